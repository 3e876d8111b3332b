//! Tests of a well-formed `agent.yaml`: what each key becomes, the defaults of optional keys,
//! and the `limits:` bounds. Malformed files are `errors`'s.

use std::fs;

use super::{CFO, agent_dir, err, load_text, simple};
use crate::agent::{
    AGENT_FILE, AgentConfig, Approval, CallStep, DEFAULT_SQL_TIMEOUT_MS, Limits, ModelConfig,
    ScriptStep, ToolConfig, ToolKind, ToolStep, TreeLimits,
};
use crate::error::ConfigError;

#[test]
fn loads_the_full_example() {
    let t = tempfile::tempdir().unwrap();
    let d = agent_dir(t.path(), "cfo", CFO);
    fs::write(d.join("ledger.db"), b"").unwrap();
    let a = AgentConfig::load(&d).unwrap();
    let dir = fs::canonicalize(&d).unwrap();
    assert_eq!(a.name, "cfo");
    assert_eq!(
        a.description,
        "Answers questions about spend from the ledger"
    );
    assert_eq!(a.can_call, vec!["analyst"]);
    assert_eq!(a.accept_from, vec!["cmo"]);
    assert_eq!(a.dir, dir);
    assert_eq!(a.file, dir.join(AGENT_FILE));
    assert_eq!(a.env.get("LEDGER_REGION").map(String::as_str), Some("eu"));
    assert_eq!(
        a.tools,
        vec![ToolConfig {
            name: "ledger".into(),
            description: "Read-only SQL over the finance ledger".into(),
            kind: ToolKind::Sql {
                database: dir.join("ledger.db"),
                bind_env: vec!["LEDGER_REGION".into()],
                timeout_ms: DEFAULT_SQL_TIMEOUT_MS,
            },
            approval: Approval::Required,
            auth: None,
            guard: None,
        }]
    );
    let ModelConfig::Script { steps } = &a.model else {
        panic!("a script model: {:?}", a.model)
    };
    assert_eq!(
        steps,
        &vec![
            ScriptStep::Tool(ToolStep {
                name: "ledger".into(),
                input:
                    "SELECT sum(amount) FROM spend WHERE month = :input AND region = :LEDGER_REGION"
                        .into(),
                arguments: None,
            }),
            ScriptStep::Call(vec![
                CallStep {
                    agent: "analyst".into(),
                    input: "check {input}".into(),
                    count: 1,
                    wait_s: None
                },
                CallStep {
                    agent: "analyst".into(),
                    input: "x".into(),
                    count: 3,
                    wait_s: None
                },
            ]),
            ScriptStep::Check("{call.analyst}".into()),
            ScriptStep::Answer("August spend: {tool.ledger}".into()),
        ]
    );
}

#[test]
fn optional_keys_default() {
    let a = load_text(b"name: solo\nmodel:\n  script:\n    - answer: hi\n").unwrap();
    assert_eq!(a.description, "");
    assert!(a.can_call.is_empty() && a.accept_from.is_empty() && a.tools.is_empty());
    assert!(a.env.is_empty());
    let a = load_text(
            b"name: solo\nagents:\nmodel:\n  script:\n    - answer: hi\ntools:\n  - {name: t, kind: sql, database: ledger.db}\n",
        )
        .unwrap();
    assert_eq!(a.tools[0].approval, Approval::None);
    assert_eq!(a.tools[0].description, "");
}

#[test]
fn io_error_for_missing_folder_or_file() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nope");
    assert!(
        matches!(AgentConfig::load(&missing), Err(ConfigError::Io { path, .. }) if path == missing)
    );
    let empty = t.path().join("empty");
    fs::create_dir(&empty).unwrap();
    assert!(
        matches!(AgentConfig::load(&empty), Err(ConfigError::Io { path, .. }) if path.ends_with("empty/agent.yaml"))
    );
}

