//! Observing, waiting on and rolling up peers, end to end (spec 002's bounded observation,
//! identity-pinned waits and attention rollup): real `consort serve` processes on loopback
//! (cmo on alpha, cfo on beta, both in goal `month-end`), asked through the HTTP API as an
//! operator and through the model tools `observe_peer` and `wait_peer` as an agent.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::ServeFleet;

const LONG: Duration = Duration::from_secs(60);

/// The example fleet with goal `month-end` (cmo, cfo, auditor); `auditor` on alpha is in the
/// goal but places no calls. `edit` may change the agent folders first.
fn fleet(edit: impl FnOnce(&Path)) -> ServeFleet {
    let fleet = ServeFleet::example(|dir| {
        let auditor = dir.join("agents").join("auditor");
        std::fs::create_dir_all(&auditor).expect("auditor dir");
        std::fs::write(
            auditor.join("agent.yaml"),
            "name: auditor\nmodel:\n  script:\n    - tool: {name: observe_peer, arguments: {agent: cfo, run: \"{input}\", lines: 3}}\n    - answer: \"{tool.observe_peer}\"\n",
        )
        .expect("auditor agent.yaml");
        edit(dir);
    });
    let file = fleet.dir.path().join("fleet.yaml");
    let yaml = std::fs::read_to_string(&file).expect("fleet.yaml");
    let yaml = yaml.replace(
        "agents: [agents/cmo]",
        "agents: [agents/cmo, agents/auditor]",
    ) + "goals:\n  - name: month-end\n    agents: [cmo, cfo, auditor]\n";
    std::fs::write(&file, yaml).expect("fleet.yaml");
    fleet
}

/// cmo calls cfo, then observes the child run it placed and answers with the observation.
fn observing_cmo(dir: &Path) {
    std::fs::write(
        dir.join("agents/cmo/agent.yaml"),
        "name: cmo\nagents:\n  can_call: [cfo]\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"{input}\"}]\n    - tool: {name: observe_peer, arguments: {agent: cfo, run: \"{call.cfo}\", lines: 3}}\n    - answer: \"{tool.observe_peer}\"\n",
    )
    .expect("cmo agent.yaml");
}

fn get(fleet: &ServeFleet, host: &str, path: &str) -> Value {
    fleet
        .http
        .get(format!("{}{path}", fleet.url(host)))
        .send()
        .expect("GET")
        .json()
        .expect("json")
}

