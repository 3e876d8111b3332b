//! Tests of goals: declared in fleet.yaml (checked where the fleet's agents are loaded) and in
//! the goals.yaml files of dev folders (merged), through the public loaders only.

use std::fs;
use std::path::{Path, PathBuf};

use super::{DirectorySettings, GoalConfig, GoalsConfig, load_dev_goals};
use crate::agent::AgentSet;
use crate::error::ConfigError;
use crate::fleet::FleetConfig;

const KEY: &str = "ed25519:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// Lines 1-5 of every test fleet: one host serving the agents under `agents/`.
fn host_header() -> String {
    format!(
        "hosts:\n  - name: alpha\n    address: 127.0.0.1:7401\n    public_key: \"{KEY}\"\n    agents: [agents]\n"
    )
}

/// The goals of the valid example fleet, from line 6 on.
const GOALS: &str = "\
goals:
  - name: month-end-close
    agents: [cmo, cfo]
  - name: launch
    agents: [cmo, analyst]
directory:
  row_cap: 50
  presence_deadline_ms: 500
  no_advancement_after_s: 10
";

fn agent(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("agent.yaml"),
        format!("name: {name}\nmodel:\n  script: []\n"),
    )
    .unwrap();
    d
}

/// A fleet.yaml of [`host_header`] then `goals`, beside agents analyst, cfo and cmo.
fn fleet(goals: &str) -> (tempfile::TempDir, Result<FleetConfig, ConfigError>) {
    let t = tempfile::tempdir().unwrap();
    for name in ["analyst", "cfo", "cmo"] {
        agent(&t.path().join("agents"), name);
    }
    let f = t.path().join("fleet.yaml");
    fs::write(&f, format!("{}{goals}", host_header())).unwrap();
    let r = FleetConfig::load(&f);
    (t, r)
}

/// (variant, line, column, key, message) of an error.
fn parts(e: &ConfigError) -> (&'static str, u64, u64, String, String) {
    eprintln!("{e}");
    match e {
        ConfigError::Schema {
            line,
            column,
            key,
            message,
            ..
        } => ("schema", *line, *column, key.clone(), message.clone()),
        ConfigError::Invalid {
            line,
            column,
            key,
            message,
            ..
        } => ("invalid", *line, *column, key.clone(), message.clone()),
        other => panic!("unexpected error {other}"),
    }
}

/// The error `FleetConfig::load` gives for these goals.
fn load_err(goals: &str) -> (&'static str, u64, u64, String, String) {
    let (_t, r) = fleet(goals);
    parts(&r.unwrap_err())
}

