//! `consort-bench`: latency and throughput of calls across hosts, inside one host, and of the
//! bare link, measured in one run on loopback (see docs/BENCHMARKS.md).
//!
//!     cargo run --release --bin consort-bench
//!     cargo run --release --bin consort-bench chain    # only the chain verification rows
//!
//! First, without hosts: verifying a chain of N signed hops (N = 2, 4, 8) with its signatures
//! checked one by one and in one batch, alternated round by round.
//!
//! Two real hosts (QUIC links with pinned mutual TLS, SQLite stores with synchronous=NORMAL,
//! script models) run in this process on one tokio runtime: alpha serves `cmo` and `lcfo`,
//! beta serves `cfo`. It measures a call up to the callee's accepted ack (cross-host through
//! the link glue, in-host through the supervisor), a full call to reply (a root run that calls
//! once and answers with the reply), and as floors a request/response of the same size on raw
//! quinn and on a bare link endpoint (quinn + TLS + codec, no signatures, actors or stores). It owns no
//! logic of its own beyond timing; it must not be run as a test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::task::JoinSet;

use consort_actors::supervisor::{RemoteCalls, SupervisorMsg};
use consort_actors::{AgentOptions, CallOutcome, Channel};
use consort_fleet::{LinkRemote, ServeOptions, ServedHost, prepare};
use consort_net::chain::verify_chain_batched;
use consort_net::{
    CallEnvelope, ChainLimits, Frame, HostKey, KeyRing, LinkConfig, LinkEndpoint, NextHop, RunId,
    VerifiedChain, verify_chain,
};

struct Stats {
    name: &'static str,
    p50_us: f64,
    p99_us: f64,
    per_sec: f64,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Latency from `seq` one-at-a-time operations, throughput from `total` with `inflight`
/// concurrent.
async fn measure<F, Fut>(
    name: &'static str,
    seq: usize,
    total: usize,
    inflight: usize,
    op: F,
) -> Result<Stats>
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    for i in 0..(seq / 10).max(5) {
        op(u64::MAX - i as u64).await?; // warm-up
    }
    let mut lat = Vec::with_capacity(seq);
    for i in 0..seq {
        let t = Instant::now();
        op(i as u64).await?;
        lat.push(t.elapsed());
    }
    lat.sort();
    let start = Instant::now();
    let mut set = JoinSet::new();
    let mut next = 0usize;
    let mut done = 0usize;
    while done < total {
        while set.len() < inflight && next < total {
            let op = op.clone();
            let n = (1_000_000 + next) as u64;
            set.spawn(async move { op(n).await });
            next += 1;
        }
        if let Some(r) = set.join_next().await {
            r??;
            done += 1;
        }
    }
    let per_sec = total as f64 / start.elapsed().as_secs_f64();
    let stats = Stats {
        name,
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
        per_sec,
    };
    eprintln!(
        "  {:<34} p50 {:>8.0} µs  p99 {:>8.0} µs  {:>8.0}/s ({inflight} in flight)",
        stats.name, stats.p50_us, stats.p99_us, stats.per_sec
    );
    Ok(stats)
}

fn envelope(caller: &str, callee: &str, n: u64) -> CallEnvelope {
    let parent = RunId::random();
    let now = consort_actors::run::now_ms();
    consort_net::new_call(NextHop {
        caller,
        callee,
        parent_run: &parent,
        tool_use_id: &format!("tu_bench_{n}"),
        input: "2026-08",
        issued_at_ms: now,
        expires_at_ms: now + 600_000,
    })
}

