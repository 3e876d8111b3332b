//! `consort-bench`: latency and throughput of calls across hosts, inside one host, and of the
//! bare link, measured in one run on loopback (see docs/BENCHMARKS.md).
//!
//!     cargo run --release --bin consort-bench
//!     cargo run --release --bin consort-bench chain    # only the chain verification rows
//!     cargo run --release --bin consort-bench calls    # every row but the chain rows (to profile)
//!     cargo run --release --bin consort-bench directory [N]   # the peer directory, N agents
//!     cargo run --release --bin consort-bench models   # the real-model adapter (see models.rs)
//!     cargo run --release --bin consort-bench agents [N]   # N idle agents on one host (scale.rs)
//!
//! First, without hosts: verifying a chain of N signed hops (N = 2, 4, 8) with its signatures
//! checked one by one and in one batch, alternated round by round.
//!
//! Two real hosts (QUIC links with pinned mutual TLS, SQLite stores with synchronous=NORMAL,
//! script models) run in this process on one tokio runtime: alpha serves `cmo` and `lcfo`,
//! beta serves `cfo`. It measures a call up to the callee's accepted ack (cross-host through
//! the link glue, in-host through the supervisor), a full call to reply (a root run that calls
//! once and answers with the reply), and as floors a request/response of the same size on raw
//! quinn and on a bare link endpoint (quinn + TLS + codec, no signatures, actors or stores),
//! and beside it two peers that do the same acked call with one SQLite commit each, as a team
//! would build them by hand (`peers.rs`): an axum JSON POST service and a ractor actor store.
//! It owns no logic of its own beyond timing; it must not be run as a test.
//!
//! `directory [N]` (no chain rows) starts instead two hosts serving N script agents between
//! them (default 1000, alternately placed, all members of one goal `g`) and times
//! `Host::directory` on alpha, with the default cap of 24 rows and, for N >= 1000, with a
//! second pair of hosts whose fleet sets `row_cap: 1000`; it prints the hosts' start time, the
//! process's RSS and open files, and the presence queries beta's link handled (counted from
//! the link's `link_inbound_presence` tracing span, the only span this mode enables).

mod models;
mod peers;
mod scale;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::task::JoinSet;
use tracing::field::{Field, Visit};
use tracing::span::Attributes;
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

use consort_actors::supervisor::RemoteCalls;
use consort_actors::visibility::Origin;
use consort_actors::{AgentOptions, CallOutcome, Channel};
use consort_core::directory::{Audience, DirectoryPacket, PresenceBasis};
use consort_fleet::{LinkRemote, ServeOptions, ServedHost, prepare};
use consort_net::chain::verify_chain_batched;
use consort_net::{
    CallEnvelope, ChainLimits, Frame, HostKey, KeyRing, LinkEndpoint, NextHop, RunId,
    VerifiedChain, verify_chain,
};

struct Stats {
    name: String,
    p50_us: f64,
    p99_us: f64,
    per_sec: f64,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// How long the hosts must have been idle before a row's one-at-a-time phase.
const QUIET_FOR: Duration = Duration::from_millis(200);
/// Idle: at most this much CPU time (in clock ticks, 10 ms each) used by this process within
/// [`QUIET_FOR`], i.e. a tenth of one core.
const QUIET_TICKS: u64 = 2;
/// The longest the bench waits for the hosts to go idle.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// The hosts the rows' work lands on. A row's throughput phase ends with its last answer
/// while the work it started goes on for seconds (after the burst row, about 4 s of one core:
/// every acked call's run still answers, and its reply goes to alpha, which refuses it three
/// times, since the bench's calls come from parent runs that do not exist). Before the next
/// row's one-at-a-time phase the bench waits for that to drain; otherwise that row's
/// latencies are the previous row's leftovers (it made "delivery to receipt", the row after
/// the burst, look like a p99 of 5-12x its p50).
#[derive(Clone, Default)]
struct Quiet(Vec<consort_actors::Host>);

impl Quiet {
    /// Waits until, over one [`QUIET_FOR`], no host's store writer took a write and this
    /// process (both hosts run in it) used at most [`QUIET_TICKS`] of CPU; how long it waited.
    async fn settle(&self) -> Result<Duration> {
        let start = Instant::now();
        if self.0.is_empty() {
            return Ok(Duration::ZERO);
        }
        let writes = || self.0.iter().map(|h| h.store_counts().writes).sum::<u64>();
        loop {
            let (writes_before, cpu_before) = (writes(), cpu_ticks());
            tokio::time::sleep(QUIET_FOR).await;
            let cpu_quiet = match (cpu_before, cpu_ticks()) {
                (Some(before), Some(after)) => after.saturating_sub(before) <= QUIET_TICKS,
                // No /proc here: the store writers' quiet is all there is to go by.
                _ => true,
            };
            if cpu_quiet && writes() == writes_before {
                return Ok(start.elapsed());
            }
            anyhow::ensure!(
                start.elapsed() < SETTLE_LIMIT,
                "the hosts were still busy after {SETTLE_LIMIT:?}"
            );
        }
    }
}

/// The CPU time this process has used (user and system), in clock ticks; `None` without
/// `/proc/self/stat`.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(ticks(11)? + ticks(12)?)
}

