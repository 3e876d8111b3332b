//! Real-model adapters driving the real `consort dev` binary: the example flow (cmo asks cfo
//! through `call_agent`, cfo runs its SQL tool) on a scripted OpenAI-compatible server, a crash
//! after a recorded turn that must not ask the model again, an API key that must reach no event,
//! error or log line, and the command adapter with a program that crashes once.

#[path = "support/chat_server.rs"]
mod chat_server;
mod support;

use std::time::Duration;

use chat_server::{ChatServer, Reply};
use serde_json::{Value, json};
use support::{Fleet, Served, runs_of};

const QUESTION: &str = "What did we spend in August 2026?";
const QUERY: &str = "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = '2026-08'";

/// The cfo on the scripted server, serving the cmo; `extra` adds `model:` keys.
fn cfo(base_url: &str, extra: &str) -> String {
    cfo_with(base_url, extra, "agents: {accept_from: [cmo]}\n")
}

/// The cfo alone in its fleet.
fn cfo_alone(base_url: &str, extra: &str) -> String {
    cfo_with(base_url, extra, "")
}

/// The cfo with `peers` as its `agents:` line.
fn cfo_with(base_url: &str, extra: &str, peers: &str) -> String {
    format!(
        "name: cfo\ndescription: Answers spend questions from the finance ledger.\n{peers}model:\n  kind: openai\n  base_url: {base_url}\n  model: cfo-model\n  max_retries: 0\n{extra}tools:\n  - {{name: ledger, kind: sql, database: ledger.db, description: 'Read-only SQL over spend(month, category, amount)'}}\n"
    )
}

fn cmo(base_url: &str) -> String {
    format!(
        "name: cmo\ndescription: Plans campaigns; asks finance for the numbers.\nagents: {{can_call: [cfo]}}\nmodel: {{kind: openai, base_url: {base_url}, model: cmo-model, stream: true}}\n"
    )
}

fn script_cfo(server: &ChatServer) {
    server.script(
        "cfo-model",
        [
            Reply::tool("ledger", json!({"query": QUERY})),
            Reply::text("48250.00 USD across all categories"),
        ],
    );
}

