//! Tests of the sql tool's declaration as an attacker would try it: a template pasted into the
//! SQL, env keys bound without being listed, a time limit out of range, and a `database:` that
//! reaches outside the agent's folder or at consort's own store files. Every refusal is a
//! located error that says what to write instead.

use std::fs;
use std::path::Path;

use super::{agent_dir, err, parts};
use crate::agent::{AgentConfig, DEFAULT_SQL_TIMEOUT_MS, MAX_SQL_TIMEOUT_MS, ToolKind};
use crate::error::ConfigError;

const LEDGER: &str = "tools:\n  - {name: ledger, kind: sql, database: ledger.db}\n";

#[test]
fn a_template_in_a_sql_step_is_refused_and_says_to_bind() {
    let yaml = format!(
        "name: x\nmodel:\n  script:\n    - tool: {{name: ledger, input: \"SELECT sum(amount) FROM spend WHERE month = '{{input}}'\"}}\n{LEDGER}"
    );
    let (k, l, c, key, msg) = err(&yaml);
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 4, 35, "model.script[0].tool.input")
    );
    assert!(msg.contains("`{input}`"), "{msg}");
    assert!(msg.contains("SQL injection"), "{msg}");
    assert!(msg.contains("write `:input`"), "{msg}");

    // Any placeholder the script model fills pastes text, not just the input.
    let yaml = format!(
        "name: x\nmodel:\n  script:\n    - tool: {{name: ledger, input: \"SELECT 1 -- {{tool.ledger}}\"}}\n{LEDGER}"
    );
    let (k, _, _, key, msg) = err(&yaml);
    assert_eq!((k, key.as_str()), ("invalid", "model.script[0].tool.input"));
    assert!(
        msg.contains("`{tool.ledger}`") && msg.contains("bind_env"),
        "{msg}"
    );
}

#[test]
fn a_template_in_sql_arguments_or_an_invoke_is_refused() {
    let yaml = format!(
        "name: x\nmodel:\n  script:\n    - answer: ok\n    - tool:\n        name: ledger\n        arguments: {{query: \"SELECT '{{reply.cfo}}'\"}}\n{LEDGER}"
    );
    let (k, l, _, key, msg) = err(&yaml);
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 7, "model.script[1].tool.arguments.query")
    );
    assert!(msg.contains("`{reply.cfo}`"), "{msg}");

    let yaml = format!(
        "name: x\nmodel:\n  script:\n    - invoke: {{name: ledger, arguments: {{query: \"SELECT '{{input}}'\"}}}}\n{LEDGER}"
    );
    let (k, l, _, key, _) = err(&yaml);
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 4, "model.script[0].invoke.arguments.query")
    );

    // A templated invoke name may land on the sql tool: its arguments follow the same rule.
    let yaml = format!(
        "name: x\nmodel:\n  script:\n    - invoke: {{name: \"{{last}}\", arguments: {{query: \"SELECT '{{input}}'\"}}}}\n{LEDGER}"
    );
    let (k, _, _, key, _) = err(&yaml);
    assert_eq!(
        (k, key.as_str()),
        ("invalid", "model.script[0].invoke.arguments.query")
    );
}

#[test]
fn templates_stay_where_no_sql_is_written() {
    let t = tempfile::tempdir().unwrap();
    let d = agent_dir(
        t.path(),
        "x",
        &format!(
            "name: x\nmodel:\n  script:\n    - tool: {{name: ledger, input: \"SELECT json('{{\\\"a\\\": 1}}') WHERE :input > ''\"}}\n    - tool: {{name: observe, input: \"{{input}}\"}}\n    - invoke: {{name: other, arguments: {{text: \"{{input}}\"}}}}\n    - answer: \"{{tool.ledger}} for {{input}}\"\n{LEDGER}"
        ),
    );
    fs::write(d.join("ledger.db"), b"").unwrap();
    AgentConfig::load(&d).unwrap();
}

#[test]
fn bind_env_names_keys_of_the_env_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let tools = |bind: &str| {
        format!(
            "name: x\nmodel:\n  script: []\ntools:\n  - {{name: ledger, kind: sql, database: ledger.db, bind_env: [{bind}]}}\nenv:\n  REGION: eu\n  API_TOKEN: secret\n  odd-key: x\n"
        )
    };
    let d = agent_dir(t.path(), "x", &tools("REGION"));
    fs::write(d.join("ledger.db"), b"").unwrap();
    let a = AgentConfig::load(&d).unwrap();
    let ToolKind::Sql {
        bind_env,
        timeout_ms,
        ..
    } = &a.tools[0].kind
    else {
        panic!("not a sql tool");
    };
    assert_eq!(bind_env, &vec!["REGION".to_owned()]);
    assert_eq!(*timeout_ms, DEFAULT_SQL_TIMEOUT_MS);

    let (k, l, c, key, msg) = err(&tools("REGION, SECRET"));
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 5, 71, "tools[0].bind_env[1]")
    );
    assert_eq!(
        msg,
        "`SECRET` is not a key of this agent's `env` (keys: API_TOKEN, REGION, odd-key)"
    );
    let (k, _, _, key, msg) = err(&tools("odd-key"));
    assert_eq!((k, key.as_str()), ("invalid", "tools[0].bind_env[0]"));
    assert!(msg.contains("cannot be bound as `:odd-key`"), "{msg}");
    let (_, _, _, key, msg) = err(&tools("input"));
    assert_eq!(key, "tools[0].bind_env[0]");
    assert!(msg.contains("always bound"), "{msg}");
    let (_, _, _, key, msg) = err(&tools("REGION, REGION"));
    assert_eq!(key, "tools[0].bind_env[1]");
    assert_eq!(msg, "`REGION` is listed twice");
}

