//! `consort fleet ...` end to end: real `consort serve` processes on loopback, an operator key
//! listed under `operators:` in fleet.yaml, and the CLI sending signed operator requests over
//! the QUIC links. The last test plays a hostile or careless client in-process (with the
//! library's `OperatorLink`) against a real host: requests signed by the wrong key, replayed,
//! expired, tampered or for another host are refused with a typed reason and logged. Every
//! wait polls a condition with a bound.

mod support;

use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use consort_net::{
    Frame, HostKey, LinkConfig, LinkError, OperatorAnswer, OperatorCommand, OperatorLink,
    OperatorRefusal, OperatorRequest, PublicKey, encode_frame, sign_operator_request,
};
use support::{ServeFleet, eventually, stderr, stdout};

const LONG: Duration = Duration::from_secs(30);

/// The example fleet (cmo on alpha, cfo on beta) with operator `ops`; `gated` puts the cfo's
/// ledger behind an operator's approval, so its runs wait until decided.
fn fleet(gated: bool) -> ServeFleet {
    ServeFleet::example_with_operators(
        |dir| {
            if gated {
                let file = dir.join("agents/cfo/agent.yaml");
                let yaml = std::fs::read_to_string(&file).unwrap_or_default();
                let with_gate =
                    yaml.replace("    kind: sql\n", "    kind: sql\n    approval: required\n");
                assert_ne!(with_gate, yaml);
                std::fs::write(&file, with_gate).expect("write agent.yaml");
            }
        },
        &["ops"],
    )
}

/// `consort fleet ARGS --json` as `ops`: the exit status and one answer per host.
fn fleet_json(fleet: &ServeFleet, args: &[&str]) -> (Output, Vec<Value>) {
    let mut all = args.to_vec();
    all.push("--json");
    let out = fleet.fleet_cli("ops", &all);
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "consort fleet {args:?} printed no JSON array ({e}): {}\n{}",
            stdout(&out),
            stderr(&out)
        )
    });
    (out, answers)
}

/// The answer of `host` among `answers`.
fn of<'a>(answers: &'a [Value], host: &str) -> &'a Value {
    answers
        .iter()
        .find(|a| a["host"] == host)
        .unwrap_or_else(|| panic!("no answer of {host} in {answers:?}"))
}

/// The child run on beta of alpha's run `parent`, once it waits for approval.
fn blocked_child_of(fleet: &ServeFleet, parent: &str) -> String {
    eventually("the blocked child", LONG, || {
        fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["parent_run"] == parent && r["status"] == "blocked")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    })
}

