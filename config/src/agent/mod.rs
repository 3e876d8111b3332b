//! `agent.yaml`: one agent's declaration, and the set of agents a host serves.
//!
//! This module owns [`AgentConfig`] and the top-level reading of one file ([`AgentConfig::load`]):
//! the name, the peer lists, `env:`, and the order in which the sections are converted. Each
//! section with rules of its own lives in a child module: `model` (the script turns), `tools`
//! (declared tools), `limits` (loop guards), `a2a` (remote A2A agents it may call), with `names`
//! for the name rule shared with fleet.yaml. The cross-file checks of a set ([`AgentSet::load`]: unique names, every peer
//! named exists) are `set`'s. Unknown keys are refused everywhere, and every error names the
//! file, line, column and key.
//!
//! Nothing here may start agents, open databases or decide consent at call time: it reads,
//! checks and hands back plain data (what the declarations mean for a call is consort-core's).

mod a2a;
mod builder;
mod endpoint;
mod limits;
mod model;
mod names;
mod set;
mod snapshot;
mod tools;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::visibility::{
    RawAgentVisibility, RawGrant, RawPolicy, VisibilityConfig, convert_agent_visibility,
};
use crate::yaml::{Ctx, KeyPath, Pos, SpannedPairs, load_file};

pub use a2a::{
    A2aAgentConfig, AllowedNetworks, DEFAULT_A2A_TIMEOUT_MS, MAX_A2A_TIMEOUT_MS, MIN_A2A_TIMEOUT_MS,
};
use a2a::{RawA2aAgent, convert_a2a_agents};
pub use builder::AgentConfigBuilder;
pub use limits::{Limits, TreeLimits};
use limits::{RawLimits, convert_limits};
pub use model::{
    CallStep, CommandModel, MAX_WAIT_S, ModelConfig, OpenAiModel, ScriptStep, ToolChoice, ToolStep,
};
use model::{RawModel, convert_model};
pub use names::check_name;
pub(crate) use names::{is_valid_name, name_problem};
pub use set::AgentSet;
pub(crate) use set::{AddError, SetBuilder, load_with_snapshot};
pub(crate) use snapshot::RACY_MARGIN;
pub use snapshot::{FileStamp, SnapshotReport};
pub use tools::{
    Approval, DEFAULT_MCP_CONNECT_TIMEOUT_MS, DEFAULT_MCP_TIMEOUT_MS, DEFAULT_SQL_TIMEOUT_MS,
    MAX_MCP_TIMEOUT_MS, MAX_SQL_TIMEOUT_MS, MCP_TOOL_SEPARATOR, McpServerConfig, McpTransport,
    ToolConfig, ToolKind,
};
use tools::{RawTool, convert_tools, sql_tool_names};

/// One agent, as declared in its folder's `agent.yaml`, validated.
///
/// Read one from its file with [`AgentConfig::load`] (or a whole set with [`AgentSet::load`]),
/// or build one in code with [`AgentConfig::builder`], which checks what it is given as the
/// file's reader does. Not built by a struct literal outside this crate (`#[non_exhaustive]`):
/// a field added later must not break an embedding app.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The agent's name (`name:`), unique in a fleet.
    pub name: String,
    /// What the agent does, as its callers are told (`description:`).
    pub description: String,
    /// Peers this agent's model may call (`agents.can_call`).
    pub can_call: Vec<String>,
    /// Peers this agent consents to serve (`agents.accept_from`).
    pub accept_from: Vec<String>,
    /// Peers that may read this agent's runs in full through the directory
    /// (`agents.show_runs_to`): what its tools were given and returned, its model turns. Any
    /// other observer but an operator sees a run's typed state and the kinds and times of its
    /// events only.
    pub show_runs_to: Vec<String>,
    /// Which model drives it (`model:`).
    pub model: ModelConfig,
    /// Its declared tools (`tools:`).
    pub tools: Vec<ToolConfig>,
    /// Visible to this agent's own tools only.
    pub env: BTreeMap<String, String>,
    /// The agent's folder, absolute.
    pub dir: PathBuf,
    /// The `agent.yaml` file, absolute.
    pub file: PathBuf,
    /// Named policies, fallback policy, grants to peers and the probe budget.
    pub visibility: VisibilityConfig,
    /// The loop guards of this agent's calls (`limits:`).
    pub limits: Limits,
    /// Remote A2A agents this agent may call, once `can_call` names them too (`a2a_agents:`).
    pub a2a_agents: Vec<A2aAgentConfig>,
}

