//! A host's agents as A2A agents, with the real binary and an independent client: the official
//! A2A Python SDK (`a2a-sdk` from PyPI, driven by `tests/a2a/client.py`; `.ci/run` installs it
//! and sets `CONSORT_A2A_TESTS=required`). A task is a run: the caller's bearer token is its
//! principal, and what the caller may see and decide is what the HTTP API lets it.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use support::{Fleet, Served, eventually, path_str};

const ECHO: &str = "name: echo\ndescription: Repeats what it is told.\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

/// A cfo whose ledger tool waits for an approval its requester may give.
const SELF_GATED_CFO: &str = r#"
name: cfo
description: finance
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: requester}
"#;

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: alice, token: tok-alice}
  - {name: bob, token: tok-bob}
anonymous: refuse
";

/// Whether the SDK is importable; `false` skips (locally) or fails (where it is required).
fn sdk_available() -> bool {
    support::python_module(
        "a2a.client",
        "CONSORT_A2A_TESTS",
        "python3 -m pip install 'a2a-sdk[http-server]==1.3.0'",
    )
}

fn host_of(agents: &[(&str, &str)]) -> (Fleet, Served) {
    let fleet = Fleet::new();
    for (name, yaml) in agents {
        fleet.agent(name, yaml);
    }
    if agents.iter().any(|(name, _)| *name == "cfo") {
        fleet.ledger("cfo");
    }
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

fn host() -> (Fleet, Served) {
    host_of(&[("echo", ECHO), ("cfo", SELF_GATED_CFO)])
}

fn client_command(base: &str, token: Option<&str>, args: &[&str]) -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/client.py");
    let mut command = Command::new("python3");
    command
        .arg(script)
        .arg(base)
        .arg(token.unwrap_or("-"))
        .args(args);
    command
}