fn goal(name: &str, agents: &[&str]) -> GoalConfig {
    GoalConfig {
        name: name.to_owned(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn fleet_goals_load_and_are_checked_with_the_agents() {
    let (_t, r) = fleet(GOALS);
    let f = r.unwrap();
    let expected = GoalsConfig {
        goals: vec![
            goal("month-end-close", &["cmo", "cfo"]),
            goal("launch", &["cmo", "analyst"]),
        ],
        directory: DirectorySettings {
            row_cap: 50,
            presence_deadline_ms: 500,
            no_advancement_after_s: 10,
            activity_window_s: 5,
        },
    };
    assert_eq!(f.declared_goals(), &expected);
    assert_eq!(f.goals().unwrap(), expected);
    assert_eq!(f.agents().unwrap().0.len(), 3);
}

#[test]
fn an_agent_in_two_goals() {
    let (_t, r) = fleet(GOALS);
    let g = r.unwrap().goals().unwrap();
    assert_eq!(g.goals_of("cmo"), vec!["month-end-close", "launch"]);
    assert_eq!(g.goals_of("cfo"), vec!["month-end-close"]);
    assert_eq!(g.goals_of("analyst"), vec!["launch"]);
    assert!(g.goals_of("nobody").is_empty());
    assert_eq!(g.goal("launch"), Some(&goal("launch", &["cmo", "analyst"])));
    assert_eq!(g.goal("nope"), None);
}

#[test]
fn a_fleet_without_goals_has_the_defaults() {
    let (_t, r) = fleet("");
    let g = r.unwrap().goals().unwrap();
    assert_eq!(g, GoalsConfig::default());
    assert!(g.goals.is_empty());
    assert_eq!(
        g.directory,
        DirectorySettings {
            row_cap: 24,
            presence_deadline_ms: 2000,
            no_advancement_after_s: 300,
            activity_window_s: 5,
        }
    );
    // Settings without goals, and only some settings: the rest keep their defaults.
    let (_t, r) = fleet("directory:\n  row_cap: 7\n");
    let g = r.unwrap().goals().unwrap();
    assert!(g.goals.is_empty());
    assert_eq!(g.directory.row_cap, 7);
    assert_eq!(g.directory.presence_deadline_ms, 2000);
}

#[test]
fn goal_name_must_be_valid() {
    let (k, l, c, key, msg) = load_err(&GOALS.replace("month-end-close", "Month End"));
    assert_eq!((k, l, c, key.as_str()), ("invalid", 7, 11, "goals[0].name"));
    assert_eq!(
        msg,
        "invalid name `Month End`; expected only a-z, 0-9, `_` and `-`"
    );
    let (k, l, c, key, _) = load_err(&GOALS.replace("month-end-close", "\"\""));
    assert_eq!((k, l, c, key.as_str()), ("invalid", 7, 11, "goals[0].name"));
}

#[test]
fn goal_names_are_unique() {
    let (k, l, c, key, msg) = load_err(&GOALS.replace("name: launch", "name: month-end-close"));
    assert_eq!((k, l, c, key.as_str()), ("invalid", 9, 11, "goals[1].name"));
    assert_eq!(msg, "duplicate goal name `month-end-close`");
}

#[test]
fn goal_agents_must_not_be_empty() {
    let (k, l, c, key, msg) = load_err(&GOALS.replace("[cmo, analyst]", "[]"));
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 10, 13, "goals[1].agents")
    );
    assert_eq!(msg, "goal `launch` has no agents; list at least one");
    // `agents:` with nothing after it is not a list at all.
    let (k, l, _, key, _) = load_err(&GOALS.replace(" [cmo, analyst]", ""));
    assert_eq!((k, l, key.as_str()), ("schema", 10, "goals[1].agents"));
}

#[test]
fn no_agent_twice_in_one_goal() {
    let (k, l, c, key, msg) = load_err(&GOALS.replace("[cmo, cfo]", "[cmo, cfo, cmo]"));
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 8, 24, "goals[0].agents[2]")
    );
    assert_eq!(msg, "agent `cmo` is listed twice in goal `month-end-close`");
    let (k, l, c, key, _) = load_err(&GOALS.replace("[cmo, cfo]", "[cmo, C-F-O]"));
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 8, 19, "goals[0].agents[1]")
    );
}

#[test]
fn every_member_is_an_agent_of_the_fleet() {
    let (_t, r) = fleet(&GOALS.replace("[cmo, analyst]", "[cmo, ghost]"));
    // Parsing alone cannot know the agents: the check happens where they are loaded.
    let f = r.unwrap();
    for e in [f.agents().unwrap_err(), f.goals().unwrap_err()] {
        assert_eq!(e.file(), Some(f.file.as_path()));
        let (k, l, c, key, msg) = parts(&e);
        assert_eq!(
            (k, l, c, key.as_str()),
            ("invalid", 10, 19, "goals[1].agents[1]")
        );
        assert_eq!(
            msg,
            "goal `launch` names agent `ghost`, which no host serves (agents: analyst, cfo, cmo)"
        );
    }
}

#[test]
fn unknown_keys_are_refused() {
    let (k, l, c, key, msg) =
        load_err(&GOALS.replace("    agents: [cmo, analyst]", "    agentz: []"));
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 10, 5, "goals[1].agentz")
    );
    assert_eq!(
        msg,
        "unknown key `agentz` in `goals[1]`; expected one of `name`, `agents`"
    );
    let (k, l, c, key, msg) = load_err(&GOALS.replace("row_cap", "rows"));
    assert_eq!((k, l, c, key.as_str()), ("schema", 12, 3, "directory.rows"));
    assert!(
        msg.starts_with("unknown key `rows` in `directory`"),
        "{msg}"
    );
    let (k, l, c, key, _) = load_err(&GOALS.replace("directory:", "directroy:"));
    assert_eq!((k, l, c, key.as_str()), ("schema", 11, 1, "directroy"));
    // `agents` is required.
    let (k, _, _, key, _) = load_err("goals:\n  - name: x\n");
    assert_eq!((k, key.as_str()), ("schema", "goals[0].agents"));
}

