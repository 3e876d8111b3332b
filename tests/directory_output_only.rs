//! Output only holds through the directory: a caller that observes the run it placed on a peer
//! sees the run's typed state and the kinds and times of its events, never what its tools were
//! given or returned, its model turns, or the values its env bound. An operator, and an agent
//! the peer's agent.yaml lets read its runs (`agents.show_runs_to`), see them in full.
//!
//! The attack this keeps out: `front` and `vault` share a goal; front calls vault, then observes
//! that child run with `source: events`, and answers with what it saw. Before, front's answer
//! held vault's tool result: an env-bound key and a private ledger row that vault's own answer
//! never gave out.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::{Fleet, eventually};

const SECRET_KEY: &str = "sk-live-7d1e5c0ffee";
const PRIVATE_ROW: &str = "payroll:ceo:412000";

/// Reads its private ledger (binding an env-held key), then answers without either.
const VAULT: &str = r#"
name: vault
description: keeps the books
agents: {accept_from: [front], show_runs_to: [auditor]}
model:
  script:
    - tool: {name: ledger, input: "SELECT entry || ' ' || :VAULT_KEY FROM private"}
    - answer: "the books balance"
tools:
  - name: ledger
    kind: sql
    database: ledger.db
    description: the private ledger
    bind_env: [VAULT_KEY]
env:
  VAULT_KEY: sk-live-7d1e5c0ffee
"#;

/// Calls vault, observes the child run's log, and answers with what it saw.
const FRONT: &str = r#"
name: front
description: asks the vault
agents: {can_call: [vault]}
model:
  script:
    - call: [{agent: vault, input: "{input}"}]
    - tool: {name: observe_peer, arguments: {agent: vault, run: "{call.vault}", source: events, lines: 50}}
    - answer: "{tool.observe_peer}"
"#;

/// Shares the goal, did not place the run, and may read vault's runs in full.
const AUDITOR: &str = r#"
name: auditor
description: audits the vault
model:
  script:
    - tool: {name: observe_peer, arguments: {agent: vault, run: "{input}", source: events, lines: 50}}
    - answer: "{tool.observe_peer}"
"#;

const GOALS: &str = "goals:\n  - name: books\n    agents: [front, vault, auditor]\n";

fn codes(observation: &Value) -> Vec<String> {
    observation["limitations"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|x| x["code"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_caller_observing_its_callee_sees_event_kinds_not_tool_results_or_env_values() {
    let fleet = Fleet::new();
    fleet.agent("vault", VAULT);
    fleet.agent("front", FRONT);
    fleet.agent("auditor", AUDITOR);
    std::fs::write(fleet.agents().join("goals.yaml"), GOALS).expect("goals.yaml");
    let ledger = fleet.agents().join("vault").join("ledger.db");
    rusqlite::Connection::open(&ledger)
        .and_then(|c| {
            c.execute_batch(&format!(
                "CREATE TABLE private (entry TEXT); INSERT INTO private VALUES ('{PRIVATE_ROW}');"
            ))
        })
        .expect("ledger");
    let host = fleet.serve(&[]);

    let run = host.run_wait("front", "month-end");
    assert_eq!(run["status"], "succeeded", "{run}");
    let output = run["output"].as_str().unwrap_or_default();
    assert!(
        !output.contains(SECRET_KEY),
        "an env-bound value leaked: {output}"
    );
    assert!(
        !output.contains(PRIVATE_ROW),
        "a tool result leaked: {output}"
    );
    let seen: Value = serde_json::from_str(output).expect("an observation");
    assert_eq!(seen["run"]["status"], "succeeded", "{seen}");
    assert_eq!(seen["run"]["parent_agent"], "front", "{seen}");
    let lines: Vec<&str> = seen["excerpt"]["lines"]
        .as_array()
        .expect("an excerpt of event kinds")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("tool_result")),
        "the kinds are shown: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with('#') && l.contains(" at ")),
        "each line is an event's place, kind and time: {lines:?}"
    );
    assert!(
        codes(&seen).contains(&"content_withheld".to_owned()),
        "the excerpt says what it left out: {seen}"
    );
    let child = seen["run"]["run"]
        .as_str()
        .expect("the child run")
        .to_owned();

    // An operator reads the same run in full.
    let full: Value = host
        .http()
        .get(format!(
            "{}/directory/observe?agent=vault&run={child}&source=events&lines=50",
            host.url
        ))
        .send()
        .and_then(|r| r.json())
        .expect("observe as the operator");
    let text = full["excerpt"].to_string();
    assert!(
        text.contains(PRIVATE_ROW),
        "the operator sees the tool result: {full}"
    );
    assert!(
        !codes(&full).contains(&"content_withheld".to_owned()),
        "{full}"
    );

    // So does the agent vault's agent.yaml names in show_runs_to, though it placed nothing.
    let audit = host.run_wait("auditor", &child);
    let audited = audit["output"].as_str().unwrap_or_default();
    assert!(
        audited.contains(PRIVATE_ROW),
        "the granted auditor sees it: {audited}"
    );

    // And the answer front was given is still vault's answer, whole.
    let events = eventually("front's log", Duration::from_secs(10), || {
        let shown = host.show(run["id"].as_str()?)?;
        shown["events"].as_array().cloned()
    });
    assert!(
        events
            .iter()
            .any(|e| e.to_string().contains("the books balance")),
        "front got vault's answer"
    );
}
