//! Tests of malformed `agent.yaml` files: every error is typed and names the file, line,
//! column and key it is about, and no input makes the loader panic.

use super::{err, load_text, parts};
use crate::agent::tools::RESERVED_TOOL_NAMES;
use crate::agent::{CallStep, ModelConfig, ScriptStep};

#[test]
fn unknown_keys_are_schema_errors_with_the_allowed_ones() {
    let (k, l, c, key, msg) = err("name: cfo\nagents:\n  can_cal: [x]\nmodel:\n  script: []\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 3, 3, "agents.can_cal"));
    assert_eq!(
        msg,
        "unknown key `can_cal` in `agents`; expected one of `can_call`, `accept_from`, `show_runs_to`"
    );

    let (k, l, c, key, msg) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - name: t\n    kind: sql\n    databse: a\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 7, 5, "tools[0].databse")
    );
    assert!(
        msg.contains("expected one of `name`, `description`, `kind`, `database`, `approval`"),
        "{msg}"
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script: []\nextra: 1\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 4, 1, "extra"));

    let (k, l, c, key, msg) =
        err("name: x\nmodel:\n  script:\n    - call: [{agent: a, input: b, cnt: 2}]\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 4, 35, "model.script[0].call[0].cnt")
    );
    assert!(msg.contains("`agent`, `input`, `count`"), "{msg}");
}

#[test]
fn unknown_variants_name_the_allowed_ones() {
    let (k, l, c, key, msg) = err("name: x\nmodel:\n  script:\n  - answr: hi\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 4, 5, "model.script[0].answr")
    );
    assert!(msg.contains("`answer`, `call`, `tool`, `check`"), "{msg}");

    let (k, l, c, key, msg) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - name: t\n    kind: sqll\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 6, 11, "tools[0].kind"));
    assert_eq!(msg, "unknown value `sqll`; expected one of `sql`, `mcp`");

    let (k, l, c, key, _) = err("name: x\nmodel:\n  gpt: {}\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 3, 3, "model.gpt"));

    let (k, l, c, key, msg) = err(
        "name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: ledger.db, approval: maybe}\n",
    );
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 5, 57, "tools[0].approval")
    );
    assert!(msg.contains("`none`, `required`"), "{msg}");
}

#[test]
fn missing_required_keys_point_at_their_mapping() {
    let (k, l, c, key, msg) = err("name: cfo\nagents:\n  can_call: [x]\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 1, 1, "model"));
    assert_eq!(msg, "missing required key `model` at the top level");

    let (k, l, c, key, _) = err("description: d\nmodel:\n  script: []\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 1, 1, "name"));

    let (k, l, c, key, msg) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - name: t\n    description: d\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 5, 5, "tools[0].kind"));
    assert_eq!(msg, "missing required key `kind` in `tools[0]`");

    let (k, l, c, key, _) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - name: t\n    kind: sql\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 5, 5, "tools[0].database")
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script:\n    - call: [{agent: a}]\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 4, 14, "model.script[0].call[0].input")
    );
}

#[test]
fn wrong_types_are_schema_errors() {
    let (k, l, c, key, msg) = err("name: [1]\nmodel:\n  script: []\n");
    assert_eq!(
        (k, l, c, key.as_str(), msg.as_str()),
        ("schema", 1, 7, "name", "expected a string, found a list")
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script: []\nagents:\n  can_call: a\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 5, 13, "agents.can_call")
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script: []\nenv:\n  A: [1]\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 5, 6, "env.A"));

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script:\n    - answer: null\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("schema", 4, 15, "model.script[0].answer")
    );

    // Huge and negative numbers.
    for n in ["99999999999999999999999", "-3", "1e400", "2.5"] {
        let (k, l, c, key, _) = err(&format!(
            "name: x\nmodel:\n  script:\n    - call: [{{agent: a, input: b, count: {n}}}]\n"
        ));
        assert_eq!(
            (k, l, c, key.as_str()),
            ("schema", 4, 42, "model.script[0].call[0].count"),
            "{n}"
        );
    }

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script: []\n  other: []\n");
    assert_eq!((k, l, c, key.as_str()), ("schema", 4, 3, "model.other"));

    let (k, l, c, key, msg) = err("name: x\nmodel:\n  script: []\nname: y\n");
    assert_eq!(
        (k, l, c, key.as_str(), msg.as_str()),
        ("schema", 4, 1, "name", "duplicate key `name`")
    );
}

