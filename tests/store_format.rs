//! Stores written before run events were typed still open, read the same and resume.
//!
//! The fixture in `tests/fixtures/store-format-1` was written by consort at event format 1
//! (see its README). This test reads it with today's binary, compares every run and event
//! with what that version printed, then serves it and finishes the run it left blocked.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use support::{Served, consort, eventually, path_str, stderr};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-format-1");

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn json(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("json output")
}

/// An unsettled run's wall time grows while it waits, and fields added since format 1 (the
/// tree cost, the origin) are new: every field the old version printed must read the same.
fn without_live_wall_time(mut run: Value) -> Value {
    if run["settled_at_ms"].is_null() {
        run["cost"]["wall_ms"] = Value::Null;
    }
    if let Some(fields) = run.as_object_mut() {
        fields.remove("tree_cost");
        fields.remove("origin");
    }
    run
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(FIXTURE).join("expected").join(name))
        .expect("expected output");
    serde_json::from_str(&text).expect("expected json")
}

#[test]
fn a_format_1_store_reads_the_same_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_dir(&Path::new(FIXTURE).join("data"), &data);

    let page = json(&consort(&[
        "jobs",
        "list",
        "--data",
        path_str(&data),
        "--json",
    ]));
    let jobs = page["runs"].clone();
    assert!(page["next"].is_null(), "one page holds the five runs");
    let want = expected("jobs.json");
    let strip = |v: &Value| -> Vec<Value> {
        v.as_array()
            .expect("array")
            .iter()
            .cloned()
            .map(without_live_wall_time)
            .collect()
    };
    assert_eq!(strip(&jobs), strip(&want), "jobs list differs");
    // Stored before origins: a root run is its own origin; who started a called run's tree
    // was never recorded.
    for run in jobs.as_array().expect("array") {
        let origin = if run["parent_run"].is_null() {
            run["principal"].clone()
        } else {
            Value::from("unknown")
        };
        assert_eq!(run["origin"], origin, "{run}");
    }
    assert_eq!(jobs.as_array().map(Vec::len), Some(5));

    for run in want.as_array().expect("runs") {
        let id = run["id"].as_str().expect("id");
        let mut shown = json(&consort(&[
            "runs",
            "show",
            id,
            "--data",
            path_str(&data),
            "--json",
        ]));
        let mut old = expected(&format!("{id}.json"));
        for v in [&mut shown, &mut old] {
            v["run"] = without_live_wall_time(v["run"].take());
        }
        assert_eq!(shown, old, "runs show {id} differs");
    }

    // Serve the old stores: the blocked audit run is resumed as blocked, and an approval
    // finishes it.
    let agents = dir.path().join("agents");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/marketing-finance");
    for name in ["cmo", "cfo"] {
        copy_dir(&examples.join(name), &agents.join(name));
    }
    copy_dir(&Path::new(FIXTURE).join("agents-extra"), &agents);
    let served = Served::start(std::slice::from_ref(&agents), &data, &[]);
    let blocked = want
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["status"] == "blocked")
        .and_then(|r| r["id"].as_str())
        .expect("a blocked run in the fixture")
        .to_owned();
    served.wait_status(&blocked, "blocked");
    let out = served.cli(&["approve", &blocked]);
    assert!(out.status.success(), "approve: {}", stderr(&out));
    let run = served.wait_status(&blocked, "succeeded");
    assert_eq!(run["run"]["output"], "3 entries", "{run}");

    // And the stores take new runs beside the old ones.
    let answer = served.run_wait("cmo", "2026-08");
    assert_eq!(answer["status"], "succeeded", "{answer}");
    let all = eventually("seven runs", Duration::from_secs(10), || {
        let jobs = json(&served.cli(&["jobs", "list", "--json"]))["runs"].clone();
        (jobs.as_array().map(Vec::len) == Some(7)).then_some(jobs)
    });
    assert_eq!(all.as_array().map(Vec::len), Some(7));
}
