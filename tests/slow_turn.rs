//! A model that takes its time, on the real binary: a `kind: command` model whose first turn
//! thinks until the test has looked (a few seconds at most). While it thinks, the run is
//! `running` (`consort runs show --json`, `GET /runs/{id}`) and its log holds the
//! `model_turn_started` of that turn and no `model_turn`; then the run goes on and succeeds,
//! every ask of this model recorded before its answer.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use support::{Fleet, Served, eventually, kinds, stdout};

/// A command model: its first turn says it was asked (`asked.marker`), thinks until
/// `release.marker` appears (30 s at most), then uses the ledger; its second answers at once
/// with the ledger's result.
const PROGRAM: &str = r#"
import json, os, sys, time
for line in sys.stdin:
    request = json.loads(line)
    results = [m for m in request["messages"] if m["role"] == "tool"]
    if not results:
        open("asked.marker", "w").close()
        deadline = time.time() + 30
        while not os.path.exists("release.marker") and time.time() < deadline:
            time.sleep(0.05)
        answer = {"tool_uses": [{"name": "ledger", "input": {"query": "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = '2026-08'"}}]}
    else:
        answer = {"answer": "spend: " + results[-1]["content"]}
    print(json.dumps(answer), flush=True)
"#;

const SLOW: &str = "name: slow\nmodel: {kind: command, argv: [python3, model.py], timeout_s: 60}\ntools:\n  - {name: ledger, kind: sql, database: ledger.db}\n";

fn start(host: &Served) -> String {
    let resp = host
        .http()
        .post(format!("{}/runs", host.url))
        .json(&json!({"agent": "slow", "input": "What did we spend in August 2026?"}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let run: Value = resp.json().unwrap();
    run["id"].as_str().unwrap().to_owned()
}

fn turns_started(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "model_turn_started")
        .map(|e| e["data"].clone())
        .collect()
}

#[test]
fn a_run_is_running_while_its_model_thinks_and_its_log_says_the_turn_started() {
    let fleet = Fleet::new();
    let file = fleet.agent("slow", SLOW);
    let dir: &Path = file.parent().unwrap();
    std::fs::write(dir.join("model.py"), PROGRAM).unwrap();
    fleet.ledger("slow");
    let host = fleet.serve(&[]);
    let id = start(&host);

    eventually("the model to be asked", Duration::from_secs(30), || {
        dir.join("asked.marker").exists().then_some(())
    });
    // The model thinks until it is released: everything here reads the run mid-turn. The ask
    // was handed to the store before the model was asked, and commits beside it (bounded).
    let shown = eventually("the run to be running", Duration::from_secs(10), || {
        host.show(&id)
            .filter(|shown| shown["run"]["status"] != "queued")
    });
    assert_eq!(shown["run"]["status"], "running", "{shown}");
    let events = shown["events"].as_array().unwrap();
    assert_eq!(
        kinds(events),
        ["created", "status", "model_turn_started"],
        "{shown}"
    );
    assert_eq!(
        events[1]["data"],
        json!({"from": "queued", "to": "running"})
    );
    assert_eq!(turns_started(events), [json!({"turn": 1})]);

    let resp = host
        .http()
        .get(format!("{}/runs/{id}", host.url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let run: Value = resp.json().unwrap();
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(run["cost"]["model_turns"], 0, "{run}");

    let text = stdout(&host.cli(&["runs", "show", &id]));
    assert!(
        text.lines()
            .any(|l| l.starts_with("status") && l.ends_with("running")),
        "{text}"
    );
    assert!(text.contains("model_turn_started {\"turn\":1}"), "{text}");

    std::fs::write(dir.join("release.marker"), "").unwrap();
    let done = host.wait_status(&id, "succeeded");
    assert_eq!(done["run"]["output"], "spend: 48250.00", "{done}");
    let events = done["events"].as_array().unwrap();
    // A model that does not answer at once has every ask recorded, each before its answer;
    // the run moved to `running` once, at its first.
    assert_eq!(
        kinds(events),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn",
            "tool_result",
            "model_turn_started",
            "model_turn",
            "answer",
            "status",
        ],
        "{done}"
    );
    assert_eq!(
        turns_started(events),
        [json!({"turn": 1}), json!({"turn": 2})]
    );
    assert_eq!(
        events[8]["data"],
        json!({"from": "running", "to": "succeeded"})
    );
}

/// A script model answers at once: its run's first turn is recorded as started (the run's move
/// to `running`), its later turns are not.
#[test]
fn a_script_run_records_only_its_first_ask() {
    let fleet = Fleet::new();
    fleet.agent(
        "cfo",
        "name: cfo\nmodel:\n  script:\n    - tool: {name: ledger, input: \"SELECT sum(amount) FROM spend WHERE month = :input\"}\n    - answer: \"{tool.ledger}\"\ntools:\n  - {name: ledger, kind: sql, database: ledger.db}\n",
    );
    fleet.ledger("cfo");
    let host = fleet.serve(&[]);
    let run = host.run_wait("cfo", "2026-08");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        run["output"].as_str().unwrap_or_default().contains("48250"),
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let shown = host.show(id).expect("runs show --json");
    let events = shown["events"].as_array().unwrap();
    assert_eq!(
        kinds(events),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn",
            "tool_result",
            "model_turn",
            "answer",
            "status",
        ],
        "{shown}"
    );
}