fn codes(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|l| {
            l.iter()
                .map(|x| x["code"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The child run cmo's run placed on beta.
fn child_of(fleet: &ServeFleet, parent: &str) -> String {
    support::eventually("the child run", LONG, || {
        fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["parent_run"] == parent)
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    })
}

#[test]
fn the_placer_sees_an_excerpt_of_its_run_a_peer_that_did_not_place_it_sees_typed_state_only() {
    let mut fleet = fleet(observing_cmo);
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    // cmo placed the child: over the link it gets typed state first, then a bounded excerpt.
    let seen: Value = serde_json::from_str(run["output"].as_str().unwrap_or("")).expect("json");
    assert_eq!(seen["agent"], "cfo", "{seen}");
    assert_eq!(seen["host"], "beta");
    assert_eq!(seen["run"]["status"], "succeeded", "{seen}");
    assert_eq!(seen["run"]["parent_agent"], "cmo");
    assert!(seen["run"]["seq"].as_u64().unwrap_or(0) > 0, "{seen}");
    assert_eq!(seen["excerpt"]["source"], "events");
    assert_eq!(seen["excerpt"]["label"], "advisory");
    assert_eq!(seen["excerpt"]["bound"]["max_lines"], 3);
    assert_eq!(seen["excerpt"]["lines"].as_array().map(Vec::len), Some(3));
    let limits = codes(&seen["limitations"]);
    assert!(limits.contains(&"excerpt_is_advisory".to_owned()), "{seen}");
    assert!(limits.contains(&"log_truncated".to_owned()), "{seen}");
    // auditor shares the goal but did not place the run: typed state, no excerpt.
    let child = child_of(&fleet, &id);
    let audit = fleet.start_run("alpha", "auditor", &child);
    let audit = fleet.wait_settled("alpha", &audit, LONG);
    let seen: Value = serde_json::from_str(audit["output"].as_str().unwrap_or("")).expect("json");
    assert_eq!(seen["run"]["status"], "succeeded", "{seen}");
    assert!(seen["excerpt"].is_null(), "{seen}");
    assert!(codes(&seen["limitations"]).contains(&"excerpt_not_permitted".to_owned()));
    // An operator may read any run, and picks the output as the source.
    let op = get(
        &fleet,
        "alpha",
        &format!("/directory/observe?agent=cfo&run={child}&source=output&lines=5"),
    );
    assert_eq!(op["excerpt"]["source"], "output", "{op}");
    assert!(
        op["excerpt"]["lines"][0]
            .as_str()
            .unwrap_or("")
            .contains("48250.00"),
        "{op}"
    );
}

#[test]
fn a_wait_is_pinned_a_stale_reread_or_a_replacement_never_satisfies_it_and_disappearance_is_typed()
{
    let mut fleet = fleet(|_| {});
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    assert_eq!(
        fleet.wait_settled("alpha", &id, LONG)["status"],
        "succeeded"
    );
    let child = child_of(&fleet, &id);
    let seen = get(
        &fleet,
        "alpha",
        &format!("/directory/observe?agent=cfo&run={child}"),
    );
    let seq = seen["run"]["seq"].as_u64().expect("seq");
    let incarnation = seen["incarnation"]
        .as_str()
        .expect("incarnation")
        .to_owned();
    let wait = |fleet: &ServeFleet, after_seq: u64, incarnation: &str, timeout_ms: u64| -> Value {
        get(
            fleet,
            "alpha",
            &format!(
                "/directory/wait?agent=cfo&run={child}&until=settled&after_seq={after_seq}&incarnation={incarnation}&timeout_ms={timeout_ms}"
            ),
        )
    };
    // Not seen yet: the settled run matches at once.
    let fresh = wait(&fleet, 0, &incarnation, 5_000);
    assert_eq!(fresh["outcome"]["outcome"], "matched", "{fresh}");
    assert_eq!(fresh["outcome"]["seq"], seq);
    // A re-read of the state the caller already saw is no change: the wait runs out.
    let started = Instant::now();
    let stale = wait(&fleet, seq, &incarnation, 1_500);
    assert_eq!(stale["outcome"]["outcome"], "timeout", "{stale}");
    assert_eq!(stale["outcome"]["last_seq"], seq);
    assert!(started.elapsed() >= Duration::from_millis(1_400));
    // beta restarts: a new occupant holds cfo's seat, and the pinned wait says so.
    fleet.terminate("beta");
    fleet.start("beta");
    let replaced = wait(&fleet, 0, &incarnation, 10_000);
    assert_eq!(replaced["outcome"]["outcome"], "replaced", "{replaced}");
    assert_eq!(replaced["outcome"]["pinned"], incarnation.as_str());
    assert_ne!(replaced["outcome"]["current"], incarnation.as_str());
    // beta gone for good: the wait ends as unreachable when its time runs out, not success.
    fleet.kill("beta");
    let gone = wait(&fleet, 0, &incarnation, 2_000);
    assert_eq!(gone["outcome"]["outcome"], "unreachable", "{gone}");
}

#[test]
fn the_rollup_names_a_blocked_run_and_changes_nothing() {
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
    // The stored facts of both hosts (an open run's wall time is computed at read time).
    let facts = |fleet: &ServeFleet| {
        let mut jobs = [fleet.jobs_of("alpha"), fleet.jobs_of("beta")];
        for run in jobs.iter_mut().flatten() {
            for cost in ["cost", "tree_cost"] {
                if let Some(cost) = run[cost].as_object_mut() {
                    cost.remove("wall_ms");
                }
            }
        }
        (jobs, fleet.events_of("beta", &child))
    };
    let before = facts(&fleet);
    let rollup = get(&fleet, "alpha", "/directory/attention?goal=month-end");
    let items = rollup["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{rollup}");
    assert_eq!(items[0]["agent"], "cfo");
    assert_eq!(items[0]["host"], "beta");
    assert_eq!(items[0]["reason"], "blocked_on_approval");
    assert_eq!(items[0]["runs"], 1);
    assert_eq!(items[0]["presence"], "blocked");
    assert_eq!(rollup["omitted_item_count"], 0);
    // Reading the rollup wrote nothing, approved nothing, assigned nothing.
    assert_eq!(before, facts(&fleet));
}
