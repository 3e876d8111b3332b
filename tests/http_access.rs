//! The HTTP API as an attacker on the same machine meets it, with the real binary: who may do
//! what (operator, principal, anonymous), where the API may listen, which requests reach it
//! (Host, Origin, JSON-only writes), and the bounds on listings, bodies and connections.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use reqwest::blocking::RequestBuilder;
use serde_json::{Value, json};

use support::{Fleet, GATED_CFO, ServeFleet, Served, consort, eventually, path_str, stderr};

const ECHO: &str = "name: echo\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: ops2, token: tok-ops2, roles: [operator]}
  - {name: alice, token: tok-alice, roles: [finance]}
  - {name: bob, token: tok-bob}
";

fn host(auth: &str) -> (Fleet, Served) {
    let fleet = Fleet::new();
    fleet.agent("cfo", GATED_CFO);
    fleet.ledger("cfo");
    fleet.agent("echo", ECHO);
    let file = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&file, auth).unwrap();
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&file)],
    );
    (fleet, served)
}

fn with(req: RequestBuilder, token: Option<&str>) -> RequestBuilder {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

fn status_and_body(req: RequestBuilder) -> (u16, Value) {
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

fn start(served: &Served, token: Option<&str>, agent: &str) -> (u16, Value) {
    status_and_body(with(
        served
            .http()
            .post(format!("{}/runs", served.url))
            .json(&json!({"agent": agent, "input": "2026-08"})),
        token,
    ))
}

fn get(served: &Served, token: Option<&str>, path: &str) -> (u16, Value) {
    status_and_body(with(
        served.http().get(format!("{}{path}", served.url)),
        token,
    ))
}

fn post(served: &Served, token: Option<&str>, path: &str, body: Value) -> (u16, Value) {
    status_and_body(with(
        served
            .http()
            .post(format!("{}{path}", served.url))
            .json(&body),
        token,
    ))
}

fn ids(page: &Value) -> Vec<String> {
    page["runs"]
        .as_array()
        .expect("a page of runs")
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn without_a_known_token_nothing_is_started_read_listed_approved_or_reloaded() {
    let (_fleet, served) = host(AUTH);
    let (status, alice_run) = start(&served, Some("tok-alice"), "cfo");
    assert_eq!(status, 201, "{alice_run}");
    let id = alice_run["id"].as_str().unwrap().to_owned();
    for token in [None, Some("wrong-token"), Some("")] {
        let (status, body) = start(&served, token, "echo");
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], "unauthenticated");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("bearer token")
        );
        for path in [
            format!("/runs/{id}"),
            format!("/runs/{id}/events"),
            "/jobs".to_owned(),
            "/agents".to_owned(),
        ] {
            assert_eq!(get(&served, token, &path).0, 401, "GET {path}");
        }
        let path = format!("/runs/{id}/approve");
        assert_eq!(post(&served, token, &path, json!({"approve": true})).0, 401);
        assert_eq!(post(&served, token, "/reload", json!({})).0, 401);
    }
    // Nothing was started, and alice's run still waits for a decision.
    let (_, all) = get(&served, Some("tok-ops"), "/jobs");
    assert_eq!(ids(&all), vec![id.clone()]);
    let run = served.wait_status_with(&id, "blocked", "tok-ops");
    assert_eq!(run["principal"], "api:alice");
    // The CLI says what to do.
    let out = served.cli(&["jobs", "list"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bearer token"), "{}", stderr(&out));
}

#[test]
fn a_principal_sees_and_controls_only_its_own_runs_and_an_operator_decides() {
    let (_fleet, served) = host(AUTH);
    let (_, alice_run) = start(&served, Some("tok-alice"), "cfo");
    let alice_id = alice_run["id"].as_str().unwrap().to_owned();
    let (_, ops_run) = start(&served, Some("tok-ops"), "cfo");
    let ops_id = ops_run["id"].as_str().unwrap().to_owned();
    let (_, bob_run) = start(&served, Some("tok-bob"), "echo");
    let bob_id = bob_run["id"].as_str().unwrap().to_owned();
    served.wait_status_with(&alice_id, "blocked", "tok-ops");
    served.wait_status_with(&ops_id, "blocked", "tok-ops");

    // bob cannot read alice's run: it answers like a run that does not exist.
    for path in [
        format!("/runs/{alice_id}"),
        format!("/runs/{alice_id}/events"),
    ] {
        let (status, body) = get(&served, Some("tok-bob"), &path);
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "unknown_run");
    }
    assert_eq!(
        get(&served, Some("tok-bob"), &format!("/runs/{bob_id}")).0,
        200
    );
    // Listings: a principal sees its own runs, an operator every run.
    let (_, bobs) = get(&served, Some("tok-bob"), "/jobs");
    assert_eq!(ids(&bobs), vec![bob_id.clone()]);
    let (_, alices) = get(&served, Some("tok-alice"), "/jobs?agent=cfo");
    assert_eq!(ids(&alices), vec![alice_id.clone()]);
    let (_, all) = get(&served, Some("tok-ops"), "/jobs");
    assert_eq!(ids(&all).len(), 3);
    let out = served.cli(&["jobs", "list", "--json", "--token", "tok-bob"]);
    let listed: Value = serde_json::from_slice(&out.stdout).expect("jobs json");
    assert_eq!(ids(&listed), vec![bob_id]);

    // Approving: the requester cannot approve its own gate; another principal cannot even
    // see it; an operator can, but not a gate of a run it started itself.
    let approve = |token: &str, id: &str| {
        post(
            &served,
            Some(token),
            &format!("/runs/{id}/approve"),
            json!({"approve": true}),
        )
    };
    let (status, body) = approve("tok-alice", &alice_id);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    assert_eq!(approve("tok-bob", &alice_id).0, 404);
    let (status, body) = approve("tok-ops", &ops_id);
    assert_eq!(status, 403, "{body}");
    let run = served.wait_status_with(&alice_id, "blocked", "tok-ops");
    assert_eq!(run["status"], "blocked", "nothing was decided");
    let (status, body) = approve("tok-ops", &alice_id);
    assert_eq!(status, 200, "{body}");
    let (_, log) = get(
        &served,
        Some("tok-ops"),
        &format!("/runs/{alice_id}/events"),
    );
    let decided = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .cloned()
        .expect("a decision in the log");
    assert_eq!(decided["data"]["by"], "api:ops", "the log says who decided");
    let (status, body) = approve("tok-ops2", &ops_id);
    assert_eq!(status, 200, "{body}");
    let done = served.wait_status_with(&alice_id, "succeeded", "tok-alice");
    assert_eq!(done["output"], "48250.00");

    // Reload needs the operator role.
    let (status, body) = post(&served, Some("tok-bob"), "/reload", json!({}));
    assert_eq!(status, 403, "{body}");
    assert_eq!(post(&served, Some("tok-ops"), "/reload", json!({})).0, 200);
}

#[test]
fn anonymous_runs_are_opt_in_and_shared_only_among_anonymous_callers() {
    let (_fleet, served) = host(&format!("{AUTH}anonymous: runs\n"));
    let (status, run) = start(&served, None, "echo");
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["principal"], "anonymous");
    let id = run["id"].as_str().unwrap();
    assert_eq!(get(&served, None, &format!("/runs/{id}")).0, 200);
    assert_eq!(get(&served, Some("tok-bob"), &format!("/runs/{id}")).0, 404);
    let (_, alice_run) = start(&served, Some("tok-alice"), "echo");
    let alice_id = alice_run["id"].as_str().unwrap();
    assert_eq!(get(&served, None, &format!("/runs/{alice_id}")).0, 404);
    let (_, listed) = get(&served, None, "/jobs");
    assert_eq!(ids(&listed), vec![id.to_owned()]);
    assert_eq!(post(&served, None, "/reload", json!({})).0, 401);
}

