//! A restarted or stopped host is noticed by its peers at once: real `consort serve`
//! processes on loopback (cmo on alpha, cfo on beta, as in examples/marketing-finance),
//! stopped with SIGTERM or SIGKILL and started again on the same data folder.
//!
//! Each case waits with a generous poll (so a failure reports how long it really took) and
//! then asserts a bound well under what a stale cached connection costs (a request timeout
//! plus a redial, 13–30 s). The bounds are for correctness, not performance measurements.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::ServeFleet;

/// How long any wait may take before the test gives up.
const LONG: Duration = Duration::from_secs(60);
/// What "promptly" means for a peer that restarted or stopped.
const PROMPT: Duration = Duration::from_secs(5);

/// A first call from alpha to beta, so alpha holds a connection to beta's process.
fn warmed_up(edit: impl FnOnce(&std::path::Path)) -> ServeFleet {
    let mut fleet = ServeFleet::example(edit);
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    fleet
}

/// Starts a cmo run on alpha and waits for it to settle; returns the run and how long it took.
fn timed_run(fleet: &ServeFleet) -> (Value, Duration) {
    let started = Instant::now();
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    (run, started.elapsed())
}

fn assert_reached(fleet: &ServeFleet, how: &str, run: &Value, took: Duration) {
    eprintln!("{how}: the next call settled in {took:?}");
    assert_eq!(
        run["status"],
        "succeeded",
        "{how}: {run}\n--- alpha ---\n{}",
        fleet.host_stderr("alpha")
    );
    assert!(
        run["output"].as_str().unwrap_or("").contains("48250.00"),
        "{how}: {run}"
    );
    assert!(
        took < PROMPT,
        "{how}: the restarted host was reached after {took:?} (bound {PROMPT:?})"
    );
}

#[test]
fn a_host_restarted_after_sigterm_is_reached_at_once() {
    let mut fleet = warmed_up(|_| {});
    fleet.terminate("beta");
    fleet.start("beta");
    let (run, took) = timed_run(&fleet);
    assert_reached(&fleet, "SIGTERM", &run, took);
    assert_eq!(fleet.jobs_of("beta").len(), 2, "one child run per call");
}

#[test]
fn a_host_restarted_after_sigkill_is_reached_at_once() {
    let mut fleet = warmed_up(|_| {});
    fleet.kill("beta");
    fleet.start("beta");
    let (run, took) = timed_run(&fleet);
    assert_reached(&fleet, "SIGKILL", &run, took);
    assert_eq!(fleet.jobs_of("beta").len(), 2, "one child run per call");
}

#[test]
fn a_call_to_a_stopped_host_is_unreachable_at_once() {
    let mut fleet = warmed_up(|_| {});
    fleet.terminate("beta");
    let (run, took) = timed_run(&fleet);
    eprintln!("stopped host: the call ended in {took:?}");
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    let refused: Vec<Value> = fleet
        .events_of("alpha", &id)
        .into_iter()
        .filter(|e| e["kind"] == "call_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["data"]["code"], "unreachable", "{refused:?}");
    let text = refused[0].to_string();
    assert!(
        !text.contains("redial backoff"),
        "the refusal names a dial that was really tried: {text}"
    );
    assert!(
        took < PROMPT,
        "a call to a stopped host ended after {took:?} (bound {PROMPT:?})"
    );
}

#[test]
fn a_reply_reaches_a_restarted_caller_host_at_once() {
    // Gate the cfo's ledger behind an operator's approval, so the child settles on command.
    let mut fleet = ServeFleet::example(|dir| {
        let file = dir.join("agents/cfo/agent.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap_or_default();
        let gated = yaml.replace("    kind: sql\n", "    kind: sql\n    approval: required\n");
        assert_ne!(gated, yaml);
        std::fs::write(&file, gated).expect("write agent.yaml");
    });
    fleet.start("alpha");
    fleet.start("beta");
    // A first call and its reply, so beta holds a connection to alpha's process.
    let first = fleet.start_run("alpha", "cmo", "2026-08");
    approve_child_of(&fleet, &first);
    let run = fleet.wait_settled("alpha", &first, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");

    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let child = blocked_child_of(&fleet, &id);
    fleet.terminate("alpha");
    fleet.start("alpha");
    // alpha is back and its run waits for the child's reply.
    support::eventually("alpha to resume the run", LONG, || {
        fleet.run("alpha", &id).filter(|r| r["status"] == "waiting")
    });
    let started = Instant::now();
    approve(&fleet, &child);
    let run = fleet.wait_settled("alpha", &id, LONG);
    let took = started.elapsed();
    eprintln!("restarted caller: the reply arrived {took:?} after the approval");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        took < PROMPT,
        "the reply reached the restarted caller host after {took:?} (bound {PROMPT:?})"
    );
}

/// The child run on beta of alpha's run `parent`, once it waits for approval.
fn blocked_child_of(fleet: &ServeFleet, parent: &str) -> String {
    support::eventually("the blocked child", LONG, || {
        fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["parent_run"] == parent && r["status"] == "blocked")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    })
}

fn approve(fleet: &ServeFleet, child: &str) {
    let approved: Value = fleet
        .http
        .post(format!("{}/runs/{child}/approve", fleet.url("beta")))
        .json(&serde_json::json!({"approve": true}))
        .send()
        .expect("approve")
        .json()
        .expect("approve json");
    assert_eq!(approved["id"], child, "{approved}");
}

fn approve_child_of(fleet: &ServeFleet, parent: &str) {
    let child = blocked_child_of(fleet, parent);
    approve(fleet, &child);
}
