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
use support::{BIN, Fleet, ServeFleet, Served, path_str};

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
