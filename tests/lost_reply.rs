//! A reply lost on the way is asked for again: real `consort serve` processes (cmo on alpha,
//! cfo on beta). beta dies right after the cfo's run settles and before its reply leaves
//! (the `after_child_settled` fault point); restarted, beta has nothing left to resume, and
//! alpha, which never restarted, would wait forever. The caller's re-ask timer asks beta again
//! and the reply arrives. The fleet simulation found this hang (`core/tests/fleet_sim.rs`).

mod support;

use std::time::Duration;

use support::ServeFleet;

#[test]
fn a_reply_lost_with_its_host_is_asked_for_again() {
    let mut fleet = ServeFleet::example(|_| {});
    fleet.start("alpha");
    fleet.start_with_env("beta", &[("CONSORT_FAULT", "after_child_settled")]);
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    fleet.wait_exit("beta", Duration::from_secs(30));
    let cfo = fleet.jobs_of("alpha");
    assert_eq!(cfo.len(), 1, "alpha holds only the cmo run: {cfo:?}");
    fleet.start("beta");
    // The re-ask timer fires after the run has waited 10 s (checked every 5 s).
    let run = fleet.wait_settled("alpha", &id, Duration::from_secs(60));
    assert_eq!(
        run["status"],
        "succeeded",
        "{run}\n--- alpha ---\n{}",
        fleet.host_stderr("alpha")
    );
    assert!(
        run["output"].as_str().unwrap_or("").contains("48250.00"),
        "{run}"
    );
    let events = fleet.events_of("alpha", &id);
    let replies = events
        .iter()
        .filter(|e| e["kind"] == "reply_received")
        .count();
    assert_eq!(replies, 1, "{events:?}");
}
