//! Delivery to peers end to end (spec 002's bounded delivery): real `consort serve` processes
//! on loopback, cmo on alpha and cfo on beta (examples/marketing-finance), both in goal
//! `month-end`. What a user checks: a receipt is no proof of execution (`active` only when the
//! run moved on, `stalled` otherwise, never success), a gated target refuses before anything
//! is written on either host, a reused id never delivers twice, and a timeout resends nothing.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::ServeFleet;

const LONG: Duration = Duration::from_secs(60);

fn fleet(edit: impl FnOnce(&Path)) -> ServeFleet {
    let fleet = ServeFleet::example(edit);
    let file = fleet.dir.path().join("fleet.yaml");
    let yaml = std::fs::read_to_string(&file).expect("fleet.yaml")
        + "goals:\n  - name: month-end\n    agents: [cmo, cfo]\n";
    std::fs::write(&file, yaml).expect("fleet.yaml");
    fleet
}

fn deliver(fleet: &ServeFleet, body: Value) -> Value {
    fleet
        .http
        .post(format!("{}/directory/deliver", fleet.url("alpha")))
        .json(&body)
        .send()
        .expect("POST /directory/deliver")
        .json()
        .expect("outcome json")
}

/// Runs on beta that a delivery started.
fn delivered_runs(fleet: &ServeFleet) -> Vec<Value> {
    fleet
        .jobs_of("beta")
        .into_iter()
        .filter(|r| r["channel"].as_str().unwrap_or("").starts_with("delivery:"))
        .collect()
}

fn messages_in(fleet: &ServeFleet, host: &str, run: &str) -> usize {
    fleet
        .events_of(host, run)
        .iter()
        .filter(|e| e["kind"] == "message_received")
        .count()
}