#[test]
fn limits_default_and_bounded() {
    let plain = load_text(simple("x", &[], &[]).as_bytes()).unwrap();
    assert_eq!(plain.limits, Limits::default());
    assert_eq!(
        (plain.limits.max_depth, plain.limits.max_calls_per_run),
        (4, 25)
    );
    let set = load_text(
        b"name: x\nlimits:\n  max_depth: 2\n  max_calls_per_run: 1000\nmodel:\n  script: []\n",
    )
    .unwrap();
    assert_eq!(
        set.limits,
        Limits {
            max_depth: 2,
            max_calls_per_run: 1000,
            ..Limits::default()
        }
    );
    let (kind, line, _, key, message) =
        err("name: x\nlimits:\n  max_depth: 17\nmodel:\n  script: []\n");
    assert_eq!(
        (kind, line, key.as_str()),
        ("invalid", 3, "limits.max_depth")
    );
    assert_eq!(message, "must be between 1 and 16 (got 17)");
    let (_, line, _, key, _) =
        err("name: x\nlimits:\n  max_calls_per_run: 0\nmodel:\n  script: []\n");
    assert_eq!((line, key.as_str()), (3, "limits.max_calls_per_run"));
    let (_, _, _, _, message) = err("name: x\nlimits:\n  depth: 3\nmodel:\n  script: []\n");
    assert!(message.contains("unknown key `depth`"), "{message}");
}

#[test]
fn run_limits_default_and_bounded() {
    let plain = load_text(simple("x", &[], &[]).as_bytes()).unwrap();
    assert_eq!(
        (
            plain.limits.max_turns,
            plain.limits.max_tokens,
            plain.limits.max_repeats
        ),
        (64, None, 3)
    );
    let set = load_text(
        b"name: x\nlimits:\n  max_turns: 1000\n  max_tokens: 100000000\n  max_repeats: 2\nmodel:\n  script: []\n",
    )
    .unwrap();
    assert_eq!(
        set.limits,
        Limits {
            max_turns: 1000,
            max_tokens: Some(100_000_000),
            max_repeats: 2,
            ..Limits::default()
        }
    );
    let low = load_text(
        b"name: x\nlimits: {max_turns: 1, max_tokens: 1, max_repeats: 100}\nmodel:\n  script: []\n",
    )
    .unwrap();
    assert_eq!(
        (
            low.limits.max_turns,
            low.limits.max_tokens,
            low.limits.max_repeats
        ),
        (1, Some(1), 100)
    );
    // `null` is no budget, as the README's block shows the default.
    let unbounded =
        load_text(b"name: x\nlimits: {max_tokens: null}\nmodel:\n  script: []\n").unwrap();
    assert_eq!(unbounded.limits, Limits::default());
    for (yaml, line, key, message) in [
        (
            "name: x\nlimits:\n  max_turns: 0\nmodel:\n  script: []\n",
            3,
            "limits.max_turns",
            "must be between 1 and 1000 (got 0)",
        ),
        (
            "name: x\nlimits:\n  max_depth: 2\n  max_turns: 1001\nmodel:\n  script: []\n",
            4,
            "limits.max_turns",
            "must be between 1 and 1000 (got 1001)",
        ),
        (
            "name: x\nlimits:\n  max_tokens: 0\nmodel:\n  script: []\n",
            3,
            "limits.max_tokens",
            "must be between 1 and 100000000 (got 0)",
        ),
        (
            "name: x\nlimits:\n  max_tokens: 100000001\nmodel:\n  script: []\n",
            3,
            "limits.max_tokens",
            "must be between 1 and 100000000 (got 100000001)",
        ),
        (
            "name: x\nlimits:\n  max_repeats: 1\nmodel:\n  script: []\n",
            3,
            "limits.max_repeats",
            "must be between 2 and 100 (got 1)",
        ),
        (
            "name: x\nlimits:\n  max_repeats: 101\nmodel:\n  script: []\n",
            3,
            "limits.max_repeats",
            "must be between 2 and 100 (got 101)",
        ),
    ] {
        let (kind, at, _, at_key, said) = err(yaml);
        assert_eq!(
            (kind, at, at_key.as_str(), said.as_str()),
            ("invalid", line, key, message),
            "{yaml}"
        );
    }
    let (_, line, _, key, message) =
        err("name: x\nlimits:\n  max_tokens: -5\nmodel:\n  script: []\n");
    assert_eq!((line, key.as_str()), (3, "limits.max_tokens"));
    assert_eq!(message, "expected a whole number, 0 or more, found `-5`");
}

