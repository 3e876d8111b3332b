//! Approval gates as an operator meets them, on the real binary: a decision names its gate, so a
//! retried approval never approves the next one; and a gated tool that was running when its host
//! was killed is never run again on the old approval: the run waits, in doubt, until someone
//! decides to run it again or records what happened.
//!
//! The payments are made by a real MCP server (`tests/mcp/bank_server.py`, on the official MCP
//! Python SDK, which `.ci/run` installs) that writes each one to a file before it answers: the
//! file is what a user would check.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use support::{Fleet, Served, eventually, kinds, stderr, stdout};

const BOUND: Duration = Duration::from_secs(60);

/// A payer whose ledger tool is gated: it pays twice in a row, each use its own gate.
const TWO_PAYMENTS: &str = r#"
name: payer
description: pays suppliers
model:
  script:
    - tool: {name: pay, input: "SELECT 'paid ' || :input || ' to acme'"}
    - tool: {name: pay, input: "SELECT 'paid ' || :input || ' to globex'"}
    - answer: "done"
tools:
  - {name: pay, kind: sql, database: ledger.db, description: pays, approval: required}
"#;

fn post(host: &Served, run: &str, body: Value) -> (u16, Value) {
    let resp = host
        .http()
        .post(format!("{}/runs/{run}/approve", host.url))
        .json(&body)
        .send()
        .expect("approve");
    let status = resp.status().as_u16();
    (status, resp.json().expect("json"))
}

fn get_run(host: &Served, run: &str) -> Value {
    host.http()
        .get(format!("{}/runs/{run}", host.url))
        .send()
        .expect("get run")
        .json()
        .expect("json")
}

/// The gate run `id` waits on, once it waits on one other than `not`.
fn waiting_gate(host: &Served, id: &str, not: Option<&str>) -> Value {
    eventually(&format!("run {id} to wait on a gate"), BOUND, || {
        let run = get_run(host, id);
        let gate = run.get("gate").filter(|g| !g.is_null())?;
        (run["status"] == "blocked" && Some(gate["id"].as_str()?) != not).then(|| gate.clone())
    })
}

fn tool_results(host: &Served, id: &str) -> Vec<Value> {
    let shown = host.show(id).expect("the run");
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| e["data"].clone())
        .collect()
}

