//! Agents built in code: the builder refuses what agent.yaml's reader refuses, with the same
//! sentences and the key the value would have in the file, and a set built from them is
//! checked as a loaded set is.

use crate::error::ConfigError;
use crate::{AgentConfig, AgentSet, Limits, TreeLimits};

/// The key and message of an `InvalidAgent` error.
fn invalid(error: ConfigError) -> (String, String) {
    match error {
        ConfigError::InvalidAgent { key, message, .. } => (key, message),
        other => panic!("expected InvalidAgent, got {other:?}"),
    }
}

#[test]
fn a_built_agent_has_what_it_was_given_and_the_defaults_otherwise() {
    let cfo = AgentConfig::builder("cfo")
        .description("answers about spend")
        .can_call(["analyst"])
        .accept_from(["cmo", "ceo"])
        .env("RATE", "12")
        .limits(Limits::default().with_max_depth(2).with_max_turns(9))
        .build()
        .unwrap();
    assert_eq!(cfo.name, "cfo");
    assert_eq!(cfo.can_call, ["analyst"]);
    assert_eq!(cfo.accept_from, ["cmo", "ceo"]);
    assert_eq!(cfo.env["RATE"], "12");
    assert_eq!(cfo.limits.max_depth, 2);
    assert_eq!(cfo.limits.max_turns, 9);
    assert_eq!(
        cfo.limits.max_calls_per_run,
        Limits::DEFAULT_MAX_CALLS_PER_RUN
    );
    assert_eq!(cfo.file, std::path::Path::new("cfo/agent.yaml"));
    assert!(cfo.tools.is_empty());
}

#[test]
fn the_builder_refuses_what_the_file_would_be_refused_for() {
    let (key, message) = invalid(AgentConfig::builder("CFO").build().unwrap_err());
    assert_eq!(key, "name");
    assert!(message.contains("invalid name `CFO`"), "{message}");

    let (key, message) = invalid(
        AgentConfig::builder("cfo")
            .can_call(["cmo", "cfo"])
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "agents.can_call[1]");
    assert!(message.contains("cannot name itself"), "{message}");

    let (key, _) = invalid(
        AgentConfig::builder("cfo")
            .accept_from(["cmo", "cmo"])
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "agents.accept_from[1]");

    let (key, _) = invalid(
        AgentConfig::builder("cfo")
            .show_runs_to(["auditor", "auditor"])
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "agents.show_runs_to[1]");

    let (key, _) = invalid(
        AgentConfig::builder("cfo")
            .env("A=B", "x")
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "env.A=B");

    let (key, message) = invalid(
        AgentConfig::builder("cfo")
            .limits(Limits::default().with_max_depth(17))
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "limits.max_depth");
    assert_eq!(message, "must be between 1 and 16 (got 17)");

    let (key, _) = invalid(
        AgentConfig::builder("cfo")
            .limits(Limits::default().with_max_repeats(1))
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "limits.max_repeats");

    let tree = TreeLimits {
        max_runs: Some(0),
        ..TreeLimits::default()
    };
    let (key, _) = invalid(
        AgentConfig::builder("cfo")
            .limits(Limits::default().with_tree(tree))
            .build()
            .unwrap_err(),
    );
    assert_eq!(key, "limits.tree");
}

#[test]
fn a_set_of_built_agents_is_checked_as_a_loaded_set() {
    let cfo = || {
        AgentConfig::builder("cfo")
            .accept_from(["cmo"])
            .build()
            .unwrap()
    };
    let cmo = AgentConfig::builder("cmo")
        .can_call(["cfo"])
        .build()
        .unwrap();
    let set = AgentSet::from_agents([cfo(), cmo.clone()]).unwrap();
    assert_eq!(set.names(), ["cfo", "cmo"]);
    assert!(set.stamps.is_empty());

    let (key, message) = invalid(AgentSet::from_agents([cfo(), cfo()]).unwrap_err());
    assert_eq!(key, "name");
    assert!(message.contains("duplicate agent name `cfo`"), "{message}");

    let (key, message) = invalid(AgentSet::from_agents([cmo]).unwrap_err());
    assert_eq!(key, "agents.can_call[0]");
    assert!(message.contains("no agent named `cfo`"), "{message}");
}