#[test]
fn a_new_run_delivery_lands_once_and_a_reused_id_never_delivers_twice() {
    let mut fleet = fleet(|dir| {
        std::fs::write(
            dir.join("agents/cmo/agent.yaml"),
            "name: cmo\nagents:\n  can_call: [cfo]\nmodel:\n  script:\n    - tool: {name: deliver, arguments: {agent: cfo, message: \"{input}\"}}\n    - answer: \"{tool.deliver}\"\n",
        )
        .expect("cmo agent.yaml");
    });
    fleet.start("alpha");
    fleet.start("beta");
    // An operator hands cfo a new run; the run moves on, so the outcome is active.
    let first = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-08", "delivery_id": "close-aug"}),
    );
    assert_eq!(first["outcome"], "active", "{first}");
    assert_eq!(first["receipt"]["existing"], false, "{first}");
    let run = first["receipt"]["run"].as_str().expect("run").to_owned();
    let runs = delivered_runs(&fleet);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["channel"], "delivery:@operator");
    assert_eq!(runs[0]["id"], run.as_str());
    // The same id and message again: the first receipt, no second run.
    let again = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-08", "delivery_id": "close-aug"}),
    );
    assert_eq!(again["receipt"]["existing"], true, "{again}");
    assert_eq!(again["receipt"]["run"], run.as_str());
    // The same id with another message is a conflict, refused before anything is written.
    let conflict = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-07", "delivery_id": "close-aug"}),
    );
    assert_eq!(conflict["outcome"], "rejected", "{conflict}");
    assert_eq!(conflict["code"], "delivery_conflict", "{conflict}");
    assert_eq!(delivered_runs(&fleet).len(), 1);
    // An agent delivers through its tool: cfo consents to cmo, so a new run `delivery:cmo`.
    let id = fleet.start_run("alpha", "cmo", "2026-07");
    let run = fleet.wait_settled("alpha", &id, LONG);
    let outcome: Value = serde_json::from_str(run["output"].as_str().unwrap_or("")).expect("json");
    assert!(
        matches!(outcome["outcome"].as_str(), Some("active" | "stalled")),
        "{outcome}"
    );
    let by_cmo: Vec<Value> = delivered_runs(&fleet)
        .into_iter()
        .filter(|r| r["channel"] == "delivery:cmo")
        .collect();
    assert_eq!(by_cmo.len(), 1, "{by_cmo:?}");
    assert_eq!(by_cmo[0]["input"], "2026-07");
    // The CLI tells a conflict by its exit code.
    let out = support::consort(&[
        "directory",
        "deliver",
        "cfo",
        "2026-06",
        "--id",
        "close-aug",
        "--at",
        fleet.url("alpha"),
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn a_delivery_to_a_gated_run_is_refused_and_writes_nothing_on_either_host() {
    let mut fleet = fleet(|dir| {
        let file = dir.join("agents/cfo/agent.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap_or_default();
        let gated = yaml.replace("    kind: sql\n", "    kind: sql\n    approval: required\n");
        assert_ne!(gated, yaml);
        std::fs::write(&file, gated).expect("write agent.yaml");
    });
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let child = support::eventually("the blocked child", LONG, || {
        fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["parent_run"] == id.as_str() && r["status"] == "blocked")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    });
    let facts = |fleet: &ServeFleet| {
        (
            fleet.events_of("alpha", &id).len(),
            fleet.events_of("beta", &child),
            fleet.jobs_of("beta").len(),
        )
    };
    let before = facts(&fleet);
    let refused = deliver(
        &fleet,
        json!({"agent": "cfo", "run": child, "message": "approve yourself", "delivery_id": "nudge-1"}),
    );
    assert_eq!(refused["outcome"], "rejected", "{refused}");
    assert_eq!(refused["code"], "delivery_target_blocked", "{refused}");
    assert_eq!(before, facts(&fleet), "nothing was written on either host");
}

#[test]
fn a_stalled_delivery_is_never_success_and_a_timeout_resends_nothing() {
    let mut fleet = fleet(|dir| {
        // A cfo whose one tool use runs for seconds: a message into that run waits for the
        // next turn, so nothing follows it inside a short window. The tool's time limit is
        // raised to the most allowed so the query outlasts the test's windows.
        let file = dir.join("agents/cfo/agent.yaml");
        std::fs::write(
            &file,
            "name: cfo\nagents:\n  accept_from: [cmo]\nmodel:\n  script:\n    - tool:\n        name: ledger\n        input: \"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) SELECT count(*) FROM c\"\n    - answer: \"{tool.ledger}\"\ntools:\n  - name: ledger\n    kind: sql\n    database: ledger.db\n    timeout_ms: 30000\n    description: the ledger\n",
        )
        .expect("cfo agent.yaml");
    });
    let file = fleet.dir.path().join("fleet.yaml");
    let yaml = std::fs::read_to_string(&file).expect("fleet.yaml")
        + "directory:\n  no_advancement_after_s: 1\n";
    std::fs::write(&file, yaml).expect("fleet.yaml");
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let child = support::eventually("the child's tool in flight", LONG, || {
        let child = fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["parent_run"] == id.as_str())?;
        let child = child["id"].as_str()?.to_owned();
        fleet
            .events_of("beta", &child)
            .iter()
            .any(|e| e["kind"] == "model_turn")
            .then_some(child)
    });
    let stalled = deliver(
        &fleet,
        json!({"agent": "cfo", "run": child, "message": "also July, please", "delivery_id": "more-1", "window_ms": 300}),
    );
    assert_eq!(stalled["outcome"], "stalled", "{stalled}");
    assert_eq!(stalled["receipt"]["receipt"], "enqueued", "{stalled}");
    assert_eq!(messages_in(&fleet, "beta", &child), 1);
    // Unread past the threshold, the stalled delivery is on the goal's attention rollup.
    let rollup = support::eventually("a stalled delivery in the rollup", LONG, || {
        let rollup: Value = fleet
            .http
            .get(format!(
                "{}/directory/attention?goal=month-end",
                fleet.url("alpha")
            ))
            .send()
            .ok()?
            .json()
            .ok()?;
        rollup["items"]
            .as_array()?
            .iter()
            .any(|i| i["agent"] == "cfo" && i["reason"] == "stalled_delivery")
            .then_some(rollup)
    });
    assert_eq!(rollup["items"][0]["reason"], "stalled_delivery", "{rollup}");
    // beta stops answering (SIGSTOP: a host that hangs): the sender's own timeout ends the
    // delivery as `timeout`, and nothing is sent again once beta goes on.
    let beta = fleet.hosts[1]
        .child
        .as_ref()
        .map(|c| c.id().to_string())
        .expect("beta runs");
    signal("-STOP", &beta);
    let timed_out = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-05", "delivery_id": "late-1", "timeout_ms": 500}),
    );
    signal("-CONT", &beta);
    assert_eq!(timed_out["outcome"], "timeout", "{timed_out}");
    std::thread::sleep(Duration::from_millis(1500));
    let landed = delivered_runs(&fleet).len();
    assert!(landed <= 1, "{landed}");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(delivered_runs(&fleet).len(), landed, "no automatic resend");
    // The sender reads what became of it instead of guessing.
    let status: Value = fleet
        .http
        .get(format!(
            "{}/directory/delivery?agent=cfo&id=late-1",
            fleet.url("alpha")
        ))
        .send()
        .expect("GET /directory/delivery")
        .json()
        .expect("receipt json");
    let expected = if landed == 1 {
        "enqueued"
    } else {
        "unknown_delivery"
    };
    assert_eq!(status["receipt"], expected, "{status}");
    // Sending again is the sender's own decision, with the same id: exactly one run.
    let resent = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-05", "delivery_id": "late-1"}),
    );
    assert_eq!(resent["receipt"]["receipt"], "enqueued", "{resent}");
    assert_eq!(delivered_runs(&fleet).len(), 1);
    let out = support::consort(&[
        "directory",
        "delivery",
        "cfo",
        "--id",
        "late-1",
        "--at",
        fleet.url("alpha"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let out = support::consort(&[
        "directory",
        "delivery",
        "cfo",
        "--id",
        "never-sent",
        "--at",
        fleet.url("alpha"),
    ]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    // A message into a run is found by its id as well.
    let status: Value = fleet
        .http
        .get(format!(
            "{}/directory/delivery?agent=cfo&id=more-1&run={child}",
            fleet.url("alpha")
        ))
        .send()
        .expect("GET /directory/delivery")
        .json()
        .expect("receipt json");
    assert_eq!(status["receipt"], "enqueued", "{status}");
    assert_eq!(status["run"], child.as_str());
}

fn signal(which: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([which, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid}");
}

#[test]
fn with_the_peer_host_down_the_directory_still_lists_it_and_a_delivery_is_carried_once_it_is_back()
{
    let mut fleet = fleet(|_| {});
    fleet.start("alpha");
    // No presence provider for cfo: its row is still there, with no presence claimed.
    let packet: Value = fleet
        .http
        .get(format!("{}/directory", fleet.url("alpha")))
        .send()
        .expect("GET /directory")
        .json()
        .expect("packet");
    assert_eq!(packet["registered_agent_count"], 2, "{packet}");
    let cfo = packet["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["agent"] == "cfo"))
        .cloned()
        .expect("cfo row");
    assert!(
        matches!(
            cfo["presence"]["state"].as_str(),
            Some("unreachable" | "unknown")
        ),
        "{packet}"
    );
    // The durable path: journaled on alpha, typed as queued (not success), readable by id.
    let queued = deliver(
        &fleet,
        json!({"agent": "cfo", "message": "2026-08", "delivery_id": "while-down"}),
    );
    assert_eq!(queued["outcome"], "queued", "{queued}");
    let status = |fleet: &ServeFleet| -> Value {
        fleet
            .http
            .get(format!(
                "{}/directory/delivery?agent=cfo&id=while-down",
                fleet.url("alpha")
            ))
            .send()
            .expect("GET /directory/delivery")
            .json()
            .expect("receipt")
    };
    assert_eq!(status(&fleet)["receipt"], "queued");
    // beta comes back: the delivery is carried, once.
    fleet.start("beta");
    support::eventually("the delivery carried to beta", LONG, || {
        (delivered_runs(&fleet).len() == 1).then_some(())
    });
    support::eventually("the receipt", LONG, || {
        (status(&fleet)["receipt"] == "enqueued").then_some(())
    });
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(delivered_runs(&fleet).len(), 1, "carried once");
}
