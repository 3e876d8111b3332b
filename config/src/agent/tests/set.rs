//! Tests of sets of agents: which folders count, duplicate names, peers that must exist, and
//! reloading one agent against its set.

use std::fs;

use super::{agent_dir, parts, simple};
use crate::agent::AGENT_FILE;
use crate::agent::AgentSet;
use crate::error::ConfigError;

#[test]
fn set_from_agent_folders_and_folders_of_folders() {
    let t = tempfile::tempdir().unwrap();
    let fleet = t.path().join("agents");
    agent_dir(&fleet, "cmo", &simple("cmo", &["cfo"], &[]));
    agent_dir(&fleet, "cfo", &simple("cfo", &[], &["cmo", "solo"]));
    fs::create_dir_all(fleet.join("not-an-agent")).unwrap();
    fs::write(fleet.join("README"), "x").unwrap();
    let solo = agent_dir(t.path(), "solo", &simple("solo", &["cfo"], &[]));
    let set = AgentSet::load(&[fleet, solo]).unwrap();
    assert_eq!(set.names(), vec!["cfo", "cmo", "solo"]);
    assert_eq!(
        set.get("cmo").map(|a| a.can_call.clone()),
        Some(vec!["cfo".to_string()])
    );
    assert!(set.get("nope").is_none());
    assert_eq!(
        set.get("cfo").map(|a| a.accept_from.clone()),
        Some(vec!["cmo".to_string(), "solo".to_string()])
    );
}

#[test]
fn set_errors() {
    let t = tempfile::tempdir().unwrap();
    let empty = t.path().join("empty");
    fs::create_dir(&empty).unwrap();
    assert!(
        matches!(AgentSet::load(std::slice::from_ref(&empty)), Err(ConfigError::NoAgents { path }) if path == empty)
    );
    let missing = t.path().join("missing");
    assert!(matches!(
        AgentSet::load(&[missing]),
        Err(ConfigError::Io { .. })
    ));
    let file = t.path().join("file");
    fs::write(&file, "x").unwrap();
    assert!(matches!(
        AgentSet::load(&[file]),
        Err(ConfigError::Io { .. })
    ));
}

#[test]
fn duplicate_names_name_both_files() {
    let t = tempfile::tempdir().unwrap();
    let a = agent_dir(t.path(), "one", &simple("cfo", &[], &[]));
    let b = agent_dir(t.path(), "two", &simple("cfo", &[], &[]));
    let e = AgentSet::load(&[a, b]).unwrap_err();
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
    assert!(e.file().is_some_and(|f| f.ends_with("two/agent.yaml")));
    assert!(msg.contains("one/agent.yaml"), "{msg}");
    // The same folder twice is the same agent twice.
    let a = t.path().join("one");
    assert!(AgentSet::load(&[a.clone(), a]).is_err());
}

#[test]
fn unknown_peers_list_the_known_agents() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("agents");
    agent_dir(&root, "cfo", &simple("cfo", &[], &["cmo"]));
    agent_dir(
        &root,
        "cmo",
        "name: cmo\nagents:\n  can_call: [cfx]\nmodel:\n  script: []\n",
    );
    let e = AgentSet::load(std::slice::from_ref(&root)).unwrap_err();
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 14, "agents.can_call[0]")
    );
    assert_eq!(msg, "no agent named `cfx` (known agents: cfo, cmo)");
    assert!(e.to_string().ends_with(
        "cmo/agent.yaml:3:14: agents.can_call[0]: no agent named `cfx` (known agents: cfo, cmo)"
    ));

    agent_dir(&root, "cmo", &simple("cmo", &[], &["ghost"]));
    let (k, l, c, key, _) = parts(&AgentSet::load(std::slice::from_ref(&root)).unwrap_err());
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 4, 17, "agents.accept_from[0]")
    );

    // A remote peer makes the name known; a remote name that is also local is an error.
    let set = AgentSet::load_with_peers(std::slice::from_ref(&root), &["ghost".into()]).unwrap();
    assert_eq!(set.len(), 2);
    let e = AgentSet::load_with_peers(&[root], &["ghost".into(), "cfo".into()]).unwrap_err();
    let (k, l, c, key, _) = parts(&e);
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
}

#[test]
fn reload_one() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("agents");
    agent_dir(&root, "cfo", &simple("cfo", &[], &["cmo"]));
    let cmo = agent_dir(&root, "cmo", &simple("cmo", &["cfo"], &[]));
    let set = AgentSet::load(&[root]).unwrap();

    fs::write(cmo.join(AGENT_FILE), simple("cmo", &[], &["cfo"])).unwrap();
    let a = set.reload_one("cmo").unwrap();
    assert_eq!(a.accept_from, vec!["cfo"]);
    assert!(a.can_call.is_empty());
    assert_eq!(
        set.get("cmo").map(|a| a.can_call.len()),
        Some(1),
        "the set is unchanged"
    );

    fs::write(cmo.join(AGENT_FILE), simple("cmx", &[], &[])).unwrap();
    let (k, l, c, key, msg) = parts(&set.reload_one("cmo").unwrap_err());
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
    assert!(msg.contains("`cmo` to `cmx`"), "{msg}");

    fs::write(cmo.join(AGENT_FILE), simple("cmo", &["nobody"], &[])).unwrap();
    let (k, l, c, key, _) = parts(&set.reload_one("cmo").unwrap_err());
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 14, "agents.can_call[0]")
    );
    assert!(set.reload_one_with_peers("cmo", &["nobody".into()]).is_ok());

    fs::write(cmo.join(AGENT_FILE), "name: cmo\n  bad: [").unwrap();
    assert!(matches!(
        set.reload_one("cmo"),
        Err(ConfigError::Syntax { .. })
    ));

    assert!(
        matches!(set.reload_one("zzz"), Err(ConfigError::UnknownAgent { name, known }) if name == "zzz" && known == vec!["cfo", "cmo"])
    );
}