#[test]
fn timeout_ms_is_bounded() {
    let tools = |ms: &str| {
        format!(
            "name: x\nmodel:\n  script: []\ntools:\n  - {{name: ledger, kind: sql, database: ledger.db, timeout_ms: {ms}}}\n"
        )
    };
    for ms in ["0".to_owned(), (MAX_SQL_TIMEOUT_MS + 1).to_string()] {
        let (k, l, _, key, msg) = err(&tools(&ms));
        assert_eq!((k, l, key.as_str()), ("invalid", 5, "tools[0].timeout_ms"));
        assert!(msg.contains("out of range; expected 1 to 30000"), "{msg}");
    }
    let t = tempfile::tempdir().unwrap();
    let d = agent_dir(t.path(), "x", &tools("500"));
    fs::write(d.join("ledger.db"), b"").unwrap();
    let a = AgentConfig::load(&d).unwrap();
    let ToolKind::Sql { timeout_ms, .. } = &a.tools[0].kind else {
        panic!("not a sql tool");
    };
    assert_eq!(*timeout_ms, 500);
}

/// Loads an agent `cfo` under `root` whose ledger tool reads `database`, after `prepare` has
/// laid out the folder.
fn load_with_database(
    root: &Path,
    database: &str,
    prepare: impl FnOnce(&Path),
) -> Result<AgentConfig, ConfigError> {
    let d = agent_dir(
        root,
        "cfo",
        &format!(
            "name: cfo\nmodel:\n  script: []\ntools:\n  - name: ledger\n    kind: sql\n    database: \"{database}\"\n"
        ),
    );
    prepare(&d);
    AgentConfig::load(&d)
}

/// The key, line and message of a refused `database:`.
fn database_refusal(result: Result<AgentConfig, ConfigError>) -> String {
    let e = match result {
        Ok(a) => panic!("accepted: {:?}", a.tools),
        Err(e) => e,
    };
    let (k, l, c, key, msg) = parts(&e);
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 7, 15, "tools[0].database")
    );
    assert!(e.file().is_some_and(|f| f.ends_with("cfo/agent.yaml")));
    msg
}

#[test]
fn database_outside_the_agent_folder_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("other")).unwrap();
    fs::write(root.join("other/ledger.db"), b"").unwrap();

    let absolute = root.join("other/ledger.db");
    let msg = database_refusal(load_with_database(
        root,
        &absolute.display().to_string(),
        |_| {},
    ));
    assert!(msg.contains("is an absolute path"), "{msg}");

    let msg = database_refusal(load_with_database(root, "../other/ledger.db", |_| {}));
    assert!(msg.contains("through `..`"), "{msg}");
    let msg = database_refusal(load_with_database(root, "sub/../ledger.db", |d| {
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("ledger.db"), b"").unwrap();
    }));
    assert!(msg.contains("through `..`"), "{msg}");
}

#[cfg(unix)]
#[test]
fn a_symlink_out_of_the_agent_folder_is_refused() {
    use std::os::unix::fs::symlink;

    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("other")).unwrap();
    fs::write(root.join("other/ledger.db"), b"").unwrap();

    let msg = database_refusal(load_with_database(root, "ledger.db", |d| {
        symlink(root.join("other/ledger.db"), d.join("ledger.db")).unwrap();
    }));
    assert!(msg.contains("outside the agent folder"), "{msg}");

    // A linked folder leads out just the same.
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("other")).unwrap();
    fs::write(root.join("other/ledger.db"), b"").unwrap();
    let msg = database_refusal(load_with_database(root, "data/ledger.db", |d| {
        symlink(root.join("other"), d.join("data")).unwrap();
    }));
    assert!(msg.contains("outside the agent folder"), "{msg}");

    // A link that stays inside is fine, and the tool opens its canonical target.
    let t = tempfile::tempdir().unwrap();
    let a = load_with_database(t.path(), "current.db", |d| {
        fs::write(d.join("ledger-2026.db"), b"").unwrap();
        symlink(d.join("ledger-2026.db"), d.join("current.db")).unwrap();
    })
    .unwrap();
    let ToolKind::Sql { database, .. } = &a.tools[0].kind else {
        panic!("not a sql tool");
    };
    assert_eq!(database, &a.dir.join("ledger-2026.db"));
}

#[test]
fn consort_store_files_are_refused() {
    for name in [
        "runs.db",
        "runs.db-wal",
        "runs.db-shm",
        "outbox.db",
        "data/RUNS.DB",
    ] {
        let t = tempfile::tempdir().unwrap();
        let msg = database_refusal(load_with_database(t.path(), name, |d| {
            fs::create_dir_all(d.join("data")).unwrap();
            fs::write(d.join(name), b"").unwrap();
        }));
        assert!(msg.contains("consort's own store files"), "{name}: {msg}");
    }
}

#[cfg(unix)]
#[test]
fn a_symlink_to_a_store_file_is_refused() {
    use std::os::unix::fs::symlink;

    let t = tempfile::tempdir().unwrap();
    let msg = database_refusal(load_with_database(t.path(), "ledger.db", |d| {
        fs::create_dir_all(d.join("data/agents/cfo")).unwrap();
        fs::write(d.join("data/agents/cfo/runs.db"), b"").unwrap();
        symlink(d.join("data/agents/cfo/runs.db"), d.join("ledger.db")).unwrap();
    }));
    assert!(msg.contains("consort's own store files"), "{msg}");
}
