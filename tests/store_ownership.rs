//! One owner per store: a second host on a data folder another host writes refuses to start and
//! names who holds it, the inspection commands keep working beside the live host, a finished
//! run never changes, and a host that was SIGKILLed leaves no stale lock behind.
//!
//! Without the lock, a second `consort dev` on the same folder came up, resumed the first
//! host's runs as its own, and a finished run went `succeeded → running → failed`.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{BIN, Fleet, GATED_PAYER, ServeFleet, Served, path_str};

const CFO: &str = r#"
name: cfo
description: answers spend questions
model:
  script:
    - answer: "August 2026 spend: 48250.00 USD"
"#;

/// Waits for `child` to exit within `bound`; a child still running then is killed and reported
/// (a second host that came up would serve forever).
fn exit_within(mut child: Child, bound: Duration) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the second host") {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("stderr");
            }
            return (status, stderr);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second host on a held data folder came up instead of refusing to start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn second_dev(fleet: &Fleet) -> Child {
    Command::new(BIN)
        .args(["dev", path_str(&fleet.agents())])
        .args(["--data", path_str(&fleet.data()), "--listen", "127.0.0.1:0"])
        .env_remove("CONSORT_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a second consort dev")
}

/// The run as `runs show --data` prints it (read-only, beside a live host).
fn shown(fleet: &Fleet, id: &str) -> Value {
    let out = fleet.consort(&[
        "runs",
        "show",
        id,
        "--data",
        path_str(&fleet.data()),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "runs show --data beside a live host: {out:?}"
    );
    serde_json::from_slice(&out.stdout).expect("runs show json")
}

#[test]
fn a_second_dev_host_on_a_held_folder_refuses_and_names_the_holder() {
    let fleet = Fleet::new();
    fleet.agent("cfo", CFO);
    let first = fleet.serve(&[]);
    let run = first.run_wait("cfo", "August");
    assert_eq!(run["status"], "succeeded", "{run}");
    let id = run["id"].as_str().expect("run id").to_owned();
    let before = shown(&fleet, &id);

    let (status, stderr) = exit_within(second_dev(&fleet), Duration::from_secs(30));
    assert!(
        !status.success(),
        "the second host exited {status}: {stderr}"
    );
    let pid = format!("pid {}", first.child.id());
    assert!(stderr.contains("is in use by"), "{stderr}");
    assert!(stderr.contains(&pid), "the holder's pid is named: {stderr}");
    assert!(
        stderr.contains("host local") && stderr.contains(" since "),
        "{stderr}"
    );

    // Inspection reads beside the live host, and nothing of the finished run changed.
    assert!(
        !fleet.jobs().is_empty(),
        "jobs list --data beside a live host"
    );
    assert_eq!(shown(&fleet, &id), before, "the finished run changed");
    let again = first.run_wait("cfo", "September");
    assert_eq!(
        again["status"], "succeeded",
        "the first host still serves: {again}"
    );

    // A SIGKILLed holder leaves no stale lock: the next host comes up on the folder.
    first.kill();
    let next = fleet.serve(&[]);
    assert_eq!(
        next.show(&id).expect("the run is there")["run"],
        before["run"]
    );
}

#[test]
fn a_second_serve_host_on_a_held_folder_refuses_before_writing_anything() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("agents/cfo")).expect("agent dir");
    std::fs::write(dir.path().join("agents/cfo/agent.yaml"), CFO).expect("agent.yaml");
    let mut fleet = ServeFleet::new(dir, &[("beta", &["cfo"])]);
    fleet.start("beta");
    let data = fleet.hosts[0].data.clone();
    let note_before = std::fs::read_to_string(data.join("serve.json")).expect("serve.json");
    let holder = fleet.hosts[0].child.as_ref().expect("beta runs").id();

    let second = Command::new(BIN)
        .arg("serve")
        .arg("--fleet")
        .arg(fleet.dir.path().join("fleet.yaml"))
        .args(["--host", "beta", "--data"])
        .arg(&data)
        .env_remove("CONSORT_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a second consort serve");
    let (status, stderr) = exit_within(second, Duration::from_secs(30));
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {holder} (host beta")),
        "the refusal names the holder: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("serve.json")).expect("serve.json"),
        note_before,
        "the refused host wrote to the folder"
    );
    assert!(
        lock_names(&data, holder),
        "the lock file still names the holder"
    );
}

