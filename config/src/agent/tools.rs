//! The `tools:` section of agent.yaml: the tools an agent declares for its model.
//!
//! This module owns [`ToolConfig`] with what a tool runs ([`ToolKind`]) and whether a use
//! waits for an operator ([`Approval`]), their raw serde shapes and the per-tool checks: names
//! that are well formed, unique and not one of the runtime's own tools; for a sql tool, a
//! database file confined to the agent's folder (relative, no `..`, no symlink out, never one
//! of consort's own store files), the env keys it may bind (`bind_env`) and its time limit
//! (`timeout_ms`). The keys of a `kind: mcp` entry (an MCP server whose tools the agent uses)
//! are read in `mcp`. The `auth:` and `guard:` blocks are converted by [`crate::visibility`];
//! this module only hands them over. It must not open a database, start a server or run a
//! tool: it resolves the file's path and checks that it is there, nothing more.

mod mcp;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::visibility::{
    GuardConfig, PolicyConfig, RawGuard, RawToolAuth, ToolAuthConfig, convert_guard,
    convert_tool_auth,
};
use crate::yaml::{Ctx, KeyPath, Pos};

pub use mcp::{
    DEFAULT_MCP_CONNECT_TIMEOUT_MS, DEFAULT_MCP_TIMEOUT_MS, MAX_MCP_TIMEOUT_MS, MCP_TOOL_SEPARATOR,
    McpServerConfig, McpTransport,
};

/// A tool declared in `agent.yaml`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolConfig {
    /// The tool's name, unique within the agent.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// What the tool runs.
    pub kind: ToolKind,
    /// Whether a use waits for an operator (`approval: required`).
    pub approval: Approval,
    /// The tool's `auth:` block (markers for visibility's T0), if any.
    pub auth: Option<ToolAuthConfig>,
    /// The tool's `guard:`, if any.
    pub guard: Option<GuardConfig>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// What a declared tool runs.
pub enum ToolKind {
    /// A read-only SQL query against a SQLite file that belongs to the agent.
    Sql {
        /// The SQLite file, canonical and inside the agent's folder; opened read-only.
        database: PathBuf,
        /// The env keys a query may bind as `:KEY` (`bind_env:`); `:input` is always bindable
        /// and no other env key is.
        bind_env: Vec<String>,
        /// How long one query may run, in milliseconds (`timeout_ms:`, default
        /// [`DEFAULT_SQL_TIMEOUT_MS`], at most [`MAX_SQL_TIMEOUT_MS`]).
        timeout_ms: u32,
    },
    /// An MCP server: each tool it lists becomes one of the agent's tools, named
    /// `<declared name>__<tool name>`, with this entry's `auth:`, `guard:` and `approval:`.
    Mcp(McpServerConfig),
}

/// A sql tool's time limit per query when `timeout_ms` is not given.
pub const DEFAULT_SQL_TIMEOUT_MS: u32 = 2_000;

/// The longest `timeout_ms` a sql tool may declare: a query runs on a blocking thread of the
/// host, and a run waits for it.
pub const MAX_SQL_TIMEOUT_MS: u32 = 30_000;

/// File names of consort's own SQLite stores (an agent's run store, a host's directory outbox).
/// A data folder may sit anywhere, even inside an agent folder, so a sql tool's database is
/// refused by these names wherever it is.
const STORE_FILE_NAMES: &[&str] = &["runs.db", "outbox.db"];

