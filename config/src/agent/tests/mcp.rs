//! Tests of the `kind: mcp` declaration: both transports as written, and each mistake a user
//! makes located at its file, line and key with a sentence that says what to write instead.

use super::{err, load_text};
use crate::agent::{
    DEFAULT_MCP_CONNECT_TIMEOUT_MS, DEFAULT_MCP_TIMEOUT_MS, McpServerConfig, McpTransport, ToolKind,
};

const HEAD: &str = "name: x\nmodel:\n  script:\n    - answer: ok\nenv:\n  TZ_TOKEN: secret\n  REGION: eu\ntools:\n";

fn mcp(tools: &str) -> McpServerConfig {
    let a = load_text(format!("{HEAD}{tools}").as_bytes()).unwrap();
    match &a.tools[0].kind {
        ToolKind::Mcp(m) => m.clone(),
        other => panic!("not an mcp tool: {other:?}"),
    }
}

#[test]
fn both_transports_load() {
    let m = mcp(
        "  - name: time\n    kind: mcp\n    command: [python, -m, mcp_server_time, --local-timezone=UTC]\n    env_keys: [REGION]\n",
    );
    assert_eq!(
        m,
        McpServerConfig {
            transport: McpTransport::Command {
                program: "python".into(),
                args: vec![
                    "-m".into(),
                    "mcp_server_time".into(),
                    "--local-timezone=UTC".into()
                ],
            },
            env_keys: vec!["REGION".into()],
            timeout_ms: DEFAULT_MCP_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_MCP_CONNECT_TIMEOUT_MS,
        }
    );
    let m = mcp(
        "  - {name: remote, kind: mcp, url: \"http://127.0.0.1:8931/mcp\", token_env: TZ_TOKEN, timeout_ms: 500}\n",
    );
    assert_eq!(
        m.transport,
        McpTransport::Http {
            url: "http://127.0.0.1:8931/mcp".into(),
            token_env: Some("TZ_TOKEN".into()),
        }
    );
    assert_eq!(m.timeout_ms, 500);
    let m = mcp("  - {name: t, kind: mcp, command: [x], connect_timeout_ms: 90000}\n");
    assert_eq!(m.connect_timeout_ms, 90_000);
}

#[test]
fn mistakes_name_line_and_key() {
    let cases: &[(&str, &str, u64, &str, &str)] = &[
        (
            "  - {name: time, kind: mcp}\n",
            "schema",
            9,
            "tools[0].command",
            "`command` or `url`",
        ),
        (
            "  - name: time\n    kind: mcp\n    command: [python]\n    url: http://127.0.0.1:1/mcp\n",
            "invalid",
            12,
            "tools[0].url",
            "mutually exclusive",
        ),
        (
            "  - {name: time, kind: mcp, command: []}\n",
            "invalid",
            9,
            "tools[0].command",
            "`command` is empty",
        ),
        (
            "  - name: time\n    kind: mcp\n    command: [python]\n    env_keys: [REGION, SECRET]\n",
            "invalid",
            12,
            "tools[0].env_keys[1]",
            "not a key of this agent's `env`",
        ),
        (
            "  - {name: time, kind: mcp, url: \"https://example.com/mcp\"}\n",
            "invalid",
            9,
            "tools[0].url",
            "https is not supported",
        ),
        (
            "  - name: time\n    kind: mcp\n    command: [python]\n    token_env: TZ_TOKEN\n",
            "invalid",
            12,
            "tools[0].token_env",
            "goes with `url`",
        ),
        (
            "  - {name: time, kind: mcp, command: [python], database: ledger.db}\n",
            "schema",
            9,
            "tools[0].database",
            "kind `sql`",
        ),
        (
            "  - {name: ledger, kind: sql, database: ledger.db, command: [python]}\n",
            "schema",
            9,
            "tools[0].command",
            "kind `mcp`",
        ),
        (
            "  - {name: my__time, kind: mcp, command: [python]}\n",
            "invalid",
            9,
            "tools[0].name",
            "may not contain `__`",
        ),
        (
            "  - {name: time, kind: mcp, command: [python], timeout_ms: 0}\n",
            "invalid",
            9,
            "tools[0].timeout_ms",
            "out of range",
        ),
        (
            "  - {name: time, kind: mcp, command: [python], connect_timeout_ms: 300001}\n",
            "invalid",
            9,
            "tools[0].connect_timeout_ms",
            "out of range",
        ),
        (
            "  - {name: ledger, kind: sql, database: ledger.db, connect_timeout_ms: 5}\n",
            "schema",
            9,
            "tools[0].connect_timeout_ms",
            "kind `mcp`",
        ),
        (
            "  - {name: time, kind: mcp, command: [python], comand: [x]}\n",
            "schema",
            9,
            "tools[0].comand",
            "",
        ),
    ];
    for (tools, kind, line, key, words) in cases {
        let (k, l, _, got_key, msg) = err(&format!("{HEAD}{tools}"));
        assert_eq!(
            (k, l, got_key.as_str()),
            (*kind, *line, *key),
            "{tools}: {msg}"
        );
        assert!(msg.contains(words), "{tools}: {msg}");
    }
}