fn start(host: &Served, agent: &str, input: &str) -> String {
    let out = host.cli(&["run", agent, input, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run: Value = serde_json::from_slice(&out.stdout).expect("run json");
    run["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_retried_approval_is_answered_as_decided_and_the_second_gate_still_waits() {
    let fleet = Fleet::new();
    fleet.agent("payer", TWO_PAYMENTS);
    fleet.ledger("payer");
    let host = fleet.serve(&[]);
    let id = start(&host, "payer", "100");

    let first = waiting_gate(&host, &id, None);
    let first_id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(
        first_id,
        format!("{id}:{}", first["tool_use_id"].as_str().unwrap())
    );
    assert_eq!(first["tool"], "pay");
    assert_eq!(first["in_doubt"], false);
    let approve_first = json!({"approve": true, "gate": first_id});
    let (status, decided) = post(&host, &id, approve_first.clone());
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["gate"], first_id);
    assert_eq!(decided["already_decided"], false);

    // The first payment is made; the run blocks on its second gate.
    let second = waiting_gate(&host, &id, Some(&first_id));
    let second_id = second["id"].as_str().unwrap().to_owned();
    assert_ne!(second_id, first_id);
    assert_eq!(tool_results(&host, &id).len(), 1);

    // A client that missed the first answer sends the same approval again: nothing changes.
    let (status, again) = post(&host, &id, approve_first);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["gate"], first_id);
    assert_eq!(again["already_decided"], true);
    assert_eq!(again["status"], "blocked");
    // The opposite decision on the gate already decided is stale.
    let (status, stale) = post(&host, &id, json!({"approve": false, "gate": first_id}));
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["error"]["code"], "stale_decision");
    assert!(
        stale["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&second_id),
        "the refusal names the gate that waits: {stale}"
    );
    // So does the CLI, naming the gate it decided.
    let cli = host.cli(&["approve", &id, "--gate", &first_id]);
    assert!(cli.status.success(), "{}", stderr(&cli));
    assert!(
        stdout(&cli).contains(&format!("approved gate {first_id} (already decided")),
        "{}",
        stdout(&cli)
    );
    std::thread::sleep(Duration::from_millis(300));
    let run = get_run(&host, &id);
    assert_eq!(run["status"], "blocked");
    assert_eq!(run["gate"]["id"], second_id, "the second gate still waits");
    assert_eq!(tool_results(&host, &id).len(), 1, "one payment only");

    // Deciding the second gate by its id moves the run on.
    let cli = host.cli(&["approve", &id]);
    assert!(cli.status.success(), "{}", stderr(&cli));
    assert!(stdout(&cli).contains(&format!("approved gate {second_id}:")));
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(done["run"]["output"], "done");
    let paid: Vec<String> = tool_results(&host, &id)
        .iter()
        .map(|r| r["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paid.len(), 2, "{paid:?}");
    assert!(paid[0].contains("paid 100 to acme") && paid[1].contains("paid 100 to globex"));
    // Each gate was asked and decided once.
    let k = kinds(done["events"].as_array().unwrap());
    assert_eq!(
        k.iter().filter(|k| *k == "approval_decided").count(),
        2,
        "{k:?}"
    );
}

#[test]
fn a_decision_body_is_checked_before_anything_is_decided() {
    let fleet = Fleet::new();
    fleet.agent("payer", TWO_PAYMENTS);
    fleet.ledger("payer");
    let host = fleet.serve(&[]);
    let id = start(&host, "payer", "100");
    let gate = waiting_gate(&host, &id, None);
    for body in [
        json!({}),
        json!({"approve": true, "record": {"result": "x"}}),
        json!({"record": {"result": "x", "error": "y"}}),
        json!({"record": {}}),
        json!({"approve": true, "gate": ""}),
    ] {
        let (status, answer) = post(&host, &id, body.clone());
        assert_eq!(status, 400, "{body} → {answer}");
        assert_eq!(answer["error"]["code"], "invalid_decision", "{answer}");
    }
    // Recording a result is for a gate in doubt only: this one's tool never ran.
    let (status, answer) = post(
        &host,
        &id,
        json!({"gate": gate["id"], "record": {"result": "done by hand"}}),
    );
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "not_in_doubt");
    assert_eq!(get_run(&host, &id)["gate"], gate, "nothing was decided");
}

// --- a gated payment in flight when its host is killed ---------------------------------------

fn bank_available() -> bool {
    support::python_module(
        "mcp.server.mcpserver",
        "CONSORT_MCP_TESTS",
        "pip install mcp==2.3.0",
    )
}

/// The interpreter, by its full path (a started server gets a cleared environment).
fn python() -> String {
    support::python_executable()
}

/// An agent that pays acme 100 through the bank's gated `pay`, and answers with its result.
fn payer() -> String {
    let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/bank_server.py");
    format!(
        r#"name: payer
description: pays suppliers
model:
  script:
    - tool: {{name: bank__pay, arguments: {{amount: 100, to: acme}}}}
    - answer: "bank says: {{tool.bank__pay}}"
tools:
  - name: bank
    kind: mcp
    command: ["{}", "{server}"]
    approval: required
"#,
        python()
    )
}

fn payments(agent_dir: &Path) -> Vec<String> {
    std::fs::read_to_string(agent_dir.join("payments.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Approves the payment, kills the host while `pay` runs (the payment already made), and
/// starts the host again on the same data: returns the new host, the run, and its first gate.
fn killed_while_paying(fleet: &Fleet) -> (Served, String, String, PathBuf) {
    let file = fleet.agent("payer", &payer());
    let dir = file.parent().unwrap().to_owned();
    std::fs::write(dir.join("slow"), "").unwrap();
    let host = fleet.serve(&[]);
    let id = start(&host, "payer", "pay acme");
    let gate = waiting_gate(&host, &id, None);
    let first = gate["id"].as_str().unwrap().to_owned();
    assert_eq!(gate["input"], json!({"amount": 100, "to": "acme"}));
    let (status, decided) = post(&host, &id, json!({"approve": true, "gate": first}));
    assert_eq!(status, 200, "{decided}");
    eventually("the payment to be made", BOUND, || {
        (payments(&dir).len() == 1).then_some(())
    });
    host.kill();
    (fleet.serve(&[]), id, first, dir)
}

#[test]
fn a_payment_killed_in_flight_waits_in_doubt_and_takes_the_result_the_operator_records() {
    if !bank_available() {
        return;
    }
    let fleet = Fleet::new();
    let (host, id, first, dir) = killed_while_paying(&fleet);

    // Resumed: the run does not pay again on the old approval; it waits, in doubt.
    let gate = waiting_gate(&host, &id, Some(&first));
    assert_eq!(gate["id"], format!("{first}:2"));
    assert_eq!(gate["in_doubt"], true);
    assert_eq!(gate["tool"], "bank__pay");
    assert_eq!(gate["input"], json!({"amount": 100, "to": "acme"}));
    assert_eq!(payments(&dir).len(), 1);
    // The approval of the first gate, retried, decides nothing now.
    let (status, again) = post(&host, &id, json!({"approve": true, "gate": first}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["already_decided"], true);
    assert_eq!(again["status"], "blocked");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(payments(&dir).len(), 1, "no second payment");

    // The operator checked with the bank and records what happened.
    let (status, decided) = post(
        &host,
        &id,
        json!({"gate": gate["id"], "record": {"result": "paid 100 to acme (statement 42)"}}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["gate"], gate["id"]);
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(
        done["run"]["output"],
        "bank says: paid 100 to acme (statement 42)"
    );
    assert_eq!(payments(&dir), ["100 acme"], "exactly one payment");
    let k = kinds(done["events"].as_array().unwrap());
    assert_eq!(
        k.iter().filter(|k| *k == "tool_started").count(),
        1,
        "{k:?}"
    );
    let events = done["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "approval_requested" && e["data"]["in_doubt"] == true),
        "{k:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "approval_decided" && e["data"]["recorded"] == true),
        "{k:?}"
    );
}

#[test]
fn a_payment_in_doubt_runs_again_only_when_the_operator_says_so() {
    if !bank_available() {
        return;
    }
    let fleet = Fleet::new();
    let (host, id, first, dir) = killed_while_paying(&fleet);
    let gate = waiting_gate(&host, &id, Some(&first));
    assert_eq!(gate["in_doubt"], true);
    // The bank says the payment did not go through: run it again, this time without delay.
    std::fs::remove_file(dir.join("slow")).unwrap();
    let cli = host.cli(&["approve", &id]);
    assert!(cli.status.success(), "{}", stderr(&cli));
    assert!(
        stdout(&cli).contains(&format!("approved gate {first}:2")),
        "{}",
        stdout(&cli)
    );
    // The resumed host lists the bank's tools before the use runs, instead of failing it as
    // "not listed yet".
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(done["run"]["output"], "bank says: paid 100 to acme");
    assert_eq!(payments(&dir), ["100 acme", "100 acme"]);
}
