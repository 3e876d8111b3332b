//! Tests of `a2a_agents:`: a declaration read with its defaults, every malformed entry named by
//! file, line and key, and the set's checks (a name of the fleet refused; `can_call` may name a
//! declared A2A agent, `accept_from` may not).

use super::{agent_dir, err, load_text, parts};
use crate::agent::AgentSet;
use crate::agent::a2a::{DEFAULT_A2A_TIMEOUT_MS, MAX_A2A_TIMEOUT_MS};

const CALLER: &str = "\
name: planner
agents:
  can_call: [forecaster]
a2a_agents:
  - name: forecaster
    card: http://127.0.0.1:9999/.well-known/agent-card.json
    token_env: FORECASTER_TOKEN
    timeout_ms: 5000
  - name: translator
    card: https://translate.example/.well-known/agent-card.json
env:
  FORECASTER_TOKEN: t0ken
model:
  script:
    - answer: hi
";

#[test]
fn a_declaration_is_read_with_its_defaults() {
    let a = load_text(CALLER.as_bytes()).unwrap();
    assert_eq!(a.a2a_agents.len(), 2);
    let f = a.a2a_agent("forecaster").unwrap();
    assert_eq!(f.card, "http://127.0.0.1:9999/.well-known/agent-card.json");
    assert_eq!(f.token_env.as_deref(), Some("FORECASTER_TOKEN"));
    assert_eq!(f.timeout_ms, 5000);
    let t = a.a2a_agent("translator").unwrap();
    assert_eq!(t.token_env, None);
    assert_eq!(t.timeout_ms, DEFAULT_A2A_TIMEOUT_MS);
    assert!(a.a2a_agent("cfo").is_none());
    // Without the section there are none.
    let plain = load_text(b"name: x\nmodel: {script: [{answer: hi}]}\n").unwrap();
    assert!(plain.a2a_agents.is_empty());
}

#[test]
fn malformed_entries_name_file_line_and_key() {
    let (k, l, _, key, msg) = err(&CALLER.replace("    token_env:", "    tokn_env:"));
    assert_eq!(
        (k, l, key.as_str()),
        ("schema", 7, "a2a_agents[0].tokn_env")
    );
    assert!(
        msg.contains("`name`, `card`, `token_env`, `timeout_ms`"),
        "{msg}"
    );

    let (k, l, _, key, msg) = err(&CALLER.replace(
        "  - name: translator\n    card: https://translate.example/.well-known/agent-card.json\n",
        "  - name: translator\n",
    ));
    assert_eq!((k, key.as_str()), ("schema", "a2a_agents[1].card"), "{msg}");
    assert!(msg.contains("card"), "{msg}");
    assert_eq!(l, 9);

    let (k, l, _, key, msg) = err(&CALLER.replace("https://translate", "ftp://translate"));
    assert_eq!((k, l, key.as_str()), ("invalid", 10, "a2a_agents[1].card"));
    assert!(msg.contains("not an http:// or https:// URL"), "{msg}");

    let (k, l, _, key, msg) =
        err(&CALLER.replace("token_env: FORECASTER_TOKEN", "token_env: NOPE"));
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 7, "a2a_agents[0].token_env")
    );
    assert!(
        msg.contains("`NOPE` is not a key of this agent's env"),
        "{msg}"
    );
    assert!(msg.contains("FORECASTER_TOKEN"), "{msg}");

    let (k, l, _, key, msg) = err(&CALLER.replace("timeout_ms: 5000", "timeout_ms: 0"));
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 8, "a2a_agents[0].timeout_ms")
    );
    assert!(
        msg.contains(&format!("between 100 and {MAX_A2A_TIMEOUT_MS}")),
        "{msg}"
    );

    let (k, l, _, key, msg) = err(&CALLER.replace("name: translator", "name: forecaster"));
    assert_eq!((k, l, key.as_str()), ("invalid", 9, "a2a_agents[1].name"));
    assert!(msg.contains("declared twice"), "{msg}");

    let (k, _, _, key, msg) = err(&CALLER.replace("name: translator", "name: planner"));
    assert_eq!((k, key.as_str()), ("invalid", "a2a_agents[1].name"));
    assert!(msg.contains("own name"), "{msg}");

    let (k, _, _, key, _) = err(&CALLER.replace("name: translator", "name: Bad Name"));
    assert_eq!((k, key.as_str()), ("invalid", "a2a_agents[1].name"));

    let (k, _, _, key, _) = err(&CALLER.replace(
        "  - name: forecaster\n    card:",
        "  - name: forecaster\n    card: [x]\n    cardx:",
    ));
    assert_eq!(k, "schema", "{key}");
}

