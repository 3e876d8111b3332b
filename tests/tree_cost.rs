//! The cost of a whole delegation tree: each run reports its own cost and its tree's (its own
//! plus every descendant's that replied), carried back with replies, across hosts too.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, ServeFleet, runs_of, stdout};

fn sum(runs: &[&Value], field: &str) -> u64 {
    runs.iter()
        .map(|r| r["cost"][field].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn a_chain_of_three_reports_each_runs_tree_in_one_host() {
    let fleet = Fleet::new();
    fleet.agent(
        "cmo",
        "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: q}]\n    - answer: \"{reply.cfo}\"\n",
    );
    fleet.agent(
        "cfo",
        "name: cfo\nagents: {can_call: [clerk], accept_from: [cmo]}\nmodel:\n  script:\n    - call: [{agent: clerk, input: q}, {agent: clerk, input: r}]\n    - answer: \"{replies}\"\n",
    );
    fleet.agent(
        "clerk",
        "name: clerk\nagents: {accept_from: [cfo]}\nmodel:\n  script:\n    - answer: \"counted {input}\"\n",
    );
    let host = fleet.serve(&[]);
    let root = host.run_wait("cmo", "go");
    assert_eq!(root["status"], "succeeded", "{root}");
    let jobs = fleet.jobs();
    let all: Vec<&Value> = jobs.iter().collect();
    assert_eq!(all.len(), 4);
    let cmo = runs_of(&jobs, "cmo")[0];
    let cfo = runs_of(&jobs, "cfo")[0];
    for field in ["model_turns", "tool_calls", "calls_placed"] {
        assert_eq!(
            cmo["tree_cost"][field].as_u64(),
            Some(sum(&all, field)),
            "{field}: {cmo}"
        );
        let below: Vec<&Value> = jobs.iter().filter(|r| r["agent"] != "cmo").collect();
        assert_eq!(
            cfo["tree_cost"][field].as_u64(),
            Some(sum(&below, field)),
            "{field}: {cfo}"
        );
    }
    assert_eq!(cmo["tree_cost"]["calls_placed"], 3);
    for clerk in runs_of(&jobs, "clerk") {
        assert_eq!(clerk["tree_cost"], clerk["cost"], "a leaf's tree is itself");
    }
    // The table shows the tree beside the run's own columns.
    let table = stdout(&host.cli(&["jobs", "list"]));
    assert!(
        table.lines().next().unwrap_or("").contains("TREE"),
        "{table}"
    );
    let shown = stdout(&host.cli(&["runs", "show", cmo["id"].as_str().unwrap()]));
    assert!(shown.contains("tree cost"), "{shown}");
}

#[test]
fn a_tree_cost_crosses_hosts_with_the_reply() {
    let mut fleet = ServeFleet::example(|_| {});
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, Duration::from_secs(60));
    assert_eq!(run["status"], "succeeded", "{run}");
    let cfo = fleet.jobs_of("beta");
    let cfo = &cfo[0];
    for field in ["model_turns", "tool_calls", "calls_placed"] {
        let own = run["cost"][field].as_u64().unwrap_or(0);
        let child = cfo["cost"][field].as_u64().unwrap_or(0);
        assert_eq!(
            run["tree_cost"][field].as_u64(),
            Some(own + child),
            "{field}: {run} / {cfo}"
        );
    }
}