fn write_agent(root: &std::path::Path, name: &str, yaml: &str) -> Result<()> {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("agent.yaml"), yaml)?;
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    chain_verification()?;
    if std::env::args().nth(1).as_deref() == Some("chain") {
        return Ok(());
    }
    let root = std::env::temp_dir().join(format!("consort-bench-{}", std::process::id()));
    let result = run(&root).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn run(root: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(root.join("keys"))?;
    write_agent(
        root,
        "cmo",
        "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"{input}\"}]\n    - answer: \"{reply.cfo}\"\n",
    )?;
    write_agent(
        root,
        "lcmo",
        "name: lcmo\nagents: {can_call: [lcfo]}\nmodel:\n  script:\n    - call: [{agent: lcfo, input: \"{input}\"}]\n    - answer: \"{reply.lcfo}\"\n",
    )?;
    for (name, caller) in [("cfo", "cmo"), ("lcfo", "lcmo")] {
        write_agent(
            root,
            name,
            &format!(
                "name: {name}\nagents: {{accept_from: [{caller}]}}\nmodel:\n  script:\n    - answer: \"ok {{input}}\"\n"
            ),
        )?;
    }
    let mut yaml = String::from("hosts:\n");
    for (host, agents) in [
        ("alpha", "[agents/cmo, agents/lcmo, agents/lcfo]"),
        ("beta", "[agents/cfo]"),
    ] {
        let key = HostKey::generate();
        key.write_new(&root.join(format!("keys/{host}.key")))?;
        yaml.push_str(&format!(
            "  - name: {host}\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: {agents}\n",
            free_port()?,
            key.public()
        ));
    }
    let fleet_file = root.join("fleet.yaml");
    std::fs::write(&fleet_file, yaml)?;
    let options = AgentOptions {
        admission_limit: 100_000,
        ..AgentOptions::default()
    };
    let mut hosts = Vec::new();
    for host in ["alpha", "beta"] {
        hosts.push(
            ServedHost::start(ServeOptions {
                fleet_file: fleet_file.clone(),
                host: host.into(),
                data_dir: root.join("data").join(host),
                key_file: None,
                listen_http: "127.0.0.1:0".parse()?,
                agent_options: options.clone(),
                link: LinkConfig::default(),
            })
            .await
            .with_context(|| format!("starting {host}"))?,
        );
    }
    let alpha = &hosts[0];
    let prepared = prepare(&fleet_file, "alpha", None)?;
    let remote = Arc::new(LinkRemote::new(
        Arc::new(prepared.map),
        prepared.key,
        alpha.endpoint.clone(),
    ));
    let supervisor = alpha.host.supervisor().clone();
    let sample = consort_net::encode_frame(&Frame::Call(envelope("cmo", "cfo", 0)))?.len();
    eprintln!("consort-bench: 2 hosts on loopback, call frame {sample} B");

    let mut rows = Vec::new();

    // Floor 0: raw quinn, the same size request and response on one connection, TLS 1.3
    // (the client trusts exactly the server's self-signed certificate), no consort code.
    let (raw_client, raw_server) = raw_quinn_pair().await?;
    let raw_payload = Arc::new(vec![7u8; sample]);
    let rc = raw_client.clone();
    rows.push(
        measure(
            "floor: raw quinn request/response",
            2000,
            10_000,
            64,
            move |_| {
                let (conn, payload) = (rc.clone(), raw_payload.clone());
                async move {
                    let (mut send, mut recv) = conn.open_bi().await?;
                    send.write_all(&payload).await?;
                    send.finish()?;
                    let echoed = recv.read_to_end(1 << 20).await?;
                    anyhow::ensure!(echoed.len() == payload.len(), "short echo");
                    Ok(())
                }
            },
        )
        .await?,
    );
    drop(raw_server);

    // Floor 1: the same size request and response on a bare link endpoint.
    let (k1, k2) = (HostKey::generate(), HostKey::generate());
    let mut ring = KeyRing::new();
    ring.insert("gamma", k1.public())?;
    ring.insert("delta", k2.public())?;
    let echo = |_peer: String, frame: Frame| async move { frame };
    let server = LinkEndpoint::bind(
        "127.0.0.1:0".parse()?,
        "delta",
        k2,
        ring.clone(),
        Arc::new(echo),
    )?;
    let noop = |_peer: String, _frame: Frame| async { Frame::Ack };
    let client = LinkEndpoint::bind("127.0.0.1:0".parse()?, "gamma", k1, ring, Arc::new(noop))?;
    let server_addr = server.local_addr()?;
    let frame = Arc::new(Frame::Call(envelope("cmo", "cfo", 0)));
    let c = client.clone();
    rows.push(
        measure(
            "floor: link request/response",
            2000,
            10_000,
            64,
            move |_| {
                let (c, frame) = (c.clone(), frame.clone());
                async move {
                    c.request("delta", server_addr, &frame).await?;
                    Ok(())
                }
            },
        )
        .await?,
    );

    let r = remote.clone();
    rows.push(
        measure(
            "cross-host call to accepted ack",
            1000,
            3000,
            32,
            move |n| {
                let r = r.clone();
                async move {
                    match r.place_call(envelope("cmo", "cfo", n)).await {
                        CallOutcome::Accepted { .. } => Ok(()),
                        CallOutcome::Refused(refusal) => anyhow::bail!("refused: {refusal}"),
                    }
                }
            },
        )
        .await?,
    );
    let s = supervisor.clone();
    rows.push(
        measure("in-host call to accepted ack", 1000, 3000, 32, move |n| {
            let s = s.clone();
            async move {
                let outcome = ractor::call_t!(
                    s,
                    |reply| SupervisorMsg::PlaceCall {
                        envelope: envelope("lcmo", "lcfo", n),
                        reply
                    },
                    30_000
                )?;
                match outcome {
                    CallOutcome::Accepted { .. } => Ok(()),
                    CallOutcome::Refused(refusal) => anyhow::bail!("refused: {refusal}"),
                }
            }
        })
        .await?,
    );
    for (name, agent) in [
        ("cross-host full call to reply", "cmo"),
        ("in-host full call to reply", "lcmo"),
    ] {
        let host = alpha.host.clone();
        rows.push(
            measure(name, 300, 1000, 16, move |_| {
                let host = host.clone();
                async move {
                    let run = host.start_run(agent, "2026-08", Channel::Api).await?;
                    let done = host.wait(&run.id, Duration::from_secs(30)).await?;
                    anyhow::ensure!(
                        done.output.as_deref() == Some("ok 2026-08"),
                        "unexpected {done:?}"
                    );
                    Ok(())
                }
            })
            .await?,
        );
    }

    println!("| measurement | p50 µs | p99 µs | throughput /s |");
    println!("|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} |",
            r.name, r.p50_us, r.p99_us, r.per_sec
        );
    }
    let by = |name: &str| rows.iter().find(|r| r.name == name);
    let ratio = |a: &str, b: &str| -> Option<(f64, f64)> {
        let (a, b) = (by(a)?, by(b)?);
        Some((a.p50_us / b.p50_us, b.per_sec / a.per_sec))
    };
    println!();
    println!("| ratio | p50 latency | throughput (inverse) |");
    println!("|---|---:|---:|");
    for (a, b) in [
        (
            "floor: link request/response",
            "floor: raw quinn request/response",
        ),
        (
            "cross-host call to accepted ack",
            "floor: raw quinn request/response",
        ),
        (
            "cross-host call to accepted ack",
            "floor: link request/response",
        ),
        (
            "cross-host call to accepted ack",
            "in-host call to accepted ack",
        ),
        (
            "cross-host full call to reply",
            "in-host full call to reply",
        ),
        (
            "cross-host full call to reply",
            "floor: link request/response",
        ),
    ] {
        if let Some((lat, thr)) = ratio(a, b) {
            println!("| {a} / {b} | {lat:.1}x | {thr:.1}x |");
        }
    }
    println!();
    println!("| host | store writes | group commits | writes per commit |");
    println!("|---|---:|---:|---:|");
    for (name, h) in ["alpha", "beta"].iter().zip(&hosts) {
        let c = h.host.store_counts();
        #[allow(clippy::cast_precision_loss)]
        let per = c.writes as f64 / c.commits.max(1) as f64;
        println!("| {name} | {} | {} | {per:.1} |", c.writes, c.commits);
    }
    for h in &hosts {
        h.host.stop();
    }
    Ok(())
}

