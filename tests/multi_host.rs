//! Multi-host fleets end to end: the real `consort` binary as several host processes on
//! loopback (distinct ports, own temp data folders, keys made by `consort keygen`), calls
//! between them over QUIC links, and crashes with SIGKILL. Every wait polls a condition with
//! a bound; no fixed sleeps.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_consort");

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` until it returns `Some`, at most `bound`.
fn poll<T>(bound: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn write_agent(root: &Path, name: &str, yaml: &str) {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("agent.yaml"), yaml).unwrap();
}

struct HostProc {
    name: String,
    child: Option<Child>,
    data: PathBuf,
    stderr: PathBuf,
    url: String,
}

struct Fleet {
    dir: tempfile::TempDir,
    hosts: Vec<HostProc>,
    http: reqwest::blocking::Client,
}

impl Fleet {
    /// A fleet of `hosts` (name, agent folders under `agents/`); agents must be written first
    /// with [`write_agent`] into `dir`.
    fn new(dir: tempfile::TempDir, hosts: &[(&str, &[&str])]) -> Self {
        let mut yaml = String::from("hosts:\n");
        for (name, agents) in hosts {
            let out = Command::new(BIN)
                .args(["keygen", "--out"])
                .arg(dir.path().join("keys"))
                .args(["--name", name])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            let public = String::from_utf8(out.stdout).unwrap().trim().to_owned();
            let list: Vec<String> = agents.iter().map(|a| format!("agents/{a}")).collect();
            yaml.push_str(&format!(
                "  - name: {name}\n    address: 127.0.0.1:{}\n    public_key: \"{public}\"\n    agents: [{}]\n",
                free_udp_port(),
                list.join(", ")
            ));
        }
        std::fs::write(dir.path().join("fleet.yaml"), yaml).unwrap();
        let hosts = hosts
            .iter()
            .map(|(name, _)| HostProc {
                name: name.to_string(),
                child: None,
                data: dir.path().join("data").join(name),
                stderr: dir.path().join(format!("{name}.stderr")),
                url: String::new(),
            })
            .collect();
        Self {
            dir,
            hosts,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    fn fleet_file(&self) -> PathBuf {
        self.dir.path().join("fleet.yaml")
    }

    fn index(&self, host: &str) -> usize {
        self.hosts.iter().position(|h| h.name == host).unwrap()
    }

    /// Starts `host` (with `fault` as CONSORT_FAULT) and waits until it wrote serve.json.
    fn start(&mut self, host: &str, fault: Option<&str>) {
        let fleet_file = self.fleet_file();
        let i = self.index(host);
        let h = &mut self.hosts[i];
        let _ = std::fs::remove_file(h.data.join("serve.json"));
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--fleet")
            .arg(&fleet_file)
            .args(["--host", host, "--data"])
            .arg(&h.data)
            .env("RUST_LOG", "info")
            .env_remove("CONSORT_FAULT")
            .stdout(Stdio::null())
            .stderr(Stdio::from(File::create(&h.stderr).unwrap()));
        if let Some(fault) = fault {
            cmd.env("CONSORT_FAULT", fault);
        }
        let child = cmd.spawn().unwrap();
        let pid = child.id() as u64;
        h.child = Some(child);
        let note = h.data.join("serve.json");
        let stderr = h.stderr.clone();
        h.url = poll(Duration::from_secs(30), "serve.json", || {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&note).ok()?).ok()?;
            (v["pid"].as_u64() == Some(pid)).then(|| v["url"].as_str().map(str::to_owned))?
        });
        // serve.json is written as the host comes up; the stderr line follows it.
        poll(Duration::from_secs(30), "the URL on stderr", || {
            std::fs::read_to_string(&stderr)
                .ok()?
                .contains("consort: serving host")
                .then_some(())
        });
    }

    /// SIGKILL.
    fn kill(&mut self, host: &str) {
        let i = self.index(host);
        if let Some(mut child) = self.hosts[i].child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn stderr(&self, host: &str) -> String {
        std::fs::read_to_string(&self.hosts[self.index(host)].stderr).unwrap_or_default()
    }

    fn url(&self, host: &str) -> &str {
        &self.hosts[self.index(host)].url
    }

    fn start_run(&self, host: &str, agent: &str, input: &str) -> String {
        let r: Value = self
            .http
            .post(format!("{}/runs", self.url(host)))
            .json(&json!({"agent": agent, "input": input}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        r["id"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned()
    }

    /// Waits (bounded) for a run to settle.
    fn wait(&self, host: &str, id: &str, bound: Duration) -> Value {
        poll(bound, "the run to settle", || {
            let r: Value = self
                .http
                .get(format!("{}/runs/{id}?wait_ms=1000", self.url(host)))
                .send()
                .ok()?
                .json()
                .ok()?;
            matches!(r["status"].as_str(), Some("succeeded" | "failed")).then_some(r)
        })
    }

    fn jobs(&self, host: &str) -> Vec<Value> {
        let v: Value = self
            .http
            .get(format!("{}/jobs?limit=1000", self.url(host)))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["runs"].as_array().unwrap().clone()
    }

    fn events(&self, host: &str, id: &str) -> Vec<Value> {
        let v: Value = self
            .http
            .get(format!("{}/runs/{id}/events?limit=1000", self.url(host)))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["events"].as_array().unwrap().clone()
    }

    fn refusal_codes(&self, host: &str, id: &str) -> Vec<String> {
        self.events(host, id)
            .iter()
            .filter(|e| e["kind"] == "call_refused")
            .map(|e| e["data"]["code"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    fn link_addr(&self, host: &str) -> SocketAddr {
        let config = consort_config::FleetConfig::load(&self.fleet_file()).unwrap();
        config.host(host).unwrap().address
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            if let Some(mut child) = h.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The marketing-finance example, cmo on alpha and cfo on beta.
fn example_fleet() -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/marketing-finance");
    for agent in ["cmo", "cfo"] {
        let to = dir.path().join("agents").join(agent);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(example.join(agent)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    Fleet::new(dir, &[("alpha", &["cmo"]), ("beta", &["cfo"])])
}

const LONG: Duration = Duration::from_secs(60);

#[test]
fn the_example_across_two_hosts() {
    let mut fleet = example_fleet();
    fleet.start("alpha", None);
    fleet.start("beta", None);
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["output"],
        "August 2026 spend, per the CFO: 48250.00 USD across all categories (ledger month 2026-08)"
    );
    let alpha = fleet.jobs("alpha");
    let beta = fleet.jobs("beta");
    assert_eq!(alpha.len(), 1, "{alpha:?}");
    assert_eq!(beta.len(), 1, "{beta:?}");
    assert_eq!(beta[0]["agent"], "cfo");
    assert_eq!(beta[0]["channel"], "agent:cmo");
    assert_eq!(beta[0]["parent_run"], id.as_str());
    assert_eq!(beta[0]["hop_depth"], 1);

    // `jobs list` of the CLI, per host.
    let out = Command::new(BIN)
        .args(["jobs", "list", "--json", "--at", fleet.url("beta")])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["runs"][0]["channel"], "agent:cmo");

    // `edges --fleet` resolves across hosts.
    let out = Command::new(BIN)
        .args(["edges", "--json", "--fleet"])
        .arg(fleet.fleet_file())
        .output()
        .unwrap();
    let edges: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        edges,
        json!([{"caller": "cmo", "caller_host": "alpha", "callee": "cfo", "callee_host": "beta", "status": "connected"}])
    );
}

#[test]
fn a_chain_across_three_hosts_with_check_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(
        root,
        "a",
        "name: a\nagents: {can_call: [b]}\nmodel:\n  script:\n    - call: [{agent: b, input: \"{input}\"}]\n    - check: \"{call.b}\"\n    - answer: \"a<{reply.b}> check={last}\"\n",
    );
    write_agent(
        root,
        "b",
        "name: b\nagents: {accept_from: [a], can_call: [c]}\nmodel:\n  script:\n    - call: [{agent: c, input: \"{input}\"}]\n    - answer: \"b<{reply.c}>\"\n",
    );
    write_agent(
        root,
        "c",
        "name: c\nagents: {accept_from: [b], can_call: [d]}\nmodel:\n  script:\n    - call: [{agent: d, input: \"{input}\"}]\n    - answer: \"c<{reply.d}>\"\n",
    );
    write_agent(
        root,
        "d",
        "name: d\nagents: {accept_from: [c]}\nmodel:\n  script:\n    - answer: \"d:{input}\"\n",
    );
    let mut fleet = Fleet::new(
        dir,
        &[("alpha", &["a", "d"]), ("beta", &["b"]), ("gamma", &["c"])],
    );
    for h in ["alpha", "beta", "gamma"] {
        fleet.start(h, None);
    }
    let id = fleet.start_run("alpha", "a", "x");
    let run = fleet.wait("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    let output = run["output"].as_str().unwrap();
    assert!(output.starts_with("a<b<c<d:x>>>"), "{output}");
    assert!(
        output.contains("succeeded"),
        "check_run across hosts: {output}"
    );
    let alpha = fleet.jobs("alpha");
    let d = alpha.iter().find(|r| r["agent"] == "d").unwrap();
    assert_eq!(d["hop_depth"], 3);
    assert_eq!(d["channel"], "agent:c");
    assert_eq!(fleet.jobs("beta").len(), 1);
    assert_eq!(fleet.jobs("gamma")[0]["channel"], "agent:b");
}

#[test]
fn the_receiver_enforces_depth_and_the_call_cap_when_the_sender_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // a -> b -> c -> d -> e is four hops; e -> f would be the fifth.
    let chain = ["a", "b", "c", "d", "e", "f"];
    for (i, name) in chain.iter().enumerate() {
        let mut yaml = format!("name: {name}\nagents: {{");
        if i > 0 {
            yaml.push_str(&format!("accept_from: [{}], ", chain[i - 1]));
        }
        if i + 1 < chain.len() {
            yaml.push_str(&format!("can_call: [{}]", chain[i + 1]));
        }
        yaml.push_str("}\nmodel:\n  script:\n");
        if i + 1 < chain.len() {
            yaml.push_str(&format!(
                "    - call: [{{agent: {}, input: \"{{input}}\"}}]\n    - answer: \"{name}<{{reply.{}}}>\"\n",
                chain[i + 1],
                chain[i + 1]
            ));
        } else {
            yaml.push_str("    - answer: \"f:{input}\"\n");
        }
        write_agent(root, name, &yaml);
    }
    write_agent(
        root,
        "fan",
        "name: fan\nagents: {can_call: [sink]}\nmodel:\n  script:\n    - call: [{agent: sink, input: \"n{n}\", count: 26}]\n    - answer: \"{replies}\"\n",
    );
    write_agent(
        root,
        "sink",
        "name: sink\nagents: {accept_from: [fan]}\nmodel:\n  script:\n    - answer: \"ok {input}\"\n",
    );
    // e and fan live on beta, whose outbound checks are switched off.
    let mut fleet = Fleet::new(
        dir,
        &[
            ("alpha", &["a", "d"]),
            ("beta", &["b", "e", "fan"]),
            ("gamma", &["c", "f", "sink"]),
        ],
    );
    fleet.start("alpha", None);
    fleet.start("beta", Some("skip_outbound_checks"));
    fleet.start("gamma", None);

    let id = fleet.start_run("alpha", "a", "deep");
    let run = fleet.wait("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        run["output"].as_str().unwrap().contains("depth limit (4)"),
        "{run}"
    );
    let gamma = fleet.jobs("gamma");
    assert!(gamma.iter().all(|r| r["agent"] != "f"), "no run of f");
    let e = fleet
        .jobs("beta")
        .into_iter()
        .find(|r| r["agent"] == "e")
        .unwrap();
    assert_eq!(e["hop_depth"], 4);
    assert_eq!(
        fleet.refusal_codes("beta", e["id"].as_str().unwrap()),
        vec!["depth_limit"]
    );
    let gamma_log = fleet.stderr("gamma");
    assert!(
        gamma_log.contains("call refused at the receiving host")
            && gamma_log.contains("depth_limit"),
        "the receiver refused and logged it"
    );

    let id = fleet.start_run("beta", "fan", "go");
    let run = fleet.wait("beta", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    let sinks = fleet
        .jobs("gamma")
        .into_iter()
        .filter(|r| r["agent"] == "sink")
        .count();
    assert_eq!(
        sinks, 25,
        "the receiver accepted 25 children and refused the 26th"
    );
    assert_eq!(fleet.refusal_codes("beta", &id), vec!["call_cap"]);
}

#[test]
fn sigkill_of_the_callee_after_the_child_is_stored_gives_one_child_run() {
    let mut fleet = example_fleet();
    fleet.start("alpha", None);
    fleet.start("beta", Some("after_child_stored"));
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    poll(LONG, "the fault point", || {
        fleet
            .stderr("beta")
            .contains("consort: fault point after_child_stored reached")
            .then_some(())
    });
    fleet.kill("beta");
    fleet.start("beta", None);
    let run = fleet.wait("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        run["output"].as_str().unwrap().contains("48250.00"),
        "{run}"
    );
    let beta = fleet.jobs("beta");
    assert_eq!(beta.len(), 1, "exactly one child run: {beta:?}");
    assert_eq!(beta[0]["status"], "succeeded");
}

#[test]
fn a_down_callee_is_unreachable_and_the_same_tool_use_after_restart_gives_one_run() {
    let mut fleet = example_fleet();
    fleet.start("alpha", None);
    // beta is down.
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait("alpha", &id, LONG);
    assert!(
        run["output"].as_str().unwrap().contains("unreachable"),
        "{run}"
    );
    assert_eq!(fleet.refusal_codes("alpha", &id), vec!["unreachable"]);

    // The same call (same parent run and tool-use id), signed as alpha would, sent while
    // beta is down, then twice after it is back: one run.
    use consort_net::{Frame, HostKey, KeyRing, LinkConfig, LinkEndpoint, NextHop, RunId};
    let key = HostKey::read(&fleet.dir.path().join("keys/alpha.key")).unwrap();
    let beta_key = HostKey::read(&fleet.dir.path().join("keys/beta.key"))
        .unwrap()
        .public();
    let beta_addr = fleet.link_addr("beta");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let parent = RunId::random();
    let now = consort_actors::run::now_ms();
    let mut envelope = consort_net::new_call(
        &consort_actors::visibility::Origin::Absent,
        NextHop {
            caller: "cmo",
            callee: "cfo",
            parent_run: &parent,
            tool_use_id: "tu_0_0",
            input: "2026-08",
            issued_at_ms: now,
            expires_at_ms: now + 600_000,
            trace: None,
        },
    );
    consort_net::sign_pending_hops(&mut envelope, "alpha", &key, |a| a == "cmo");
    let child = envelope.hops[0].child_run.clone();
    let frame = Frame::Call(envelope);
    let mut ring = KeyRing::new();
    ring.insert("beta", beta_key).unwrap();
    let config = LinkConfig {
        dial_timeout: Duration::from_secs(2),
        redial_backoff: Duration::from_millis(10),
        max_redial_backoff: Duration::from_millis(50),
        ..LinkConfig::default()
    };
    let endpoint = rt
        .block_on(async {
            let handler = |_peer: String, _f: Frame| async { Frame::Ack };
            LinkEndpoint::bind_with_config(
                "127.0.0.1:0".parse().unwrap(),
                "alpha",
                key.clone(),
                ring,
                std::sync::Arc::new(handler),
                config,
            )
        })
        .unwrap();
    let first = rt.block_on(endpoint.request("beta", beta_addr, &frame));
    assert!(
        matches!(first, Err(consort_net::LinkError::Unreachable { .. })),
        "{first:?}"
    );
    fleet.start("beta", None);
    let answers: Vec<Frame> = (0..2)
        .map(|_| {
            poll(LONG, "beta to answer", || {
                rt.block_on(endpoint.request("beta", beta_addr, &frame))
                    .ok()
            })
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            Frame::Accepted {
                child_run: child.clone(),
                existing: false
            },
            Frame::Accepted {
                child_run: child.clone(),
                existing: true
            }
        ]
    );
    let beta = fleet.jobs("beta");
    assert_eq!(beta.len(), 1, "{beta:?}");
    assert_eq!(beta[0]["id"], child.as_str());

    // And the link from alpha reconnects: a fresh run gets its answer.
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = poll(LONG, "a reconnected call", || {
        let run = fleet.wait("alpha", &id, LONG);
        (run["status"] == "succeeded").then_some(run)
    });
    assert!(
        run["output"].as_str().unwrap().contains("48250.00"),
        "{run}"
    );
}

#[test]
fn serve_reports_fleet_yaml_errors_with_file_and_line() {
    let fleet = example_fleet();
    let file = fleet.fleet_file();
    let good = std::fs::read_to_string(&file).unwrap();
    let serve = |yaml: &str| {
        std::fs::write(&file, yaml).unwrap();
        let out = Command::new(BIN)
            .arg("serve")
            .arg("--fleet")
            .arg(&file)
            .args(["--host", "alpha", "--data"])
            .arg(fleet.dir.path().join("data/x"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    // One agent on two hosts.
    let err = serve(&good.replace("agents: [agents/cfo]", "agents: [agents/cfo, agents/cmo]"));
    assert!(err.contains("fleet.yaml:9:"), "{err}");
    assert!(
        err.contains("placed on host `alpha` and on host `beta`"),
        "{err}"
    );
    // An unknown agent folder.
    let err = serve(&good.replace("agents: [agents/cfo]", "agents: [agents/nope]"));
    assert!(
        err.contains("fleet.yaml:9:") && err.contains("does not exist"),
        "{err}"
    );
    // A malformed key.
    let err = serve(&good.replacen("public_key: \"ed25519:", "public_key: \"ed25519:zz", 1));
    assert!(
        err.contains("fleet.yaml:4:") && err.contains("public_key"),
        "{err}"
    );
    // An unknown host.
    std::fs::write(&file, &good).unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--fleet")
        .arg(&file)
        .args(["--host", "delta"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no host named `delta`"), "{err}");
}

#[test]
fn a_reply_survives_the_caller_host_being_down_when_the_child_settles() {
    let mut fleet = example_fleet();
    // Gate the cfo's ledger behind an operator's approval, so the child settles on command.
    let cfo_yaml = fleet.dir.path().join("agents/cfo/agent.yaml");
    let yaml = std::fs::read_to_string(&cfo_yaml).unwrap();
    let gated = yaml.replace("    kind: sql\n", "    kind: sql\n    approval: required\n");
    assert_ne!(gated, yaml);
    std::fs::write(&cfo_yaml, gated).unwrap();
    fleet.start("alpha", None);
    fleet.start("beta", None);
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let child = poll(LONG, "the blocked child", || {
        let jobs = fleet.jobs("beta");
        let run = jobs.first()?;
        (run["status"] == "blocked").then(|| run["id"].as_str().unwrap().to_owned())
    });
    fleet.kill("alpha");
    let approved: Value = fleet
        .http
        .post(format!("{}/runs/{child}/approve", fleet.url("beta")))
        .json(&json!({"approve": true}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(approved["id"], child.as_str(), "{approved}");
    fleet.wait("beta", &child, LONG);
    // beta gives up delivering; alpha asks for the reply again when it resumes the run.
    poll(LONG, "beta to give up on the reply", || {
        fleet
            .stderr("beta")
            .contains("reply not delivered; the caller's host asks for it again")
            .then_some(())
    });
    fleet.start("alpha", None);
    let run = fleet.wait("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        run["output"].as_str().unwrap().contains("48250.00"),
        "{run}"
    );
    assert_eq!(fleet.jobs("beta").len(), 1);
}

#[test]
fn keygen_refuses_a_name_that_would_leave_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("a/b/keys");
    for name in ["../../x", "/tmp/x", "A", ""] {
        let out = Command::new(BIN)
            .args(["keygen", "--out"])
            .arg(&out_dir)
            .args(["--name", name])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--name:"), "{name}: {err}");
    }
    assert!(
        !dir.path().join("a/x.key").exists() && !out_dir.exists(),
        "nothing was written"
    );
}