#[test]
fn requests_for_another_name_from_another_site_or_not_json_are_refused() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = Served::start(&[fleet.agents()], &fleet.data(), &[]);
    let http = served.http();
    // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1.
    let (status, body) = status_and_body(
        http.get(format!("{}/jobs", served.url))
            .header("Host", "evil.example:7400"),
    );
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], "wrong_host");
    let port = served.url.rsplit(':').next().unwrap();
    let (status, _) = status_and_body(
        http.get(format!("{}/jobs", served.url))
            .header("Host", format!("localhost:{port}")),
    );
    assert_eq!(status, 200);
    // A cross-site form post: text/plain, no preflight.
    std::fs::write(
        fleet.agents().join("echo/agent.yaml"),
        "name: echo\nmodel: {script: [{answer: \"changed {input}\"}]}\n",
    )
    .unwrap();
    let (status, body) = status_and_body(
        http.post(format!("{}/reload", served.url))
            .header("Content-Type", "text/plain")
            .body("{}"),
    );
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"]["code"], "json_only");
    let (status, body) = status_and_body(
        http.post(format!("{}/reload", served.url))
            .header("Origin", "https://evil.example")
            .json(&json!({})),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "cross_origin");
    // A preflight gets no CORS grant.
    let preflight = http
        .request(reqwest::Method::OPTIONS, format!("{}/reload", served.url))
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .unwrap();
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    // The refused reloads changed nothing; the CLI's own reload (JSON) works.
    let out = served.cli(&["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        support::stdout(&out).contains("echo"),
        "the edit was still pending"
    );
}