/// Whether the folder's lock file names `pid` as its holder.
fn lock_names(data: &Path, pid: u32) -> bool {
    std::fs::read_to_string(data.join("consort.lock"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|v| v["pid"].as_u64() == Some(u64::from(pid)))
}

#[test]
fn a_host_that_stopped_lets_the_next_one_take_the_folder() {
    let fleet = Fleet::new();
    fleet.agent("cfo", CFO);
    let first = fleet.serve(&[]);
    let pid = first.child.id();
    assert!(lock_names(&fleet.data(), pid));
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut first = first;
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the first host did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let next: Served = fleet.serve(&[]);
    assert!(lock_names(&fleet.data(), next.child.id()));
}

// --- PostgreSQL: one lease holder per agent store --------------------------------------------

#[path = "../actors/src/store/postgres/test_server.rs"]
mod test_server;

const PG_VAR: &str = "CONSORT_OWNERSHIP_PG_URL";

fn pg_host(fleet: &Fleet, data: &Path, url: &str, args: &[&str]) -> Served {
    let mut all = vec!["--store-url-env", PG_VAR, "--lease-ttl-secs", "2"];
    all.extend_from_slice(args);
    Served::start_with(&[fleet.agents()], data, &[(PG_VAR, url)], &all)
}

fn start_run(host: &Served, agent: &str, input: &str) -> (u16, Value) {
    let resp = host
        .http()
        .post(format!("{}/runs", host.url))
        .json(&serde_json::json!({"agent": agent, "input": input}))
        .send()
        .expect("POST /runs");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

fn approve(host: &Served, id: &str) -> u16 {
    host.http()
        .post(format!("{}/runs/{id}/approve", host.url))
        .json(&serde_json::json!({"approve": true}))
        .send()
        .expect("POST approve")
        .status()
        .as_u16()
}

/// Every run of the store, with its event count, as `host` reads them.
fn store_contents(host: &Served) -> Vec<(String, String, usize)> {
    let jobs: Value = host
        .http()
        .get(format!("{}/jobs?limit=100", host.url))
        .send()
        .and_then(|r| r.json())
        .expect("GET /jobs");
    let mut runs: Vec<(String, String, usize)> = jobs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            let id = run["id"].as_str().expect("id").to_owned();
            let events = host.show(&id).expect("the run")["events"]
                .as_array()
                .map_or(0, Vec::len);
            (id, run["status"].as_str().unwrap_or("").to_owned(), events)
        })
        .collect();
    runs.sort();
    runs
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

#[test]
fn a_second_host_on_one_postgres_store_refuses_and_names_the_holder() {
    let Some(server) = test_server::TestServer::start() else {
        return;
    };
    let url = server.database("ownership_two");
    let fleet = Fleet::new();
    fleet.agent("cfo", CFO);
    let first = pg_host(&fleet, &fleet.dir.path().join("a"), &url, &[]);
    let run = first.run_wait("cfo", "August");
    assert_eq!(run["status"], "succeeded", "{run}");
    let before = store_contents(&first);

    let second = Command::new(BIN)
        .args(["dev", path_str(&fleet.agents())])
        .args(["--data", path_str(&fleet.dir.path().join("b"))])
        .args(["--listen", "127.0.0.1:0", "--store-url-env", PG_VAR])
        .env(PG_VAR, &url)
        .env_remove("CONSORT_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a second consort dev");
    let (status, stderr) = exit_within(second, Duration::from_secs(30));
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("store of agent `cfo` is held by")
            && stderr.contains(&format!("pid {} (host local", first.child.id())),
        "the refusal names the holder: {stderr}"
    );
    assert_eq!(store_contents(&first), before, "a finished run changed");
}

#[test]
fn a_paused_owner_whose_lease_a_standby_took_writes_nothing() {
    let Some(server) = test_server::TestServer::start() else {
        return;
    };
    let url = server.database("ownership_standby");
    let fleet = Fleet::new();
    fleet.agent("payer", GATED_PAYER);
    fleet.ledger("payer");
    let owner = pg_host(&fleet, &fleet.dir.path().join("a"), &url, &[]);
    let owner_pid = owner.child.id();

    // One payment made and finished, one waiting for its approval.
    let (_, done) = start_run(&owner, "payer", "acme");
    let done = done["id"].as_str().expect("run id").to_owned();
    owner.wait_status(&done, "blocked");
    assert_eq!(approve(&owner, &done), 200);
    owner.wait_status(&done, "succeeded");
    let (_, waiting) = start_run(&owner, "payer", "globex");
    let waiting = waiting["id"].as_str().expect("run id").to_owned();
    owner.wait_status(&waiting, "blocked");

    // The owner is paused; a standby takes its lease once it ends, and finishes the run.
    signal(owner_pid, "-STOP");
    let standby = pg_host(&fleet, &fleet.dir.path().join("b"), &url, &["--standby"]);
    standby.wait_status(&waiting, "blocked");
    assert_eq!(approve(&standby, &waiting), 200);
    standby.wait_status(&waiting, "succeeded");
    let after_takeover = store_contents(&standby);
    assert_eq!(after_takeover.len(), 2, "{after_takeover:?}");

    // The old owner wakes up and is asked to write: nothing it does reaches the store.
    signal(owner_pid, "-CONT");
    let (status, refused) = start_run(&owner, "payer", "initech");
    assert!(
        status >= 400,
        "the paused owner started a run: {status} {refused}"
    );
    let _ = approve(&owner, &waiting);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        store_contents(&standby),
        after_takeover,
        "the old owner wrote after it lost its lease"
    );
}