/// Times `verify_chain_batched` (several signatures in one batch) against `verify_chain` (every
/// signature checked alone), on chains of 2, 4 and 8 hops signed by three hosts.
fn chain_verification() -> Result<()> {
    const ROUNDS: usize = 9;
    const PER_ROUND: u32 = 400;
    let hosts = ["h0", "h1", "h2"];
    let keys: Vec<HostKey> = hosts.iter().map(|_| HostKey::generate()).collect();
    let ring = KeyRing::from_hosts(hosts.iter().zip(&keys).map(|(h, k)| (*h, k.public())))?;
    let agents: Vec<String> = (0..=8).map(|i| format!("a{i}")).collect();
    let placements: BTreeMap<String, String> = agents
        .iter()
        .enumerate()
        .map(|(i, agent)| (agent.clone(), hosts[i % hosts.len()].to_owned()))
        .collect();
    let now = consort_actors::run::now_ms();
    let limits = ChainLimits {
        now_ms: now,
        allowed_skew_ms: 30_000,
        max_depth: 16,
        max_lifetime_ms: 15 * 60_000,
    };
    eprintln!("consort-bench: chain verification, {ROUNDS} alternated rounds of {PER_ROUND}");
    println!("| chain | one by one µs | batch µs | one by one / batch |");
    println!("|---|---:|---:|---:|");
    for depth in [2, 4, 8] {
        let mut envelope: Option<CallEnvelope> = None;
        let root_run = RunId::random();
        for i in 0..depth {
            let parent = envelope
                .as_ref()
                .and_then(|e| e.hops.last())
                .map_or_else(|| root_run.clone(), |hop| hop.child_run.clone());
            let next = NextHop {
                caller: &agents[i],
                callee: &agents[i + 1],
                parent_run: &parent,
                tool_use_id: &format!("tu_{i}"),
                input: "2026-08",
                issued_at_ms: now,
                expires_at_ms: now + 600_000,
            };
            envelope = Some(match &envelope {
                None => consort_net::new_call(next),
                Some(chain) => consort_net::extend(chain, next)?,
            });
        }
        let mut envelope = envelope.context("no hops")?;
        for (host, key) in hosts.iter().zip(&keys) {
            consort_net::sign_pending_hops(&mut envelope, host, key, |agent| {
                placements.get(agent).map(String::as_str) == Some(*host)
            });
        }
        let batch = || verify_chain_batched(&envelope, &ring, &placements, &limits);
        let one_by_one = || verify_chain(&envelope, &ring, &placements, &limits);
        anyhow::ensure!(batch()?.depth() == depth && one_by_one()?.depth() == depth);
        let time = |verify: &dyn Fn() -> Result<VerifiedChain, consort_net::ChainError>| {
            let start = Instant::now();
            for _ in 0..PER_ROUND {
                std::hint::black_box(verify()).ok();
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND)
        };
        let (mut alone, mut batched) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            if round % 2 == 0 {
                alone.push(time(&one_by_one));
                batched.push(time(&batch));
            } else {
                batched.push(time(&batch));
                alone.push(time(&one_by_one));
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (alone, batched) = (median(alone), median(batched));
        println!(
            "| {depth} signed hops | {alone:.1} | {batched:.1} | {:.2}x |",
            alone / batched
        );
    }
    println!();
    Ok(())
}

/// A raw quinn server that echoes each bidirectional stream, and one client connection to it.
async fn raw_quinn_pair() -> Result<(quinn::Connection, quinn::Endpoint)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert_der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()),
    );
    let server_config = quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key_der)?;
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse()?)?;
    let addr = server.local_addr()?;
    let accepting = server.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    tokio::spawn(async move {
                        if let Ok(data) = recv.read_to_end(1 << 20).await {
                            let _ = send.write_all(&data).await;
                            let _ = send.finish();
                        }
                    });
                }
            });
        }
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der)?;
    let client_config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    let mut client = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    client.set_default_client_config(client_config);
    let conn = client.connect(addr, "localhost")?.await?;
    Ok((conn, server))
}
