//! A host's agents as MCP tools, with the real binary and an independent client: the official
//! MCP Python SDK (`mcp` from PyPI, driven by `tests/mcp/client.py`; `.ci/run` installs it and
//! sets `CONSORT_MCP_TESTS=required`). The caller's bearer token is the run's principal, as over
//! the rest of the API.

mod support;

use std::process::Command;

use serde_json::Value;

use support::{Fleet, Served, path_str};

const ECHO: &str = "name: echo\ndescription: repeats what it is told\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: alice, token: tok-alice}
anonymous: refuse
";

/// Whether the SDK is importable; `false` skips (locally) or fails (where it is required).
fn sdk_available() -> bool {
    support::python_module(
        "mcp.client.streamable_http",
        "CONSORT_MCP_TESTS",
        "pip install mcp",
    )
}

fn host() -> (Fleet, Served) {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).unwrap();
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    (fleet, served)
}

/// Runs the SDK client against the host's `/mcp`; its one JSON line.
fn client(served: &Served, token: Option<&str>, args: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(format!("{}/mcp", served.url))
        .arg(token.unwrap_or("-"))
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the MCP client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn an_mcp_client_lists_the_agents_as_tools_and_asks_one_as_its_principal() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host();
    let listed = client(&served, Some("tok-alice"), &["list"]);
    let tools = listed["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1, "{listed}");
    assert_eq!(tools[0]["name"], "ask_echo");
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("repeats what it is told")
    );
    assert_eq!(tools[0]["input_schema"]["required"][0], "input");

    let answer = client(&served, Some("tok-alice"), &["call", "ask_echo", "hello"]);
    assert_eq!(answer["is_error"], false, "{answer}");
    assert_eq!(answer["text"], "echo hello");
    let run_id = answer["structured"]["run_id"].as_str().expect("the run id");
    assert_eq!(answer["structured"]["status"], "succeeded");
    // The run acts for the token that called the tool, like a run started over HTTP.
    let run: Value = served
        .http()
        .get(format!("{}/runs/{run_id}", served.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(run["principal"], "api:alice");
    assert_eq!(run["output"], "echo hello");
}

#[test]
fn a_caller_without_a_token_or_with_a_bad_request_is_told_why() {
    if !sdk_available() {
        return;
    }
    let (fleet, served) = host();
    // No token on a host that refuses anonymous callers: nothing is listed or started.
    let listed = client(&served, None, &["list"]);
    assert!(
        listed["protocol_error"]
            .as_str()
            .is_some_and(|e| e.contains("bearer token")),
        "{listed}"
    );
    let answer = client(&served, Some("tok-wrong"), &["call", "ask_echo", "hello"]);
    assert_eq!(answer["is_error"], true, "{answer}");
    assert!(answer["text"].as_str().unwrap().contains("bearer token"));
    // A tool no agent has is a protocol error naming it.
    let unknown = client(&served, Some("tok-alice"), &["call", "ask_nobody", "hello"]);
    assert!(
        unknown["protocol_error"]
            .as_str()
            .is_some_and(|e| e.contains("ask_nobody")),
        "{unknown}"
    );
    // An empty question starts nothing.
    let empty = client(&served, Some("tok-alice"), &["call", "ask_echo", " "]);
    assert_eq!(empty["is_error"], true);
    assert!(empty["text"].as_str().unwrap().contains("empty"));
    assert!(
        fleet.jobs().is_empty(),
        "no run was started by the refused calls"
    );
}
