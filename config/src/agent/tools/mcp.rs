//! The keys of a `kind: mcp` tool entry: an MCP server whose tools an agent uses.
//!
//! This module owns [`McpServerConfig`] and [`McpTransport`] and the checks of their keys: one
//! transport (`command:` to start a program that speaks MCP on its stdio, or `url:` for a
//! streamable HTTP endpoint, never both), the env keys the program may see (`env_keys:`, keys of
//! the agent's `env` only) or the one that holds the bearer token (`token_env:`), and the time
//! limits of one use (`timeout_ms:`) and of starting or reaching the server
//! (`connect_timeout_ms:`). It must not start the program, open a connection or ask
//! the server anything: which tools a server has is known only when the agent uses it.

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// What joins a server's declared name and one of its tool names into the name the model sees
/// (`time__get_current_time`): tool names allow only letters, digits, `_` and `-`, so a `.` is
/// not available, and a declared server name may not hold this separator itself.
pub const MCP_TOOL_SEPARATOR: &str = "__";

/// An MCP tool use's time limit (and a listing's) when `timeout_ms` is not given.
pub const DEFAULT_MCP_TIMEOUT_MS: u32 = 30_000;

/// The time limit of starting or reaching a server and its handshake when
/// `connect_timeout_ms` is not given: a program may have to load a runtime first.
pub const DEFAULT_MCP_CONNECT_TIMEOUT_MS: u32 = 30_000;

/// The longest `timeout_ms` or `connect_timeout_ms` an MCP server entry may declare: a run
/// waits for the use.
pub const MAX_MCP_TIMEOUT_MS: u32 = 300_000;