#[test]
fn an_api_beyond_loopback_without_auth_is_refused_before_anything_starts() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = consort(&[
            "dev",
            path_str(&fleet.agents()),
            "--data",
            path_str(&fleet.data()),
            "--listen",
            listen,
        ]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains("refusing to serve the HTTP API") && err.contains("--auth"),
            "{err}"
        );
        assert!(!fleet.data().join("serve.json").exists(), "nothing served");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents/echo")).unwrap();
    std::fs::write(dir.path().join("agents/echo/agent.yaml"), ECHO).unwrap();
    let fleet = ServeFleet::new(dir, &[("solo", &["echo"])]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_consort"))
        .args(["serve", "--fleet"])
        .arg(fleet.dir.path().join("fleet.yaml"))
        .args(["--host", "solo", "--listen-http", "0.0.0.0:0", "--data"])
        .arg(fleet.dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--auth"), "{}", stderr(&out));
}

#[test]
fn serve_takes_an_auth_file_and_its_runs_act_for_the_token() {
    let mut fleet = ServeFleet::example(|_| {});
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).unwrap();
    fleet.start("beta");
    fleet.start_with_args("alpha", &[], &["--auth", path_str(&auth)]);
    let url = fleet.url("alpha").to_owned();
    let anonymous = fleet
        .http
        .post(format!("{url}/runs"))
        .json(&json!({"agent": "cmo", "input": "What did we spend in August 2026?"}))
        .send()
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let started: Value = fleet
        .http
        .post(format!("{url}/runs"))
        .bearer_auth("tok-alice")
        .json(&json!({"agent": "cmo", "input": "What did we spend in August 2026?"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(started["principal"], "api:alice", "{started}");
    let id = started["id"].as_str().unwrap();
    let settled: Value = fleet
        .http
        .get(format!("{url}/runs/{id}?wait_ms=30000"))
        .bearer_auth("tok-alice")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(settled["status"], "succeeded", "{settled}");
}

#[test]
fn listings_come_in_pages_and_bodies_and_connections_are_bounded() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = Served::start(&[fleet.agents()], &fleet.data(), &[]);
    let mut started = Vec::new();
    for i in 0..5 {
        let run = served.run_wait("echo", &format!("n{i}"));
        started.push(run["id"].as_str().unwrap().to_owned());
    }
    // Pages of two, followed by their cursors, give every run once, newest first.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/jobs?limit=2&cursor={c}"),
            None => "/jobs?limit=2".to_owned(),
        };
        let (status, page) = get(&served, None, &path);
        assert_eq!(status, 200, "{page}");
        assert!(page["runs"].as_array().unwrap().len() <= 2);
        seen.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    started.reverse();
    assert_eq!(seen, started);
    let (status, body) = get(&served, None, "/jobs?cursor=garbage");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_cursor");
    let out = served.cli(&["jobs", "list", "--limit", "2"]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("consort jobs list --cursor"),
        "{}",
        stderr(&out)
    );
    // Events page the same way.
    let id = &started[0];
    let (_, first) = get(&served, None, &format!("/runs/{id}/events?limit=1"));
    assert_eq!(first["events"].as_array().unwrap().len(), 1);
    let after = first["next_after"].as_u64().expect("more events");
    let (_, rest) = get(&served, None, &format!("/runs/{id}/events?after={after}"));
    assert!(rest["next_after"].is_null());
    assert_eq!(rest["events"][0]["seq"].as_u64(), Some(after + 1));

    // A body over the cap is refused with 413 and starts nothing.
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, body) = post(
        &served,
        None,
        "/runs",
        json!({"agent": "echo", "input": big}),
    );
    assert_eq!(status, 413, "{body}");
    let (_, all) = get(&served, None, "/jobs");
    assert_eq!(ids(&all).len(), 5);

    // Half-sent requests: 300 connections that never finish their headers hold no slot past
    // the header timeout, and the API answers again.
    let addr = served.url.trim_start_matches("http://").to_owned();
    let mut stalled = Vec::new();
    for _ in 0..300 {
        if let Ok(mut c) = TcpStream::connect(&addr) {
            let _ = c.write_all(b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            stalled.push(c);
        }
    }
    let began = Instant::now();
    let answered = eventually("the API to answer again", Duration::from_secs(40), || {
        let quick = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        quick
            .get(format!("{}/agents", served.url))
            .send()
            .ok()
            .filter(|r| r.status().is_success())
    });
    assert!(answered.status().is_success());
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    let open_files = std::fs::read_dir(format!("/proc/{}/fd", served.child.id()))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(open_files < 400, "{open_files} files open");
    drop(stalled);
}

#[test]
fn a_refused_reload_names_the_file_but_not_where_the_host_keeps_it() {
    let (fleet, served) = host(AUTH);
    std::fs::write(
        fleet.agents().join("echo/agent.yaml"),
        "name: echo\nmodel: {script: [{answer: ok}]}\nbogus_key: 1\n",
    )
    .unwrap();
    let (status, body) = post(&served, Some("tok-ops"), "/reload", json!({}));
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("echo/agent.yaml"), "{message}");
    assert!(message.contains("bogus_key"), "{message}");
    let root = fleet.dir.path().to_str().unwrap();
    assert!(!message.contains(root), "{message}");
    assert!(!body.to_string().contains("/tmp/"), "{body}");
}

