//! A budget over a whole call tree, on real `consort serve` processes across two hosts: the
//! root's `limits.tree` (or its request's `budget`) is split into allowances that travel signed
//! with each call, every host refuses what no allowance covers with the `budget_exhausted`
//! refusal the model reads, and `GET /runs/{id}` and `runs show` show the tree's spend, never
//! more than its budget.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{ServeFleet, consort, eventually, stdout};

const WAIT: Duration = Duration::from_secs(60);

/// The root agent, on alpha: three calls to the worker at once, then one more after their
/// replies, then an answer with whatever came back.
const LEAD: &str = r#"
name: lead
agents:
  can_call: [worker]
limits:
  tree: {max_runs: 6, max_wall_s: 300}
model:
  script:
    - call: [{agent: worker, input: "part {n}", count: 3}]
    - call: [{agent: worker, input: "one more"}]
    - answer: "lead heard: {replies}"
"#;

/// On beta: two calls back to alpha's clerk, then an answer.
const WORKER: &str = r#"
name: worker
agents:
  can_call: [clerk]
  accept_from: [lead]
model:
  script:
    - call: [{agent: clerk, input: "count {input}", count: 2}]
    - answer: "worker heard: {replies}"
"#;

/// On alpha, called from beta.
const CLERK: &str = r#"
name: clerk
agents:
  accept_from: [worker]
model:
  script:
    - answer: "counted {input}"
"#;

fn write_agent(dir: &Path, name: &str, yaml: &str) {
    let folder = dir.join("agents").join(name);
    std::fs::create_dir_all(&folder).expect("agent folder");
    std::fs::write(folder.join("agent.yaml"), yaml).expect("agent.yaml");
}

/// The `call_refused` events of a run's log: (tool use, code, what the model read).
fn refusals(fleet: &ServeFleet, host: &str, id: &str) -> Vec<(String, String, String)> {
    fleet
        .events_of(host, id)
        .into_iter()
        .filter(|e| e["kind"] == "call_refused")
        .map(|e| {
            let d = &e["data"];
            let text = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (text("tool_use_id"), text("code"), text("reason"))
        })
        .collect()
}

