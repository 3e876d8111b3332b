//! Canceling runs with the real binary, as a user stops one that is no longer wanted: a run
//! blocked on an approval nobody will give, canceled over HTTP by its own requester (another
//! principal cannot even see it, an anonymous caller is refused, a second cancel is 409); a
//! run waiting on a peer, canceled from the CLI by an operator while a live stream follows it
//! (the stream ends, the peer's later reply does not revive it); and both still canceled after
//! the host is killed and started again on the same data. Across two `consort serve` hosts: a
//! canceled callee's caller reads a failed reply saying so, and a canceled caller takes its
//! peer's later reply over the link without a write or a retry.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reqwest::blocking::RequestBuilder;
use serde_json::{Value, json};

use support::{BIN, Fleet, ServeFleet, Served, eventually, kinds, path_str, stderr};

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: alice, token: tok-alice}
  - {name: bob, token: tok-bob}
";

/// cfo's ledger waits for an operator's approval; cmo asks cfo and answers with its reply.
const CFO: &str = r#"
name: cfo
description: finance
agents: {accept_from: [cmo]}
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}
"#;
const CMO: &str = "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"{input}\"}]\n    - answer: \"per the CFO: {reply.cfo}\"\n";

const WAIT: Duration = Duration::from_secs(30);

fn fleet() -> Fleet {
    let fleet = Fleet::new();
    fleet.agent("cfo", CFO);
    fleet.ledger("cfo");
    fleet.agent("cmo", CMO);
    std::fs::write(fleet.dir.path().join("host-auth.yaml"), AUTH).unwrap();
    fleet
}

fn serve(fleet: &Fleet) -> Served {
    let auth = fleet.dir.path().join("host-auth.yaml");
    Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    )
}

