//! Tests of the compiled snapshot of an agent set, on real folders and files: it is used only
//! while every key of an entry matches the file system, a damaged or foreign snapshot is
//! discarded, errors still name file, line and key, and a snapshot that cannot be written
//! never stops a load.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{agent_dir, parts, simple};
use crate::agent::{AGENT_FILE, AgentSet, SnapshotReport};
use crate::error::ConfigError;

/// A folder of three independent agents and the snapshot file beside it.
fn fleet() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let agents = t.path().join("agents");
    agent_dir(&agents, "a", &simple("a", &[], &["caller"]));
    agent_dir(&agents, "b", &simple("b", &[], &["caller"]));
    agent_dir(&agents, "caller", &simple("caller", &["a", "b"], &[]));
    let snapshot = t.path().join("data").join("agent-set.snapshot");
    (t, agents, snapshot)
}

/// A load through the snapshot. The files were all written before it, so no margin is needed
/// for them to count as settled (the real margin is tested on its own below).
fn load(agents: &Path, snapshot: &Path) -> Result<(AgentSet, SnapshotReport), ConfigError> {
    AgentSet::load_cached_with(&[agents.to_path_buf()], &[], snapshot, Duration::ZERO)
}

fn counts(r: &SnapshotReport) -> (usize, usize) {
    (r.from_snapshot, r.parsed)
}

fn mtime(file: &Path) -> SystemTime {
    fs::metadata(file).unwrap().modified().unwrap()
}

fn set_mtime(file: &Path, at: SystemTime) {
    fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

#[test]
fn an_unchanged_set_is_read_from_the_snapshot() {
    let (_t, agents, snapshot) = fleet();
    let (first, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (0, 3));
    assert_eq!(r.written, Some(3));
    assert!(r.discarded.is_none() && r.write_failed.is_none(), "{r:?}");
    assert!(snapshot.is_file());

    let (second, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (3, 0));
    // Nothing changed: the snapshot is not written again.
    assert_eq!(r.written, None);
    assert_eq!(second, first);
    assert_eq!(second, AgentSet::load(&[agents]).unwrap());
}

#[test]
fn an_edit_of_the_same_size_with_a_new_mtime_is_parsed() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    let file = agents.join("a").join(AGENT_FILE);
    let before = fs::read_to_string(&file).unwrap();
    let edited = before.replace("answer: hi", "answer: ho");
    assert_eq!(edited.len(), before.len());
    let was = mtime(&file);
    fs::write(&file, &edited).unwrap();
    set_mtime(&file, was + Duration::from_secs(1));

    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (2, 1));
    assert_eq!(set, AgentSet::load(&[agents]).unwrap());
    assert!(format!("{:?}", set.get("a").unwrap().model).contains("ho"));
}

#[test]
fn an_edit_of_another_size_with_the_same_mtime_is_parsed() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    let file = agents.join("b").join(AGENT_FILE);
    let was = mtime(&file);
    fs::write(&file, simple("b", &[], &["caller", "a"])).unwrap();
    set_mtime(&file, was);
    assert_eq!(mtime(&file), was);

    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (2, 1));
    assert_eq!(set.get("b").unwrap().accept_from, vec!["caller", "a"]);
}

#[test]
fn a_file_replaced_with_the_same_size_and_mtime_is_parsed() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    // Another file (another inode) renamed over the agent.yaml, with the old size and mtime:
    // what a deploy tool that keeps times does.
    let file = agents.join("a").join(AGENT_FILE);
    let before = fs::read_to_string(&file).unwrap();
    let was = mtime(&file);
    let other = agents.join("a").join("agent.yaml.new");
    fs::write(&other, before.replace("answer: hi", "answer: yo")).unwrap();
    set_mtime(&other, was);
    fs::rename(&other, &file).unwrap();

    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (2, 1));
    assert!(format!("{:?}", set.get("a").unwrap().model).contains("yo"));
}

#[test]
fn added_and_removed_agents_are_seen() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    agent_dir(&agents, "d", &simple("d", &[], &[]));
    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (3, 1));
    assert_eq!(set.names(), vec!["a", "b", "caller", "d"]);
    assert_eq!(r.written, Some(4));

    fs::remove_dir_all(agents.join("d")).unwrap();
    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (3, 0));
    assert_eq!(set.names(), vec!["a", "b", "caller"]);
    // The removed agent's entry is dropped from the snapshot.
    assert_eq!(r.written, Some(3));
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert_eq!((counts(&r), r.written), ((3, 0), None));
}

