//! End-to-end tests of one host: the real `consort` binary on real agent folders, real SQLite
//! stores, real HTTP on loopback. Each test builds its own temporary fleet.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, consort, eventually, kinds, path_str, runs_of, stderr, stdout};

const CMO: &str = r#"
name: cmo
description: marketing
agents: {can_call: [cfo]}
model:
  script:
    - call: [{agent: cfo, input: "2026-08"}]
    - answer: "cfo says: {reply.cfo}"
"#;

const CFO: &str = r#"
name: cfo
description: finance
agents: {accept_from: [cmo]}
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger}
"#;

fn finance() -> Fleet {
    let fleet = Fleet::new();
    fleet.agent("cmo", CMO);
    fleet.agent("cfo", CFO);
    fleet.ledger("cfo");
    fleet
}

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn edges_report_connected_and_one_sided_declarations() {
    let fleet = Fleet::new();
    let answer = "model: {script: [{answer: ok}]}";
    fleet.agent(
        "a",
        &format!("name: a\nagents: {{can_call: [b, c]}}\n{answer}"),
    );
    fleet.agent(
        "b",
        &format!("name: b\nagents: {{accept_from: [a]}}\n{answer}"),
    );
    fleet.agent("c", &format!("name: c\n{answer}"));
    fleet.agent(
        "d",
        &format!("name: d\nagents: {{accept_from: [c]}}\n{answer}"),
    );
    let out = consort(&["edges", path_str(&fleet.agents()), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let edges: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let status = |caller: &str, callee: &str| {
        edges
            .iter()
            .find(|e| e["caller"] == caller && e["callee"] == callee)
            .map(|e| e["status"].as_str().unwrap().to_owned())
    };
    assert_eq!(status("a", "b").as_deref(), Some("connected"));
    assert_eq!(status("a", "c").as_deref(), Some("caller_only"));
    assert_eq!(status("c", "d").as_deref(), Some("callee_only"));
    assert_eq!(edges.len(), 3);
    let table = consort(&["edges", path_str(&fleet.agents())]);
    assert!(stdout(&table).contains("caller_only"));
}

#[test]
fn example_answers_through_the_cfo_and_lists_both_runs() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/marketing-finance");
    let data = tempfile::tempdir().unwrap();
    let out = consort(&[
        "dev",
        example,
        "--data",
        path_str(data.path()),
        "--ask",
        "cmo",
        "What did we spend in August?",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("August 2026 spend, per the CFO: 48250.00 USD"),
        "{text}"
    );
    assert!(
        text.contains("agent:cmo"),
        "the runs table shows the cfo's channel: {text}"
    );

    let jobs = consort(&["jobs", "list", "--data", path_str(data.path()), "--json"]);
    let jobs: Value = serde_json::from_slice(&jobs.stdout).unwrap();
    let jobs = jobs["runs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 2);
    let cmo = runs_of(&jobs, "cmo")[0];
    let cfo = runs_of(&jobs, "cfo")[0];
    assert_eq!(cmo["channel"], "cli");
    assert_eq!(cfo["channel"], "agent:cmo");
    assert_eq!(cfo["parent_run"], cmo["id"]);
    assert_eq!(cfo["hop_depth"], 1);
    assert_eq!(cmo["status"], "succeeded");
    assert_eq!(cfo["status"], "succeeded");
    // Each run carries its own cost: the cfo used its tool, the cmo placed the call.
    assert_eq!(cfo["cost"]["tool_calls"], 1);
    assert_eq!(cfo["cost"]["calls_placed"], 0);
    assert_eq!(cmo["cost"]["tool_calls"], 0);
    assert_eq!(cmo["cost"]["calls_placed"], 1);
    assert_eq!(cmo["cost"]["model_turns"], 2);
    // The cfo saw only the input text, and the cmo never touched the cfo's tool.
    assert_eq!(cfo["input"], "2026-08");
    let cmo_events = consort(&[
        "runs",
        "show",
        cmo["id"].as_str().unwrap(),
        "--data",
        path_str(data.path()),
        "--json",
    ]);
    let shown: Value = serde_json::from_slice(&cmo_events.stdout).unwrap();
    let events = shown["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .all(|e| e["kind"] != "tool_result" || e["data"]["name"] == "call_agent"),
        "the cmo used no tool of its own, and never the cfo's: {events:?}"
    );
    assert!(kinds(events).contains(&"reply_received".to_string()));
}

#[test]
fn serving_host_answers_over_http_and_cli() {
    let fleet = finance();
    let host = fleet.serve(&[]);
    let run = host.run_wait("cmo", "August");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "cfo says: 48250.00");
    let id = run["id"].as_str().unwrap();

    let shown = host.cli(&["runs", "show", id]);
    assert!(
        stdout(&shown).contains("reply_received"),
        "{}",
        stdout(&shown)
    );
    let listed = host.cli(&["jobs", "list", "--agent", "cfo", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let listed = listed["runs"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["channel"], "agent:cmo");
    let events = host
        .http()
        .get(format!("{}/runs/{id}/events", host.url))
        .send()
        .unwrap();
    assert_eq!(events.status(), 200);
    let events: Value = events.json().unwrap();
    let events = events["events"].as_array().unwrap().clone();
    let k = kinds(&events);
    for expected in [
        "created",
        "model_turn",
        "call_placed",
        "tool_result",
        "reply_received",
        "answer",
    ] {
        assert!(k.contains(&expected.to_string()), "{expected} in {k:?}");
    }
}

#[test]
fn a_fifth_hop_is_refused_with_the_depth_message() {
    let fleet = Fleet::new();
    for i in 1..=6 {
        let next = i + 1;
        let yaml = if i < 6 {
            format!(
                "name: a{i}\nagents: {{can_call: [a{next}], accept_from: [a{}]}}\nmodel:\n  script:\n    - call: [{{agent: a{next}, input: \"{{input}}>{i}\"}}]\n    - answer: \"a{i}<{{reply.a{next}}}\"\n",
                i - 1
            )
        } else {
            "name: a6\nagents: {accept_from: [a5]}\nmodel: {script: [{answer: \"a6 reached\"}]}\n"
                .to_owned()
        };
        fleet.agent(
            &format!("a{i}"),
            &yaml.replace("accept_from: [a0]", "accept_from: []"),
        );
    }
    let host = fleet.serve(&[]);
    let run = host.run_wait("a1", "go");
    assert_eq!(run["status"], "succeeded", "{run}");
    let answer = run["output"].as_str().unwrap();
    assert!(
        answer.contains("call chain depth limit (4) reached: answer with what you have"),
        "{answer}"
    );
    assert!(!answer.contains("a6 reached"));
    drop(host);
    let jobs = fleet.jobs();
    assert!(
        runs_of(&jobs, "a6").is_empty(),
        "no run was created past the limit"
    );
    let a5 = runs_of(&jobs, "a5")[0];
    assert_eq!(a5["hop_depth"], 4);
    let events = fleet.events(a5["id"].as_str().unwrap());
    let refusal = events
        .iter()
        .find(|e| e["kind"] == "call_refused")
        .expect("refusal in a5's log");
    assert_eq!(refusal["data"]["code"], "depth_limit");
}

#[test]
fn the_twenty_sixth_call_of_a_run_is_refused() {
    let fleet = Fleet::new();
    fleet.agent(
        "fan",
        r#"
name: fan
agents: {can_call: [echo]}
model:
  script:
    - call: [{agent: echo, input: "q{n}", count: 26}]
    - answer: "{replies}"
"#,
    );
    fleet.agent(
        "echo",
        "name: echo\nagents: {accept_from: [fan]}\nmodel: {script: [{answer: \"e:{input}\"}]}\n",
    );
    let host = fleet.serve(&[]);
    let run = host.run_wait("fan", "go");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["cost"]["calls_placed"], 25);
    let out = run["output"].as_str().unwrap();
    assert_eq!(out.lines().count(), 25, "{out}");
    drop(host);
    let jobs = fleet.jobs();
    assert_eq!(runs_of(&jobs, "echo").len(), 25);
    let events = fleet.events(run["id"].as_str().unwrap());
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "call_refused")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["data"]["code"], "call_cap");
    assert_eq!(
        refused[0]["data"]["reason"],
        "per-run call limit (25) reached: answer with what you have"
    );
}

#[test]
fn a_replay_after_sigkill_finds_the_one_child_run() {
    let fleet = finance();
    let mut host = fleet.serve(&[("CONSORT_FAULT", "after_child_stored")]);
    // The child may be stored (and the host abort) before the CLI has read its answer: the
    // run's id is taken from the store, where the root run is in either case.
    let _ = host.cli(&["run", "cmo", "August", "--json"]);
    // The fault point aborts the host right there, as a crash would.
    host.wait_for_crash("after_child_stored", WAIT);
    host.kill();
    let cmo = fleet.jobs();
    let cmo = runs_of(&cmo, "cmo");
    assert_eq!(cmo.len(), 1, "the root run was stored: {cmo:?}");
    let id = cmo[0]["id"].as_str().unwrap().to_owned();

    // The crash window: the child is stored, the caller has not recorded the call.
    let jobs = fleet.jobs();
    assert_eq!(runs_of(&jobs, "cfo").len(), 1);
    let cmo_log = fleet.events(&id);
    assert!(
        !kinds(&cmo_log).contains(&"call_placed".to_string()),
        "{cmo_log:?}"
    );

    let host = fleet.serve(&[]);
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(done["run"]["output"], "cfo says: 48250.00");
    drop(host);
    let jobs = fleet.jobs();
    assert_eq!(runs_of(&jobs, "cfo").len(), 1, "exactly one child run");
    let log = fleet.events(&id);
    let placed: Vec<&Value> = log.iter().filter(|e| e["kind"] == "call_placed").collect();
    assert_eq!(placed.len(), 1);
    assert_eq!(
        placed[0]["data"]["existing"], true,
        "the replay found the existing run"
    );
    assert_eq!(
        done["run"]["cost"]["calls_placed"], 1,
        "the replay is not counted twice"
    );
}

#[test]
fn narrowing_accept_from_while_serving_refuses_the_next_call() {
    let fleet = finance();
    let host = fleet.serve(&[]);
    assert_eq!(host.run_wait("cmo", "one")["status"], "succeeded");

    let cfo = fleet.agents().join("cfo/agent.yaml");
    std::fs::write(&cfo, CFO.replace("accept_from: [cmo]", "accept_from: []")).unwrap();
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{}", stderr(&reload));
    assert!(stdout(&reload).contains("cfo"), "{}", stdout(&reload));

    let run = host.run_wait("cmo", "two");
    let answer = run["output"].as_str().unwrap();
    assert!(
        answer.contains("cfo does not accept calls from cmo"),
        "{answer}"
    );
    let events = host.cli(&["runs", "show", run["id"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&events.stdout).unwrap();
    let refusal = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "call_refused")
        .cloned()
        .unwrap();
    assert_eq!(refusal["data"]["code"], "not_accepted");

    // Widening the caller's side alone grants nothing: the cfo still has not consented.
    std::fs::write(fleet.agents().join("cmo/agent.yaml"), CMO).unwrap();
    let _ = host.cli(&["reload"]);
    let again = host.run_wait("cmo", "three");
    assert!(
        again["output"]
            .as_str()
            .unwrap()
            .contains("does not accept")
    );

    // An invalid edit is refused and loses nothing: the previous config stays in force.
    std::fs::write(
        &cfo,
        "name: cfo\nagents: {accept_from: [nobody]}\nmodel: {script: []}\n",
    )
    .unwrap();
    let bad = host.cli(&["reload"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("agent.yaml:2"), "{}", stderr(&bad));
    assert_eq!(runs_of(&host_jobs(&host), "cfo").len(), 1);
}

fn host_jobs(host: &support::Served) -> Vec<Value> {
    let out = host.cli(&["jobs", "list", "--json"]);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    page["runs"].as_array().unwrap().clone()
}

#[test]
fn an_edit_on_disk_is_picked_up_without_reload() {
    let fleet = finance();
    let host = fleet.serve(&[]);
    std::fs::write(
        fleet.agents().join("cfo/agent.yaml"),
        CFO.replace("accept_from: [cmo]", "accept_from: []"),
    )
    .unwrap();
    let answer = eventually("the watcher to apply the edit", WAIT, || {
        let run = host.run_wait("cmo", "x");
        let out = run["output"].as_str()?.to_owned();
        out.contains("does not accept").then_some(out)
    });
    assert!(answer.contains("cfo does not accept calls from cmo"));

    // The operator who edited the file and reloads is told the edit is in force, though the
    // watcher applied it first; once told, a reload has nothing new to say.
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{}", stderr(&reload));
    assert_eq!(stdout(&reload).trim(), "reloaded: cfo");
    let again = host.cli(&["reload"]);
    assert_eq!(stdout(&again).trim(), "no agent.yaml changed");
}

#[test]
fn a_gated_tool_on_the_callee_parks_until_approved() {
    let fleet = Fleet::new();
    fleet.agent("cmo", CMO);
    fleet.agent(
        "cfo",
        &CFO.replace(
            "description: the ledger}",
            "description: the ledger, approval: required}",
        ),
    );
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let started = host.cli(&["run", "cmo", "Aug", "--json"]);
    let cmo: Value = serde_json::from_slice(&started.stdout).unwrap();
    let cmo_id = cmo["id"].as_str().unwrap().to_owned();
    let cfo_id = eventually("the cfo run to block", WAIT, || {
        let jobs = host_jobs(&host);
        let cfo = runs_of(&jobs, "cfo").first().cloned().cloned()?;
        (cfo["status"] == "blocked").then(|| cfo["id"].as_str().unwrap().to_owned())
    });
    let jobs = host_jobs(&host);
    assert_eq!(
        runs_of(&jobs, "cmo")[0]["status"],
        "waiting",
        "the caller keeps waiting"
    );

    let approved = host.cli(&["approve", &cfo_id]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    let first = host.wait_status(&cmo_id, "succeeded");
    assert_eq!(first["run"]["output"], "cfo says: 48250.00");
    let cfo_log = host.cli(&["runs", "show", &cfo_id, "--json"]);
    let v: Value = serde_json::from_slice(&cfo_log.stdout).unwrap();
    let k = kinds(v["events"].as_array().unwrap());
    assert!(
        k.contains(&"approval_requested".to_string())
            && k.contains(&"approval_decided".to_string()),
        "{k:?}"
    );

    // Approving something that is not blocked is a clear error.
    let again = host.cli(&["approve", &cfo_id]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("not waiting for an approval"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_denied_tool_use_reaches_the_model_as_an_error() {
    let fleet = Fleet::new();
    fleet.agent(
        "cfo",
        &CFO.replace(
            "description: the ledger}",
            "description: the ledger, approval: required}",
        )
        .replace("accept_from: [cmo]", "accept_from: []"),
    );
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let started = host.cli(&["run", "cfo", "2026-08", "--json"]);
    let run: Value = serde_json::from_slice(&started.stdout).unwrap();
    let id = run["id"].as_str().unwrap().to_owned();
    host.wait_status(&id, "blocked");
    assert!(host.cli(&["approve", &id, "--deny"]).status.success());
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(
        done["run"]["output"],
        "the operator denied the use of `ledger`"
    );
}

#[test]
fn a_single_agent_runtime_says_it_has_no_peers() {
    let fleet = Fleet::new();
    fleet.agent("solo", "name: solo\nmodel:\n  script:\n    - call: [{agent: helper, input: hi}]\n    - answer: \"{reply.helper}\"\n");
    let data = fleet.data();
    let out = consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&data),
        "--ask",
        "solo",
        "hi",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("call_agent is unavailable: this runtime serves a single agent (solo) and has no peers to call"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn check_run_and_reply_cap() {
    let fleet = Fleet::new();
    fleet.agent(
        "cmo",
        r#"
name: cmo
agents: {can_call: [cfo]}
model:
  script:
    - call: [{agent: cfo, input: "big"}]
    - check: "{call.cfo}"
    - check: "run_00000000000000000000000000000000"
    - answer: "{reply.cfo}"
"#,
    );
    fleet.agent(
        "cfo",
        r#"
name: cfo
agents: {accept_from: [cmo]}
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.20000c', 'x')"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db}
"#,
    );
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let run = host.run_wait("cmo", "go");
    assert_eq!(run["status"], "succeeded", "{run}");
    let out = run["output"].as_str().unwrap();
    assert!(
        out.contains("[… output truncated: 16384 of 20000 bytes shown]"),
        "{}",
        &out[out.len().saturating_sub(200)..]
    );
    assert!(out.len() < 17_000);
    let log = host.cli(&["runs", "show", run["id"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&log.stdout).unwrap();
    let results: Vec<&Value> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result" && e["data"]["name"] == "check_run")
        .collect();
    assert_eq!(results.len(), 2);
    let known: Value =
        serde_json::from_str(results[0]["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(known["agent"], "cfo");
    assert_eq!(known["status"], "succeeded");
    assert_eq!(results[1]["data"]["is_error"], true);
    assert!(
        results[1]["data"]["content"]
            .as_str()
            .unwrap()
            .starts_with("unknown run")
    );
}

#[test]
fn the_sql_tool_refuses_writes_in_the_engine() {
    let fleet = Fleet::new();
    fleet.agent("cfo", "name: cfo\nmodel:\n  script:\n    - tool: {name: ledger, input: \"DELETE FROM spend\"}\n    - answer: \"{tool.ledger}\"\ntools:\n  - {name: ledger, kind: sql, database: ledger.db}\n");
    fleet.ledger("cfo");
    let out = consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "cfo",
        "x",
    ]);
    // The authorizer refuses it before the read-only connection would.
    assert!(
        stdout(&out).contains("forbidden: sql: DELETE is not allowed"),
        "{}",
        stdout(&out)
    );
    let conn = rusqlite::Connection::open(fleet.agents().join("cfo/ledger.db")).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM spend", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 3);
}

/// Starts `consort dev` on a broken fleet and returns its stderr.
fn startup_error(fleet: &Fleet) -> String {
    let out = consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "a",
        "x",
    ]);
    assert!(!out.status.success(), "a broken fleet must not start");
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_config_is_a_clear_startup_error() {
    let ok = "model: {script: [{answer: ok}]}";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "malformed yaml",
            "name: a\nmodel: [unclosed\n".into(),
            "agent.yaml:",
        ),
        (
            "unknown key",
            format!("name: a\nagents: {{can_cal: [b]}}\n{ok}"),
            "can_cal",
        ),
        (
            "unknown peer",
            format!("name: a\nagents: {{can_call: [ghost]}}\n{ok}"),
            "ghost",
        ),
        (
            "unknown tool kind",
            format!("name: a\n{ok}\ntools:\n  - {{name: t, kind: shell}}\n"),
            "shell",
        ),
        (
            "missing sql file",
            format!("name: a\n{ok}\ntools:\n  - {{name: t, kind: sql, database: nope.db}}\n"),
            "nope.db",
        ),
        (
            "a template in a sql tool's query",
            "name: a\nmodel:\n  script:\n    - tool: {name: t, input: \"SELECT '{input}'\"}\ntools:\n  - {name: t, kind: sql, database: nope.db}\n".into(),
            "write `:input`",
        ),
        (
            "a sql database outside the agent folder",
            format!("name: a\n{ok}\ntools:\n  - {{name: t, kind: sql, database: /etc/passwd}}\n"),
            "is an absolute path",
        ),
    ];
    for (what, yaml, needle) in cases {
        let fleet = Fleet::new();
        let file = fleet.agent("a", &yaml);
        let err = startup_error(&fleet);
        assert!(
            err.contains(path_str(&file)) || err.contains("a/agent.yaml"),
            "{what}: names the file: {err}"
        );
        assert!(err.contains(needle), "{what}: {err}");
        let located = err.contains("agent.yaml:")
            && err
                .split("agent.yaml:")
                .nth(1)
                .is_some_and(|r| r.chars().next().is_some_and(|c| c.is_ascii_digit()));
        assert!(located, "{what}: names the line: {err}");
    }
    let fleet = Fleet::new();
    fleet.agent("a", "name: twin\nmodel: {script: [{answer: ok}]}\n");
    fleet.agent("b", "name: twin\nmodel: {script: [{answer: ok}]}\n");
    let err = startup_error(&fleet);
    assert!(
        err.contains("twin") && err.contains("a/agent.yaml") && err.contains("b/agent.yaml"),
        "{err}"
    );
}

#[test]
fn bad_requests_get_json_errors() {
    let fleet = finance();
    let host = fleet.serve(&[]);
    let http = host.http();
    let post = |body: &str, content_type: &str| {
        let resp = http
            .post(format!("{}/runs", host.url))
            .header("content-type", content_type)
            .body(body.to_owned())
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        let json: Value = resp.json().expect("a JSON error body");
        (status, json)
    };
    let (status, body) = post(r#"{"agent": "ghost", "input": "x"}"#, "application/json");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "unknown_agent");
    let (status, body) = post(r#"{"agent": "cmo", "input": "  "}"#, "application/json");
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "empty_input");
    let (status, body) = post("this is not json", "application/json");
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "bad_json");
    let (status, _) = post(r#"{"agent": "cmo"}"#, "application/json");
    assert_eq!(status, 400);
    let missing = http
        .get(format!("{}/runs/run_0123", host.url))
        .send()
        .unwrap();
    assert_eq!(missing.status(), 400);
    let unknown = http
        .get(format!("{}/runs/run_{}", host.url, "0".repeat(32)))
        .send()
        .unwrap();
    let status = unknown.status().as_u16();
    assert_eq!(status, 404, "{}", unknown.text().unwrap_or_default());
    let cli = host.cli(&["run", "ghost", "x"]);
    assert!(!cli.status.success());
    assert!(
        stderr(&cli).contains("no agent named `ghost`"),
        "{}",
        stderr(&cli)
    );
    // The host keeps serving after all of that.
    assert_eq!(host.run_wait("cmo", "still here")["status"], "succeeded");
}