impl AgentConfig {
    /// The A2A agent this agent declares under `name`, if any.
    pub fn a2a_agent(&self, name: &str) -> Option<&A2aAgentConfig> {
        self.a2a_agents.iter().find(|a| a.name == name)
    }
}

/// The file name of an agent's declaration inside its folder.
const AGENT_FILE: &str = "agent.yaml";

// The raw shape of agent.yaml. Spanned fields are the ones a later check may need to point at.
// The sections with rules of their own keep their raw shapes beside their conversion.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: Spanned<String>,
    description: Option<String>,
    agents: Option<RawAgents>,
    model: Spanned<RawModel>,
    tools: Option<Vec<Spanned<RawTool>>>,
    env: Option<SpannedPairs>,
    policies: Option<BTreeMap<String, Spanned<RawPolicy>>>,
    fallback_policy: Option<Spanned<String>>,
    grants: Option<BTreeMap<String, Spanned<RawGrant>>>,
    probe_budget: Option<Spanned<u64>>,
    limits: Option<RawLimits>,
    a2a_agents: Option<Vec<RawA2aAgent>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgents {
    can_call: Option<Vec<Spanned<String>>>,
    accept_from: Option<Vec<Spanned<String>>>,
    show_runs_to: Option<Vec<Spanned<String>>>,
}

/// Where the peer names of one agent were written, for the cross-file checks of a set.
#[derive(Clone, Debug)]
struct PeerSpans {
    name: Pos,
    can_call: Vec<Pos>,
    accept_from: Vec<Pos>,
    show_runs_to: Vec<Pos>,
    a2a_agents: Vec<Pos>,
}

impl PeerSpans {
    /// For an agent taken from a snapshot: no positions are kept there (an error in the set
    /// is reported by a load from the files, which has them).
    fn unknown() -> Self {
        Self {
            name: Pos::START,
            can_call: Vec::new(),
            accept_from: Vec::new(),
            show_runs_to: Vec::new(),
            a2a_agents: Vec::new(),
        }
    }
}

impl AgentConfig {
    /// Reads and checks `dir/agent.yaml` on its own (peer names are checked for form, not for
    /// existence: that needs the set, see [`AgentSet::load`]). Paths in the result are absolute.
    pub fn load(dir: &Path) -> Result<Self, ConfigError> {
        load_agent(dir).map(|(a, _)| a)
    }
}

