//! An agent that is down comes back: by itself once its store can be written again, or on a
//! reload whatever took it down. The real `consort dev` binary, real SQLite stores.
//!
//! "The disk is full" is a file-size limit (`RLIMIT_FSIZE`) set on the running host with
//! util-linux's `prlimit --pid`, as an operator could, and lifted the same way to give the
//! space back. It needs no privileges; where `prlimit` is missing or may not change the
//! host's limits, the test says so and skips. Runs are accepted before the limit and held in
//! their first model turn (a `kind: command` model that answers once a file exists), so the
//! limit lands on runs in flight: their next commit fails.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Fleet, Served, eventually};

/// One turn per run: a model program that answers only once the file `go` exists in the
/// agent's folder.
const SCRIBE: &str = "name: scribe\ndescription: writes\nmodel: {kind: command, argv: [sh, model.sh], timeout_s: 120}\n";
const HELD_MODEL: &str = r#"while IFS= read -r line; do
  while [ ! -e go ]; do sleep 0.05; done
  printf '%s\n' '{"answer": "written"}'
done
"#;

/// A store small enough that any commit past it fails: a WAL frame alone is larger.
const FULL_AT: &str = "4096";
const BOUND: Duration = Duration::from_secs(60);

/// Sets the soft file-size limit of process `pid` (`unlimited` lifts it), through `prlimit`.
fn set_file_size_limit(pid: u32, soft: &str) -> Result<(), String> {
    let out = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={soft}:")])
        .output()
        .map_err(|e| format!("prlimit did not run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "prlimit --pid {pid} --fsize={soft}: failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this machine can limit a running process's file size (util-linux's `prlimit`,
/// and a kernel and sandbox that let it); `Err` says why not.
fn file_size_limits_work() -> Result<(), String> {
    let mut probe = Command::new("sleep")
        .arg("30")
        .spawn()
        .map_err(|e| format!("cannot start a process to try prlimit on: {e}"))?;
    let tried = set_file_size_limit(probe.id(), FULL_AT)
        .and_then(|()| set_file_size_limit(probe.id(), "unlimited"));
    let _ = probe.kill();
    let _ = probe.wait();
    tried
}

fn agents_status(host: &Served) -> Vec<Value> {
    host.http()
        .get(format!("{}/agents", host.url))
        .send()
        .and_then(|r| r.json::<Value>())
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn agent_status(host: &Served, agent: &str) -> Value {
    agents_status(host)
        .into_iter()
        .find(|a| a["name"] == agent)
        .unwrap_or_else(|| panic!("GET /agents lists no {agent}"))
}

fn start_run(host: &Served, agent: &str, input: &str) -> reqwest::blocking::Response {
    host.http()
        .post(format!("{}/runs", host.url))
        .json(&json!({"agent": agent, "input": input}))
        .send()
        .expect("POST /runs")
}

fn run(host: &Served, id: &str) -> Value {
    host.http()
        .get(format!("{}/runs/{id}", host.url))
        .send()
        .and_then(|r| r.json::<Value>())
        .expect("GET /runs/{id}")
}

fn model_turns(host: &Served, id: &str) -> usize {
    let events: Value = host
        .http()
        .get(format!("{}/runs/{id}/events?limit=1000", host.url))
        .send()
        .and_then(|r| r.json())
        .expect("GET /runs/{id}/events");
    events["events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["kind"] == "model_turn").count())
        .unwrap_or(0)
}

#[test]
fn an_agent_down_on_a_full_store_comes_back_by_itself_and_finishes_its_accepted_runs() {
    if let Err(why) = file_size_limits_work() {
        eprintln!("SKIPPED: this test limits a process's file size with `prlimit --pid`: {why}");
        return;
    }
    let fleet = Fleet::new();
    let file = fleet.agent("scribe", SCRIBE);
    let folder = file.parent().expect("agent folder");
    std::fs::write(folder.join("model.sh"), HELD_MODEL).expect("model program");
    let mut host = fleet.serve(&[]);
    let pid = host.child.id();

    // Three runs accepted, each held in its first model turn.
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let answer = start_run(&host, "scribe", &format!("note {i}"));
            assert_eq!(answer.status().as_u16(), 201, "run {i} accepted");
            let run: Value = answer.json().expect("run json");
            run["id"].as_str().expect("run id").to_owned()
        })
        .collect();
    // Stored (the answer came after the commit) and asked: the model program is holding the
    // first turn; a run is `running` once its ask is recorded (`model_turn_started`, committed
    // beside the ask).
    assert!(
        host.wait_for_line("model program started", BOUND).is_some(),
        "the model is asked"
    );
    for id in &ids {
        eventually(&format!("{id} to be running"), BOUND, || {
            (run(&host, id)["status"] == "running").then_some(())
        });
    }

    // The disk fills; then the model answers, and recording its turns needs room.
    set_file_size_limit(pid, FULL_AT).expect("limit the host's file size");
    std::fs::write(folder.join("go"), b"").expect("release the model");
    let down = eventually("scribe down on its store", BOUND, || {
        let status = agent_status(&host, "scribe");
        (status["up"] == false).then_some(status)
    });
    assert_eq!(down["down"]["reason"], "store_not_writable", "{down}");
    let detail = down["down"]["detail"].as_str().unwrap_or_default();
    assert!(!detail.is_empty(), "{down}");
    assert!(
        host.wait_for_line("its store is not writable", BOUND)
            .is_some(),
        "the log says why the agent went down"
    );
    assert!(
        host.child.try_wait().expect("host state").is_none(),
        "a write past the file-size limit must not end the host"
    );
    // Nothing accepted is lost, nothing new is taken while down.
    for id in &ids {
        let r = run(&host, id);
        assert!(
            !matches!(r["status"].as_str(), Some("succeeded" | "failed")),
            "{r}"
        );
    }
    let refused = start_run(&host, "scribe", "while down");
    assert_eq!(
        refused.status().as_u16(),
        409,
        "a down agent takes no new run"
    );
    let refusal: Value = refused.json().expect("error json");
    assert_eq!(refusal["error"]["code"], "agent_down", "{refusal}");

    // Space comes back: the agent comes back by itself and its runs finish.
    set_file_size_limit(pid, "unlimited").expect("lift the limit");
    let back = host
        .wait_for_line("store writable again", BOUND)
        .expect("the log says when the agent is back");
    assert!(back.contains("scribe"), "{back}");
    let status = agent_status(&host, "scribe");
    assert_eq!(status["up"], true, "{status}");
    assert!(status["down"].is_null(), "{status}");
    for id in &ids {
        let done = eventually(&format!("{id} to finish"), BOUND, || {
            let r = run(&host, id);
            matches!(r["status"].as_str(), Some("succeeded" | "failed")).then_some(r)
        });
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["output"], "written", "{done}");
        assert_eq!(
            model_turns(&host, id),
            1,
            "the lost turn is asked again once"
        );
    }
    let after = start_run(&host, "scribe", "after");
    assert_eq!(
        after.status().as_u16(),
        201,
        "the agent takes new runs again"
    );
}

/// A gated tool holds a run open; its row is then broken in the store so that the agent fails
/// each time it starts.
const CLERK: &str = r#"
name: clerk
description: counts
model:
  script:
    - tool: {name: ledger, input: "SELECT count(*) FROM spend"}
    - answer: "rows: {tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}
"#;

fn set_roles(store: &Path, id: &str, roles: &str) {
    let conn = rusqlite::Connection::open(store).expect("open the store");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let n = conn
        .execute(
            "UPDATE runs SET principal_roles = ?1 WHERE id = ?2",
            rusqlite::params![roles, id],
        )
        .expect("update the run's row");
    assert_eq!(n, 1);
}

#[test]
fn reload_revives_an_agent_down_past_its_restart_budget_without_a_config_change() {
    let fleet = Fleet::new();
    fleet.agent("clerk", CLERK);
    fleet.ledger("clerk");
    let host = fleet.serve(&[]);
    let answer = start_run(&host, "clerk", "count");
    assert_eq!(answer.status().as_u16(), 201);
    let id = answer.json::<Value>().expect("run json")["id"]
        .as_str()
        .expect("run id")
        .to_owned();
    host.wait_status(&id, "blocked");
    host.kill();

    // A broken row: the agent fails each time it resumes its runs.
    let store = fleet.data().join("agents/clerk/runs.db");
    set_roles(&store, &id, "not json");
    let mut host = fleet.serve(&[]);
    let down = eventually("clerk down past its restart budget", BOUND, || {
        let status = agent_status(&host, "clerk");
        (status["up"] == false).then_some(status)
    });
    assert_eq!(down["down"]["reason"], "restart_budget_spent", "{down}");
    assert!(
        down["down"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("principal roles")),
        "{down}"
    );
    assert!(
        host.wait_for_line("past its restart budget", BOUND)
            .is_some(),
        "the log says the agent is down"
    );

    // The operator repairs the row and reloads; agent.yaml did not change.
    set_roles(&store, &id, "[]");
    let reloaded: Value = host
        .http()
        .post(format!("{}/reload", host.url))
        .json(&json!({}))
        .send()
        .and_then(|r| r.json())
        .expect("POST /reload");
    assert_eq!(reloaded, json!({"changed": [], "revived": ["clerk"]}));
    let status = agent_status(&host, "clerk");
    assert_eq!(status["up"], true, "{status}");
    assert!(status["down"].is_null(), "{status}");
    assert!(
        host.wait_for_line("reload: the agent was down", BOUND)
            .is_some()
    );

    // Its accepted run was kept and finishes.
    let approved = host.cli(&["approve", &id]);
    assert!(approved.status.success(), "{}", support::stderr(&approved));
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(done["run"]["output"], "rows: 3");
    // With nothing down, a reload revives nothing.
    let again: Value = host
        .http()
        .post(format!("{}/reload", host.url))
        .json(&json!({}))
        .send()
        .and_then(|r| r.json())
        .expect("POST /reload");
    assert_eq!(again["revived"], json!([]));
}