#[test]
fn limits_serialized_before_the_run_limits_still_read() {
    let old: Limits = serde_json::from_str(r#"{"max_depth":2,"max_calls_per_run":7}"#).unwrap();
    assert_eq!(
        old,
        Limits {
            max_depth: 2,
            max_calls_per_run: 7,
            ..Limits::default()
        }
    );
    let limits = Limits {
        max_tokens: Some(5000),
        ..Limits::default()
    };
    let text = serde_json::to_string(&limits).unwrap();
    assert_eq!(serde_json::from_str::<Limits>(&text).unwrap(), limits);
}

#[test]
fn tree_limits_default_to_none_and_are_bounded() {
    let plain = load_text(simple("x", &[], &[]).as_bytes()).unwrap();
    assert!(plain.limits.tree.is_unbounded());
    let set = load_text(
        b"name: x\nlimits:\n  tree:\n    max_runs: 10\n    max_tokens: 50000\n    max_wall_s: 300\nmodel:\n  script: []\n",
    )
    .unwrap();
    assert_eq!(
        set.limits.tree,
        TreeLimits {
            max_runs: Some(10),
            max_tokens: Some(50_000),
            max_wall_s: Some(300),
        }
    );
    let one = load_text(b"name: x\nlimits: {tree: {max_runs: 1}}\nmodel:\n  script: []\n").unwrap();
    assert_eq!(
        one.limits.tree,
        TreeLimits {
            max_runs: Some(1),
            ..TreeLimits::default()
        }
    );
    for (yaml, line, key, message) in [
        (
            "name: x\nlimits:\n  tree:\n    max_runs: 0\nmodel:\n  script: []\n",
            4,
            "limits.tree.max_runs",
            "must be between 1 and 100000 (got 0)",
        ),
        (
            "name: x\nlimits:\n  max_turns: 3\n  tree:\n    max_tokens: 1000000001\nmodel:\n  script: []\n",
            5,
            "limits.tree.max_tokens",
            "must be between 1 and 1000000000 (got 1000000001)",
        ),
        (
            "name: x\nlimits:\n  tree:\n    max_runs: 2\n    max_wall_s: 604801\nmodel:\n  script: []\n",
            5,
            "limits.tree.max_wall_s",
            "must be between 1 and 604800 (got 604801)",
        ),
    ] {
        let (kind, at, _, at_key, said) = err(yaml);
        assert_eq!(
            (kind, at, at_key.as_str(), said.as_str()),
            ("invalid", line, key, message),
            "{yaml}"
        );
    }
    let (_, line, _, key, message) =
        err("name: x\nlimits:\n  tree:\n    max_calls: 3\nmodel:\n  script: []\n");
    assert!(message.contains("unknown key `max_calls`"), "{message}");
    assert_eq!(line, 4, "{key}");
}

#[test]
fn a_request_budget_only_tightens_and_is_checked_against_the_same_bounds() {
    let agent = TreeLimits {
        max_runs: Some(10),
        max_tokens: None,
        max_wall_s: Some(300),
    };
    let request = TreeLimits {
        max_runs: Some(50),
        max_tokens: Some(2_000),
        max_wall_s: Some(60),
    };
    assert_eq!(
        agent.tightened(request),
        TreeLimits {
            max_runs: Some(10),
            max_tokens: Some(2_000),
            max_wall_s: Some(60),
        }
    );
    assert_eq!(agent.tightened(TreeLimits::default()), agent);
    assert_eq!(TreeLimits::default().tightened(request), request);
    assert_eq!(request.check(), Ok(()));
    assert_eq!(
        TreeLimits {
            max_runs: Some(0),
            ..TreeLimits::default()
        }
        .check(),
        Err("max_runs must be between 1 and 100000 (got 0)".to_owned())
    );
    assert_eq!(
        TreeLimits {
            max_wall_s: Some(TreeLimits::MAX_WALL_S_BOUND + 1),
            ..TreeLimits::default()
        }
        .check(),
        Err("max_wall_s must be between 1 and 604800 (got 604801)".to_owned())
    );
    // Limits serialized before `tree` existed read no tree budget.
    let old: Limits = serde_json::from_str(r#"{"max_depth":2,"max_calls_per_run":7}"#).unwrap();
    assert!(old.tree.is_unbounded());
}