/// The text of the last message of a request.
fn last_content(messages: &[Value]) -> String {
    messages
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn cmo_asks_cfo_through_call_agent_and_the_answer_comes_back() {
    let server = ChatServer::start();
    let fleet = Fleet::new();
    fleet.agent("cfo", &cfo(&server.base_url, ""));
    fleet.ledger("cfo");
    fleet.agent("cmo", &cmo(&server.base_url));
    server.script(
        "cmo-model",
        [
            Reply::StreamedTools(vec![(
                "call_agent".into(),
                json!({"agent": "cfo", "input": QUESTION}).to_string(),
            )]),
            Reply::StreamedText("August 2026 spend, per the CFO: 48250.00 USD".into()),
        ],
    );
    script_cfo(&server);

    let out = fleet.consort(&[
        "dev",
        support::path_str(&fleet.agents()),
        "--data",
        support::path_str(&fleet.data()),
        "--ask",
        "cmo",
        QUESTION,
    ]);
    let text = support::stdout(&out);
    assert!(out.status.success(), "{text}\n{}", support::stderr(&out));
    assert!(
        text.contains("August 2026 spend, per the CFO: 48250.00 USD"),
        "{text}"
    );

    // cfo ran its SQL tool and read its result.
    let cfo_seen = server.seen_for("cfo-model");
    assert_eq!(cfo_seen.len(), 2);
    assert_eq!(
        cfo_seen[0].messages()[1]["content"],
        QUESTION,
        "the peer sees only the input"
    );
    assert_eq!(last_content(&cfo_seen[1].messages()), "48250.00");
    // cmo's second turn read the reply as the call spec says.
    let cmo_seen = server.seen_for("cmo-model");
    assert_eq!(cmo_seen.len(), 2);
    assert_eq!(
        cmo_seen[0].tool_names(),
        [
            "call_agent",
            "check_run",
            "search_tools",
            "load_tool",
            "invoke_tool"
        ]
    );
    assert_eq!(
        last_content(&cmo_seen[1].messages()),
        "[reply from cfo] 48250.00 USD across all categories"
    );

    // Token usage per turn, rolled up into the run's cost and its tree's.
    let jobs = fleet.jobs();
    let cmo_run = runs_of(&jobs, "cmo")[0];
    let cfo_run = runs_of(&jobs, "cfo")[0];
    assert_eq!(
        (cmo_run["status"].as_str(), cfo_run["status"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    assert_eq!(cmo_run["cost"]["input_tokens"], 200);
    assert_eq!(cmo_run["cost"]["output_tokens"], 20);
    assert_eq!(cfo_run["cost"]["input_tokens"], 200);
    assert_eq!(cmo_run["tree_cost"]["input_tokens"], 400, "{cmo_run}");
}

#[test]
fn a_turn_recorded_before_a_crash_is_replayed_not_asked_again() {
    let server = ChatServer::start();
    let fleet = Fleet::new();
    fleet.agent("cfo", &cfo_alone(&server.base_url, ""));
    fleet.ledger("cfo");
    script_cfo(&server);

    let mut host = fleet.serve(&[("CONSORT_FAULT", "after_turn_recorded")]);
    let _ = host.cli(&["run", "cfo", QUESTION, "--json"]);
    host.wait_for_crash("after_turn_recorded", Duration::from_secs(30));
    drop(host);
    assert_eq!(
        server.seen().len(),
        1,
        "the turn was asked for once before the crash"
    );

    let host = fleet.serve(&[]);
    let jobs = fleet.jobs();
    let id = runs_of(&jobs, "cfo")[0]["id"].as_str().unwrap().to_owned();
    let shown = host.wait_status(&id, "succeeded");
    assert_eq!(shown["run"]["output"], "48250.00 USD across all categories");
    let seen = server.seen();
    assert_eq!(
        seen.len(),
        2,
        "the recorded turn was replayed, not asked for again"
    );
    let m = seen[1].messages();
    assert_eq!(m[2]["tool_calls"][0]["id"], "tu_0_0");
    assert_eq!(m[3]["content"], "48250.00");
}

#[test]
fn the_api_key_reaches_no_event_error_or_log_line() {
    const KEY: &str = "sk-live-4f9a0c2e7b1d";
    let server = ChatServer::start();
    server.require_key("sk-the-right-one");
    let fleet = Fleet::new();
    fleet.agent(
        "cfo",
        &cfo_alone(&server.base_url, "  api_key_env: CONSORT_E2E_MODEL_KEY\n"),
    );
    fleet.ledger("cfo");
    let mut host = fleet.serve(&[("CONSORT_E2E_MODEL_KEY", KEY), ("RUST_LOG", "debug")]);
    let run = host.run_wait("cfo", QUESTION);
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("refused the API key (401)") && error.contains("[redacted]"),
        "{error}"
    );
    let id = run["id"].as_str().unwrap();
    let shown = host.show(id).unwrap();
    let log = host.stderr_lines(Duration::from_millis(500)).join("\n");
    assert_eq!(
        server.seen()[0].authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    for (what, text) in [
        ("run", run.to_string()),
        ("events", shown.to_string()),
        ("log", log),
    ] {
        assert!(!text.contains(KEY), "the key is in the {what}: {text}");
        assert!(
            !text.contains("4f9a0c2e7b1d"),
            "part of the key is in the {what}"
        );
    }
}

/// A command model: asks the ledger on its first turn, answers with the tool's result on its
/// second. With `--crash-once` it exits without answering the first time it is asked (a marker
/// file remembers), as a crashing program would.
const PROGRAM: &str = r#"
import json, os, sys
crash_once = "--crash-once" in sys.argv
for line in sys.stdin:
    request = json.loads(line)
    print("turn for", request["agent"], "with", len(request["tools"]), "tools", file=sys.stderr, flush=True)
    if crash_once and not os.path.exists("crashed.marker"):
        open("crashed.marker", "w").close()
        sys.exit(3)
    results = [m for m in request["messages"] if m["role"] == "tool"]
    if not results:
        answer = {"tool_uses": [{"name": "ledger", "input": {"query": "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = '2026-08'"}}],
                  "usage": {"input_tokens": 7, "output_tokens": 3}}
    else:
        answer = {"answer": "spend: " + results[-1]["content"], "usage": {"input_tokens": 9, "output_tokens": 2}}
    print(json.dumps(answer), flush=True)
"#;

#[test]
fn a_command_model_answers_through_its_tool_and_is_restarted_after_a_crash() {
    let fleet = Fleet::new();
    let file = fleet.agent(
        "cfo",
        "name: cfo\nmodel: {kind: command, argv: [python3, model.py, --crash-once], timeout_s: 20}\ntools:\n  - {name: ledger, kind: sql, database: ledger.db}\n",
    );
    let dir = file.parent().unwrap();
    std::fs::write(dir.join("model.py"), PROGRAM).unwrap();
    fleet.ledger("cfo");
    let mut host = fleet.serve(&[]);
    let run = host.run_wait("cfo", QUESTION);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "spend: 48250.00");
    assert_eq!(run["cost"]["input_tokens"], 16);
    assert!(
        dir.join("crashed.marker").exists(),
        "the program crashed once and was restarted"
    );
    let log = host.stderr_lines(Duration::from_millis(500)).join("\n");
    assert!(
        log.contains("model program: turn for cfo with 4 tools"),
        "stderr goes to the log:\n{log}"
    );
    assert!(log.contains("restarting it"), "{log}");
}

#[test]
fn a_command_model_that_cannot_start_fails_the_run_with_the_reason() {
    let fleet = Fleet::new();
    fleet.agent(
        "cfo",
        "name: cfo\nmodel: {kind: command, argv: [./no-such-model]}\n",
    );
    let host: Served = fleet.serve(&[]);
    let run = host.run_wait("cfo", QUESTION);
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the model program `./no-such-model` could not be started"),
        "{error}"
    );
}