fn absolute_dir(dir: &Path) -> Result<PathBuf, ConfigError> {
    // canonicalize: the folder must exist anyway, and a canonical path makes the duplicate
    // check of a set see through `./a` vs `a` and symlinks.
    std::fs::canonicalize(dir).map_err(|source| ConfigError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn load_agent(dir: &Path) -> Result<(AgentConfig, PeerSpans), ConfigError> {
    load_agent_in(absolute_dir(dir)?)
}

/// As [`load_agent`], for a folder whose canonical path is already known.
fn load_agent_in(dir: PathBuf) -> Result<(AgentConfig, PeerSpans), ConfigError> {
    let file = dir.join(AGENT_FILE);
    let raw: RawAgent = load_file(&file, "an agent declaration with `name` and `model`")?;
    convert(raw, dir, file)
}

fn convert(
    raw: RawAgent,
    dir: PathBuf,
    file: PathBuf,
) -> Result<(AgentConfig, PeerSpans), ConfigError> {
    let ctx = Ctx { file: &file };
    let root = KeyPath::root();

    let name = raw.name.value.clone();
    if !is_valid_name(&name) {
        return Err(ctx.invalid(Pos::of(&raw.name), &root.key("name"), name_problem(&name)));
    }

    let (can_call, accept_from, show_runs_to) = match raw.agents {
        Some(a) => (
            a.can_call.unwrap_or_default(),
            a.accept_from.unwrap_or_default(),
            a.show_runs_to.unwrap_or_default(),
        ),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    let mut spans = PeerSpans {
        name: Pos::of(&raw.name),
        can_call: Vec::new(),
        accept_from: Vec::new(),
        show_runs_to: Vec::new(),
        a2a_agents: Vec::new(),
    };
    let can_call = peer_list(ctx, &name, "can_call", can_call, &mut spans.can_call)?;
    let accept_from = peer_list(
        ctx,
        &name,
        "accept_from",
        accept_from,
        &mut spans.accept_from,
    )?;
    let show_runs_to = peer_list(
        ctx,
        &name,
        "show_runs_to",
        show_runs_to,
        &mut spans.show_runs_to,
    )?;

    let raw_tools = raw.tools.unwrap_or_default();
    let model = convert_model(ctx, &dir, raw.model, &sql_tool_names(&raw_tools))?;
    let visibility = convert_agent_visibility(
        ctx,
        RawAgentVisibility {
            policies: raw.policies,
            fallback_policy: raw.fallback_policy,
            grants: raw.grants,
            probe_budget: raw.probe_budget,
        },
    )?;

    // The env before the tools: a sql tool's `bind_env` names keys of it.
    let env = convert_env(ctx, &root, raw.env)?;
    let tools = convert_tools(ctx, &dir, raw_tools, &visibility.policies, &env)?;
    let limits = convert_limits(ctx, &root, raw.limits)?;
    let a2a_agents = convert_a2a_agents(ctx, &name, raw.a2a_agents, &env, &mut spans.a2a_agents)?;
    let agent = AgentConfig {
        name,
        limits,
        description: raw.description.unwrap_or_default(),
        can_call,
        accept_from,
        show_runs_to,
        model,
        tools,
        env,
        dir,
        file,
        visibility,
        a2a_agents,
    };
    Ok((agent, spans))
}

fn peer_list(
    ctx: Ctx<'_>,
    me: &str,
    list: &str,
    entries: Vec<Spanned<String>>,
    spans: &mut Vec<Pos>,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::with_capacity(entries.len());
    // A set beside the list: an agent may name many thousands of peers.
    let mut seen: std::collections::HashSet<String> =
        std::collections::HashSet::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let key = KeyPath::root().key("agents").key(list).index(i);
        let at = Pos::of(&e);
        let n = e.value;
        if let Some(problem) = peer_problem(me, &n, &mut seen) {
            return Err(ctx.invalid(at, &key, problem));
        }
        out.push(n);
        spans.push(at);
    }
    Ok(out)
}

/// Why `name` may not stand in `me`'s list of peers whose names so far are `seen` (adding it to
/// `seen` when it may): agent.yaml's reader and the builder check peers with this one rule.
fn peer_problem(
    me: &str,
    name: &str,
    seen: &mut std::collections::HashSet<String>,
) -> Option<String> {
    if !is_valid_name(name) {
        Some(name_problem(name))
    } else if name == me {
        Some(format!("an agent cannot name itself (`{name}`) as a peer"))
    } else if !seen.insert(name.to_owned()) {
        Some(format!("`{name}` is listed twice"))
    } else {
        None
    }
}

/// Why an `env:` entry may not be given to the agent's tools: they become process environment
/// variables, and the OS refuses `=` in a name and NUL anywhere. `Err` on the key, `Ok(Some)`
/// on the value.
fn env_problem(key: &str, value: &str) -> Result<Option<&'static str>, &'static str> {
    if key.is_empty() || key.contains('=') || key.contains('\0') {
        Err("environment variable names must be non-empty and contain no `=` or NUL")
    } else if value.contains('\0') {
        Ok(Some("environment values must not contain NUL"))
    } else {
        Ok(None)
    }
}

fn convert_env(
    ctx: Ctx<'_>,
    root: &KeyPath,
    raw: Option<SpannedPairs>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut env = BTreeMap::new();
    for (k, v) in raw.unwrap_or_default().0 {
        let key = root.key("env").key(&k.value);
        match env_problem(&k.value, &v.value) {
            Err(problem) => return Err(ctx.invalid(Pos::of(&k), &key, problem)),
            Ok(Some(problem)) => return Err(ctx.invalid(Pos::of(&v), &key, problem)),
            Ok(None) => {}
        }
        env.insert(k.value, v.value);
    }
    Ok(env)
}
