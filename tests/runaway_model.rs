//! A model that never stops, on the real `consort dev` binary: a `kind: command` model (a
//! Python program) that answers every turn with a tool use, and the run limits of agent.yaml
//! that end its runs. The loop guard refuses the third identical use in a row with a sentence
//! the model reads and fails the run at the fourth (`repeated_tool_use`), far below the turn
//! limit; `limits.max_turns` and `limits.max_tokens` end a run that never repeats itself.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, Served};

/// The runaway: every turn one tool use, never an answer, reporting 700 tokens read and 300
/// written. `check` polls a run it never placed, `ledger` asks the ledger the same query,
/// `wander` asks it a new query each turn. It writes what it read last to stderr, which the
/// host logs, so a test can see the model was told.
const PROGRAM: &str = r#"
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    request = json.loads(line)
    messages = request["messages"]
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if messages[-1]["role"] == "tool":
        print("read:", messages[-1]["content"], file=sys.stderr, flush=True)
    if mode == "check":
        use = {"name": "check_run", "input": {"run_id": "run_0123456789abcdef0123456789abcdef"}}
    elif mode == "ledger":
        use = {"name": "ledger", "input": {"query": "SELECT count(*) FROM spend"}}
    else:
        use = {"name": "ledger", "input": {"query": "SELECT %d" % turn}}
    answer = {"tool_uses": [use], "usage": {"input_tokens": 700, "output_tokens": 300}}
    print(json.dumps(answer), flush=True)
"#;

/// An agent `name` whose model is the runaway in `mode`, with `extra` keys (its `limits:`, its
/// `agents:`).
fn runaway(fleet: &Fleet, name: &str, mode: &str, extra: &str) {
    let file = fleet.agent(
        name,
        &format!(
            "name: {name}\nmodel: {{kind: command, argv: [python3, model.py, {mode}], timeout_s: 20}}\n{extra}tools:\n  - {{name: ledger, kind: sql, database: ledger.db, description: the ledger}}\n"
        ),
    );
    std::fs::write(file.parent().unwrap().join("model.py"), PROGRAM).unwrap();
    fleet.ledger(name);
}

/// The run's events, from `runs show --json`.
fn events(host: &Served, run: &Value) -> Vec<Value> {
    let id = run["id"].as_str().expect("run id");
    let shown = host.show(id).expect("runs show");
    shown["events"].as_array().cloned().unwrap_or_default()
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn model_turns(run: &Value) -> u64 {
    run["cost"]["model_turns"].as_u64().expect("model turns")
}

fn error(run: &Value) -> &str {
    run["error"].as_str().unwrap_or_default()
}

fn refusal(tool: &str, times: u32) -> String {
    format!(
        "you called `{tool}` with the same input {times} times in a row and its result will not change: stop repeating it; answer with what you have or try something different"
    )
}

#[test]
fn a_model_repeating_one_tool_use_is_refused_at_the_third_turn_and_failed_at_the_fourth() {
    let fleet = Fleet::new();
    // The poller has a peer, so it is offered `call_agent` and `check_run`.
    runaway(&fleet, "poller", "check", "agents: {can_call: [clerk]}\n");
    runaway(&fleet, "looper", "ledger", "");
    fleet.agent(
        "clerk",
        "name: clerk\nagents: {accept_from: [poller]}\nmodel: {script: [{answer: filed}]}\n",
    );
    let mut host = fleet.serve(&[]);

    // The real-world case: polling a run id it made up, turn after turn.
    let run = host.run_wait("poller", "Is my report done?");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        error(&run),
        format!("repeated_tool_use: {}", refusal("check_run", 4)),
        "{run}"
    );
    assert_eq!(model_turns(&run), 4, "far below the default 64: {run}");
    let log = events(&host, &run);
    assert_eq!(of_kind(&log, "model_turn").len(), 4);
    let results: Vec<(&str, bool)> = of_kind(&log, "tool_result")
        .iter()
        .map(|e| {
            (
                e["data"]["content"].as_str().unwrap_or_default(),
                e["data"]["is_error"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(results.len(), 3, "the fourth turn's use never ran");
    assert!(
        results[..2]
            .iter()
            .all(|(c, e)| *e && c.starts_with("unknown run `run_0123")),
        "{results:?}"
    );
    assert_eq!(results[2], (refusal("check_run", 3).as_str(), true));
    // Each turn recorded the tokens it reported.
    assert!(
        of_kind(&log, "model_turn")
            .iter()
            .all(|e| e["data"]["input_tokens"] == 700 && e["data"]["output_tokens"] == 300)
    );

    // A declared tool: it ran twice, the third use was refused, the fourth failed the run.
    let run = host.run_wait("looper", "How many rows?");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        error(&run),
        format!("repeated_tool_use: {}", refusal("ledger", 4))
    );
    assert!(model_turns(&run) <= 5, "{run}");
    assert_eq!(run["cost"]["tool_calls"], 2, "{run}");
    let log = events(&host, &run);
    let last = of_kind(&log, "tool_result")
        .last()
        .map(|e| e["data"]["content"].clone());
    assert_eq!(last, Some(Value::from(refusal("ledger", 3))));

    // The model read the refusal: its program logged it before its fourth turn.
    let lines = host.stderr_lines(Duration::from_millis(500)).join("\n");
    assert!(
        lines.contains(&format!("read: {}", refusal("ledger", 3))),
        "{lines}"
    );
}

#[test]
fn a_run_that_never_repeats_itself_ends_at_its_turn_limit_or_its_token_budget() {
    let fleet = Fleet::new();
    runaway(&fleet, "wanderer", "wander", "limits: {max_turns: 3}\n");
    runaway(&fleet, "spender", "wander", "limits: {max_tokens: 2500}\n");
    let host = fleet.serve(&[]);

    let run = host.run_wait("wanderer", "Look around.");
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        error(&run).starts_with("model turn limit (3) reached"),
        "{run}"
    );
    assert_eq!(model_turns(&run), 3);
    assert_eq!(run["cost"]["tool_calls"], 3, "the last turn's tool ran");

    // 1000 tokens a turn: the third reaches 2500, and the run is not asked again.
    let run = host.run_wait("spender", "Look around.");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        error(&run),
        "budget_exhausted: this run used 3000 tokens of its 2500-token budget (limits.max_tokens)"
    );
    assert_eq!(model_turns(&run), 3);
    assert_eq!(
        (&run["cost"]["input_tokens"], &run["cost"]["output_tokens"]),
        (&Value::from(2100), &Value::from(900))
    );
}