#[test]
fn a_damaged_or_foreign_snapshot_is_discarded_and_rewritten() {
    let (_t, agents, snapshot) = fleet();
    let plain = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    load(&agents, &snapshot).unwrap();
    let good = fs::read(&snapshot).unwrap();

    let mut flipped = good.clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 0x20;
    let mut other_format = good.clone();
    // The byte after the magic is the format number (a one-byte varint).
    assert_eq!(other_format[8], 2);
    other_format[8] = 1;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"not a snapshot at all".to_vec(),
            "not a snapshot",
        ),
        ("empty", Vec::new(), "not a snapshot"),
        ("truncated", good[..good.len() / 2].to_vec(), ""),
        (
            "one byte short",
            good[..good.len() - 1].to_vec(),
            "checksum",
        ),
        ("a flipped byte", flipped, "checksum"),
        ("another format", other_format, "format 2"),
    ];
    for (what, bytes, says) in cases {
        fs::write(&snapshot, &bytes).unwrap();
        let (set, r) = load(&agents, &snapshot).unwrap();
        let why = r
            .discarded
            .clone()
            .unwrap_or_else(|| panic!("{what}: {r:?}"));
        assert!(why.contains(says), "{what}: {why}");
        assert_eq!(counts(&r), (0, 3), "{what}");
        assert_eq!(set, plain, "{what}");
        assert_eq!(r.written, Some(3), "{what}");
        // Rewritten whole: the next load uses it.
        let (_, r) = load(&agents, &snapshot).unwrap();
        assert_eq!(counts(&r), (3, 0), "{what}");
    }
}

#[test]
fn a_malformed_agent_yaml_is_reported_as_without_a_snapshot() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    let file = agents.join("b").join(AGENT_FILE);
    fs::write(
        &file,
        "name: b\nagents:\n  accept_from: [caller]\nmodel:\n  script: []\n  colour: red\n",
    )
    .unwrap();
    let with = load(&agents, &snapshot).unwrap_err();
    let without = AgentSet::load(std::slice::from_ref(&agents)).unwrap_err();
    assert_eq!(with.to_string(), without.to_string());
    let (kind, line, column, key, _) = parts(&with);
    assert_eq!(
        (kind, line, column, key.as_str()),
        ("schema", 6, 3, "model.colour")
    );
    assert!(
        with.to_string().contains(&file.display().to_string()),
        "{with}"
    );
}

#[test]
fn a_cross_file_error_names_the_unchanged_file_line_and_key() {
    let (_t, agents, snapshot) = fleet();
    load(&agents, &snapshot).unwrap();
    // `caller` is unchanged (taken from the snapshot, which keeps no positions), but the
    // agent it calls is gone: the error still points into caller's agent.yaml.
    fs::remove_dir_all(agents.join("b")).unwrap();
    let with = load(&agents, &snapshot).unwrap_err();
    let without = AgentSet::load(std::slice::from_ref(&agents)).unwrap_err();
    assert_eq!(with.to_string(), without.to_string());
    let (kind, line, column, key, message) = parts(&with);
    assert_eq!(
        (kind, line, key.as_str()),
        ("invalid", 3, "agents.can_call[1]")
    );
    assert!(column > 1, "{with}");
    assert!(message.contains("no agent named `b`"), "{message}");
    assert!(with.to_string().contains("caller"), "{with}");
}

#[test]
fn a_snapshot_that_cannot_be_written_does_not_stop_the_load() {
    let (t, agents, _) = fleet();
    // The data folder is a file: nothing can be created under it, whoever runs the test.
    let data = t.path().join("data-is-a-file");
    fs::write(&data, b"x").unwrap();
    let snapshot = data.join("agent-set.snapshot");
    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(set.names(), vec!["a", "b", "caller"]);
    assert_eq!(counts(&r), (0, 3));
    assert!(r.write_failed.is_some(), "{r:?}");
    assert_eq!(r.written, None);
    // And again: still loads, still says why.
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert!(r.write_failed.is_some(), "{r:?}");
}

