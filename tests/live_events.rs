//! Live streams with the real binary: `GET /runs/{id}/events?follow=1`, `GET /jobs?follow=1`
//! and `consort runs show ID -f`, as a user follows a run that waits on an approval, as
//! principals who must see only their own runs, and across a host killed and restarted
//! mid-stream.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use support::{BIN, Fleet, GATED_CFO, Served, eventually, path_str};

const ECHO: &str = "name: echo\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: alice, token: tok-alice}
  - {name: bob, token: tok-bob}
";

const WAIT: Duration = Duration::from_secs(60);

fn fleet() -> Fleet {
    let fleet = Fleet::new();
    fleet.agent("cfo", GATED_CFO);
    fleet.ledger("cfo");
    fleet.agent("echo", ECHO);
    fleet
}

fn with_auth(fleet: &Fleet) -> Served {
    let file = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&file, AUTH).unwrap();
    Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&file)],
    )
}

fn request(
    served: &Served,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
) -> reqwest::blocking::RequestBuilder {
    let req = served
        .http()
        .request(method, format!("{}{path}", served.url));
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

fn start(served: &Served, token: Option<&str>, agent: &str) -> String {
    let resp = request(served, reqwest::Method::POST, "/runs", token)
        .json(&json!({"agent": agent, "input": "2026-08"}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let run: Value = resp.json().unwrap();
    run["id"].as_str().unwrap().to_owned()
}

fn approve(served: &Served, id: &str) {
    let resp = request(
        served,
        reqwest::Method::POST,
        &format!("/runs/{id}/approve"),
        Some("tok-ops"),
    )
    .json(&json!({"approve": true}))
    .send()
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text());
}

/// The status and error code of a request that should be refused.
fn refused(served: &Served, path: &str, token: Option<&str>) -> (u16, String) {
    let resp = request(served, reqwest::Method::GET, path, token)
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().unwrap_or(Value::Null);
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

/// Opens an event stream and hands its events (`(kind, data)`) to the returned channel as
/// they arrive.
fn open_stream(
    served: &Served,
    path: &str,
    token: Option<&str>,
) -> mpsc::Receiver<(String, Value)> {
    let client = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap();
    let mut req = client.get(format!("{}{path}", served.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().unwrap();
    assert_eq!(resp.status().as_u16(), 200, "stream {path} not opened");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kind = String::from("message");
        for line in BufReader::new(resp).lines().map_while(Result::ok) {
            if let Some(k) = line.strip_prefix("event: ") {
                kind = k.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let value = serde_json::from_str(data).unwrap_or(Value::Null);
                if tx.send((kind.clone(), value)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Events from `rx` until one matches `stop`; all of them, in order.
fn until(
    rx: &mpsc::Receiver<(String, Value)>,
    what: &str,
    mut stop: impl FnMut(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        let (kind, data) = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("no {what} on the stream; saw {seen:?}"));
        let done = stop(&kind, &data);
        seen.push((kind, data));
        if done {
            return seen;
        }
    }
}

/// `consort runs show ID -f --json` as a child process, its stdout lines on a channel.
fn follow_cli(url: &str, id: &str, token: Option<&str>) -> (Child, mpsc::Receiver<Value>) {
    let mut cmd = Command::new(BIN);
    cmd.args(["runs", "show", id, "-f", "--json", "--at", url])
        .env_remove("CONSORT_AT")
        .env_remove("CONSORT_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    let mut child = cmd.spawn().unwrap();
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

/// Lines of `runs show -f --json` until the approval request; then the rest once the child
/// exits.
fn cli_lines_until_blocked(rx: &mpsc::Receiver<Value>) -> Vec<Value> {
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("runs show -f printed no approval request: {lines:?}"));
        let blocked = line["event"]["kind"] == "approval_requested";
        lines.push(line);
        if blocked {
            return lines;
        }
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    eventually("runs show -f to exit", WAIT, || child.try_wait().unwrap())
}

/// The event sequence numbers the follower printed must be the stored log's, once each.
fn assert_whole_log(lines: &[Value], served: &Served, id: &str, token: Option<&str>) {
    let printed: Vec<u64> = lines
        .iter()
        .filter_map(|l| l["event"]["seq"].as_u64())
        .collect();
    let mut args = vec!["runs", "show", id, "--json"];
    args.extend(token.iter().flat_map(|t| ["--token", *t]));
    let out = served.cli(&args);
    let stored: Value = serde_json::from_slice(&out.stdout).expect("runs show");
    let all: Vec<u64> = stored["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(printed, all, "every event once, in order");
    let last = lines.last().expect("a last line");
    assert_eq!(last["run"]["status"], "succeeded", "{last}");
    assert_eq!(last["run"]["output"], "48250.00");
}

#[test]
fn runs_show_follow_prints_events_as_they_happen_and_ends_when_the_run_settles() {
    let fleet = fleet();
    let served = with_auth(&fleet);
    let id = start(&served, Some("tok-alice"), "cfo");
    let (mut child, rx) = follow_cli(&served.url, &id, Some("tok-alice"));
    let mut lines = cli_lines_until_blocked(&rx);
    // The run waits on the gate: the follower is still following.
    assert!(child.try_wait().unwrap().is_none(), "it must not end early");
    approve(&served, &id);
    assert!(wait_exit(&mut child).success());
    lines.extend(rx.iter());
    assert_whole_log(&lines, &served, &id, Some("tok-alice"));
}

#[test]
fn an_event_stream_starts_after_a_given_event_and_ends_with_the_settled_run() {
    let fleet = fleet();
    let served = with_auth(&fleet);
    let id = start(&served, Some("tok-alice"), "cfo");
    served.wait_status_with(&id, "blocked", "tok-alice");
    let rx = open_stream(
        &served,
        &format!("/runs/{id}/events?follow=1&after=2"),
        Some("tok-alice"),
    );
    let before = until(&rx, "approval request", |_, e| {
        e["kind"] == "approval_requested"
    });
    assert_eq!(before[0].1["seq"], 3, "the stream starts after `after`");
    approve(&served, &id);
    let rest = until(&rx, "end", |kind, _| kind == "end");
    let (kind, run) = rest.last().unwrap();
    assert_eq!(kind, "end");
    assert_eq!(run["status"], "succeeded");
    let seqs: Vec<u64> = before
        .iter()
        .chain(&rest)
        .filter(|(k, _)| k == "event")
        .map(|(_, e)| e["seq"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (3..=seqs.len() as u64 + 2).collect();
    assert_eq!(seqs, expected, "each event once, in order");
    // A settled run's stream is its remaining log, then the end.
    let again = open_stream(
        &served,
        &format!("/runs/{id}/events?follow=1&after=100"),
        Some("tok-alice"),
    );
    let only = until(&again, "end", |kind, _| kind == "end");
    assert_eq!(only.len(), 1);
}

#[test]
fn a_live_list_of_runs_shows_each_caller_only_what_its_pages_would() {
    let fleet = fleet();
    let served = with_auth(&fleet);
    let alice = open_stream(&served, "/jobs?follow=1", Some("tok-alice"));
    let ops = open_stream(&served, "/jobs?follow=1&agent=echo", Some("tok-ops"));
    let bobs = start(&served, Some("tok-bob"), "echo");
    let alices = start(&served, Some("tok-alice"), "echo");
    let seen = until(&alice, "alice's run settling", |_, r| {
        r["id"] == alices.as_str() && r["status"] == "succeeded"
    });
    for (kind, run) in &seen {
        assert_eq!(kind, "run");
        assert_eq!(
            run["principal"], "api:alice",
            "alice sees only her runs: {run}"
        );
    }
    assert!(
        seen.iter().any(|(_, r)| r["status"] == "queued"),
        "a run is streamed from when it is stored"
    );
    // The operator sees both runs, of the agent it asked for.
    let mut settled = std::collections::HashSet::new();
    until(&ops, "both runs settling", |_, r| {
        assert_eq!(r["agent"], "echo");
        if r["status"] == "succeeded" {
            settled.insert(r["id"].as_str().unwrap().to_owned());
        }
        settled.contains(&bobs) && settled.contains(&alices)
    });
}

#[test]
fn streams_are_refused_like_the_pages_they_follow() {
    let fleet = fleet();
    let served = with_auth(&fleet);
    let id = start(&served, Some("tok-alice"), "echo");
    let events = format!("/runs/{id}/events?follow=1");
    assert_eq!(
        refused(&served, &events, None),
        (401, "unauthenticated".into())
    );
    assert_eq!(
        refused(&served, &events, Some("tok-bob")),
        (404, "unknown_run".into()),
        "another principal's run answers like one that does not exist"
    );
    assert_eq!(
        refused(
            &served,
            &format!("/runs/{id}/events?follow=yes"),
            Some("tok-alice")
        ),
        (400, "bad_follow".into())
    );
    assert_eq!(
        refused(&served, &format!("{events}&limit=5"), Some("tok-alice")),
        (400, "bad_query".into())
    );
    assert_eq!(
        refused(&served, "/jobs?follow=1&cursor=x", Some("tok-ops")),
        (400, "bad_query".into())
    );
    assert_eq!(
        refused(&served, "/jobs?follow=1&agent=nobody", Some("tok-ops")),
        (404, "unknown_agent".into())
    );
    assert_eq!(
        refused(&served, "/jobs?follow=1", None),
        (401, "unauthenticated".into())
    );
}

#[test]
fn a_follower_carries_on_across_a_host_killed_and_restarted_mid_stream() {
    let fleet = fleet();
    let served = fleet.serve(&[]);
    let url = served.url.clone();
    let listen = url.trim_start_matches("http://").to_owned();
    let id = start(&served, None, "cfo");
    let (mut child, rx) = follow_cli(&url, &id, None);
    let mut lines = cli_lines_until_blocked(&rx);
    served.kill();
    // The follower keeps trying while the host is down.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "it must wait for the host"
    );
    let served = Served::start_listening(&[fleet.agents()], &fleet.data(), &[], &[], &listen);
    served.wait_status(&id, "blocked");
    approve_local(&served, &id);
    assert!(wait_exit(&mut child).success());
    lines.extend(rx.iter());
    assert_whole_log(&lines, &served, &id, None);
}

/// Approves on a host without an auth file (its one local operator).
fn approve_local(served: &Served, id: &str) {
    let resp = request(
        served,
        reqwest::Method::POST,
        &format!("/runs/{id}/approve"),
        None,
    )
    .json(&json!({"approve": true}))
    .send()
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text());
}