/// The files SQLite keeps beside a database in WAL and rollback-journal modes.
const STORE_FILE_SUFFIXES: &[&str] = &["", "-wal", "-shm", "-journal"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
/// Whether a tool use waits for an operator's decision.
pub enum Approval {
    #[default]
    /// Uses run at once.
    None,
    /// Each use blocks the run until an operator approves or denies it.
    Required,
    /// Each use blocks the run until an operator, or the principal the run acts for,
    /// approves or denies it (`approval: requester`): for gates that ask "are you sure?"
    /// rather than "may you?".
    Requester,
}

impl Approval {
    /// Whether a use waits for a decision.
    pub fn is_gated(self) -> bool {
        self != Self::None
    }
}

/// Tool names the runtime gives every agent (peer calls and the visibility meta-tools); a
/// declared tool may not shadow them.
pub(super) const RESERVED_TOOL_NAMES: &[&str] = &[
    "call_agent",
    "check_run",
    "search_tools",
    "load_tool",
    "invoke_tool",
    "wait_for_replies",
    "final_answer",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    name: Spanned<String>,
    description: Option<String>,
    kind: Spanned<RawToolKind>,
    database: Option<Spanned<String>>,
    approval: Option<RawApproval>,
    auth: Option<RawToolAuth>,
    guard: Option<Spanned<RawGuard>>,
    bind_env: Option<Vec<Spanned<String>>>,
    timeout_ms: Option<Spanned<u64>>,
    connect_timeout_ms: Option<Spanned<u64>>,
    command: Option<Spanned<Vec<Spanned<String>>>>,
    url: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    env_keys: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawToolKind {
    Sql,
    Mcp,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawApproval {
    None,
    Required,
    Requester,
}

/// The names of the sql tools among `raw`, as written (before any check), so the script steps
/// can be held to the sql rule while the model section is converted.
pub(super) fn sql_tool_names(raw: &[Spanned<RawTool>]) -> BTreeSet<String> {
    raw.iter()
        .filter(|t| matches!(t.value.kind.value, RawToolKind::Sql))
        .map(|t| t.value.name.value.clone())
        .collect()
}

/// Converts `tools:`. `dir` is the agent's canonical folder. `policies` are the agent's named
/// policies, which a tool's `auth:` block may refer to, so the visibility section is converted
/// first; `env` is the agent's env, which `bind_env` names keys of.
pub(super) fn convert_tools(
    ctx: Ctx<'_>,
    dir: &Path,
    raw: Vec<Spanned<RawTool>>,
    policies: &BTreeMap<String, PolicyConfig>,
    env: &BTreeMap<String, String>,
) -> Result<Vec<ToolConfig>, ConfigError> {
    let mut tools = Vec::new();
    let mut tool_names: BTreeSet<String> = BTreeSet::new();
    for (i, t) in raw.into_iter().enumerate() {
        let at = Pos::of(&t);
        let t = t.value;
        let key = KeyPath::root().key("tools").index(i);
        let tname = t.name.value.clone();
        let name_key = key.key("name");
        if RESERVED_TOOL_NAMES.contains(&tname.as_str()) {
            return Err(ctx.invalid(
                Pos::of(&t.name),
                &name_key,
                format!(
                    "`{tname}` is a built-in tool name; reserved names are {}",
                    RESERVED_TOOL_NAMES.join(", ")
                ),
            ));
        }
        if !is_valid_tool_name(&tname) {
            return Err(ctx.invalid(
                Pos::of(&t.name),
                &name_key,
                format!("invalid tool name `{tname}`; expected 1 to 64 characters of a-z, A-Z, 0-9, `_` and `-`"),
            ));
        }
        if !tool_names.insert(tname.clone()) {
            return Err(ctx.invalid(
                Pos::of(&t.name),
                &name_key,
                format!("duplicate tool name `{tname}`"),
            ));
        }
        let kind = match t.kind.value {
            RawToolKind::Mcp => {
                let raw = mcp::RawMcpKeys {
                    description: t.description.is_some(),
                    database: t.database.as_ref().map(Pos::of),
                    bind_env: t.bind_env.as_ref().and_then(|b| b.first()).map(Pos::of),
                    timeout_ms: t.timeout_ms,
                    connect_timeout_ms: t.connect_timeout_ms,
                    command: t.command,
                    url: t.url,
                    token_env: t.token_env,
                    env_keys: t.env_keys.unwrap_or_default(),
                };
                ToolKind::Mcp(mcp::convert_mcp(ctx, at, &key, &tname, raw, env)?)
            }
            RawToolKind::Sql => {
                if let Some((pos, name)) = mcp::mcp_only_key(
                    &t.command,
                    &t.url,
                    &t.token_env,
                    &t.env_keys,
                    &t.connect_timeout_ms,
                ) {
                    return Err(ctx.schema(
                        pos,
                        &key.key(name),
                        format!(
                            "`{name}` belongs to tools of kind `mcp`; a sql tool does not take it"
                        ),
                    ));
                }
                let Some(db) = t.database else {
                    return Err(ctx.schema(
                        at,
                        &key.key("database"),
                        "missing required key `database` (tools of kind `sql` need one)",
                    ));
                };
                let database = confined_database(dir, &db.value)
                    .map_err(|problem| ctx.invalid(Pos::of(&db), &key.key("database"), problem))?;
                let mut bind_env = Vec::new();
                for (j, k) in t.bind_env.unwrap_or_default().into_iter().enumerate() {
                    if let Some(problem) = bind_env_problem(&k.value, &bind_env, env) {
                        return Err(ctx.invalid(
                            Pos::of(&k),
                            &key.key("bind_env").index(j),
                            problem,
                        ));
                    }
                    bind_env.push(k.value);
                }
                let timeout_ms = match t.timeout_ms {
                    None => DEFAULT_SQL_TIMEOUT_MS,
                    Some(ms) if (1..=u64::from(MAX_SQL_TIMEOUT_MS)).contains(&ms.value) => {
                        ms.value as u32
                    }
                    Some(ms) => {
                        return Err(ctx.invalid(
                            Pos::of(&ms),
                            &key.key("timeout_ms"),
                            format!(
                                "timeout_ms {} is out of range; expected 1 to {MAX_SQL_TIMEOUT_MS}",
                                ms.value
                            ),
                        ));
                    }
                };
                ToolKind::Sql {
                    database,
                    bind_env,
                    timeout_ms,
                }
            }
        };
        let approval = match t.approval {
            None | Some(RawApproval::None) => Approval::None,
            Some(RawApproval::Required) => Approval::Required,
            Some(RawApproval::Requester) => Approval::Requester,
        };
        let auth = t
            .auth
            .map(|a| convert_tool_auth(ctx, &key.key("auth"), a, policies))
            .transpose()?;
        let guard = t
            .guard
            .map(|g| convert_guard(ctx, &key.key("guard"), g))
            .transpose()?;
        tools.push(ToolConfig {
            name: tname,
            description: t.description.unwrap_or_default(),
            kind,
            approval,
            auth,
            guard,
        });
    }
    Ok(tools)
}

fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The canonical path of a sql tool's `database:` as written, or why it is refused. `dir` is
/// the agent's canonical folder.
///
/// Refused: an absolute path, a `..` component, a path that does not name an existing file, a
/// path whose canonical form leaves `dir` (a symlink out), and consort's own store files under
/// either name (as written or as resolved).
fn confined_database(dir: &Path, written: &str) -> Result<PathBuf, String> {
    if let Some(problem) = written_database_problem(written) {
        return Err(problem);
    }
    let joined = dir.join(written);
    let canonical = match std::fs::canonicalize(&joined) {
        Ok(c) if c.is_file() => c,
        _ => {
            return Err(format!(
                "database file `{}` does not exist",
                joined.display()
            ));
        }
    };
    match resolved_database_problem(dir, &canonical) {
        Some(problem) => Err(problem),
        None => Ok(canonical),
    }
}

/// What is wrong with a `database:` value on its face, before the file system is asked.
fn written_database_problem(written: &str) -> Option<String> {
    let path = Path::new(written);
    if written.is_empty() {
        return Some("the database path is empty; expected a file in the agent folder".into());
    }
    if path
        .components()
        .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)))
    {
        return Some(format!(
            "`{written}` is an absolute path; a sql tool reads a file of its own agent: give a \
             path relative to the agent folder"
        ));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Some(format!(
            "`{written}` leaves the agent folder through `..`; give a path inside the agent folder"
        ));
    }
    path.file_name()
        .filter(|name| is_store_file(name))
        .map(|_| store_file_message(written))
}