#[test]
fn files_changed_just_now_are_not_kept() {
    let (_t, agents, snapshot) = fleet();
    // With the real margin, files written a moment ago may still change under the same
    // stamp: none is kept, and each load parses them.
    let (_, r) = AgentSet::load_cached(std::slice::from_ref(&agents), &[], &snapshot).unwrap();
    assert_eq!((counts(&r), r.written), ((0, 3), Some(0)));
    let (_, r) = AgentSet::load_cached(std::slice::from_ref(&agents), &[], &snapshot).unwrap();
    assert_eq!(counts(&r), (0, 3));
    // Once they are old enough they are kept.
    let old = SystemTime::now() - Duration::from_secs(3600);
    for name in ["a", "b", "caller"] {
        set_mtime(&agents.join(name).join(AGENT_FILE), old);
    }
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(r.written, Some(3));
}

#[test]
fn an_agent_with_a_sql_tool_is_always_parsed() {
    let (_t, agents, snapshot) = fleet();
    let d = agent_dir(
        &agents,
        "ledger",
        "name: ledger\nmodel:\n  script: []\ntools:\n  - name: q\n    kind: sql\n    database: ledger.db\n",
    );
    fs::write(d.join("ledger.db"), b"").unwrap();
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert_eq!((counts(&r), r.written), ((0, 4), Some(3)));
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert_eq!((counts(&r), r.written), ((3, 1), None));
    // Its database is checked on every load: gone, the agent is refused.
    fs::remove_file(d.join("ledger.db")).unwrap();
    let e = load(&agents, &snapshot).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[cfg(unix)]
#[test]
fn an_agent_behind_a_symlink_is_keyed_by_its_canonical_folder() {
    let (t, agents, snapshot) = fleet();
    let elsewhere = t.path().join("elsewhere");
    let one = agent_dir(&elsewhere, "one", &simple("linked", &[], &[]));
    std::os::unix::fs::symlink(&one, agents.join("linked")).unwrap();
    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (0, 4));
    assert_eq!(
        set.get("linked").unwrap().dir,
        fs::canonicalize(&one).unwrap()
    );
    let (_, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (4, 0));

    // The link now points at a copy: same text, another folder. It is parsed, and the agent's
    // folder is the new one.
    let two = elsewhere.join("two");
    fs::create_dir_all(&two).unwrap();
    fs::copy(one.join(AGENT_FILE), two.join(AGENT_FILE)).unwrap();
    set_mtime(&two.join(AGENT_FILE), mtime(&one.join(AGENT_FILE)));
    fs::remove_file(agents.join("linked")).unwrap();
    std::os::unix::fs::symlink(&two, agents.join("linked")).unwrap();
    let (set, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (3, 1));
    assert_eq!(
        set.get("linked").unwrap().dir,
        fs::canonicalize(&two).unwrap()
    );
}

#[test]
fn every_part_of_a_config_survives_the_snapshot() {
    let t = tempfile::tempdir().unwrap();
    let agents = t.path().join("agents");
    agent_dir(
        &agents,
        "rich",
        "\
name: rich
description: All the parts
agents:
  can_call: [peer, remote]
  accept_from: [peer]
model:
  script:
    - call: [{agent: peer, input: \"x {input}\", count: 2, wait_s: 5}]
    - tool: {name: clock__now, input: \"t\", arguments: {a: [1, 2.5, null, true], b: {c: \"{input}\"}}}
    - invoke: {name: clock__now, arguments: {x: 1}}
    - search: {query: q, limit: 3}
    - load: clock__now
    - check: \"{call.peer}\"
    - answer: done
tools:
  - name: clock
    kind: mcp
    command: [python, -m, clock]
    env_keys: [TZ]
    approval: requester
    guard: {kind: quota, max_uses: 3}
env:
  TZ: UTC
policies:
  ops: {roles: [ops], origin_roles: [admin]}
fallback_policy: ops
grants:
  peer: {roles: [ops], on_behalf_of: any}
probe_budget: 7
limits: {max_depth: 3, max_calls_per_run: 9}
a2a_agents:
  - {name: remote, card: \"https://agent.example/.well-known/agent-card.json\", timeout_ms: 5000}
",
    );
    agent_dir(
        &agents,
        "peer",
        "name: peer\nagents: {can_call: [rich], accept_from: [rich]}\nmodel:\n  kind: openai\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  temperature: 0.25\n  headers: {X-A: b}\n",
    );
    let snapshot = t.path().join("agent-set.snapshot");
    let (first, _) = load(&agents, &snapshot).unwrap();
    let (second, r) = load(&agents, &snapshot).unwrap();
    assert_eq!(counts(&r), (2, 0));
    assert_eq!(second, first);
}