fn parse_client(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "the A2A client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the A2A client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs the SDK client against `base` (`http://…` or `http://…/a2a/AGENT`); its one JSON line.
fn client(base: &str, token: Option<&str>, args: &[&str]) -> Value {
    parse_client(
        &client_command(base, token, args)
            .output()
            .expect("run python3"),
    )
}

fn at(served: &Served, agent: &str) -> String {
    format!("{}/a2a/{agent}", served.url)
}

/// The last task state a list of stream events reports.
fn states(events: &Value) -> Vec<String> {
    events["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events: {events}"))
        .iter()
        .filter_map(|e| {
            e["task"]["status"]["state"]
                .as_str()
                .or_else(|| e["statusUpdate"]["status"]["state"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

fn first_task(events: &Value) -> &Value {
    &events["events"][0]["task"]
}

fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A raw JSON-RPC request, as a client other than the SDK would send it.
fn raw(
    served: &Served,
    path: &str,
    token: &str,
    version: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut request = served
        .http()
        .post(format!("{}{path}", served.url))
        .header("content-type", "application/json")
        .bearer_auth(token)
        .body(body.to_owned());
    if let Some(v) = version {
        request = request.header("A2A-Version", v);
    }
    let response = request.send().expect("post");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn an_a2a_client_reads_the_cards_and_gets_an_answer_as_its_principal() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host();

    let card = client(&served.url, None, &["card"]);
    let card = &card["result"];
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("{}/a2a", served.url)
    );
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(skills, ["cfo", "echo"], "{card}");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    let echo_card = client(&at(&served, "echo"), None, &["card"]);
    assert_eq!(echo_card["result"]["name"], "echo");
    assert_eq!(
        echo_card["result"]["description"],
        "Repeats what it is told."
    );
    assert_eq!(
        echo_card["result"]["supportedInterfaces"][0]["url"],
        at(&served, "echo")
    );

    let sent = client(
        &at(&served, "echo"),
        Some("tok-alice"),
        &["send", "hello there"],
    );
    let task = first_task(&sent);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(text_of(&task["status"]["message"]), "echo hello there");
    assert_eq!(task["artifacts"][0]["name"], "answer");
    assert_eq!(text_of(&task["artifacts"][0]), "echo hello there");
    assert_eq!(task["history"][0]["role"], "ROLE_USER");
    assert_eq!(text_of(&task["history"][0]), "hello there");
    assert_eq!(task["metadata"]["consort"]["agent"], "echo");
    let id = task["id"].as_str().expect("task id").to_owned();
    assert_eq!(task["contextId"], id.as_str());

    // The task is a run of the API, acting for alice.
    let run: Value = served
        .http()
        .get(format!("{}/runs/{id}", served.url))
        .bearer_auth("tok-alice")
        .send()
        .expect("get run")
        .json()
        .expect("run json");
    assert_eq!(run["principal"], "api:alice");
    assert_eq!(run["output"], "echo hello there");

    // Alice reads it back; bob may not see it; nobody without a token gets anything.
    let got = client(&at(&served, "echo"), Some("tok-alice"), &["get", &id]);
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    let hidden = client(&at(&served, "echo"), Some("tok-bob"), &["get", &id]);
    assert_eq!(hidden["error"]["type"], "TaskNotFoundError", "{hidden}");
    let other_agent = client(&at(&served, "cfo"), Some("tok-alice"), &["get", &id]);
    assert_eq!(
        other_agent["error"]["type"], "TaskNotFoundError",
        "{other_agent}"
    );
    let anonymous = client(&at(&served, "echo"), None, &["send", "hi"]);
    assert!(
        anonymous["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("401")),
        "{anonymous}"
    );

    // The host's own endpoint takes the agent from the message's metadata.
    let named = client(
        &served.url,
        Some("tok-alice"),
        &["send", "via the host", "--agent", "echo"],
    );
    assert_eq!(
        text_of(&first_task(&named)["status"]["message"]),
        "echo via the host"
    );
    let unnamed = client(&served.url, Some("tok-alice"), &["send", "which one?"]);
    assert!(
        unnamed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("several agents")),
        "{unnamed}"
    );
}

#[test]
fn a_task_waiting_for_approval_is_input_required_and_a_reply_decides_it() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host();
    let cfo = at(&served, "cfo");

    // Streamed: the task as stored, then its changes, until it stops to wait.
    let sent = client(&cfo, Some("tok-alice"), &["send", "2026-08", "--stream"]);
    let seen = states(&sent);
    assert_eq!(
        seen.last().map(String::as_str),
        Some("TASK_STATE_INPUT_REQUIRED"),
        "{sent}"
    );
    assert!(
        seen.first().is_some_and(|s| s == "TASK_STATE_SUBMITTED"
            || s == "TASK_STATE_WORKING"
            || s == "TASK_STATE_INPUT_REQUIRED"),
        "{seen:?}"
    );
    let id = first_task(&sent)["id"].as_str().expect("id").to_owned();
    let waiting = client(&cfo, Some("tok-alice"), &["get", &id]);
    let why = text_of(&waiting["result"]["status"]["message"]);
    assert!(why.contains("`ledger`") && why.contains("approve"), "{why}");

    // Someone following the task sees it finish once alice approves.
    let follower = client_command(&cfo, Some("tok-alice"), &["subscribe", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("subscribe");
    std::thread::sleep(Duration::from_millis(500));

    // Bob cannot see it, so cannot decide it; a word that is no decision is refused.
    let bob = client(&cfo, Some("tok-bob"), &["reply", &id, "approve"]);
    assert_eq!(bob["error"]["type"], "TaskNotFoundError", "{bob}");
    let vague = client(&cfo, Some("tok-alice"), &["reply", &id, "maybe later"]);
    assert!(
        vague["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("approve")),
        "{vague}"
    );

    let approved = client(&cfo, Some("tok-alice"), &["reply", &id, "approve"]);
    let task = first_task(&approved);
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{approved}"
    );
    assert_eq!(text_of(&task["status"]["message"]), "48250.00");

    let followed = parse_client(&follower.wait_with_output().expect("subscriber"));
    assert_eq!(
        states(&followed).last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{followed}"
    );
    let artifact = followed["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e.get("artifactUpdate").is_some()))
        .unwrap_or_else(|| panic!("no artifact update: {followed}"));
    assert_eq!(text_of(&artifact["artifactUpdate"]["artifact"]), "48250.00");

    // The decision is in the run's log under alice's name.
    let events: Value = served
        .http()
        .get(format!("{}/runs/{id}/events", served.url))
        .bearer_auth("tok-alice")
        .send()
        .expect("events")
        .json()
        .expect("events json");
    let decided = events["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["kind"] == "approval_decided"))
        .unwrap_or_else(|| panic!("no decision: {events}"));
    assert_eq!(decided["data"]["by"], "api:alice");

    // A settled task takes no more messages and cannot be followed.
    let again = client(&cfo, Some("tok-alice"), &["reply", &id, "approve"]);
    assert_eq!(
        again["error"]["type"], "UnsupportedOperationError",
        "{again}"
    );
    let late = client(&cfo, Some("tok-alice"), &["subscribe", &id]);
    assert_eq!(late["error"]["type"], "UnsupportedOperationError", "{late}");
}

#[test]
fn list_tasks_pages_through_the_callers_own_tasks() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host();
    let echo = at(&served, "echo");
    for n in 0..3 {
        let sent = client(&echo, Some("tok-alice"), &["send", &format!("alice {n}")]);
        assert_eq!(first_task(&sent)["status"]["state"], "TASK_STATE_COMPLETED");
    }
    let bobs = client(&echo, Some("tok-bob"), &["send", "bob's"]);
    assert_eq!(first_task(&bobs)["status"]["state"], "TASK_STATE_COMPLETED");

    let first = client(&echo, Some("tok-alice"), &["list", "--page-size", "2"]);
    let page = &first["result"];
    assert_eq!(page["totalSize"], 3, "{first}");
    assert_eq!(page["pageSize"], 2);
    let inputs = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .map(|tasks| tasks.iter().map(|t| text_of(&t["history"][0])).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        inputs(page),
        ["alice 2", "alice 1"],
        "newest first: {first}"
    );
    assert!(
        page["tasks"][0].get("artifacts").is_none(),
        "artifacts only when asked"
    );
    let token = page["nextPageToken"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = client(
        &echo,
        Some("tok-alice"),
        &[
            "list",
            "--page-size",
            "2",
            "--page-token",
            &token,
            "--artifacts",
        ],
    );
    assert_eq!(inputs(&second["result"]), ["alice 0"], "{second}");
    assert!(
        second["result"]
            .get("nextPageToken")
            .is_none_or(|t| t == "")
    );
    assert_eq!(
        text_of(&second["result"]["tasks"][0]["artifacts"][0]),
        "echo alice 0"
    );

    // An operator sees every principal's tasks; a state filter narrows them.
    let all = client(&echo, Some("tok-ops"), &["list"]);
    assert_eq!(all["result"]["totalSize"], 4, "{all}");
    let working = client(
        &echo,
        Some("tok-ops"),
        &["list", "--status", "TASK_STATE_WORKING"],
    );
    assert!(
        working["result"].get("totalSize").is_none_or(|t| t == 0),
        "{working}"
    );
    let bad = client(
        &echo,
        Some("tok-alice"),
        &["list", "--page-token", "nonsense"],
    );
    assert!(bad.get("error").is_some(), "{bad}");
}

#[test]
fn malformed_and_unsupported_requests_get_typed_json_rpc_errors() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host_of(&[("echo", ECHO)]);
    let send = |parts: Value| {
        json!({"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": {
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts}
        }})
        .to_string()
    };
    let code = |(status, body): (u16, Value)| (status, body["error"]["code"].as_i64());

    let ok = raw(
        &served,
        "/a2a/echo",
        "tok-alice",
        Some("1.0"),
        &send(json!([{"text": "hi"}])),
    );
    assert_eq!(ok.0, 200);
    assert_eq!(ok.1["id"], "r1");
    assert_eq!(
        ok.1["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // A host of one agent takes a message at its own endpoint without naming the agent.
    let own = raw(
        &served,
        "/a2a",
        "tok-alice",
        Some("1.0"),
        &send(json!([{"text": "hi"}])),
    );
    assert_eq!(
        own.1["result"]["task"]["metadata"]["consort"]["agent"], "echo",
        "{own:?}"
    );

    let cases: [(&str, Option<&str>, String, i64); 7] = [
        ("/a2a/echo", None, send(json!([{"text": "hi"}])), -32009),
        ("/a2a/echo", Some("1.0"), "{not json".to_owned(), -32700),
        ("/a2a/echo", Some("1.0"), "[]".to_owned(), -32600),
        (
            "/a2a/echo",
            Some("1.0"),
            json!({"jsonrpc": "2.0", "id": 2, "method": "message/send"}).to_string(),
            -32601,
        ),
        ("/a2a/echo", Some("1.0"), send(json!([{"data": {"month": 8}}])), -32005),
        ("/a2a/echo", Some("1.0"), send(json!([{"text": "a", "url": "b"}])), -32602),
        (
            "/a2a/echo",
            Some("1.0"),
            json!({"jsonrpc": "2.0", "id": 3, "method": "CreateTaskPushNotificationConfig", "params": {}}).to_string(),
            -32003,
        ),
    ];
    for (path, version, body, expected) in cases {
        assert_eq!(
            code(raw(&served, path, "tok-alice", version, &body)),
            (200, Some(expected)),
            "{body}"
        );
    }
    let unknown_task = json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "run_00000000000000000000000000000000"}});
    assert_eq!(
        code(raw(
            &served,
            "/a2a/echo",
            "tok-alice",
            Some("1.0"),
            &unknown_task.to_string()
        )),
        (200, Some(-32001))
    );
    let (status, _) = raw(
        &served,
        "/a2a/nobody",
        "tok-alice",
        Some("1.0"),
        &send(json!([{"text": "hi"}])),
    );
    assert_eq!(status, 404);
    let (status, body) = raw(
        &served,
        "/a2a/echo",
        "wrong-token",
        Some("1.0"),
        &send(json!([{"text": "hi"}])),
    );
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bearer token"))
    );

    // The host still answers after all of that.
    let after = client(
        &at(&served, "echo"),
        Some("tok-alice"),
        &["send", "still here"],
    );
    eventually("the host to answer", Duration::from_secs(5), || {
        (first_task(&after)["status"]["state"] == "TASK_STATE_COMPLETED").then_some(())
    });
}

#[test]
fn cancel_task_cancels_the_run_and_a_settled_task_is_not_cancelable() {
    if !sdk_available() {
        return;
    }
    let (_fleet, served) = host();
    let cfo = at(&served, "cfo");
    let sent = client(&cfo, Some("tok-alice"), &["send", "2026-08"]);
    let task = first_task(&sent);
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{sent}"
    );
    let id = task["id"].as_str().expect("id").to_owned();

    let bob = client(&cfo, Some("tok-bob"), &["cancel", &id]);
    assert_eq!(bob["error"]["type"], "TaskNotFoundError", "{bob}");
    let canceled = client(&cfo, Some("tok-alice"), &["cancel", &id]);
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    assert!(text_of(&canceled["result"]["status"]["message"]).contains("canceled by api:alice"));
    let run: Value = served
        .http()
        .get(format!("{}/runs/{id}", served.url))
        .bearer_auth("tok-alice")
        .send()
        .expect("get run")
        .json()
        .expect("run json");
    assert_eq!(run["status"], "failed");
    let again = client(&cfo, Some("tok-alice"), &["cancel", &id]);
    assert_eq!(again["error"]["type"], "TaskNotCancelableError", "{again}");
    let listed = client(
        &cfo,
        Some("tok-alice"),
        &["list", "--status", "TASK_STATE_CANCELED"],
    );
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
}
