//! Tests of a well-formed `agent.yaml`: what each key becomes, the defaults of optional keys,
//! and the `limits:` bounds. Malformed files are `errors`'s.

use std::fs;

use super::{CFO, agent_dir, err, load_text, simple};
use crate::agent::{
    AGENT_FILE, AgentConfig, Approval, CallStep, DEFAULT_SQL_TIMEOUT_MS, Limits, ModelConfig,
    ScriptStep, ToolConfig, ToolKind, ToolStep,
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
            max_calls_per_run: 1000
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
