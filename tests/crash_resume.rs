//! A host killed during a burst of calls resumes every run: the real `consort dev` binary is
//! SIGKILLed while about 30 parent runs each place three calls, restarted on the same data
//! folder, killed again, and so on. After each restart every run must settle within a bound
//! (the next restart must not be what rescues a run the previous one left hanging); at the end
//! each parent has exactly three children, one per call, and an answer built from all three
//! replies (none lost, none duplicated).
//!
//! This is the operator's view of the crash windows between "call recorded" and "reply
//! recorded": a parent still `running` at the kill (some calls recorded, others in flight) must
//! ask again for the replies of the calls it had already recorded.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Fleet;

/// Three calls in one turn, then an answer built from all three replies.
const PARENT: &str = r#"
name: parent
description: fans out to three workers
agents: {can_call: [worker]}
model:
  script:
    - call: [{agent: worker, input: "{input}#{n}", count: 3}]
    - answer: "{replies}"
"#;

/// A child that takes a couple of turns, so a kill finds children at every stage.
const WORKER: &str = r#"
name: worker
description: answers
agents: {accept_from: [parent]}
model:
  script:
    - answer: "ok {input}"
"#;

const BURST: usize = 30;
const ROUNDS: usize = 8;
const SETTLE: Duration = Duration::from_secs(20);

/// Posts `BURST` runs from a few threads and SIGKILLs the host once about half were accepted.
fn burst_and_kill(host: support::Served, round: usize) {
    let url = host.url.clone();
    let accepted = AtomicUsize::new(0);
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http client");
    std::thread::scope(|scope| {
        for t in 0..3 {
            let (url, http, accepted) = (&url, &http, &accepted);
            scope.spawn(move || {
                for i in 0..BURST / 3 {
                    let body = json!({"agent": "parent", "input": format!("r{round}t{t}i{i}")});
                    let sent = http.post(format!("{url}/runs")).json(&body).send();
                    match sent {
                        Ok(r) if r.status().as_u16() == 201 => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                        }
                        // The host is gone: the kill happened; the rest of the burst is moot.
                        _ => return,
                    }
                }
            });
        }
        // Kill mid-burst: runs started, calls placed, replies in flight.
        let deadline = Instant::now() + Duration::from_secs(30);
        while accepted.load(Ordering::SeqCst) < BURST / 2 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        host.kill();
    });
}

/// Waits until every run in the data folder settled; on timeout, fails with the open runs and
/// their logs (a parent left waiting on a reply nothing will send shows up here).
fn all_settle(fleet: &Fleet, what: &str) -> Vec<Value> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let jobs = fleet.jobs();
        let open: Vec<&Value> = jobs
            .iter()
            .filter(|r| !matches!(r["status"].as_str(), Some("succeeded" | "failed")))
            .collect();
        if open.is_empty() {
            return jobs;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = open
                .iter()
                .map(|r| {
                    let id = r["id"].as_str().unwrap_or_default();
                    let log: Vec<String> = fleet
                        .events(id)
                        .iter()
                        .map(|e| format!("{} {}", e["kind"], e["data"]["child_run"]))
                        .collect();
                    format!("{} {} {}: {log:?}", r["agent"], id, r["status"])
                })
                .collect();
            panic!(
                "{what}: {} runs never settled:\n{}",
                open.len(),
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn runs_killed_mid_burst_all_settle_with_three_children_each() {
    let fleet = Fleet::new();
    fleet.agent("parent", PARENT);
    fleet.agent("worker", WORKER);

    let mut host = fleet.serve(&[]);
    for round in 0..ROUNDS {
        burst_and_kill(host, round);
        host = fleet.serve(&[]);
        // Each restart on its own must settle everything the kill interrupted: a later restart
        // must not be what rescues a run the previous one left hanging.
        all_settle(&fleet, &format!("restart after kill {}", round + 1));
    }
    let jobs = all_settle(&fleet, "the last restart");
    drop(host);
    let parents: Vec<&Value> = jobs.iter().filter(|r| r["agent"] == "parent").collect();
    assert!(
        parents.len() >= ROUNDS * BURST / 2,
        "the bursts started runs: {}",
        parents.len()
    );
    let mut children: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for child in jobs.iter().filter(|r| r["agent"] == "worker") {
        let parent = child["parent_run"]
            .as_str()
            .expect("a child names its parent");
        children.entry(parent.to_owned()).or_default().push(child);
    }
    for parent in &parents {
        let id = parent["id"].as_str().expect("run id");
        let input = parent["input"].as_str().expect("run input");
        assert_eq!(parent["status"], "succeeded", "{parent}");
        let mine = children.get(id).map(Vec::as_slice).unwrap_or(&[]);
        let tool_uses: BTreeSet<&str> = mine
            .iter()
            .filter_map(|c| c["tool_use_id"].as_str())
            .collect();
        assert_eq!(mine.len(), 3, "exactly three children of {id}: {mine:?}");
        assert_eq!(tool_uses.len(), 3, "one child per call of {id}: {mine:?}");
        assert_eq!(parent["cost"]["calls_placed"], 3, "{parent}");
        let output = parent["output"].as_str().unwrap_or_default();
        for n in 1..=3 {
            let line = format!("worker: ok {input}#{n}");
            assert!(
                output.lines().any(|l| l == line),
                "{id} answered {output:?}, missing {line:?}"
            );
        }
    }
    let orphans: Vec<&String> = children
        .keys()
        .filter(|p| !parents.iter().any(|r| r["id"] == p.as_str()))
        .collect();
    assert!(orphans.is_empty(), "children without a parent: {orphans:?}");
}