#[test]
fn directory_settings_are_bounded() {
    // (key, line in GOALS, smallest allowed, largest allowed)
    for (setting, line, min, max) in [
        ("row_cap", 12, 1, 1000),
        ("presence_deadline_ms", 13, 100, 30_000),
        ("no_advancement_after_s", 14, 1, 86_400),
    ] {
        let with = |v: u64| {
            let line_text = GOALS
                .lines()
                .find(|l| l.trim_start().starts_with(setting))
                .unwrap();
            GOALS.replace(line_text, &format!("  {setting}: {v}"))
        };
        for ok in [min, max] {
            let (_t, r) = fleet(&with(ok));
            let d = r.unwrap().declared_goals().directory;
            let got = match setting {
                "row_cap" => d.row_cap as u64,
                "presence_deadline_ms" => d.presence_deadline_ms,
                _ => d.no_advancement_after_s,
            };
            assert_eq!(got, ok, "{setting}");
        }
        let column = setting.len() as u64 + 5;
        for bad in [min - 1, max + 1] {
            let (k, l, c, key, msg) = load_err(&with(bad));
            assert_eq!(
                (k, l, c, key),
                ("invalid", line, column, format!("directory.{setting}"))
            );
            assert_eq!(msg, format!("must be between {min} and {max} (got {bad})"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dev folders.

/// Agent folders `names` under `root`, and the set they make.
fn dev_agents(root: &Path, names: &[&str]) -> PathBuf {
    for n in names {
        agent(root, n);
    }
    root.to_path_buf()
}

#[test]
fn dev_goals_of_two_folders_are_merged() {
    let t = tempfile::tempdir().unwrap();
    let finance = dev_agents(&t.path().join("finance"), &["cfo", "analyst"]);
    let marketing = dev_agents(&t.path().join("marketing"), &["cmo"]);
    fs::write(
        finance.join("goals.yaml"),
        "goals:\n  - name: month-end-close\n    agents: [cfo, cmo]\n",
    )
    .unwrap();
    fs::write(
        marketing.join("goals.yaml"),
        "goals:\n  - name: launch\n    agents: [cmo, analyst]\ndirectory:\n  row_cap: 3\n",
    )
    .unwrap();
    let dirs = vec![finance, marketing];
    let set = AgentSet::load(&dirs).unwrap();
    let g = load_dev_goals(&dirs, &set).unwrap();
    assert_eq!(
        g.goals,
        vec![
            goal("month-end-close", &["cfo", "cmo"]),
            goal("launch", &["cmo", "analyst"]),
        ]
    );
    assert_eq!(g.goals_of("cmo"), vec!["month-end-close", "launch"]);
    assert_eq!(g.directory.row_cap, 3);
    assert_eq!(g.directory.no_advancement_after_s, 300);
}

#[test]
fn dev_goal_declared_in_two_files_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let a = dev_agents(&t.path().join("a"), &["cfo"]);
    let b = dev_agents(&t.path().join("b"), &["cmo"]);
    fs::write(
        a.join("goals.yaml"),
        "goals:\n  - name: close\n    agents: [cfo]\n",
    )
    .unwrap();
    fs::write(
        b.join("goals.yaml"),
        "goals:\n  - name: launch\n    agents: [cmo]\n  - name: close\n    agents: [cmo]\n",
    )
    .unwrap();
    let dirs = vec![a.clone(), b.clone()];
    let set = AgentSet::load(&dirs).unwrap();
    let e = load_dev_goals(&dirs, &set).unwrap_err();
    let second = fs::canonicalize(b.join("goals.yaml")).unwrap();
    assert_eq!(e.file(), Some(second.as_path()));
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!((k, l, c, key.as_str()), ("invalid", 4, 11, "goals[1].name"));
    let first = fs::canonicalize(a.join("goals.yaml")).unwrap();
    assert_eq!(
        msg,
        format!("goal `close` is also declared in {}", first.display())
    );
}

#[test]
fn dev_directory_settings_in_two_files_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let a = dev_agents(&t.path().join("a"), &["cfo"]);
    let b = dev_agents(&t.path().join("b"), &["cmo"]);
    fs::write(a.join("goals.yaml"), "directory:\n  row_cap: 5\n").unwrap();
    fs::write(
        b.join("goals.yaml"),
        "goals:\n  - name: x\n    agents: [cmo]\ndirectory:\n  no_advancement_after_s: 9\n",
    )
    .unwrap();
    let dirs = vec![a, b.clone()];
    let set = AgentSet::load(&dirs).unwrap();
    let e = load_dev_goals(&dirs, &set).unwrap_err();
    let second = fs::canonicalize(b.join("goals.yaml")).unwrap();
    assert_eq!(e.file(), Some(second.as_path()));
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!((k, l, c, key.as_str()), ("invalid", 5, 3, "directory"));
    assert!(
        msg.starts_with("directory settings are also given in "),
        "{msg}"
    );
}

#[test]
fn dev_without_goals_yaml_has_the_defaults() {
    let t = tempfile::tempdir().unwrap();
    let dirs = vec![dev_agents(&t.path().join("agents"), &["cfo", "cmo"])];
    let set = AgentSet::load(&dirs).unwrap();
    assert_eq!(load_dev_goals(&dirs, &set).unwrap(), GoalsConfig::default());
    assert_eq!(load_dev_goals(&[], &set).unwrap(), GoalsConfig::default());
}

#[test]
fn dev_agent_folder_given_directly_may_hold_goals_yaml() {
    let t = tempfile::tempdir().unwrap();
    let cfo = agent(t.path(), "cfo");
    let cmo = agent(t.path(), "cmo");
    fs::write(
        cfo.join("goals.yaml"),
        "goals:\n  - name: close\n    agents: [cfo, cmo]\n",
    )
    .unwrap();
    let dirs = vec![cfo, cmo];
    let set = AgentSet::load(&dirs).unwrap();
    let g = load_dev_goals(&dirs, &set).unwrap();
    assert_eq!(g.goals, vec![goal("close", &["cfo", "cmo"])]);
    assert_eq!(g.directory, DirectorySettings::default());
}

#[test]
fn dev_goals_yaml_errors_point_into_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = dev_agents(&t.path().join("agents"), &["cfo", "cmo"]);
    let file = dir.join("goals.yaml");
    let dirs = vec![dir];
    let set = AgentSet::load(&dirs).unwrap();

    fs::write(&file, "goals:\n  - name: close\n    agents: [cfo, ghost]\n").unwrap();
    let e = load_dev_goals(&dirs, &set).unwrap_err();
    let canonical = fs::canonicalize(&file).unwrap();
    assert_eq!(e.file(), Some(canonical.as_path()));
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 19, "goals[0].agents[1]")
    );
    assert_eq!(
        msg,
        "goal `close` names agent `ghost`, which no host serves (agents: cfo, cmo)"
    );

    fs::write(
        &file,
        "goals:\n  - name: close\n    agents: [cfo]\n    why: x\n",
    )
    .unwrap();
    let (k, l, c, key, _) = parts(&load_dev_goals(&dirs, &set).unwrap_err());
    assert_eq!((k, l, c, key.as_str()), ("schema", 4, 5, "goals[0].why"));

    fs::write(&file, "hosts: []\n").unwrap();
    let (k, l, c, key, _) = parts(&load_dev_goals(&dirs, &set).unwrap_err());
    assert_eq!((k, l, c, key.as_str()), ("schema", 1, 1, "hosts"));

    fs::write(&file, "directory:\n  presence_deadline_ms: 99\n").unwrap();
    let (k, l, c, key, msg) = parts(&load_dev_goals(&dirs, &set).unwrap_err());
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 2, 25, "directory.presence_deadline_ms")
    );
    assert_eq!(msg, "must be between 100 and 30000 (got 99)");
}

#[test]
fn the_activity_window_is_bounded_and_defaults_to_five_seconds() {
    let (_t, r) = fleet("directory:\n  activity_window_s: 30\n");
    assert_eq!(r.unwrap().declared_goals().directory.activity_window_s, 30);
    let (_t, r) = fleet("");
    assert_eq!(r.unwrap().declared_goals().directory.activity_window_s, 5);
    for bad in [0, 601] {
        let (_t, r) = fleet(&format!("directory:\n  activity_window_s: {bad}\n"));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("activity_window_s") && e.contains("between 1 and 600"),
            "{e}"
        );
    }
}