/// Latency from `seq` one-at-a-time operations (once `quiet`'s hosts are idle), throughput
/// from `total` with `inflight` concurrent.
async fn measure<F, Fut>(
    quiet: &Quiet,
    name: impl Into<String>,
    seq: usize,
    total: usize,
    inflight: usize,
    op: F,
) -> Result<Stats>
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let settled = quiet.settle().await?;
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
        name: name.into(),
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
        per_sec,
    };
    eprintln!(
        "  {:<34} p50 {:>8.0} µs  p99 {:>8.0} µs  {:>8.0}/s ({inflight} in flight; hosts idle after {} ms)",
        stats.name,
        stats.p50_us,
        stats.p99_us,
        stats.per_sec,
        settled.as_millis()
    );
    Ok(stats)
}

fn envelope(caller: &str, callee: &str, n: u64) -> CallEnvelope {
    let parent = RunId::random();
    let now = consort_actors::run::now_ms();
    consort_net::new_call(
        &Origin::Absent,
        NextHop {
            caller,
            callee,
            parent_run: &parent,
            tool_use_id: &format!("tu_bench_{n}"),
            input: "2026-08",
            issued_at_ms: now,
            expires_at_ms: now + 600_000,
            trace: None,
        },
    )
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
    if std::env::args().nth(1).as_deref() == Some("models") {
        let root = std::env::temp_dir().join(format!("consort-bench-{}", std::process::id()));
        let result = models::models_bench(&root).await;
        let _ = std::fs::remove_dir_all(&root);
        return result;
    }
    if std::env::args().nth(1).as_deref() == Some("agents") {
        let agents = match std::env::args().nth(2) {
            Some(n) => n.parse().context("usage: consort-bench agents [N]")?,
            None => 2000,
        };
        anyhow::ensure!(agents >= 1, "N must be at least 1");
        let runs = match std::env::args().nth(3) {
            Some(n) => n
                .parse()
                .context("usage: consort-bench agents [N] [RUNS]")?,
            None => 1,
        };
        let root = std::env::temp_dir().join(format!("consort-bench-{}", std::process::id()));
        let result = scale::scale_bench(&root, agents, runs).await;
        let _ = std::fs::remove_dir_all(&root);
        return result;
    }
    if std::env::args().nth(1).as_deref() == Some("directory") {
        let agents = match std::env::args().nth(2) {
            Some(n) => n.parse().context("usage: consort-bench directory [N]")?,
            None => 1000,
        };
        anyhow::ensure!(agents >= 2, "N must be at least 2 (one agent per host)");
        let root = std::env::temp_dir().join(format!("consort-bench-{}", std::process::id()));
        let result = directory_bench(&root, agents).await;
        if result.is_err() && STOPPED_EARLY.load(Ordering::SeqCst) {
            // The watchdog is removing the folder under the hosts and ends the process: the
            // error is its doing, not the directory's.
            std::thread::sleep(Duration::from_secs(60));
        }
        let _ = std::fs::remove_dir_all(&root);
        return result;
    }
    // `calls` skips the chain rows: what a profile of the call rows alone is taken with.
    if std::env::args().nth(1).as_deref() != Some("calls") {
        chain_verification()?;
    }
    if std::env::args().nth(1).as_deref() == Some("chain") {
        return Ok(());
    }
    // `CONSORT_BENCH_LOG=<filter>` prints the runtime's log with timestamps, to follow one
    // operation's time through the hosts (it slows every row: never for the figures).
    if let Ok(filter) = std::env::var("CONSORT_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .with_writer(std::io::stderr)
            .init();
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
    let options = AgentOptions::default().with_admission_limit(100_000);
    let mut hosts = Vec::new();
    for host in ["alpha", "beta"] {
        hosts.push(
            ServedHost::start(ServeOptions {
                agent_options: options.clone(),
                ..ServeOptions::new(fleet_file.clone(), host, root.join("data").join(host))
            })
            .await
            .with_context(|| format!("starting {host}"))?,
        );
    }
    let quiet = Quiet(hosts.iter().map(|h| h.host.clone()).collect());
    let alpha = &hosts[0];
    let prepared = prepare(&fleet_file, "alpha", None)?;
    let remote = Arc::new(LinkRemote::new(
        Arc::new(prepared.map),
        prepared.key,
        alpha.endpoint.clone(),
    ));
    let inbox = alpha.host.inbox();
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
            &quiet,
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
            &quiet,
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
    let signed_before = remote.signing_counts();
    rows.push(
        measure(
            &quiet,
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
    let mut signing = vec![signing_line(
        "cross-host call to accepted ack (one at a time, then 32 in flight)",
        signed_before,
        remote.signing_counts(),
    )];
    // A burst: 32 calls to one host placed at once, all acked; what the batch signer makes of
    // it (one op is the whole burst: its p50 is the burst's, its rate counts calls).
    let r = remote.clone();
    let signed_before = remote.signing_counts();
    let mut burst = measure(&quiet, BURST_ROW, 100, 300, 2, move |n| {
        let r = r.clone();
        async move {
            let mut calls = JoinSet::new();
            for i in 0..BURST {
                let r = r.clone();
                calls.spawn(
                    async move { r.place_call(envelope("cmo", "cfo", n * BURST + i)).await },
                );
            }
            while let Some(outcome) = calls.join_next().await {
                if let CallOutcome::Refused(refusal) = outcome? {
                    anyhow::bail!("refused: {refusal}");
                }
            }
            Ok(())
        }
    })
    .await?;
    burst.per_sec *= BURST as f64;
    rows.push(burst);
    signing.push(signing_line(
        BURST_ROW,
        signed_before,
        remote.signing_counts(),
    ));
    // A delivery as a new run of cfo, from alpha's operator, to its receipt (the run is stored
    // and committed on beta): the peer-directory counterpart of the call's accepted ack.
    let r = remote.clone();
    rows.push(
        measure(
            &quiet,
            "cross-host delivery to receipt",
            1000,
            3000,
            32,
            move |n| {
                let r = r.clone();
                async move {
                    let receipt = r
                        .deliver(
                            "beta".into(),
                            None,
                            "cfo".into(),
                            None,
                            format!("bench-{n}"),
                            "2026-08".into(),
                        )
                        .await
                        .map_err(|e| anyhow::anyhow!("not delivered: {e}"))?;
                    match receipt {
                        consort_core::directory::Receipt::Enqueued { .. } => Ok(()),
                        other => anyhow::bail!("not enqueued: {other:?}"),
                    }
                }
            },
        )
        .await?,
    );
    let s = inbox.clone();
    rows.push(
        measure(
            &quiet,
            "in-host call to accepted ack",
            1000,
            3000,
            32,
            move |n| {
                let s = s.clone();
                async move {
                    let outcome = s
                        .place_call(envelope("lcmo", "lcfo", n), Duration::from_secs(30))
                        .await?;
                    match outcome {
                        CallOutcome::Accepted { .. } => Ok(()),
                        CallOutcome::Refused(refusal) => anyhow::bail!("refused: {refusal}"),
                    }
                }
            },
        )
        .await?,
    );
    // The peers: what the same acked call costs as a hand-rolled HTTP service with one SQLite
    // commit per request (a), and as a naive actor store with one commit per ask (b).
    let http_peer = peers::start_http_peer(root).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    rows.push(
        measure(&quiet, PEER_HTTP, 1000, 3000, 32, move |n| {
            let (http, url) = (http.clone(), http_peer.clone());
            async move {
                let answer: serde_json::Value = http
                    .post(&url)
                    .json(&peers::PeerCall::numbered(n))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                anyhow::ensure!(answer["accepted"] == true, "not accepted: {answer}");
                Ok(())
            }
        })
        .await?,
    );
    let store_actor = peers::start_actor_peer(root).await?;
    let a = store_actor.clone();
    rows.push(
        measure(&quiet, PEER_ACTOR, 1000, 3000, 32, move |n| {
            let a = a.clone();
            async move {
                let stored = ractor::call_t!(
                    a,
                    |reply| peers::StoreCall(peers::PeerCall::numbered(n), reply),
                    30_000
                )?;
                anyhow::ensure!(stored, "a call was stored twice");
                Ok(())
            }
        })
        .await?,
    );
    store_actor.stop(None);
    for (name, agent) in [
        ("cross-host full call to reply", "cmo"),
        ("in-host full call to reply", "lcmo"),
    ] {
        let host = alpha.host.clone();
        rows.push(
            measure(&quiet, name, 300, 1000, 16, move |_| {
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

    print_rows(&rows);
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
        (BURST_ROW, "floor: raw quinn request/response"),
        (
            "cross-host full call to reply",
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
            "cross-host delivery to receipt",
            "cross-host call to accepted ack",
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
    println!("| consort row / peer | consort /s | peer /s | consort ÷ peer | target |");
    println!("|---|---:|---:|---:|---:|");
    for (a, b, target) in [
        ("cross-host call to accepted ack", PEER_HTTP, "≥ 1×"),
        (BURST_ROW, PEER_HTTP, "≥ 1×"),
        ("in-host call to accepted ack", PEER_ACTOR, "≥ 3×"),
    ] {
        if let (Some(a_row), Some(b_row)) = (by(a), by(b)) {
            println!(
                "| {a} / {b} | {:.0} | {:.0} | {:.2}× | {target} |",
                a_row.per_sec,
                b_row.per_sec,
                a_row.per_sec / b_row.per_sec
            );
        }
    }
    println!();
    println!("| consort row / raw quinn | p50 ratio | throughput ratio | target |");
    println!("|---|---:|---:|---:|");
    for (a, target) in [
        (
            "cross-host call to accepted ack",
            "throughput ≥ 0.25×, p50 ≤ 3×",
        ),
        (BURST_ROW, "throughput ≥ 0.25×"),
        ("cross-host full call to reply", "throughput ≥ 0.08×"),
    ] {
        if let (Some(a_row), Some(raw)) = (by(a), by("floor: raw quinn request/response")) {
            println!(
                "| {a} | {:.1}× | {:.3}× | {target} |",
                a_row.p50_us / raw.p50_us,
                a_row.per_sec / raw.per_sec
            );
        }
    }
    println!();
    println!("| consort row | p99 ÷ p50 | target |");
    println!("|---|---:|---:|");
    for r in rows
        .iter()
        .filter(|r| !r.name.starts_with("floor") && !r.name.starts_with("peer"))
    {
        println!("| {} | {:.1}× | ≤ 3× |", r.name, r.p99_us / r.p50_us);
    }
    println!();
    println!("| signed by alpha's link glue | calls and replies | signatures | per call |");
    println!("|---|---:|---:|---:|");
    for line in &signing {
        println!("{line}");
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

/// Calls placed at once in one op of the burst row.
const BURST: u64 = 32;
/// The burst row: its p50 is a whole burst's, its throughput counts calls.
const BURST_ROW: &str = "cross-host burst of 32 calls, all acked (calls/s)";

/// A table line: what `LinkRemote::signing_counts` moved by between `before` and `after`.
fn signing_line(what: &str, before: (u64, u64), after: (u64, u64)) -> String {
    let (signatures, leaves) = (after.0 - before.0, after.1 - before.1);
    #[allow(clippy::cast_precision_loss)]
    let per_call = signatures as f64 / leaves.max(1) as f64;
    format!("| {what} | {leaves} | {signatures} | {per_call:.3} |")
}

/// Peer (a)'s row: a hand-rolled HTTP RPC service (see `peers.rs`).
const PEER_HTTP: &str = "peer (a): axum JSON POST + one SQLite commit";
/// Peer (b)'s row: a naive in-host actor store (see `peers.rs`).
const PEER_ACTOR: &str = "peer (b): ractor ask + one SQLite commit";

fn print_rows(rows: &[Stats]) {
    println!("| measurement | p50 µs | p99 µs | throughput /s |");
    println!("|---|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} |",
            r.name, r.p50_us, r.p99_us, r.per_sec
        );
    }
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
                trace: None,
            };
            envelope = Some(match &envelope {
                None => consort_net::new_call(&Origin::Absent, next),
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

// The peer directory (`consort-bench directory [N]`).

/// The RSS past which the directory mode stops: this machine's budget for it.
const RSS_LIMIT_MB: u64 = 2048;
/// How long one host may take to start its agents before the directory mode gives up.
const START_LIMIT: Duration = Duration::from_secs(180);
/// Set by the watchdog once it stops the process.
static STOPPED_EARLY: AtomicBool = AtomicBool::new(false);
/// The span the inbound link handler opens for every `Frame::PresenceQuery` it handles.
const PRESENCE_SPAN: &str = "link_inbound_presence";

/// Per host: the presence queries its link handled and the agents they named in all, read off
/// [`PRESENCE_SPAN`] (fields `host` and `agents`). The only callsite this subscriber enables.
#[derive(Clone, Default)]
struct PresenceQueries(Arc<Mutex<BTreeMap<String, (u64, u64)>>>);

impl PresenceQueries {
    fn of(&self, host: &str) -> (u64, u64) {
        self.0
            .lock()
            .map(|m| m.get(host).copied().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PresenceQueries {
    fn register_callsite(&self, metadata: &'static tracing::Metadata<'static>) -> Interest {
        if metadata.is_span() && metadata.name() == PRESENCE_SPAN {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: LayerContext<'_, S>) -> bool {
        metadata.is_span() && metadata.name() == PRESENCE_SPAN
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, _: &tracing::span::Id, _: LayerContext<'_, S>) {
        if attrs.metadata().name() != PRESENCE_SPAN {
            return;
        }
        let mut fields = SpanFields::default();
        attrs.record(&mut fields);
        if let Ok(mut counts) = self.0.lock() {
            let entry = counts.entry(fields.host).or_default();
            entry.0 += 1;
            entry.1 += fields.agents;
        }
    }
}

#[derive(Default)]
struct SpanFields {
    host: String,
    agents: u64,
}

impl Visit for SpanFields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "agents" {
            self.agents = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "host" => self.host = format!("{value:?}"),
            "agents" => self.agents = format!("{value:?}").parse().unwrap_or_default(),
            _ => {}
        }
    }
}

/// A `kB` line of /proc/self/status, in MB.
fn proc_status_mb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kb| kb / 1024)
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

fn memory_line() -> String {
    format!(
        "RSS {} MB (peak {} MB), {} open files",
        proc_status_mb("VmRSS:"),
        proc_status_mb("VmHWM:"),
        open_files()
    )
}

/// Stops the process (after removing `root`) once its RSS passes [`RSS_LIMIT_MB`].
fn rss_watchdog(root: std::path::PathBuf) {
    let started = Instant::now();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let rss = proc_status_mb("VmRSS:");
            if rss > RSS_LIMIT_MB {
                STOPPED_EARLY.store(true, Ordering::SeqCst);
                eprintln!(
                    "consort-bench directory: stopped early, RSS {rss} MB > {RSS_LIMIT_MB} MB after {:.1} s ({} open files)",
                    started.elapsed().as_secs_f64(),
                    open_files()
                );
                // The hosts are still creating stores under `root`: retry until it is gone.
                for _ in 0..20 {
                    let _ = std::fs::remove_dir_all(&root);
                    std::thread::sleep(Duration::from_millis(50));
                    if !root.exists() {
                        break;
                    }
                }
                if root.exists() {
                    eprintln!(
                        "consort-bench directory: could not remove {}",
                        root.display()
                    );
                }
                std::process::exit(3);
            }
        }
    });
}

/// The agents of the directory fleet, `a0000`…: even ones on alpha, odd ones on beta, so the
/// first rows in name order come from both hosts. Each is a one-step script agent in its own
/// folder under `agents-<host>/`.
fn write_directory_agents(root: &std::path::Path, n: usize) -> Result<Vec<String>> {
    let width = (n - 1).to_string().len();
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("a{i:0width$}");
        let host = if i % 2 == 0 { "alpha" } else { "beta" };
        let dir = root.join(format!("agents-{host}")).join(&name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("agent.yaml"),
            format!("name: {name}\nmodel: {{script: [{{answer: ok}}]}}\n"),
        )?;
        names.push(name);
    }
    Ok(names)
}

/// A fleet.yaml of alpha and beta on fresh ports, each serving its folder of agent folders,
/// with goal `g` holding every agent and, when given, the directory's `row_cap`.
fn write_directory_fleet(
    root: &std::path::Path,
    file: &str,
    keys: &[(&str, String)],
    names: &[String],
    row_cap: Option<usize>,
) -> Result<std::path::PathBuf> {
    let mut yaml = String::from("hosts:\n");
    for (host, public) in keys {
        yaml.push_str(&format!(
            "  - name: {host}\n    address: 127.0.0.1:{}\n    public_key: \"{public}\"\n    agents: [agents-{host}]\n",
            free_port()?
        ));
    }
    yaml.push_str(&format!(
        "goals:\n  - name: g\n    agents: [{}]\n",
        names.join(", ")
    ));
    if let Some(cap) = row_cap {
        yaml.push_str(&format!("directory: {{row_cap: {cap}}}\n"));
    }
    let path = root.join(file);
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// Starts alpha then beta of `fleet_file`, each within [`START_LIMIT`]; returns them and the
/// time each took.
async fn start_pair(
    root: &std::path::Path,
    fleet_file: &std::path::Path,
    tag: &str,
) -> Result<(Vec<ServedHost>, Vec<Duration>)> {
    let mut hosts = Vec::new();
    let mut took = Vec::new();
    for host in ["alpha", "beta"] {
        let start = Instant::now();
        let served = tokio::time::timeout(
            START_LIMIT,
            ServedHost::start(ServeOptions::new(
                fleet_file.to_path_buf(),
                host,
                root.join(format!("data-{tag}")).join(host),
            )),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{host} did not start within {START_LIMIT:?}"))?
        .with_context(|| format!("starting {host}"))?;
        took.push(start.elapsed());
        hosts.push(served);
    }
    Ok((hosts, took))
}

/// Stops both hosts and waits (up to 10 s) until the process has no more open files than
/// `baseline` (the stores close once the agents and every host handle are gone); returns how
/// long that took.
async fn stop_pair(hosts: Vec<ServedHost>, baseline: usize) -> Duration {
    let start = Instant::now();
    for h in &hosts {
        h.host.stop();
        h.endpoint.close().await;
        h.server.abort();
    }
    drop(hosts);
    while open_files() > baseline && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// What every measured answer must be: all `n` agents counted, the first `min(cap, n)` shown,
/// the rest counted as omitted, and every row's presence from its host's supervisor.
fn check_packet(packet: &DirectoryPacket, n: usize, cap: usize) -> Result<()> {
    let shown = cap.min(n);
    anyhow::ensure!(
        packet.registered_agent_count == n
            && packet.rows.len() == shown
            && packet.omitted_row_count == n - shown,
        "expected {n} registered, {shown} rows, {} omitted; got {}, {}, {} ({:?})",
        n - shown,
        packet.registered_agent_count,
        packet.rows.len(),
        packet.omitted_row_count,
        packet.limitations
    );
    if let Some(row) = packet
        .rows
        .iter()
        .find(|r| r.presence.basis != PresenceBasis::SupervisorRunTable)
    {
        anyhow::bail!(
            "row {} (host {}): presence basis {}",
            row.agent,
            row.host,
            row.presence.basis.as_str()
        );
    }
    Ok(())
}

/// Times `directory(Operator, "g")` on alpha and checks, from the presence spans, that beta's
/// link handled exactly one query per call, naming exactly beta's shown agents.
async fn measure_directory(
    alpha: &consort_actors::Host,
    queries: &PresenceQueries,
    n: usize,
    cap: usize,
    (seq, total, inflight): (usize, usize, usize),
    rows: &mut Vec<Stats>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let calls = Arc::new(AtomicU64::new(0));
    let (beta_before, alpha_before) = (queries.of("beta"), queries.of("alpha"));
    let (host, counted) = (alpha.clone(), calls.clone());
    rows.push(
        measure(
            &Quiet::default(),
            format!("directory of {n} agents over 2 hosts (cap {cap})"),
            seq,
            total,
            inflight,
            move |_| {
                let (host, counted) = (host.clone(), counted.clone());
                async move {
                    let packet = host.directory(Audience::Operator, Some("g".into())).await?;
                    counted.fetch_add(1, Ordering::Relaxed);
                    check_packet(&packet, n, cap)
                }
            },
        )
        .await?,
    );
    let calls = calls.load(Ordering::Relaxed);
    let (beta_after, alpha_after) = (queries.of("beta"), queries.of("alpha"));
    let (q, named) = (beta_after.0 - beta_before.0, beta_after.1 - beta_before.1);
    let beta_rows = (cap.min(n) / 2) as u64;
    let verdict = if q == calls && named == calls * beta_rows {
        "one round trip to beta per call, naming its shown agents"
    } else {
        "MISMATCH: not one query per call"
    };
    notes.push(format!(
        "cap {cap}: {calls} directory calls on alpha; presence queries handled by beta: {q} ({named} agents named, {beta_rows} shown per call), by alpha: {}: {verdict}",
        alpha_after.0 - alpha_before.0
    ));
    Ok(())
}

/// `consort-bench directory [N]`.
async fn directory_bench(root: &std::path::Path, n: usize) -> Result<()> {
    let queries = PresenceQueries::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(queries.clone()))
        .context("installing the presence-span counter")?;
    rss_watchdog(root.to_path_buf());
    let mut notes = vec![format!("before start: {}", memory_line())];
    std::fs::create_dir_all(root.join("keys"))?;
    let written = Instant::now();
    let names = write_directory_agents(root, n)?;
    let mut keys = Vec::new();
    for host in ["alpha", "beta"] {
        let key = HostKey::generate();
        key.write_new(&root.join(format!("keys/{host}.key")))?;
        keys.push((host, key.public().to_string()));
    }
    eprintln!(
        "consort-bench directory: {n} agents ({} on alpha, {} on beta) written in {:.0} ms",
        n.div_ceil(2),
        n / 2,
        written.elapsed().as_secs_f64() * 1e3
    );
    let mut rows = Vec::new();
    let mut caps = vec![24];
    if n >= 1000 {
        caps.push(1000);
    }
    for cap in caps {
        let file = format!("fleet-cap{cap}.yaml");
        let fleet_file =
            write_directory_fleet(root, &file, &keys, &names, (cap != 24).then_some(cap))?;
        let (before, baseline) = (memory_line(), open_files());
        let (hosts, took) = start_pair(root, &fleet_file, &format!("cap{cap}")).await?;
        let line = format!(
            "cap {cap}: start of alpha {:.2} s, beta {:.2} s ({} agents each); before: {before}; after: {}",
            took[0].as_secs_f64(),
            took[1].as_secs_f64(),
            n / 2,
            memory_line()
        );
        eprintln!("  {line}");
        notes.push(line);
        let budget = if cap == 24 {
            (300, 1000, 16)
        } else {
            (100, 300, 16)
        };
        let alpha = hosts[0].host.clone();
        measure_directory(&alpha, &queries, n, cap, budget, &mut rows, &mut notes).await?;
        if cap == 24 {
            // Without beta, its rows lose their presence: it came from beta's link, not alpha.
            let beta = &hosts[1];
            beta.host.stop();
            beta.endpoint.close().await;
            let t = Instant::now();
            let packet = alpha
                .directory(Audience::Operator, Some("g".into()))
                .await?;
            let mut bases: BTreeMap<(&str, &str), usize> = BTreeMap::new();
            for row in &packet.rows {
                *bases
                    .entry((row.host.as_str(), row.presence.basis.as_str()))
                    .or_default() += 1;
            }
            notes.push(format!(
                "cap 24 with beta stopped: one call took {:.0} ms; rows by (host, presence basis): {bases:?}",
                t.elapsed().as_secs_f64() * 1e3
            ));
        }
        drop(alpha); // the host handle keeps its store writer (and its open stores) alive
        let stopped = stop_pair(hosts, baseline).await;
        notes.push(format!(
            "cap {cap}: stopping both hosts took {:.1} s; after: {}",
            stopped.as_secs_f64(),
            memory_line()
        ));
    }
    print_rows(&rows);
    println!();
    for note in notes {
        println!("{note}");
    }
    Ok(())
}
