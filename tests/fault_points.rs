//! Crash tests at every durable boundary of a call: the example flow (cmo asks cfo for
//! August's spend) runs on the real `consort dev` binary, which dies (an abort, as a crash
//! would) at one named fault point; a restart on the same data folder must finish the flow with
//! nothing lost and nothing duplicated: every run settles, exactly one child run for the one
//! call, the call counted once, one reply recorded, and the cmo's answer right.
//!
//! The fault points exist only in a build with the `fault-injection` feature, which the tests'
//! build turns on (see the root Cargo.toml); `.ci/run` checks that a plain build ignores
//! `CONSORT_FAULT`.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Fleet, Served, kinds, runs_of};

const WAIT: Duration = Duration::from_secs(30);
const ANSWER: &str =
    "August 2026 spend, per the CFO: 48250.00 USD across all categories (ledger month 2026-08)";

fn example() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/marketing-finance"
    ))
}

fn count(log: &[Value], kind: &str) -> usize {
    kinds(log).iter().filter(|k| *k == kind).count()
}

/// Runs the example flow, crashes at `point`, checks the crash window with `window` (the jobs
/// and the cmo run's log as the crash left them), restarts and checks the flow finished once.
fn crash_and_resume(point: &str, window: impl Fn(&[Value], &[Value])) {
    let fleet = Fleet::new();
    let mut host = Served::start(&[example()], &fleet.data(), &[("CONSORT_FAULT", point)]);
    // At `after_root_stored` the host dies before it answers: the CLI's failure is expected.
    let _ = host.cli(&["run", "cmo", "What did we spend in August?", "--json"]);
    let status = host.wait_for_crash(point, WAIT);
    assert_eq!(
        status.signal(),
        Some(6),
        "the host aborted at {point}: {status:?}"
    );
    drop(host);

    let jobs = fleet.jobs();
    let cmo = runs_of(&jobs, "cmo");
    assert_eq!(
        cmo.len(),
        1,
        "the root run was stored before the crash: {jobs:?}"
    );
    let id = cmo[0]["id"].as_str().expect("run id").to_owned();
    window(&jobs, &fleet.events(&id));

    let _host = Served::start(&[example()], &fleet.data(), &[]);
    let deadline = Instant::now() + WAIT;
    let jobs = loop {
        let jobs = fleet.jobs();
        if jobs
            .iter()
            .all(|r| matches!(r["status"].as_str(), Some("succeeded" | "failed")))
        {
            break jobs;
        }
        assert!(
            Instant::now() < deadline,
            "after a crash at {point}, runs never settled: {jobs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (cmo, cfo) = (runs_of(&jobs, "cmo"), runs_of(&jobs, "cfo"));
    assert_eq!((cmo.len(), cfo.len()), (1, 1), "one run each: {jobs:?}");
    let (cmo, cfo) = (cmo[0], cfo[0]);
    assert_eq!(cmo["status"], "succeeded", "{cmo}");
    assert_eq!(cmo["output"], ANSWER, "{cmo}");
    assert_eq!(
        cmo["cost"]["calls_placed"], 1,
        "the call counted once: {cmo}"
    );
    assert_eq!(cfo["status"], "succeeded", "{cfo}");
    assert_eq!(cfo["parent_run"], cmo["id"], "{cfo}");
    let log = fleet.events(&id);
    assert_eq!(count(&log, "call_placed"), 1, "{:?}", kinds(&log));
    assert_eq!(count(&log, "reply_received"), 1, "{:?}", kinds(&log));
}

#[test]
fn crash_after_the_root_run_is_stored() {
    crash_and_resume("after_root_stored", |jobs, log| {
        // The run steps behind its insert in the store writer's queue, so its first turn may
        // have committed in the same batch; nothing left the host before the crash.
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        assert!(
            matches!(jobs[0]["status"].as_str(), Some("queued" | "running")),
            "{jobs:?}"
        );
        assert!(count(log, "model_turn") <= 1, "{:?}", kinds(log));
        assert_eq!(count(log, "call_placed"), 0, "{:?}", kinds(log));
    });
}

#[test]
fn crash_after_the_calling_turn_is_recorded() {
    crash_and_resume("after_turn_recorded", |jobs, log| {
        assert!(runs_of(jobs, "cfo").is_empty(), "{jobs:?}");
        assert_eq!(count(log, "model_turn"), 1, "{:?}", kinds(log));
        assert_eq!(count(log, "call_placed"), 0, "{:?}", kinds(log));
    });
}

#[test]
fn crash_after_the_child_run_is_stored() {
    crash_and_resume("after_child_stored", |jobs, log| {
        assert_eq!(runs_of(jobs, "cfo").len(), 1, "{jobs:?}");
        assert_eq!(count(log, "call_placed"), 0, "{:?}", kinds(log));
    });
}

#[test]
fn crash_after_the_call_is_recorded() {
    crash_and_resume("after_call_recorded", |_, log| {
        assert_eq!(count(log, "call_placed"), 1, "{:?}", kinds(log));
        assert_eq!(count(log, "reply_received"), 0, "{:?}", kinds(log));
    });
}

#[test]
fn crash_after_the_child_settles_before_its_reply_is_sent() {
    crash_and_resume("after_child_settled", |jobs, log| {
        assert_eq!(runs_of(jobs, "cfo")[0]["status"], "succeeded", "{jobs:?}");
        assert_eq!(count(log, "reply_received"), 0, "{:?}", kinds(log));
    });
}

#[test]
fn crash_after_the_reply_is_recorded() {
    crash_and_resume("after_reply_recorded", |jobs, log| {
        assert_eq!(count(log, "reply_received"), 1, "{:?}", kinds(log));
        assert_ne!(runs_of(jobs, "cmo")[0]["status"], "succeeded", "{jobs:?}");
    });
}