#[test]
fn odd_documents_never_panic() {
    let (k, l, c, key, _) = err("");
    assert_eq!((k, l, c, key.as_str()), ("schema", 1, 1, ""));
    let (k, l, c, _, _) = err("# only a comment\n");
    assert_eq!((k, l, c), ("schema", 1, 1));
    let (k, l, c, _, msg) = err("- a\n- b\n");
    assert_eq!((k, l, c), ("schema", 1, 1));
    assert!(msg.contains("found a list"), "{msg}");
    let (k, ..) = err("just a string\n");
    assert_eq!(k, "schema");
    let (k, l, c, _, _) = err("name: 'x\n");
    assert_eq!((k, l, c), ("syntax", 1, 7));
    let (k, l, c, _, msg) = err("name: x\nmodel:\n\tscript: []\n");
    assert_eq!((k, l), ("syntax", 3));
    assert!(msg.contains("tab"), "{msg} at {c}");
    let (k, l, ..) = err("name: x\nmodel:\n  script: []\n---\nname: y\n");
    assert_eq!((k, l), ("syntax", 5));
    let (k, ..) = err("{{{{");
    assert_eq!(k, "syntax");
    let (k, ..) = err("name: x\nmodel:\n  script: []\nx: *nope\n");
    assert_eq!(k, "syntax");
    // Alias bombs are refused by serde-saphyr's budget, not expanded.
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..12 {
        bomb.push_str(&format!(
            "b{i}: &b{i} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
            p = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            }
        ));
    }
    assert!(load_text(bomb.as_bytes()).is_err());

    let e = load_text(b"name: \xff\xfe\x00garbage").unwrap_err();
    assert_eq!(parts(&e).0, "syntax");
    assert_eq!(parts(&e).1..=parts(&e).2, 1..=7);
    for junk in [
        &[0u8, 1, 2, 3, 0x80, 0x81][..],
        b"\x00\x00\x00",
        b"\t\t\t",
        b":",
        b"name:",
        b"?",
        b"!!binary ###",
    ] {
        assert!(load_text(junk).is_err(), "{junk:?}");
    }
}

#[test]
fn semantic_errors_point_at_the_value() {
    let (k, l, c, key, msg) = err("name: Bad Name\nmodel:\n  script: []\n");
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
    assert!(msg.contains("a-z"), "{msg}");
    let long = "a".repeat(65);
    let (k, l, c, key, _) = err(&format!("name: {long}\nmodel:\n  script: []\n"));
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
    let (k, l, c, key, _) = err("name: \"\"\nmodel:\n  script: []\n");
    assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));

    let (k, l, c, key, msg) = err("name: x\nagents:\n  can_call: [a, x]\nmodel:\n  script: []\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 17, "agents.can_call[1]")
    );
    assert!(msg.contains("itself"), "{msg}");
    let (k, l, c, key, _) =
        err("name: x\nagents:\n  accept_from:\n    - a\n    - x\nmodel:\n  script: []\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 5, 7, "agents.accept_from[1]")
    );
    let (k, l, c, key, msg) = err("name: x\nagents:\n  can_call: [a, a]\nmodel:\n  script: []\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 17, "agents.can_call[1]")
    );
    assert!(msg.contains("twice"), "{msg}");
    let (k, l, c, key, _) = err("name: x\nagents:\n  can_call: [A]\nmodel:\n  script: []\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 3, 14, "agents.can_call[0]")
    );

    let tools =
        "name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: ledger.db}\n";
    let (k, l, c, key, msg) = err(&format!(
        "{tools}  - {{name: t, kind: sql, database: ledger.db}}\n"
    ));
    assert_eq!((k, l, c, key.as_str()), ("invalid", 6, 12, "tools[1].name"));
    assert_eq!(msg, "duplicate tool name `t`");
    for reserved in RESERVED_TOOL_NAMES {
        let (k, l, c, key, _) = err(&format!(
            "{tools}  - {{name: {reserved}, kind: sql, database: ledger.db}}\n"
        ));
        assert_eq!((k, l, c, key.as_str()), ("invalid", 6, 12, "tools[1].name"));
    }
    let (k, l, c, key, msg) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: nope.db}\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 5, 36, "tools[0].database")
    );
    assert!(
        msg.contains("nope.db") && msg.contains("does not exist"),
        "{msg}"
    );
    // A folder is not a database file.
    let (k, ..) =
        err("name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: .}\n");
    assert_eq!(k, "invalid");

    for (n, col) in [("0", 42), ("1001", 42)] {
        let (k, l, c, key, msg) = err(&format!(
            "name: x\nmodel:\n  script:\n    - call: [{{agent: a, input: b, count: {n}}}]\n"
        ));
        assert_eq!(
            (k, l, c, key.as_str()),
            ("invalid", 4, col, "model.script[0].call[0].count")
        );
        assert!(msg.contains("1 to 1000"), "{msg}");
    }
    let a =
        load_text(b"name: x\nmodel:\n  script:\n    - call: [{agent: a, input: b, count: 1000}]\n")
            .unwrap();
    assert_eq!(
        a.model,
        ModelConfig::Script {
            steps: vec![ScriptStep::Call(vec![CallStep {
                agent: "a".into(),
                input: "b".into(),
                count: 1000,
                wait_s: None
            }])]
        }
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script:\n    - call: []\n");
    assert_eq!(
        (k, l, c, key.as_str()),
        ("invalid", 4, 13, "model.script[0].call")
    );

    let (k, l, c, key, _) = err("name: x\nmodel:\n  script: []\nenv:\n  \"A=B\": c\n");
    assert_eq!((k, l, c, key.as_str()), ("invalid", 5, 3, "env.A=B"));
}

#[test]
fn display_names_file_line_column_key() {
    let e = load_text(b"name: x\nagents:\n  can_call: [a, x]\nmodel:\n  script: []\n").unwrap_err();
    let s = e.to_string();
    assert!(
        s.ends_with(
            "/a/agent.yaml:3:17: agents.can_call[1]: an agent cannot name itself (`x`) as a peer"
        ),
        "{s}"
    );
}
