//! `call_agent {agent, input, wait_s}` on the real binary: the caller's turn stays open until
//! the reply, which is then the tool result itself; past `wait_s` the tool result says the
//! run goes on, and the reply lands later as a `[reply from …]` message.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, eventually, kinds, runs_of, stderr};

const WAIT: Duration = Duration::from_secs(20);

const CFO: &str = r#"
name: cfo
agents: {accept_from: [cmo]}
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger}
"#;

fn cmo(wait_s: u32) -> String {
    format!(
        r#"
name: cmo
agents: {{can_call: [cfo]}}
model:
  script:
    - call: [{{agent: cfo, input: "2026-08", wait_s: {wait_s}}}]
    - answer: "in turn: {{tool.call_agent}}"
"#
    )
}

fn events(host: &support::Served, id: &str) -> Vec<Value> {
    let out = host.cli(&["runs", "show", id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    v["events"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_blocking_call_returns_the_reply_as_its_tool_result() {
    let fleet = Fleet::new();
    fleet.agent("cmo", &cmo(30));
    fleet.agent("cfo", CFO);
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let run = host.run_wait("cmo", "go");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "in turn: 48250.00");
    let log = events(&host, run["id"].as_str().unwrap());
    let k = kinds(&log);
    // One model turn placed the call, the reply closed it, a second turn answered: the run
    // never waited between turns.
    assert_eq!(k.iter().filter(|k| *k == "model_turn").count(), 2, "{k:?}");
    assert!(
        !k.contains(&"status".to_string()) || !log.iter().any(|e| e["data"]["to"] == "waiting"),
        "{k:?}"
    );
    let reply = log
        .iter()
        .find(|e| e["kind"] == "reply_received")
        .expect("the reply is in the log");
    assert_eq!(reply["data"]["in_turn"], true);
    let result = log
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["data"]["name"] == "call_agent")
        .expect("the call's tool result");
    assert_eq!(result["data"]["content"], "48250.00");
}

#[test]
fn a_blocking_call_past_its_wait_says_the_run_goes_on_and_the_reply_lands_later() {
    let fleet = Fleet::new();
    fleet.agent(
        "cmo",
        &cmo(1).replace(
            r#"    - answer: "in turn: {tool.call_agent}""#,
            "    - answer: \"timed out: {tool.call_agent}\"",
        ),
    );
    fleet.agent(
        "cfo",
        &CFO.replace(
            "description: the ledger}",
            "description: the ledger, approval: required}",
        ),
    );
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let started = host.cli(&["run", "cmo", "go", "--json"]);
    let cmo: Value = serde_json::from_slice(&started.stdout).expect("json");
    let cmo_id = cmo["id"].as_str().expect("id").to_owned();
    // The cfo parks on its approval gate; after 1 s the cmo's turn ends without the reply,
    // and its model reads that the run goes on.
    let still = eventually("the wait to end", WAIT, || {
        let log = events(&host, &cmo_id);
        log.iter()
            .find(|e| e["kind"] == "tool_result" && e["data"]["name"] == "call_agent")
            .map(|e| e["data"]["content"].as_str().unwrap_or_default().to_owned())
    });
    let result: Value = serde_json::from_str(&still).expect("json result");
    assert_eq!(result["status"], "still_running", "{result}");
    let cfo_id = result["run_id"].as_str().expect("run id").to_owned();
    let jobs: Vec<Value> = {
        let out = host.cli(&["jobs", "list", "--json"]);
        let page: Value = serde_json::from_slice(&out.stdout).expect("jobs");
        page["runs"].as_array().cloned().expect("runs")
    };
    assert_eq!(runs_of(&jobs, "cfo")[0]["status"], "blocked");
    // Approving lets the cfo finish; its reply lands as an ordinary [reply from cfo] message.
    let approved = host.cli(&["approve", &cfo_id]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    let done = host.wait_status(&cmo_id, "succeeded");
    let output = done["run"]["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("timed out: ") && output.contains("still_running"),
        "{output}"
    );
    let log = events(&host, &cmo_id);
    let reply = log
        .iter()
        .find(|e| e["kind"] == "reply_received")
        .expect("the reply landed later");
    assert_eq!(reply["data"]["output"], "48250.00");
    assert!(reply["data"].get("in_turn").is_none(), "{reply}");
}