fn send(req: RequestBuilder, token: Option<&str>) -> (u16, Value) {
    let req = match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

fn start(served: &Served, token: &str, agent: &str) -> String {
    let (status, run) = send(
        served
            .http()
            .post(format!("{}/runs", served.url))
            .json(&json!({"agent": agent, "input": "2026-08"})),
        Some(token),
    );
    assert_eq!(status, 201, "{run}");
    run["id"].as_str().unwrap().to_owned()
}

fn cancel(served: &Served, token: Option<&str>, id: &str, body: Option<Value>) -> (u16, Value) {
    let req = served
        .http()
        .post(format!("{}/runs/{id}/cancel", served.url))
        .header("content-type", "application/json");
    let req = match body {
        Some(body) => req.json(&body),
        None => req,
    };
    send(req, token)
}

fn events(served: &Served, token: &str, id: &str) -> Vec<Value> {
    let (status, page) = send(
        served
            .http()
            .get(format!("{}/runs/{id}/events?limit=1000", served.url)),
        Some(token),
    );
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().unwrap()
}

fn run_of(served: &Served, token: &str, id: &str) -> Value {
    let (status, run) = send(
        served.http().get(format!("{}/runs/{id}", served.url)),
        Some(token),
    );
    assert_eq!(status, 200, "{run}");
    run
}

/// The cfo run a cmo run called, once it waits for approval.
fn blocked_child(served: &Served, parent: &str) -> String {
    eventually("the cfo child to block", WAIT, || {
        let (_, page) = send(
            served.http().get(format!("{}/jobs?agent=cfo", served.url)),
            Some("tok-ops"),
        );
        page["runs"].as_array()?.iter().find_map(|r| {
            (r["parent_run"] == parent && r["status"] == "blocked")
                .then(|| r["id"].as_str().unwrap().to_owned())
        })
    })
}

/// `consort runs show ID -f --json` as a child process, its stdout lines on a channel.
fn follow(served: &Served, id: &str, token: &str) -> (Child, mpsc::Receiver<Value>) {
    let mut child = Command::new(BIN)
        .args(["runs", "show", id, "-f", "--json", "--at", &served.url])
        .args(["--token", token])
        .env_remove("CONSORT_AT")
        .env_remove("CONSORT_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let value = serde_json::from_str(&line).unwrap_or(json!({"unparsed": line}));
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn canceled_runs_settle_failed_stay_canceled_and_refuse_a_second_cancel() {
    let fleet = fleet();
    let mut served = serve(&fleet);

    // A run blocked on an approval nobody will give.
    let blocked = start(&served, "tok-alice", "cfo");
    served.wait_status_with(&blocked, "blocked", "tok-alice");
    // Only its requester (or an operator) may stop it: bob cannot see it, and a caller
    // without a token is not let in.
    let (status, body) = cancel(&served, Some("tok-bob"), &blocked, None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("unknown_run"))
    );
    let (status, body) = cancel(&served, None, &blocked, None);
    assert_eq!(status, 401, "{body}");
    let (status, body) = cancel(
        &served,
        Some("tok-alice"),
        &blocked,
        Some(json!({"reason": "x".repeat(1001)})),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_reason"))
    );
    let (status, body) = cancel(
        &served,
        Some("tok-alice"),
        &blocked,
        Some(json!({"why": "typo"})),
    );
    assert_eq!((status, &body["error"]["code"]), (400, &json!("bad_json")));
    assert_eq!(run_of(&served, "tok-alice", &blocked)["status"], "blocked");

    let (status, run) = cancel(
        &served,
        Some("tok-alice"),
        &blocked,
        Some(json!({"reason": "nobody will approve"})),
    );
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"], "canceled by api:alice: nobody will approve");
    let log = events(&served, "tok-alice", &blocked);
    let tail: Vec<String> = kinds(&log).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["status", "failed", "canceled"], "{log:?}");
    let canceled = log.iter().find(|e| e["kind"] == "canceled").unwrap();
    assert_eq!(
        canceled["data"],
        json!({"by": "api:alice", "reason": "nobody will approve"})
    );
    // Again: 409, and an operator's late approval finds nothing to approve.
    let (status, body) = cancel(&served, Some("tok-alice"), &blocked, None);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_settled");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("already settled")),
        "{body}"
    );
    let (status, body) = send(
        served
            .http()
            .post(format!("{}/runs/{blocked}/approve", served.url))
            .json(&json!({"approve": true})),
        Some("tok-ops"),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("not_awaiting_approval"))
    );
    assert_eq!(events(&served, "tok-alice", &blocked).len(), log.len());

    // A run waiting on a peer, followed live, canceled by an operator from the CLI.
    let waiting = start(&served, "tok-alice", "cmo");
    let child = blocked_child(&served, &waiting);
    served.wait_status_with(&waiting, "waiting", "tok-alice");
    let (mut follower, lines) = follow(&served, &waiting, "tok-alice");
    let first = lines.recv_timeout(WAIT).expect("the stream starts");
    assert_eq!(first["event"]["kind"], "created", "{first}");
    let out = served.cli(&[
        "runs", "cancel", &waiting, "--reason", "stale", "--json", "--token", "tok-ops",
    ]);
    assert!(out.status.success(), "runs cancel: {}", stderr(&out));
    let run: Value = serde_json::from_slice(&out.stdout).expect("runs cancel json");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"], "canceled by api:ops: stale");
    // The live stream ends with the settled run.
    let status = eventually("runs show -f to exit", WAIT, || {
        follower.try_wait().unwrap()
    });
    assert!(status.success());
    let streamed: Vec<Value> = lines.try_iter().collect();
    let last = streamed.last().expect("the stream's end");
    assert_eq!(last["run"]["status"], "failed", "{streamed:?}");
    assert!(
        streamed
            .iter()
            .any(|l| l["event"]["kind"] == "canceled" && l["event"]["data"]["by"] == "api:ops"),
        "{streamed:?}"
    );

    // The peer's run goes on; approved, it answers, and its reply revives nothing.
    assert_eq!(run_of(&served, "tok-ops", &child)["status"], "blocked");
    let before = events(&served, "tok-alice", &waiting);
    let (status, body) = send(
        served
            .http()
            .post(format!("{}/runs/{child}/approve", served.url))
            .json(&json!({"approve": true})),
        Some("tok-ops"),
    );
    assert_eq!(status, 200, "{body}");
    served.wait_status_with(&child, "succeeded", "tok-ops");
    std::thread::sleep(Duration::from_millis(500));
    let after = run_of(&served, "tok-alice", &waiting);
    assert_eq!(after["status"], "failed");
    assert_eq!(after["error"], "canceled by api:ops: stale");
    assert_eq!(
        events(&served, "tok-alice", &waiting),
        before,
        "the log is final"
    );
    assert!(
        served
            .stderr_lines(Duration::from_millis(300))
            .iter()
            .all(|l| !l.contains("ERROR")),
        "a late reply is no error"
    );

    // Killed and started again on the same data, both runs are still canceled.
    served.kill();
    let served = serve(&fleet);
    std::thread::sleep(Duration::from_millis(500));
    for (id, error) in [
        (&blocked, "canceled by api:alice: nobody will approve"),
        (&waiting, "canceled by api:ops: stale"),
    ] {
        let run = run_of(&served, "tok-ops", id);
        assert_eq!(
            (run["status"].as_str(), run["error"].as_str()),
            (Some("failed"), Some(error))
        );
        assert!(kinds(&events(&served, "tok-ops", id)).contains(&"canceled".to_owned()));
    }
    let out = served.cli(&["runs", "cancel", &waiting, "--token", "tok-ops"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already_settled"), "{}", stderr(&out));
}

/// POST /runs/{id}/cancel on a `consort serve` host without an auth file (its local operator).
fn cancel_on(fleet: &ServeFleet, host: &str, id: &str, reason: &str) -> (u16, Value) {
    send(
        fleet
            .http
            .post(format!("{}/runs/{id}/cancel", fleet.url(host)))
            .json(&json!({"reason": reason})),
        None,
    )
}

/// The cfo run on beta that the cmo run `parent` on alpha called, once it waits for approval.
fn blocked_on_beta(fleet: &ServeFleet, parent: &str) -> String {
    eventually("the cfo child to block on beta", WAIT, || {
        fleet.jobs_of("beta").iter().find_map(|r| {
            (r["parent_run"] == parent && r["status"] == "blocked")
                .then(|| r["id"].as_str().unwrap().to_owned())
        })
    })
}

#[test]
fn across_hosts_a_cancel_reaches_the_caller_as_a_failed_reply_and_a_late_reply_is_taken() {
    let mut fleet = ServeFleet::example(|dir| {
        let file = dir.join("agents/cfo/agent.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap();
        let gated = yaml.replace(
            "    bind_env: [LEDGER_CURRENCY]\n",
            "    bind_env: [LEDGER_CURRENCY]\n    approval: required\n",
        );
        assert_ne!(gated, yaml, "the example's ledger is gated");
        std::fs::write(&file, gated).unwrap();
    });
    fleet.start("beta");
    fleet.start("alpha");

    // The callee canceled on beta: the caller on alpha reads why, and answers with it.
    let first = fleet.start_run("alpha", "cmo", "August");
    let child = blocked_on_beta(&fleet, &first);
    let (status, run) = cancel_on(&fleet, "beta", &child, "the ledger is closed");
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["error"], "canceled by operator: the ledger is closed");
    let done = fleet.wait_settled("alpha", &first, WAIT);
    assert_eq!(done["status"], "succeeded", "{done}");
    let reply = fleet
        .events_of("alpha", &first)
        .into_iter()
        .find(|e| e["kind"] == "reply_received")
        .expect("the caller took the reply");
    assert_eq!(reply["data"]["status"], "failed");
    assert_eq!(
        reply["data"]["output"],
        "canceled by operator: the ledger is closed"
    );

    // The caller canceled on alpha while it waits: the callee's later reply crosses the link,
    // is taken without a write, and is not sent again.
    let second = fleet.start_run("alpha", "cmo", "August");
    let child = blocked_on_beta(&fleet, &second);
    eventually("the caller to wait", WAIT, || {
        fleet
            .run("alpha", &second)
            .filter(|r| r["status"] == "waiting")
    });
    let (status, run) = cancel_on(&fleet, "alpha", &second, "no longer needed");
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "failed");
    let before = fleet.events_of("alpha", &second);
    let (status, body) = send(
        fleet
            .http
            .post(format!("{}/runs/{child}/approve", fleet.url("beta")))
            .json(&json!({"approve": true})),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let answered = fleet.wait_settled("beta", &child, WAIT);
    assert_eq!(answered["status"], "succeeded", "{answered}");
    std::thread::sleep(Duration::from_secs(1));
    let after = fleet.run("alpha", &second).unwrap();
    assert_eq!(after["status"], "failed");
    assert_eq!(after["error"], "canceled by operator: no longer needed");
    assert_eq!(
        fleet.events_of("alpha", &second),
        before,
        "the log is final"
    );
    let beta_log = fleet.host_stderr("beta");
    for complaint in ["reply refused", "reply not delivered"] {
        assert!(!beta_log.contains(complaint), "{complaint}: {beta_log}");
    }
}