#[test]
fn a_tree_budget_of_runs_holds_across_two_hosts_and_calls_beyond_it_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_agent(dir.path(), "lead", LEAD);
    write_agent(dir.path(), "worker", WORKER);
    write_agent(dir.path(), "clerk", CLERK);
    let mut fleet = ServeFleet::new(dir, &[("alpha", &["lead", "clerk"]), ("beta", &["worker"])]);
    fleet.start("alpha");
    fleet.start("beta");

    let root = fleet.start_run("alpha", "lead", "the numbers");
    let run = fleet.wait_settled("alpha", &root, WAIT);
    assert_eq!(run["status"], "succeeded", "{run}");

    // Six runs: the root holds one and splits five among its three calls (2, 2, 1). A worker
    // with two runs places one of its two calls back to alpha; the one with one places none.
    let budget = &run["budget"];
    assert_eq!(budget["max_runs"], 6, "{run}");
    assert_eq!(budget["max_wall_s"], 300, "{run}");
    assert_eq!(budget["spent"]["runs"], 6, "{run}");
    assert_eq!(budget["held"]["runs"], 0, "{run}");
    let mut all: Vec<Value> = fleet.jobs_of("alpha");
    all.extend(fleet.jobs_of("beta"));
    assert_eq!(
        all.len(),
        6,
        "the tree never holds more runs than its budget"
    );
    let count = |agent: &str| all.iter().filter(|r| r["agent"] == agent).count();
    assert_eq!((count("lead"), count("worker"), count("clerk")), (1, 3, 2));

    // The root's fourth call came after the tree was spent: refused, in words the model read
    // before it answered.
    let at_root = refusals(&fleet, "alpha", &root);
    assert_eq!(at_root.len(), 1, "{at_root:?}");
    let (tool_use, code, said) = &at_root[0];
    assert_eq!(
        (tool_use.as_str(), code.as_str()),
        ("tu_1_0", "budget_exhausted")
    );
    assert_eq!(
        said,
        "the call tree's run budget is spent (6 of 6 runs started or handed out to calls): no more calls can be placed; answer with what you have"
    );
    let read = fleet
        .events_of("alpha", &root)
        .into_iter()
        .find(|e| e["kind"] == "tool_result" && e["data"]["tool_use_id"] == "tu_1_0")
        .expect("the refusal is the call's result");
    assert_eq!(read["data"]["is_error"], true);
    assert_eq!(read["data"]["content"], said.as_str());

    // On beta: each worker held the allowance its hop carried, and refused what it could not
    // hand on with the same code.
    let workers: Vec<&Value> = all.iter().filter(|r| r["agent"] == "worker").collect();
    let mut allowances = Vec::new();
    let mut refused_on_beta = 0;
    for worker in &workers {
        let id = worker["id"].as_str().unwrap();
        let seen = fleet.run("beta", id).expect("the worker's run");
        assert_eq!(seen["status"], "succeeded", "{seen}");
        let b = &seen["budget"];
        let max = b["max_runs"].as_u64().expect("a worker's budget");
        assert!(b["spent"]["runs"].as_u64().unwrap() <= max, "{seen}");
        allowances.push(max);
        for (_, code, _) in refusals(&fleet, "beta", id) {
            assert_eq!(code, "budget_exhausted");
            refused_on_beta += 1;
        }
    }
    allowances.sort_unstable();
    assert_eq!(allowances, [1, 2, 2]);
    assert_eq!(
        refused_on_beta, 4,
        "one of two calls of each worker with 2, both with 1"
    );
    // Each clerk (on alpha again) ran on the one run its worker handed it.
    for clerk in all.iter().filter(|r| r["agent"] == "clerk") {
        let seen = fleet
            .run("alpha", clerk["id"].as_str().unwrap())
            .expect("the clerk's run");
        assert_eq!(seen["budget"]["max_runs"], 1, "{seen}");
        assert_eq!(seen["budget"]["spent"]["runs"], 1, "{seen}");
    }

    // `runs show` prints the same line.
    let shown = stdout(&consort(&[
        "runs",
        "show",
        &root,
        "--at",
        fleet.url("alpha"),
    ]));
    let line = shown
        .lines()
        .find(|l| l.starts_with("budget"))
        .unwrap_or_else(|| panic!("no budget line:\n{shown}"));
    assert!(
        line.contains("runs 6/6, tokens 0 (no limit), wall ") && line.ends_with("/300 s"),
        "{line}"
    );

    // `consort run --max-runs 1`: the request narrows the agent's six to one, so the root may
    // place no call at all; its model reads why and answers.
    let out = consort(&[
        "run",
        "lead",
        "alone",
        "--at",
        fleet.url("alpha"),
        "--max-runs",
        "1",
        "--wait",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let alone: Value = serde_json::from_slice(&out.stdout).expect("run json");
    assert_eq!(alone["status"], "succeeded", "{alone}");
    let id = alone["id"].as_str().unwrap();
    let seen = fleet.run("alpha", id).unwrap();
    assert_eq!(seen["budget"]["max_runs"], 1, "{seen}");
    assert_eq!(
        seen["budget"]["max_wall_s"], 300,
        "the agent's own limit stays"
    );
    assert_eq!(seen["budget"]["spent"]["runs"], 1, "{seen}");
    let codes: Vec<String> = refusals(&fleet, "alpha", id)
        .into_iter()
        .map(|(_, code, _)| code)
        .collect();
    assert_eq!(codes, ["budget_exhausted"; 4]);
    let bad = consort(&[
        "run",
        "lead",
        "x",
        "--at",
        fleet.url("alpha"),
        "--max-runs",
        "0",
    ]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--max-runs must be between 1 and 100000"),
        "{bad:?}"
    );
}

#[test]
fn a_requests_wall_clock_budget_ends_the_tree_on_both_hosts() {
    // The example's cfo, its ledger gated: its run waits on beta for an operator.
    let mut fleet = ServeFleet::example(|dir| {
        let file = dir.join("agents/cfo/agent.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap();
        let gated = yaml.replace(
            "    bind_env: [LEDGER_CURRENCY]\n",
            "    bind_env: [LEDGER_CURRENCY]\n    approval: required\n",
        );
        assert_ne!(gated, yaml, "the example's ledger is gated");
        std::fs::write(&file, gated).unwrap();
    });
    fleet.start("alpha");
    fleet.start("beta");

    // A request budget out of bounds is refused before anything starts.
    let refused = fleet
        .http
        .post(format!("{}/runs", fleet.url("alpha")))
        .json(&json!({"agent": "cmo", "input": "August", "budget": {"max_wall_s": 0}}))
        .send()
        .expect("POST /runs");
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().unwrap();
    assert_eq!(body["error"]["code"], "bad_budget", "{body}");

    // Two seconds for the whole tree.
    let started: Value = fleet
        .http
        .post(format!("{}/runs", fleet.url("alpha")))
        .json(&json!({"agent": "cmo", "input": "August", "budget": {"max_wall_s": 2}}))
        .send()
        .expect("POST /runs")
        .json()
        .expect("run json");
    let root = started["id"].as_str().expect("run id").to_owned();
    let child = eventually("the child to block on beta", WAIT, || {
        fleet
            .jobs_of("beta")
            .into_iter()
            .find(|r| r["status"] == "blocked")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    });
    // The child holds the root's deadline, carried in its hop.
    let seen = fleet.run("beta", &child).unwrap();
    let deadline = seen["budget"]["deadline_ms"].as_u64().expect("a deadline");
    let root_now = fleet.run("alpha", &root).unwrap();
    assert_eq!(root_now["budget"]["deadline_ms"].as_u64(), Some(deadline));
    assert_eq!(root_now["budget"]["max_wall_s"], 2);

    std::thread::sleep(Duration::from_millis(2_500));
    let approved = fleet
        .http
        .post(format!("{}/runs/{child}/approve", fleet.url("beta")))
        .json(&json!({"approve": true}))
        .send()
        .expect("approve");
    assert_eq!(approved.status().as_u16(), 200);
    // Past the deadline, neither run asks its model again.
    let child_done = fleet.wait_settled("beta", &child, WAIT);
    assert_eq!(child_done["status"], "failed", "{child_done}");
    let error = child_done["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("budget_exhausted: the call tree's time budget ran out"),
        "{error}"
    );
    let done = fleet.wait_settled("alpha", &root, WAIT);
    assert_eq!(done["status"], "failed", "{done}");
    let error = done["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("budget_exhausted: the call tree's time budget ran out"),
        "{error}"
    );
    assert!(
        done["budget"]["spent"]["wall_s"].as_u64().unwrap() >= 2,
        "{done}"
    );
}