#[test]
fn status_shows_each_host_its_agents_runs_and_links_and_a_host_down_as_unreachable() {
    let mut fleet = fleet(false);
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");

    let (out, answers) = fleet_json(&fleet, &["status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(answers.len(), 2, "{answers:?}");
    let alpha = of(&answers, "alpha");
    assert_eq!(alpha["ok"], true, "{alpha}");
    let a = &alpha["answer"];
    assert_eq!(a["host"], "alpha");
    assert_eq!(a["draining"], false);
    assert_eq!(a["unsettled"], 0);
    assert_eq!(a["agents"][0]["name"], "cmo");
    assert_eq!(a["agents"][0]["up"], true);
    assert_eq!(a["agents"][0]["restarts"], 0);
    assert_eq!(a["agents"][0]["runs"]["succeeded"], 1);
    assert_eq!(a["runs"]["succeeded"], 1);
    assert_eq!(a["links"][0]["host"], "beta");
    assert_eq!(a["links"][0]["state"], "connected", "{a}");
    assert_eq!(a["last_failure"], Value::Null);
    let b = &of(&answers, "beta")["answer"];
    assert_eq!(b["agents"][0]["name"], "cfo");
    assert_eq!(b["agents"][0]["runs"]["succeeded"], 1);
    assert_eq!(b["links"][0]["host"], "alpha");
    assert_eq!(b["links"][0]["state"], "connected", "{b}");

    // For people: one section per host.
    let out = fleet.fleet_cli("ops", &["status", "--host", "beta"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("== beta =="), "{text}");
    assert!(!text.contains("== alpha =="), "{text}");
    assert!(text.contains("admitting new runs"), "{text}");
    assert!(text.contains("cfo") && text.contains("connected"), "{text}");

    // A drained host says so, and `drain --undo` opens it again.
    let (out, answers) = fleet_json(&fleet, &["drain", "--host", "alpha"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(of(&answers, "alpha")["answer"]["draining"], true);
    let (_, answers) = fleet_json(&fleet, &["status", "--host", "alpha"]);
    assert_eq!(of(&answers, "alpha")["answer"]["draining"], true);
    let (out, answers) = fleet_json(&fleet, &["drain", "--undo", "--host", "alpha"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(of(&answers, "alpha")["answer"]["draining"], false);

    // A host that is down is shown as unreachable, with why; the others still answer.
    fleet.kill("beta");
    let (out, answers) = fleet_json(&fleet, &["status"]);
    assert_eq!(out.status.code(), Some(1), "{answers:?}");
    assert_eq!(of(&answers, "alpha")["ok"], true);
    let beta = of(&answers, "beta");
    assert_eq!(beta["ok"], false, "{beta}");
    assert_eq!(beta["error"]["kind"], "unreachable", "{beta}");
    assert!(
        beta["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("beta")),
        "{beta}"
    );
    let out = fleet.fleet_cli("ops", &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("unreachable:"), "{}", stdout(&out));
}

#[test]
fn drain_refuses_new_root_runs_while_accepted_ones_finish_and_resume_reopens() {
    let mut fleet = fleet(true);
    fleet.start("alpha");
    fleet.start("beta");
    let first = fleet.start_run("alpha", "cmo", "2026-08");
    let first_child = blocked_child_of(&fleet, &first);

    let (out, answers) = fleet_json(&fleet, &["drain", "--host", "beta"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let drained = &of(&answers, "beta")["answer"];
    assert_eq!(drained["draining"], true, "{drained}");
    assert_eq!(drained["unsettled"], 1, "{drained}");

    // A new root run on the draining host is refused: 503 `draining`.
    let refused = fleet
        .http
        .post(format!("{}/runs", fleet.url("beta")))
        .json(&serde_json::json!({"agent": "cfo", "input": "2026-07"}))
        .send()
        .expect("POST /runs");
    assert_eq!(refused.status().as_u16(), 503);
    let body: Value = refused.json().expect("error json");
    assert_eq!(body["error"]["code"], "draining", "{body}");
    // The status says so, with the run still to finish.
    let (_, answers) = fleet_json(&fleet, &["status", "--host", "beta"]);
    let status = &of(&answers, "beta")["answer"];
    assert_eq!(status["draining"], true);
    assert_eq!(status["unsettled"], 1);
    assert_eq!(status["runs"]["blocked"], 1);

    // A call from a run another host admitted is still taken: it belongs to work underway.
    let second = fleet.start_run("alpha", "cmo", "2026-08");
    let second_child = blocked_child_of(&fleet, &second);

    // The accepted runs finish: approve both gates, by run id, without naming the host (alpha
    // holds neither run and says so; that is no failure).
    for child in [&first_child, &second_child] {
        let (out, answers) = fleet_json(&fleet, &["approve", child]);
        assert!(out.status.success(), "{answers:?} {}", stderr(&out));
        let decided = &of(&answers, "beta")["answer"];
        assert_eq!(decided["approved"], true, "{decided}");
        assert_eq!(decided["run"]["id"], child.as_str());
        assert_eq!(of(&answers, "alpha")["error"]["code"], "unknown_run");
        // The run's log records who decided.
        let log = serde_json::to_string(&fleet.events_of("beta", child)).unwrap_or_default();
        assert!(log.contains("operator:ops"), "{log}");
    }
    for parent in [&first, &second] {
        let run = fleet.wait_settled("alpha", parent, LONG);
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    let (_, answers) = fleet_json(&fleet, &["status", "--host", "beta"]);
    assert_eq!(of(&answers, "beta")["answer"]["unsettled"], 0);

    // Resume: the host admits again.
    let (out, answers) = fleet_json(&fleet, &["resume", "--host", "beta"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(of(&answers, "beta")["answer"]["draining"], false);
    let admitted = fleet
        .http
        .post(format!("{}/runs", fleet.url("beta")))
        .json(&serde_json::json!({"agent": "cfo", "input": "2026-07"}))
        .send()
        .expect("POST /runs");
    assert_eq!(admitted.status().as_u16(), 201);

    // A denial by an operator is a decision too.
    let third = fleet.start_run("alpha", "cmo", "2026-08");
    let third_child = blocked_child_of(&fleet, &third);
    let (out, answers) = fleet_json(
        &fleet,
        &["approve", &third_child, "--deny", "--host", "beta"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(of(&answers, "beta")["answer"]["approved"], false);
    // Deciding again: the run is no longer waiting, a typed failure and exit 1.
    let (out, answers) = fleet_json(&fleet, &["approve", &third_child, "--host", "beta"]);
    assert_eq!(out.status.code(), Some(1));
    let again = of(&answers, "beta");
    assert_eq!(again["error"]["kind"], "failed", "{again}");
    assert_eq!(again["error"]["code"], "not_awaiting_approval", "{again}");
}

#[test]
fn restart_an_agent_and_its_blocked_run_resumes_then_reload_and_jobs() {
    let mut fleet = fleet(true);
    fleet.start("alpha");
    fleet.start("beta");
    let parent = fleet.start_run("alpha", "cmo", "2026-08");
    let child = blocked_child_of(&fleet, &parent);

    // Restart without naming the host: alpha does not serve cfo and says so, beta restarts it.
    let (out, answers) = fleet_json(&fleet, &["restart", "cfo"]);
    assert!(out.status.success(), "{answers:?} {}", stderr(&out));
    let restarted = &of(&answers, "beta")["answer"]["agent"];
    assert_eq!(restarted["name"], "cfo");
    assert_eq!(restarted["up"], true);
    assert_eq!(restarted["restarts"], 1);
    assert_eq!(of(&answers, "alpha")["error"]["code"], "unknown_agent");
    let (_, answers) = fleet_json(&fleet, &["status", "--host", "beta"]);
    let cfo = &of(&answers, "beta")["answer"]["agents"][0];
    assert_eq!(
        (cfo["up"].clone(), cfo["restarts"].clone()),
        (true.into(), 1.into())
    );
    // Its run resumed as after a crash: still waiting for the gate, which still works.
    let run = fleet.run("beta", &child).expect("the child run");
    assert_eq!(run["status"], "blocked", "{run}");
    let (out, _) = fleet_json(&fleet, &["approve", &child, "--host", "beta"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = fleet.wait_settled("alpha", &parent, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    // An agent no host serves is a failure everywhere.
    let (out, answers) = fleet_json(&fleet, &["restart", "nobody"]);
    assert_eq!(out.status.code(), Some(1), "{answers:?}");

    // Reload: a valid edit is taken (by the watcher or by the reload; either way the answer
    // is a list), a broken one is refused with no absolute path in the answer.
    let (out, answers) = fleet_json(&fleet, &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(of(&answers, "alpha")["answer"]["changed"].is_array());
    let file = fleet.dir.path().join("agents/cfo/agent.yaml");
    std::fs::write(&file, "name: cfo\nmodel: [not, a, model]\n").expect("break agent.yaml");
    let (out, answers) = fleet_json(&fleet, &["reload", "--host", "beta"]);
    assert_eq!(out.status.code(), Some(1), "{answers:?}");
    let error = &of(&answers, "beta")["error"];
    assert_eq!(error["code"], "invalid_config", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("cfo/agent.yaml"), "{message}");
    let root = fleet.dir.path().to_string_lossy().into_owned();
    assert!(!message.contains(&root), "{message}");

    // Jobs: a page of each host's runs, newest first, with a cursor to the next.
    fleet.start_run("alpha", "cmo", "2026-09");
    let (out, answers) = fleet_json(&fleet, &["jobs", "--host", "alpha", "--limit", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = &of(&answers, "alpha")["answer"];
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(1), "{page}");
    let first_id = page["runs"][0]["id"].clone();
    let next = page["next"].as_str().expect("a cursor to the next page");
    let (out, answers) = fleet_json(
        &fleet,
        &["jobs", "--host", "alpha", "--limit", "1", "--cursor", next],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let second = &of(&answers, "alpha")["answer"];
    assert_eq!(second["runs"].as_array().map(Vec::len), Some(1), "{second}");
    assert_ne!(second["runs"][0]["id"], first_id);
    // By agent, every host asked: the host that serves it answers, the other is not a failure.
    let (out, answers) = fleet_json(&fleet, &["jobs", "--agent", "cfo"]);
    assert!(out.status.success(), "{answers:?}");
    assert!(of(&answers, "beta")["answer"]["runs"].is_array());
    let text = stdout(&fleet.fleet_cli("ops", &["jobs", "--host", "alpha", "--limit", "1"]));
    assert!(
        text.contains("== alpha ==") && text.contains("more runs:"),
        "{text}"
    );
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn forged_replayed_expired_and_misdirected_requests_are_refused_and_logged() {
    let mut fleet = fleet(false);
    fleet.start("beta");
    // The probes run on a runtime of their own: the fleet's blocking HTTP client may not be
    // dropped inside one.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(probe_beta(&fleet));
    // Each refusal is in beta's log, with the operator and the reason.
    let log = eventually("the refusals in beta's log", LONG, || {
        let log = fleet.host_stderr("beta");
        log.contains("reason=\"replayed\"").then_some(log)
    });
    for reason in [
        "bad_signature",
        "unknown_operator",
        "wrong_host",
        "expired",
        "replayed",
    ] {
        assert!(
            log.lines().any(|l| l.contains("operator request refused")
                && l.contains(&format!("reason=\"{reason}\""))
                && l.contains("operator=ops")
                && l.contains("key=sha256:")),
            "no logged refusal for {reason}:\n{log}"
        );
    }
    assert!(
        log.contains("refusing peer: its key is not in the key ring"),
        "{log}"
    );
    assert!(
        log.contains("a host may not send operator requests"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// Sends beta genuine, forged, tampered, misdirected, expired and replayed requests, with the
/// operator's key, a stranger's and a host's as the link's identity.
async fn probe_beta(fleet: &ServeFleet) {
    let keys = fleet.dir.path().join("keys");
    let ops = HostKey::read(&keys.join("ops.key")).expect("ops key");
    let alpha = HostKey::read(&keys.join("alpha.key")).expect("alpha key");
    let beta_public: PublicKey = HostKey::read(&keys.join("beta.key"))
        .expect("beta key")
        .public();
    let fleet_yaml = std::fs::read_to_string(fleet.dir.path().join("fleet.yaml")).unwrap();
    let beta_addr: std::net::SocketAddr = fleet_yaml
        .lines()
        .skip_while(|l| !l.contains("name: beta"))
        .find_map(|l| l.trim().strip_prefix("address: "))
        .expect("beta's address")
        .parse()
        .expect("an address");
    let config = LinkConfig {
        dial_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(10),
        ..LinkConfig::default()
    };
    let link = OperatorLink::new("ops", &ops, config.clone()).expect("operator link");
    let send = |request: OperatorRequest| {
        let link = &link;
        async move {
            link.request(
                "beta",
                beta_addr,
                beta_public,
                &Frame::OperatorRequest(request),
            )
            .await
            .expect("beta answers")
        }
    };
    let refused = |frame: Frame| match frame {
        Frame::OperatorAnswer(OperatorAnswer::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let signed = |operator: &str, host: &str, command: OperatorCommand, key: &HostKey| {
        let mut request = OperatorRequest::new(operator, host, command, now_ms());
        sign_operator_request(&mut request, key);
        request
    };

    // A genuine request works.
    let answer = send(signed("ops", "beta", OperatorCommand::Status, &ops)).await;
    assert!(
        matches!(answer, Frame::OperatorAnswer(OperatorAnswer::Done { .. })),
        "{answer:?}"
    );

    // Signed by a key that is not the operator's (here a host's own key): refused.
    let forged = send(signed("ops", "beta", OperatorCommand::Drain, &alpha)).await;
    assert!(
        matches!(refused(forged), OperatorRefusal::BadSignature { .. }),
        "a request signed by a host key passed"
    );
    // Signed by a fresh key, as an operator fleet.yaml does not list.
    let stranger = HostKey::generate();
    let unknown = send(signed("mallory", "beta", OperatorCommand::Drain, &stranger)).await;
    assert!(matches!(
        refused(unknown),
        OperatorRefusal::UnknownOperator { .. }
    ));
    // Tampered after signing.
    let mut tampered = signed("ops", "beta", OperatorCommand::Status, &ops);
    tampered.command = OperatorCommand::Drain;
    assert!(matches!(
        refused(send(tampered).await),
        OperatorRefusal::BadSignature { .. }
    ));
    // For another host.
    let elsewhere = send(signed("ops", "alpha", OperatorCommand::Drain, &ops)).await;
    assert!(matches!(
        refused(elsewhere),
        OperatorRefusal::WrongHost { .. }
    ));
    // Expired (beyond the 30 s skew).
    let mut old = OperatorRequest::new("ops", "beta", OperatorCommand::Drain, now_ms() - 120_000);
    sign_operator_request(&mut old, &ops);
    assert!(matches!(
        refused(send(old).await),
        OperatorRefusal::Expired { .. }
    ));
    // Replayed: the same signed bytes twice.
    let once = signed("ops", "beta", OperatorCommand::Status, &ops);
    let bytes = encode_frame(&Frame::OperatorRequest(once)).expect("encode");
    let first = link
        .request_bytes("beta", beta_addr, beta_public, &bytes)
        .await
        .expect("answer");
    assert!(
        matches!(first, Frame::OperatorAnswer(OperatorAnswer::Done { .. })),
        "{first:?}"
    );
    let again = link
        .request_bytes("beta", beta_addr, beta_public, &bytes)
        .await
        .expect("answer");
    assert_eq!(refused(again), OperatorRefusal::Replayed);

    // Nothing of that drained the host.
    let status = send(signed("ops", "beta", OperatorCommand::Status, &ops)).await;
    let Frame::OperatorAnswer(OperatorAnswer::Done { json }) = status else {
        panic!("{status:?}")
    };
    let status: Value = serde_json::from_str(&json).expect("status json");
    assert_eq!(status["draining"], false);

    // A key fleet.yaml does not list is refused at the handshake.
    let outsider = OperatorLink::new("ops", &stranger, config.clone()).expect("link");
    let error = outsider
        .request(
            "beta",
            beta_addr,
            beta_public,
            &Frame::OperatorRequest(signed("ops", "beta", OperatorCommand::Status, &ops)),
        )
        .await
        .expect_err("an unlisted key passed the handshake");
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
    // A host's key passes the handshake as that host, and a host may not send operator
    // requests.
    let as_host = OperatorLink::new("alpha", &alpha, config).expect("link");
    let answer = as_host
        .request(
            "beta",
            beta_addr,
            beta_public,
            &Frame::OperatorRequest(signed("ops", "beta", OperatorCommand::Drain, &ops)),
        )
        .await
        .expect("beta answers");
    assert!(matches!(answer, Frame::Refused { .. }), "{answer:?}");
    link.close().await;
}