/// What is wrong with the canonical form of a `database:` path: outside the agent's
/// (canonical) folder, or one of consort's store files once symlinks are resolved.
fn resolved_database_problem(dir: &Path, canonical: &Path) -> Option<String> {
    if !canonical.starts_with(dir) {
        return Some(format!(
            "the database resolves to `{}`, outside the agent folder `{}` (through a symlink); \
             a sql tool reads only files inside its agent's folder",
            canonical.display(),
            dir.display()
        ));
    }
    canonical
        .file_name()
        .filter(|name| is_store_file(name))
        .map(|_| store_file_message(&canonical.display().to_string()))
}

fn is_store_file(name: &OsStr) -> bool {
    // Case-insensitive: some file systems are, and `RUNS.DB` is then the same file.
    let name = name.to_string_lossy().to_ascii_lowercase();
    STORE_FILE_NAMES.iter().any(|store| {
        STORE_FILE_SUFFIXES
            .iter()
            .any(|suffix| name == format!("{store}{suffix}"))
    })
}

fn store_file_message(path: &str) -> String {
    format!(
        "`{path}` is one of consort's own store files ({}, with their -wal, -shm and -journal \
         files); a sql tool may not read them",
        STORE_FILE_NAMES.join(", ")
    )
}

/// Why `key` may not be listed in a sql tool's `bind_env`, if it may not. `listed` are the
/// entries before it.
fn bind_env_problem(
    key: &str,
    listed: &[String],
    env: &BTreeMap<String, String>,
) -> Option<String> {
    if key == "input" {
        return Some(
            "`input` is always bound (`:input` is the run's input); list only env keys here".into(),
        );
    }
    if !is_sql_parameter_name(key) {
        return Some(format!(
            "`{key}` cannot be bound as `:{key}`; an env key to bind starts with a letter or `_` \
             and holds only letters, digits and `_`"
        ));
    }
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

/// Whether `name` can follow `:` in SQLite's named-parameter syntax unchanged. Narrower than
/// what SQLite accepts, so a name means the same to a reader and to the engine.
fn is_sql_parameter_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_database_paths() {
        assert_eq!(written_database_problem("ledger.db"), None);
        assert_eq!(written_database_problem("data/ledger.db"), None);
        assert_eq!(written_database_problem("./ledger.db"), None);
        for refused in [
            "",
            "/etc/passwd",
            "../other/ledger.db",
            "data/../../x.db",
            "runs.db",
            "data/RUNS.DB-wal",
            "outbox.db-shm",
            "runs.db-journal",
        ] {
            assert!(written_database_problem(refused).is_some(), "{refused}");
        }
        assert_eq!(written_database_problem("runs.db.bak"), None);
    }

    #[test]
    fn resolved_database_paths() {
        let dir = Path::new("/agents/cfo");
        assert_eq!(
            resolved_database_problem(dir, Path::new("/agents/cfo/ledger.db")),
            None
        );
        assert!(resolved_database_problem(dir, Path::new("/agents/cfox/ledger.db")).is_some());
        assert!(resolved_database_problem(dir, Path::new("/data/agents/cfo/runs.db")).is_some());
        assert!(resolved_database_problem(dir, Path::new("/agents/cfo/d/runs.db-wal")).is_some());
    }

    #[test]
    fn bind_env_entries() {
        let env = BTreeMap::from([
            ("REGION".to_owned(), "eu".to_owned()),
            ("bad-key".to_owned(), "x".to_owned()),
        ]);
        assert_eq!(bind_env_problem("REGION", &[], &env), None);
        assert!(bind_env_problem("REGION", &["REGION".into()], &env).is_some());
        assert!(bind_env_problem("input", &[], &env).is_some());
        assert!(bind_env_problem("bad-key", &[], &env).is_some());
        assert!(bind_env_problem("9LIVES", &[], &env).is_some());
        let missing = bind_env_problem("SECRET", &[], &env).unwrap();
        assert!(missing.contains("REGION, bad-key"), "{missing}");
    }
}
