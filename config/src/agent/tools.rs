//! The `tools:` section of agent.yaml: the tools an agent declares for its model.
//!
//! This module owns [`ToolConfig`] with what a tool runs ([`ToolKind`]) and whether a use
//! waits for an operator ([`Approval`]), their raw serde shapes and the per-tool checks: names
//! that are well formed, unique and not one of the runtime's own tools, and a database file
//! that exists. The `auth:` and `guard:` blocks are converted by [`crate::visibility`]; this
//! module only hands them over. It must not open a database or run a tool: it checks that the
//! file is there, nothing more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::visibility::{
    GuardConfig, PolicyConfig, RawGuard, RawToolAuth, ToolAuthConfig, convert_guard,
    convert_tool_auth,
};
use crate::yaml::{Ctx, KeyPath, Pos};

/// A tool declared in `agent.yaml`.
#[derive(Clone, Debug, PartialEq)]
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

#[derive(Clone, Debug, PartialEq)]
/// What a declared tool runs.
pub enum ToolKind {
    /// A read-only SQL query against a SQLite file that belongs to the agent.
    Sql {
        /// The SQLite file, absolute; opened read-only.
        database: PathBuf,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
/// Whether a tool use waits for an operator's decision.
pub enum Approval {
    #[default]
    /// Uses run at once.
    None,
    /// Each use blocks the run until an operator approves or denies it.
    Required,
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
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawToolKind {
    Sql,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawApproval {
    None,
    Required,
}

/// Converts `tools:`. `policies` are the agent's named policies, which a tool's `auth:` block
/// may refer to, so the visibility section is converted first.
pub(super) fn convert_tools(
    ctx: Ctx<'_>,
    dir: &Path,
    raw: Vec<Spanned<RawTool>>,
    policies: &BTreeMap<String, PolicyConfig>,
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
            RawToolKind::Sql => {
                let Some(db) = t.database else {
                    return Err(ctx.schema(
                        at,
                        &key.key("database"),
                        "missing required key `database` (tools of kind `sql` need one)",
                    ));
                };
                let path = dir.join(&db.value);
                if db.value.is_empty() || !path.is_file() {
                    return Err(ctx.invalid(
                        Pos::of(&db),
                        &key.key("database"),
                        format!("database file `{}` does not exist", path.display()),
                    ));
                }
                ToolKind::Sql { database: path }
            }
        };
        let approval = match t.approval {
            None | Some(RawApproval::None) => Approval::None,
            Some(RawApproval::Required) => Approval::Required,
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