#[test]
fn the_set_refuses_a_fleet_name_and_knows_declared_a2a_agents() {
    let t = tempfile::tempdir().unwrap();
    let fleet = t.path().join("agents");
    agent_dir(&fleet, "planner", CALLER);
    let set = AgentSet::load(std::slice::from_ref(&fleet)).unwrap();
    assert_eq!(set.names(), vec!["planner"]);

    // A fleet agent of the same name: refused, pointing at the A2A entry.
    agent_dir(
        &fleet,
        "translator",
        "name: translator\nmodel: {script: [{answer: hi}]}\n",
    );
    let e = AgentSet::load(std::slice::from_ref(&fleet)).unwrap_err();
    let (k, l, _, key, msg) = parts(&e);
    assert_eq!((k, l, key.as_str()), ("invalid", 9, "a2a_agents[1].name"));
    assert!(msg.contains("already an agent of the fleet"), "{msg}");
    assert!(e.to_string().contains("planner"), "{e}");
    std::fs::remove_dir_all(fleet.join("translator")).unwrap();

    // An agent another host serves counts too.
    let e = AgentSet::load_with_peers(std::slice::from_ref(&fleet), &["forecaster".into()])
        .unwrap_err();
    assert_eq!(parts(&e).3, "a2a_agents[0].name");

    // accept_from names agents of the fleet only.
    agent_dir(
        &fleet,
        "planner",
        &CALLER.replace(
            "  can_call: [forecaster]",
            "  can_call: [forecaster]\n  accept_from: [translator]",
        ),
    );
    let e = AgentSet::load(std::slice::from_ref(&fleet)).unwrap_err();
    assert_eq!(parts(&e).3, "agents.accept_from[0]");

    // So does show_runs_to: an A2A agent never reads a run through the directory.
    agent_dir(
        &fleet,
        "planner",
        &CALLER.replace(
            "  can_call: [forecaster]",
            "  can_call: [forecaster]\n  show_runs_to: [translator]",
        ),
    );
    let e = AgentSet::load(std::slice::from_ref(&fleet)).unwrap_err();
    assert_eq!(parts(&e).3, "agents.show_runs_to[0]");

    // can_call of a name declared nowhere is still an error.
    agent_dir(
        &fleet,
        "planner",
        &CALLER.replace("can_call: [forecaster]", "can_call: [oracle]"),
    );
    let e = AgentSet::load(std::slice::from_ref(&fleet)).unwrap_err();
    assert_eq!(parts(&e).3, "agents.can_call[0]");

    // A reload applies the same checks.
    agent_dir(&fleet, "planner", CALLER);
    let set = AgentSet::load(std::slice::from_ref(&fleet)).unwrap();
    agent_dir(
        &fleet,
        "planner",
        &CALLER.replace("timeout_ms: 5000", "timeout_ms: 7000"),
    );
    assert_eq!(
        set.reload_one("planner")
            .unwrap()
            .a2a_agent("forecaster")
            .map(|a| a.timeout_ms),
        Some(7000)
    );
    let e = set
        .reload_one_with_peers("planner", &["translator".into()])
        .unwrap_err();
    assert_eq!(parts(&e).3, "a2a_agents[1].name");
}