/// An MCP server an agent uses tools of.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct McpServerConfig {
    /// How the server is reached.
    pub transport: McpTransport,
    /// The agent's env keys the started program gets (`env_keys:`); none of the agent's other
    /// keys reach it.
    pub env_keys: Vec<String>,
    /// How long one use (or listing the tools) may take, in milliseconds.
    pub timeout_ms: u32,
    /// How long starting or reaching the server and its handshake may take, in milliseconds.
    pub connect_timeout_ms: u32,
}

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum McpTransport {
    /// A program the host starts, speaking MCP over its stdin and stdout (`command:`).
    Command {
        /// The program (looked up on `PATH` unless it holds a `/`).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A streamable HTTP endpoint (`url:`).
    Http {
        /// The endpoint, `http://host:port/path`.
        url: String,
        /// The agent's env key whose value is sent as `Authorization: Bearer <value>`
        /// (`token_env:`), if any.
        token_env: Option<String>,
    },
}

/// The keys of a tools entry that an mcp entry reads or must refuse, taken out of the raw entry.
pub(super) struct RawMcpKeys {
    pub description: bool,
    pub database: Option<Pos>,
    pub bind_env: Option<Pos>,
    pub timeout_ms: Option<Spanned<u64>>,
    pub connect_timeout_ms: Option<Spanned<u64>>,
    pub command: Option<Spanned<Vec<Spanned<String>>>>,
    pub url: Option<Spanned<String>>,
    pub token_env: Option<Spanned<String>>,
    pub env_keys: Vec<Spanned<String>>,
}

/// The first key of an mcp entry written on an entry of another kind, if any.
pub(super) fn mcp_only_key(
    command: &Option<Spanned<Vec<Spanned<String>>>>,
    url: &Option<Spanned<String>>,
    token_env: &Option<Spanned<String>>,
    env_keys: &Option<Vec<Spanned<String>>>,
    connect_timeout_ms: &Option<Spanned<u64>>,
) -> Option<(Pos, &'static str)> {
    command
        .as_ref()
        .map(|c| (Pos::of(c), "command"))
        .or_else(|| url.as_ref().map(|u| (Pos::of(u), "url")))
        .or_else(|| token_env.as_ref().map(|t| (Pos::of(t), "token_env")))
        .or_else(|| {
            env_keys
                .as_ref()
                .and_then(|k| k.first())
                .map(|k| (Pos::of(k), "env_keys"))
        })
        .or_else(|| {
            connect_timeout_ms
                .as_ref()
                .map(|c| (Pos::of(c), "connect_timeout_ms"))
        })
}

/// Converts the keys of the mcp entry `name` at `key` (the entry starts at `at`). `env` is the
/// agent's env, which `env_keys` and `token_env` name keys of.
pub(super) fn convert_mcp(
    ctx: Ctx<'_>,
    at: Pos,
    key: &KeyPath,
    name: &str,
    raw: RawMcpKeys,
    env: &BTreeMap<String, String>,
) -> Result<McpServerConfig, ConfigError> {
    if name.contains(MCP_TOOL_SEPARATOR) {
        return Err(ctx.invalid(
            at,
            &key.key("name"),
            format!(
                "an mcp entry's name may not contain `{MCP_TOOL_SEPARATOR}`: its tools are named `{name}{MCP_TOOL_SEPARATOR}<tool>`, and the separator must be unambiguous"
            ),
        ));
    }
    if raw.description {
        return Err(ctx.schema(
            at,
            &key.key("description"),
            "tools of kind `mcp` take no `description`: each tool of the server is described by the server",
        ));
    }
    if let Some((pos, k)) = raw
        .database
        .map(|p| (p, "database"))
        .or(raw.bind_env.map(|p| (p, "bind_env")))
    {
        return Err(ctx.schema(
            pos,
            &key.key(k),
            format!("`{k}` belongs to tools of kind `sql`; an mcp entry does not take it"),
        ));
    }
    let transport = match (raw.command, raw.url) {
        (Some(_), Some(url)) => {
            return Err(ctx.invalid(
                Pos::of(&url),
                &key.key("url"),
                "`command` and `url` are mutually exclusive: give `command` to start a server that speaks MCP on its stdio, or `url` for one reached over streamable HTTP",
            ));
        }
        (None, None) => {
            return Err(ctx.schema(
                at,
                &key.key("command"),
                "missing required key `command` or `url` (tools of kind `mcp` need one: `command: [program, args...]` to start a server on stdio, or `url: http://host:port/path` for streamable HTTP)",
            ));
        }
        (Some(command), None) => {
            if let Some(t) = &raw.token_env {
                return Err(ctx.invalid(
                    Pos::of(t),
                    &key.key("token_env"),
                    "`token_env` goes with `url`: a started program gets its secrets through `env_keys`",
                ));
            }
            let command_at = Pos::of(&command);
            let words: Vec<Spanned<String>> = command.value;
            let Some(first) = words.first() else {
                return Err(ctx.invalid(
                    command_at,
                    &key.key("command"),
                    "`command` is empty; expected the program and its arguments, e.g. [python, -m, mcp_server_time]",
                ));
            };
            if first.value.trim().is_empty() {
                return Err(ctx.invalid(
                    Pos::of(first),
                    &key.key("command").index(0),
                    "the program to start is empty",
                ));
            }
            for (j, w) in words.iter().enumerate() {
                if w.value.contains('\0') {
                    return Err(ctx.invalid(
                        Pos::of(w),
                        &key.key("command").index(j),
                        "a command word must not contain NUL",
                    ));
                }
            }
            let mut words = words.into_iter().map(|w| w.value);
            let program = words.next().unwrap_or_default();
            McpTransport::Command {
                program,
                args: words.collect(),
            }
        }
        (None, Some(url)) => {
            if let Some(problem) = url_problem(&url.value) {
                return Err(ctx.invalid(Pos::of(&url), &key.key("url"), problem));
            }
            if let Some(k) = raw.env_keys.first() {
                return Err(ctx.invalid(
                    Pos::of(k),
                    &key.key("env_keys"),
                    "`env_keys` goes with `command` (what a started program sees); a server reached by `url` gets only the bearer token of `token_env`",
                ));
            }
            let token_env = match raw.token_env {
                None => None,
                Some(t) => {
                    if let Some(problem) = env_key_problem(&t.value, &[], env) {
                        return Err(ctx.invalid(Pos::of(&t), &key.key("token_env"), problem));
                    }
                    Some(t.value)
                }
            };
            McpTransport::Http {
                url: url.value,
                token_env,
            }
        }
    };
    let mut env_keys = Vec::new();
    for (j, k) in raw.env_keys.into_iter().enumerate() {
        if let Some(problem) = env_key_problem(&k.value, &env_keys, env) {
            return Err(ctx.invalid(Pos::of(&k), &key.key("env_keys").index(j), problem));
        }
        env_keys.push(k.value);
    }
    let limit = |written: Option<Spanned<u64>>, name: &str, default: u32| match written {
        None => Ok(default),
        Some(ms) if (1..=u64::from(MAX_MCP_TIMEOUT_MS)).contains(&ms.value) => Ok(ms.value as u32),
        Some(ms) => Err(ctx.invalid(
            Pos::of(&ms),
            &key.key(name),
            format!(
                "{name} {} is out of range; expected 1 to {MAX_MCP_TIMEOUT_MS}",
                ms.value
            ),
        )),
    };
    let timeout_ms = limit(raw.timeout_ms, "timeout_ms", DEFAULT_MCP_TIMEOUT_MS)?;
    let connect_timeout_ms = limit(
        raw.connect_timeout_ms,
        "connect_timeout_ms",
        DEFAULT_MCP_CONNECT_TIMEOUT_MS,
    )?;
    Ok(McpServerConfig {
        transport,
        env_keys,
        timeout_ms,
        connect_timeout_ms,
    })
}

/// What is wrong with an mcp entry's `url:`, if anything.
fn url_problem(url: &str) -> Option<String> {
    if url.starts_with("https://") {
        return Some(format!(
            "`{url}`: https is not supported yet (the MCP client speaks plain HTTP); reach the server on a loopback or private address with `http://`"
        ));
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Some(format!(
            "`{url}` is not an http URL; expected http://host:port/path"
        ));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "`{url}` names no host or holds spaces; expected http://host:port/path"
        ));
    }
    None
}

/// Why `key` may not be listed (in `env_keys`, or as `token_env`), if it may not. `listed` are
/// the entries before it.
fn env_key_problem(key: &str, listed: &[String], env: &BTreeMap<String, String>) -> Option<String> {
    if listed.iter().any(|k| k == key) {
        return Some(format!("`{key}` is listed twice"));
    }
    if !env.contains_key(key) {
        let known: Vec<String> = env.keys().cloned().collect();
        return Some(format!(
            "`{key}` is not a key of this agent's `env` (keys: {})",
            crate::error::known_list(&known)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(url_problem("http://127.0.0.1:8931/mcp"), None);
        assert_eq!(url_problem("http://localhost/mcp"), None);
        for refused in [
            "https://example.com/mcp",
            "ftp://x",
            "127.0.0.1:8931",
            "http://",
            "http:///mcp",
            "http://a b/mcp",
        ] {
            assert!(url_problem(refused).is_some(), "{refused}");
        }
    }

    #[test]
    fn env_keys() {
        let env = BTreeMap::from([("TZ_TOKEN".to_owned(), "x".to_owned())]);
        assert_eq!(env_key_problem("TZ_TOKEN", &[], &env), None);
        assert!(env_key_problem("TZ_TOKEN", &["TZ_TOKEN".into()], &env).is_some());
        let missing = env_key_problem("SECRET", &[], &env).unwrap();
        assert!(missing.contains("TZ_TOKEN"), "{missing}");
    }
}