#[test]
fn one_principal_cannot_park_enough_gated_runs_to_lock_others_out_even_across_restarts() {
    let (fleet, served) = host(AUTH);
    let mut parked = Vec::new();
    for _ in 0..32 {
        let (status, run) = start(&served, Some("tok-alice"), "cfo");
        assert_eq!(status, 201, "{run}");
        parked.push(run["id"].as_str().unwrap().to_owned());
    }
    let (status, body) = start(&served, Some("tok-alice"), "cfo");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "principal_saturated");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("api:alice already has 32 runs in progress on cfo")
    );
    assert_eq!(start(&served, Some("tok-bob"), "cfo").0, 201);
    served.wait_status_with(&parked[31], "blocked", "tok-ops");
    served.kill();

    // After a crash the share is counted again from the store.
    let file = fleet.dir.path().join("host-auth.yaml");
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&file)],
    );
    assert_eq!(start(&served, Some("tok-alice"), "cfo").0, 429);
    assert_eq!(start(&served, Some("tok-bob"), "echo").0, 201);
    // A decision frees a slot.
    let (status, body) = post(
        &served,
        Some("tok-ops"),
        &format!("/runs/{}/approve", parked[0]),
        json!({"approve": false}),
    );
    assert_eq!(status, 200, "{body}");
    eventually("a slot to free", Duration::from_secs(30), || {
        (start(&served, Some("tok-alice"), "cfo").0 == 201).then_some(())
    });
}

#[test]
fn a_gate_that_allows_it_is_decided_by_the_runs_requester_and_the_log_says_who() {
    let (fleet, served) = host(AUTH);
    std::fs::write(
        fleet.agents().join("cfo/agent.yaml"),
        GATED_CFO.replace("approval: required", "approval: requester"),
    )
    .unwrap();
    assert_eq!(post(&served, Some("tok-ops"), "/reload", json!({})).0, 200);
    let (_, run) = start(&served, Some("tok-alice"), "cfo");
    let id = run["id"].as_str().unwrap().to_owned();
    served.wait_status_with(&id, "blocked", "tok-alice");
    let path = format!("/runs/{id}/approve");
    assert_eq!(
        post(&served, Some("tok-bob"), &path, json!({"approve": true})).0,
        404
    );
    let (status, body) = post(&served, Some("tok-alice"), &path, json!({"approve": true}));
    assert_eq!(status, 200, "{body}");
    let done = served.wait_status_with(&id, "succeeded", "tok-alice");
    assert_eq!(done["output"], "48250.00");
    let (_, log) = get(&served, Some("tok-alice"), &format!("/runs/{id}/events"));
    let events = log["events"].as_array().unwrap();
    let asked = events
        .iter()
        .find(|e| e["kind"] == "approval_requested")
        .expect("asked");
    assert_eq!(asked["data"]["requester_may_decide"], true, "{asked}");
    let decided = events
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .expect("decided");
    assert_eq!(decided["data"]["by"], "api:alice", "{decided}");
}
