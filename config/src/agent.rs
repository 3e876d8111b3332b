//! `agent.yaml`: one agent's declaration, and the set of agents a host serves.
//!
//! Owns the public agent types, the serde "raw" structs that mirror the file (unknown keys
//! refused everywhere), their conversion with per-file checks ([`AgentConfig::load`]) and the
//! cross-file checks of a set ([`AgentSet::load`]: unique names, every peer named exists). It
//! must not start agents, open databases or decide consent at call time: it reads, checks and
//! hands back plain data (the consent decision itself lives in [`crate::consent`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::{ConfigError, known_list};
use crate::visibility::{
    GuardConfig, RawAgentVisibility, RawGuard, RawPolicy, RawToolAuth, ToolAuthConfig,
    VisibilityConfig, convert_agent_visibility, convert_guard, convert_tool_auth,
};
use crate::yaml::{Ctx, KeyPath, Pos, SpannedPairs, load_file};

/// One agent, as declared in its folder's `agent.yaml`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentConfig {
    /// The agent's name (`name:`), unique in a fleet.
    pub name: String,
    /// What the agent does, as its callers are told (`description:`).
    pub description: String,
    /// Peers this agent's model may call (`agents.can_call`).
    pub can_call: Vec<String>,
    /// Peers this agent consents to serve (`agents.accept_from`).
    pub accept_from: Vec<String>,
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
}

/// The loop guards of one agent (`limits: {max_depth, max_calls_per_run}` in agent.yaml).
///
/// The caller's limits bound the calls its runs place; the callee's bound the calls it
/// accepts, so each side enforces its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest call chain, in hops: `a -> b -> c -> d -> e` is four.
    pub max_depth: u32,
    /// The most calls one run may place.
    pub max_calls_per_run: u32,
}

impl Limits {
    /// The depth limit when agent.yaml sets none.
    pub const DEFAULT_MAX_DEPTH: u32 = 4;
    /// The call cap when agent.yaml sets none.
    pub const DEFAULT_MAX_CALLS_PER_RUN: u32 = 25;
    /// The deepest chain any agent may allow.
    pub const MAX_DEPTH_BOUND: u32 = 16;
    /// The largest call cap any agent may allow.
    pub const MAX_CALLS_BOUND: u32 = 1_000;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_calls_per_run: Self::DEFAULT_MAX_CALLS_PER_RUN,
        }
    }
}

/// Which model drives the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    /// The deterministic script model: step `i` is played on the agent's `i`-th model turn.
    Script {
        /// The steps, in turn order.
        steps: Vec<ScriptStep>,
    },
}

/// One turn of a script model. Text fields are templates rendered by the script model.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptStep {
    /// Final answer.
    Answer(String),
    /// One `call_agent` tool use per entry (an entry with `count: n` places n calls).
    Call(Vec<CallStep>),
    /// One use of a declared tool.
    Tool(ToolStep),
    /// `check_run` on a run id (a template such as `{call.cfo}`).
    Check(String),
    /// `search_tools {query, limit}` (the query is a template; the limit is passed as written,
    /// so a script can exercise the meta-tool's own range check).
    Search {
        /// The search text (a template).
        query: String,
        /// The most results asked for, if given.
        limit: Option<u64>,
    },
    /// `load_tool {name}`.
    Load(String),
    /// `invoke_tool {name, arguments}`; string values inside `arguments` are templates.
    Invoke {
        /// The tool to invoke.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
}

#[derive(Clone, Debug, PartialEq)]
/// One `call:` entry of a script step.
pub struct CallStep {
    /// The agent to call.
    pub agent: String,
    /// The call's input (a template).
    pub input: String,
    /// How many calls this entry places (default 1, at least 1).
    pub count: u32,
    /// Keep the turn open up to this many seconds for the reply (`call_agent`'s `wait_s`).
    pub wait_s: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
/// One `tool:` script step: a use of a declared tool.
pub struct ToolStep {
    /// The declared tool to use.
    pub name: String,
    /// The tool's input (a template).
    pub input: String,
}

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

/// The agents one host serves (or one fleet declares), by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentSet {
    /// The agents, by name.
    pub agents: BTreeMap<String, AgentConfig>,
}

/// The file name of an agent's declaration inside its folder.
pub(crate) const AGENT_FILE: &str = "agent.yaml";

/// Tool names the runtime gives every agent (peer calls and the visibility meta-tools); a
/// declared tool may not shadow them.
pub(crate) const RESERVED_TOOL_NAMES: &[&str] = &[
    "call_agent",
    "check_run",
    "search_tools",
    "load_tool",
    "invoke_tool",
];

/// Upper bound of `count` in a script `call` entry: a script is a test fixture, and a typo such
/// as `count: 100000` should not become a fan-out storm.
pub(crate) const MAX_CALL_COUNT: u64 = 1000;

/// The longest a `call_agent` may keep its caller's turn open for the reply, in seconds.
pub const MAX_WAIT_S: u32 = 300;

/// Longest agent (and host) name.
pub(crate) const MAX_NAME_LEN: usize = 64;

/// Whether `name` is a valid agent or host name: 1..=64 of `[a-z0-9_-]`.
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

pub(crate) fn name_problem(name: &str) -> String {
    if name.is_empty() {
        "name is empty; expected 1 to 64 characters of a-z, 0-9, `_` and `-`".to_owned()
    } else if name.len() > MAX_NAME_LEN {
        format!(
            "name is {} characters long; at most {MAX_NAME_LEN} allowed",
            name.len()
        )
    } else {
        format!("invalid name `{name}`; expected only a-z, 0-9, `_` and `-`")
    }
}

// ---------------------------------------------------------------------------------------------
// The raw shape of agent.yaml. Spanned fields are the ones a later check may need to point at.

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
    grants: Option<BTreeMap<String, Spanned<Vec<Spanned<String>>>>>,
    probe_budget: Option<Spanned<u64>>,
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_depth: Option<Spanned<u64>>,
    max_calls_per_run: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgents {
    can_call: Option<Vec<Spanned<String>>>,
    accept_from: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawModel {
    Script(Option<Vec<Spanned<RawStep>>>),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawStep {
    Answer(String),
    Call(Spanned<Vec<Spanned<RawCall>>>),
    Tool(RawToolStep),
    Check(String),
    Search(RawSearchStep),
    Load(String),
    Invoke(RawInvokeStep),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearchStep {
    query: String,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInvokeStep {
    name: String,
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCall {
    agent: String,
    input: String,
    count: Option<Spanned<u64>>,
    wait_s: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolStep {
    name: String,
    input: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
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

/// Where the peer names of one agent were written, for the cross-file checks of a set.
#[derive(Clone, Debug)]
struct PeerSpans {
    name: Pos,
    can_call: Vec<Pos>,
    accept_from: Vec<Pos>,
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
    let dir = absolute_dir(dir)?;
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

    let (can_call, accept_from) = match raw.agents {
        Some(a) => (
            a.can_call.unwrap_or_default(),
            a.accept_from.unwrap_or_default(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut spans = PeerSpans {
        name: Pos::of(&raw.name),
        can_call: Vec::new(),
        accept_from: Vec::new(),
    };
    let can_call = peer_list(ctx, &name, "can_call", can_call, &mut spans.can_call)?;
    let accept_from = peer_list(
        ctx,
        &name,
        "accept_from",
        accept_from,
        &mut spans.accept_from,
    )?;

    let model = convert_model(ctx, raw.model)?;
    let visibility = convert_agent_visibility(
        ctx,
        RawAgentVisibility {
            policies: raw.policies,
            fallback_policy: raw.fallback_policy,
            grants: raw.grants,
            probe_budget: raw.probe_budget,
        },
    )?;

    let mut tools = Vec::new();
    let mut tool_names: BTreeSet<String> = BTreeSet::new();
    for (i, t) in raw.tools.unwrap_or_default().into_iter().enumerate() {
        let at = Pos::of(&t);
        let t = t.value;
        let key = root.key("tools").index(i);
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
            .map(|a| convert_tool_auth(ctx, &key.key("auth"), a, &visibility.policies))
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

    let mut env = BTreeMap::new();
    for (k, v) in raw.env.unwrap_or_default().0 {
        let key = root.key("env").key(&k.value);
        // These become process environment variables of the agent's tools: the OS refuses
        // `=` in a name and NUL anywhere.
        if k.value.is_empty() || k.value.contains('=') || k.value.contains('\0') {
            return Err(ctx.invalid(
                Pos::of(&k),
                &key,
                "environment variable names must be non-empty and contain no `=` or NUL",
            ));
        }
        if v.value.contains('\0') {
            return Err(ctx.invalid(Pos::of(&v), &key, "environment values must not contain NUL"));
        }
        env.insert(k.value, v.value);
    }

    let limits = convert_limits(ctx, &root, raw.limits)?;
    let agent = AgentConfig {
        name,
        limits,
        description: raw.description.unwrap_or_default(),
        can_call,
        accept_from,
        model,
        tools,
        env,
        dir,
        file,
        visibility,
    };
    Ok((agent, spans))
}

fn convert_limits(
    ctx: Ctx<'_>,
    root: &KeyPath,
    raw: Option<RawLimits>,
) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    let Some(raw) = raw else {
        return Ok(limits);
    };
    let bounded = |value: Option<Spanned<u64>>, key: &str, max: u32| match value {
        None => Ok(None),
        Some(v) if v.value >= 1 && v.value <= u64::from(max) => Ok(Some(v.value as u32)),
        Some(v) => Err(ctx.invalid(
            Pos::of(&v),
            &root.key("limits").key(key),
            format!("must be between 1 and {max} (got {})", v.value),
        )),
    };
    if let Some(depth) = bounded(raw.max_depth, "max_depth", Limits::MAX_DEPTH_BOUND)? {
        limits.max_depth = depth;
    }
    if let Some(calls) = bounded(
        raw.max_calls_per_run,
        "max_calls_per_run",
        Limits::MAX_CALLS_BOUND,
    )? {
        limits.max_calls_per_run = calls;
    }
    Ok(limits)
}

fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn peer_list(
    ctx: Ctx<'_>,
    me: &str,
    list: &str,
    entries: Vec<Spanned<String>>,
    spans: &mut Vec<Pos>,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        let key = KeyPath::root().key("agents").key(list).index(i);
        let at = Pos::of(&e);
        let n = e.value;
        if !is_valid_name(&n) {
            return Err(ctx.invalid(at, &key, name_problem(&n)));
        }
        if n == me {
            return Err(ctx.invalid(
                at,
                &key,
                format!("an agent cannot name itself (`{n}`) as a peer"),
            ));
        }
        if out.contains(&n) {
            return Err(ctx.invalid(at, &key, format!("`{n}` is listed twice")));
        }
        out.push(n);
        spans.push(at);
    }
    Ok(out)
}

fn convert_model(ctx: Ctx<'_>, model: Spanned<RawModel>) -> Result<ModelConfig, ConfigError> {
    let RawModel::Script(steps) = model.value;
    let base = KeyPath::root().key("model").key("script");
    let mut out = Vec::new();
    for (i, step) in steps.unwrap_or_default().into_iter().enumerate() {
        let key = base.index(i);
        out.push(match step.value {
            RawStep::Answer(t) => ScriptStep::Answer(t),
            RawStep::Check(t) => ScriptStep::Check(t),
            RawStep::Search(s) => ScriptStep::Search {
                query: s.query,
                limit: s.limit,
            },
            RawStep::Load(name) => ScriptStep::Load(name),
            RawStep::Invoke(i) => ScriptStep::Invoke {
                name: i.name,
                arguments: i
                    .arguments
                    .unwrap_or_else(|| serde_json::Value::Object(Default::default())),
            },
            RawStep::Tool(t) => ScriptStep::Tool(ToolStep {
                name: t.name,
                input: t.input,
            }),
            RawStep::Call(calls) => {
                if calls.value.is_empty() {
                    return Err(ctx.invalid(
                        Pos::of(&calls),
                        &key.key("call"),
                        "a `call` step needs at least one entry",
                    ));
                }
                let mut entries = Vec::new();
                for (j, c) in calls.value.into_iter().enumerate() {
                    let c = c.value;
                    let count = match c.count {
                        None => 1,
                        Some(n) if (1..=MAX_CALL_COUNT).contains(&n.value) => n.value as u32,
                        Some(n) => {
                            return Err(ctx.invalid(
                                Pos::of(&n),
                                &key.key("call").index(j).key("count"),
                                format!(
                                    "count {} is out of range; expected 1 to {MAX_CALL_COUNT}",
                                    n.value
                                ),
                            ));
                        }
                    };
                    let wait_s = match c.wait_s {
                        None => None,
                        Some(w) if (1..=u64::from(MAX_WAIT_S)).contains(&w.value) => {
                            Some(w.value as u32)
                        }
                        Some(w) => {
                            return Err(ctx.invalid(
                                Pos::of(&w),
                                &key.key("call").index(j).key("wait_s"),
                                format!(
                                    "wait_s {} is out of range; expected 1 to {MAX_WAIT_S}",
                                    w.value
                                ),
                            ));
                        }
                    };
                    entries.push(CallStep {
                        agent: c.agent,
                        input: c.input,
                        count,
                        wait_s,
                    });
                }
                ScriptStep::Call(entries)
            }
        });
    }
    Ok(ModelConfig::Script { steps: out })
}

// ---------------------------------------------------------------------------------------------
// Sets of agents.

/// The agent folders `path` stands for: itself when it holds an `agent.yaml`, else each direct
/// subfolder that holds one, sorted by folder name.
pub(crate) fn agent_dirs(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let io = |source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a folder",
        )));
    }
    if path.join(AGENT_FILE).is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        let p = entry.path();
        if p.is_dir() && p.join(AGENT_FILE).is_file() {
            dirs.push(p);
        }
    }
    if dirs.is_empty() {
        return Err(ConfigError::NoAgents {
            path: path.to_path_buf(),
        });
    }
    dirs.sort();
    Ok(dirs)
}

/// Why [`SetBuilder::add_path`] failed: the fleet loader words duplicates in terms of hosts.
pub(crate) enum AddError {
    Config(ConfigError),
    Duplicate { name: String, error: ConfigError },
}

impl From<ConfigError> for AddError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<AddError> for ConfigError {
    fn from(e: AddError) -> Self {
        match e {
            AddError::Config(e) | AddError::Duplicate { error: e, .. } => e,
        }
    }
}

/// Builds a set from loaded agents: refuses duplicate names (naming both files) and peers that
/// are neither in the set nor in `known_remote`.
pub(crate) struct SetBuilder {
    agents: BTreeMap<String, AgentConfig>,
    spans: BTreeMap<String, PeerSpans>,
}

impl SetBuilder {
    pub(crate) fn new() -> Self {
        Self {
            agents: BTreeMap::new(),
            spans: BTreeMap::new(),
        }
    }

    /// Loads every agent under `path` (see [`agent_dirs`]); returns the names added.
    pub(crate) fn add_path(&mut self, path: &Path) -> Result<Vec<String>, AddError> {
        let mut added = Vec::new();
        for dir in agent_dirs(path)? {
            let (agent, spans) = load_agent(&dir)?;
            if let Some(first) = self.agents.get(&agent.name) {
                let name = agent.name.clone();
                let error = Ctx { file: &agent.file }.invalid(
                    spans.name,
                    &KeyPath::root().key("name"),
                    format!(
                        "duplicate agent name `{}`: also declared in {}",
                        agent.name,
                        first.file.display()
                    ),
                );
                return Err(AddError::Duplicate { name, error });
            }
            added.push(agent.name.clone());
            self.spans.insert(agent.name.clone(), spans);
            self.agents.insert(agent.name.clone(), agent);
        }
        Ok(added)
    }

    pub(crate) fn finish(self, known_remote: &[String]) -> Result<AgentSet, ConfigError> {
        for remote in known_remote {
            if let Some(a) = self.agents.get(remote) {
                let at = self.spans.get(remote).map_or(Pos::START, |s| s.name);
                return Err(Ctx { file: &a.file }.invalid(
                    at,
                    &KeyPath::root().key("name"),
                    format!("agent `{remote}` is also served by another host of the fleet"),
                ));
            }
        }
        let mut known: BTreeSet<&str> = self.agents.keys().map(String::as_str).collect();
        known.extend(known_remote.iter().map(String::as_str));
        for (name, agent) in &self.agents {
            if let Some(spans) = self.spans.get(name) {
                check_peers_exist(agent, spans, &known)?;
            }
        }
        Ok(AgentSet {
            agents: self.agents,
        })
    }
}

fn check_peers_exist(
    agent: &AgentConfig,
    spans: &PeerSpans,
    known: &BTreeSet<&str>,
) -> Result<(), ConfigError> {
    let ctx = Ctx { file: &agent.file };
    for (list, names, positions) in [
        ("can_call", &agent.can_call, &spans.can_call),
        ("accept_from", &agent.accept_from, &spans.accept_from),
    ] {
        for (i, n) in names.iter().enumerate() {
            if !known.contains(n.as_str()) {
                let at = positions.get(i).copied().unwrap_or(Pos::START);
                let listed: Vec<String> = known.iter().map(|s| s.to_string()).collect();
                return Err(ctx.invalid(
                    at,
                    &KeyPath::root().key("agents").key(list).index(i),
                    format!(
                        "no agent named `{n}` (known agents: {})",
                        known_list(&listed)
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl AgentSet {
    /// Loads every agent under `paths`. Each path is an agent folder (it holds `agent.yaml`)
    /// or a folder of agent folders (each direct subfolder holding `agent.yaml`, in name order).
    /// Then checks the set: names are unique, and every `can_call` / `accept_from` entry names
    /// an agent of the set.
    pub fn load(paths: &[PathBuf]) -> Result<Self, ConfigError> {
        Self::load_with_peers(paths, &[])
    }

    /// As [`AgentSet::load`], for one host of a multi-host fleet: names in `known_remote` (the
    /// agents other hosts serve) also count as existing peers. A local agent that is also in
    /// `known_remote` is an error.
    pub fn load_with_peers(
        paths: &[PathBuf],
        known_remote: &[String],
    ) -> Result<Self, ConfigError> {
        let mut b = SetBuilder::new();
        for p in paths {
            b.add_path(p).map_err(ConfigError::from)?;
        }
        b.finish(known_remote)
    }

    /// The agent with this name, if the set holds it.
    pub fn get(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.get(name)
    }

    /// Agent names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }

    /// How many agents the set holds.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True when the set holds no agent.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    /// Re-reads the `agent.yaml` of agent `name` (after an edit) and checks it against the
    /// set: the name must not change, and every peer it names must be in the set. The set
    /// itself is not changed; the caller swaps the result in.
    pub fn reload_one(&self, name: &str) -> Result<AgentConfig, ConfigError> {
        self.reload_one_with_peers(name, &[])
    }

    /// As [`AgentSet::reload_one`], where names in `known_remote` also count as existing peers
    /// (the set does not remember them: it holds this host's agents only).
    pub fn reload_one_with_peers(
        &self,
        name: &str,
        known_remote: &[String],
    ) -> Result<AgentConfig, ConfigError> {
        let Some(current) = self.agents.get(name) else {
            return Err(ConfigError::UnknownAgent {
                name: name.to_owned(),
                known: self.names(),
            });
        };
        let (agent, spans) = load_agent(&current.dir)?;
        if agent.name != name {
            return Err(Ctx { file: &agent.file }.invalid(
                spans.name,
                &KeyPath::root().key("name"),
                format!(
                    "the agent's name changed from `{name}` to `{}`; a rename needs a restart",
                    agent.name
                ),
            ));
        }
        let mut known: BTreeSet<&str> = self.agents.keys().map(String::as_str).collect();
        known.extend(known_remote.iter().map(String::as_str));
        check_peers_exist(&agent, &spans, &known)?;
        Ok(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const CFO: &str = "\
name: cfo
description: Answers questions about spend from the ledger
agents:
  can_call: [analyst]
  accept_from: [cmo]
model:
  script:
    - tool: {name: ledger, input: \"SELECT sum(amount) FROM spend WHERE month = '{input}'\"}
    - call: [{agent: analyst, input: \"check {input}\"}, {agent: analyst, input: \"x\", count: 3}]
    - check: \"{call.analyst}\"
    - answer: \"August spend: {tool.ledger}\"
tools:
  - name: ledger
    description: Read-only SQL over the finance ledger
    kind: sql
    database: ledger.db
    approval: required
env:
  LEDGER_REGION: eu
";

    fn agent_dir(root: &Path, name: &str, yaml: &str) -> PathBuf {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(AGENT_FILE), yaml).unwrap();
        d
    }

    fn simple(name: &str, can_call: &[&str], accept_from: &[&str]) -> String {
        format!(
            "name: {name}\nagents:\n  can_call: [{}]\n  accept_from: [{}]\nmodel:\n  script:\n    - answer: hi\n",
            can_call.join(", "),
            accept_from.join(", ")
        )
    }

    fn load_text(yaml: &[u8]) -> Result<AgentConfig, ConfigError> {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(AGENT_FILE), yaml).unwrap();
        fs::write(d.join("ledger.db"), b"").unwrap();
        AgentConfig::load(&d)
    }

    /// (variant, line, column, key, message) of an error.
    fn parts(e: &ConfigError) -> (&'static str, u64, u64, String, String) {
        match e {
            ConfigError::Syntax {
                line,
                column,
                message,
                ..
            } => ("syntax", *line, *column, String::new(), message.clone()),
            ConfigError::Schema {
                line,
                column,
                key,
                message,
                ..
            } => ("schema", *line, *column, key.clone(), message.clone()),
            ConfigError::Invalid {
                line,
                column,
                key,
                message,
                ..
            } => ("invalid", *line, *column, key.clone(), message.clone()),
            other => panic!("unexpected error {other}"),
        }
    }

    fn err(yaml: &str) -> (&'static str, u64, u64, String, String) {
        match load_text(yaml.as_bytes()) {
            Ok(a) => panic!("accepted: {a:?}"),
            Err(e) => {
                eprintln!("{e}");
                parts(&e)
            }
        }
    }

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
                    database: dir.join("ledger.db")
                },
                approval: Approval::Required,
                auth: None,
                guard: None,
            }]
        );
        let ModelConfig::Script { steps } = &a.model;
        assert_eq!(
            steps,
            &vec![
                ScriptStep::Tool(ToolStep {
                    name: "ledger".into(),
                    input: "SELECT sum(amount) FROM spend WHERE month = '{input}'".into()
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
    fn unknown_keys_are_schema_errors_with_the_allowed_ones() {
        let (k, l, c, key, msg) = err("name: cfo\nagents:\n  can_cal: [x]\nmodel:\n  script: []\n");
        assert_eq!((k, l, c, key.as_str()), ("schema", 3, 3, "agents.can_cal"));
        assert_eq!(
            msg,
            "unknown key `can_cal` in `agents`; expected one of `can_call`, `accept_from`"
        );

        let (k, l, c, key, msg) = err(
            "name: x\nmodel:\n  script: []\ntools:\n  - name: t\n    kind: sql\n    databse: a\n",
        );
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
        assert_eq!(msg, "unknown value `sqll`; expected one of `sql`");

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
        assert_eq!((k, l, c, key.as_str()), ("schema", 4, 3, "model"));

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

        let (k, l, c, key, msg) =
            err("name: x\nagents:\n  can_call: [a, x]\nmodel:\n  script: []\n");
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
        let (k, l, c, key, msg) =
            err("name: x\nagents:\n  can_call: [a, a]\nmodel:\n  script: []\n");
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

        let tools = "name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: ledger.db}\n";
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
        let (k, l, c, key, msg) = err(
            "name: x\nmodel:\n  script: []\ntools:\n  - {name: t, kind: sql, database: nope.db}\n",
        );
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
        let a = load_text(
            b"name: x\nmodel:\n  script:\n    - call: [{agent: a, input: b, count: 1000}]\n",
        )
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
        let e =
            load_text(b"name: x\nagents:\n  can_call: [a, x]\nmodel:\n  script: []\n").unwrap_err();
        let s = e.to_string();
        assert!(s.ends_with("/a/agent.yaml:3:17: agents.can_call[1]: an agent cannot name itself (`x`) as a peer"), "{s}");
    }

    // ---- sets -------------------------------------------------------------------------------

    #[test]
    fn set_from_agent_folders_and_folders_of_folders() {
        let t = tempfile::tempdir().unwrap();
        let fleet = t.path().join("agents");
        agent_dir(&fleet, "cmo", &simple("cmo", &["cfo"], &[]));
        agent_dir(&fleet, "cfo", &simple("cfo", &[], &["cmo", "solo"]));
        fs::create_dir_all(fleet.join("not-an-agent")).unwrap();
        fs::write(fleet.join("README"), "x").unwrap();
        let solo = agent_dir(t.path(), "solo", &simple("solo", &["cfo"], &[]));
        let set = AgentSet::load(&[fleet, solo]).unwrap();
        assert_eq!(set.names(), vec!["cfo", "cmo", "solo"]);
        assert_eq!(
            set.get("cmo").map(|a| a.can_call.clone()),
            Some(vec!["cfo".to_string()])
        );
        assert!(set.get("nope").is_none());
        assert_eq!(
            set.get("cfo").map(|a| a.accept_from.clone()),
            Some(vec!["cmo".to_string(), "solo".to_string()])
        );
    }

    #[test]
    fn set_errors() {
        let t = tempfile::tempdir().unwrap();
        let empty = t.path().join("empty");
        fs::create_dir(&empty).unwrap();
        assert!(
            matches!(AgentSet::load(std::slice::from_ref(&empty)), Err(ConfigError::NoAgents { path }) if path == empty)
        );
        let missing = t.path().join("missing");
        assert!(matches!(
            AgentSet::load(&[missing]),
            Err(ConfigError::Io { .. })
        ));
        let file = t.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            AgentSet::load(&[file]),
            Err(ConfigError::Io { .. })
        ));
    }

    #[test]
    fn duplicate_names_name_both_files() {
        let t = tempfile::tempdir().unwrap();
        let a = agent_dir(t.path(), "one", &simple("cfo", &[], &[]));
        let b = agent_dir(t.path(), "two", &simple("cfo", &[], &[]));
        let e = AgentSet::load(&[a, b]).unwrap_err();
        let (k, l, c, key, msg) = parts(&e);
        assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
        assert!(e.file().is_some_and(|f| f.ends_with("two/agent.yaml")));
        assert!(msg.contains("one/agent.yaml"), "{msg}");
        // The same folder twice is the same agent twice.
        let a = t.path().join("one");
        assert!(AgentSet::load(&[a.clone(), a]).is_err());
    }

    #[test]
    fn unknown_peers_list_the_known_agents() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("agents");
        agent_dir(&root, "cfo", &simple("cfo", &[], &["cmo"]));
        agent_dir(
            &root,
            "cmo",
            "name: cmo\nagents:\n  can_call: [cfx]\nmodel:\n  script: []\n",
        );
        let e = AgentSet::load(std::slice::from_ref(&root)).unwrap_err();
        let (k, l, c, key, msg) = parts(&e);
        assert_eq!(
            (k, l, c, key.as_str()),
            ("invalid", 3, 14, "agents.can_call[0]")
        );
        assert_eq!(msg, "no agent named `cfx` (known agents: cfo, cmo)");
        assert!(e.to_string().ends_with(
            "cmo/agent.yaml:3:14: agents.can_call[0]: no agent named `cfx` (known agents: cfo, cmo)"
        ));

        agent_dir(&root, "cmo", &simple("cmo", &[], &["ghost"]));
        let (k, l, c, key, _) = parts(&AgentSet::load(std::slice::from_ref(&root)).unwrap_err());
        assert_eq!(
            (k, l, c, key.as_str()),
            ("invalid", 4, 17, "agents.accept_from[0]")
        );

        // A remote peer makes the name known; a remote name that is also local is an error.
        let set =
            AgentSet::load_with_peers(std::slice::from_ref(&root), &["ghost".into()]).unwrap();
        assert_eq!(set.len(), 2);
        let e = AgentSet::load_with_peers(&[root], &["ghost".into(), "cfo".into()]).unwrap_err();
        let (k, l, c, key, _) = parts(&e);
        assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
    }

    #[test]
    fn reload_one() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("agents");
        agent_dir(&root, "cfo", &simple("cfo", &[], &["cmo"]));
        let cmo = agent_dir(&root, "cmo", &simple("cmo", &["cfo"], &[]));
        let set = AgentSet::load(&[root]).unwrap();

        fs::write(cmo.join(AGENT_FILE), simple("cmo", &[], &["cfo"])).unwrap();
        let a = set.reload_one("cmo").unwrap();
        assert_eq!(a.accept_from, vec!["cfo"]);
        assert!(a.can_call.is_empty());
        assert_eq!(
            set.get("cmo").map(|a| a.can_call.len()),
            Some(1),
            "the set is unchanged"
        );

        fs::write(cmo.join(AGENT_FILE), simple("cmx", &[], &[])).unwrap();
        let (k, l, c, key, msg) = parts(&set.reload_one("cmo").unwrap_err());
        assert_eq!((k, l, c, key.as_str()), ("invalid", 1, 7, "name"));
        assert!(msg.contains("`cmo` to `cmx`"), "{msg}");

        fs::write(cmo.join(AGENT_FILE), simple("cmo", &["nobody"], &[])).unwrap();
        let (k, l, c, key, _) = parts(&set.reload_one("cmo").unwrap_err());
        assert_eq!(
            (k, l, c, key.as_str()),
            ("invalid", 3, 14, "agents.can_call[0]")
        );
        assert!(set.reload_one_with_peers("cmo", &["nobody".into()]).is_ok());

        fs::write(cmo.join(AGENT_FILE), "name: cmo\n  bad: [").unwrap();
        assert!(matches!(
            set.reload_one("cmo"),
            Err(ConfigError::Syntax { .. })
        ));

        assert!(
            matches!(set.reload_one("zzz"), Err(ConfigError::UnknownAgent { name, known }) if name == "zzz" && known == vec!["cfo", "cmo"])
        );
    }

    const VISIBLE: &str = "\
name: cfo
policies:
  finance_team: {roles: [finance]}
  the_cmo: {principals: [agent:cmo]}
  per_row: {needs_resource: true}
fallback_policy: finance_team
grants: {cmo: [marketing], analyst: [finance, finance]}
probe_budget: 3
model:
  script:
    - search: {query: \"pay {input}\", limit: 5}
    - load: payroll
    - invoke: {name: payroll, arguments: {query: \"SELECT 1\"}}
    - answer: done
tools:
  - name: payroll
    kind: sql
    database: ledger.db
    auth: {policies: [\"roles:finance,hr\", finance_team]}
    guard: {kind: feature, enabled: false, message: payroll is closed}
  - name: ledger
    kind: sql
    database: ledger.db
    auth: {anonymous: true}
    guard: {kind: quota, max_uses: 2}
";

    #[test]
    fn loads_visibility_declarations_and_meta_tool_steps() {
        let a = load_text(VISIBLE.as_bytes()).unwrap();
        let v = &a.visibility;
        assert_eq!(v.policies["finance_team"].roles, vec!["finance"]);
        assert_eq!(v.policies["the_cmo"].principals, vec!["agent:cmo"]);
        assert!(v.policies["per_row"].needs_resource);
        assert_eq!(v.fallback_policy.as_deref(), Some("finance_team"));
        assert_eq!(v.grants["cmo"], vec!["marketing"]);
        assert_eq!(v.grants["analyst"], vec!["finance"], "duplicates folded");
        assert_eq!(v.probe_budget, 3);
        assert_eq!(
            a.tools[0].auth,
            Some(ToolAuthConfig {
                anonymous: false,
                policies: vec!["roles:finance,hr".into(), "finance_team".into()],
            })
        );
        assert_eq!(
            a.tools[0].guard,
            Some(GuardConfig::Feature {
                enabled: false,
                message: "payroll is closed".into()
            })
        );
        assert_eq!(a.tools[1].guard, Some(GuardConfig::Quota { max_uses: 2 }));
        assert!(a.tools[1].auth.as_ref().is_some_and(|x| x.anonymous));
        let ModelConfig::Script { steps } = &a.model;
        assert_eq!(
            steps[0],
            ScriptStep::Search {
                query: "pay {input}".into(),
                limit: Some(5)
            }
        );
        assert_eq!(steps[1], ScriptStep::Load("payroll".into()));
        assert_eq!(
            steps[2],
            ScriptStep::Invoke {
                name: "payroll".into(),
                arguments: serde_json::json!({"query": "SELECT 1"})
            }
        );
        let plain = load_text(simple("x", &[], &[]).as_bytes()).unwrap();
        assert_eq!(plain.visibility, VisibilityConfig::default());
        assert_eq!(plain.visibility.probe_budget, 25);
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

    #[test]
    fn bad_visibility_input_names_line_and_key() {
        let with = |from: &str, to: &str| {
            assert!(VISIBLE.contains(from), "{from}");
            VISIBLE.replace(from, to)
        };
        // A value outside the descriptor's schema.
        let (k, l, _, key, _) = err(&with("auth: {anonymous: true}", "auth: {anonymous: maybe}"));
        assert_eq!(
            (k, l, key.as_str()),
            ("schema", 24, "tools[1].auth.anonymous")
        );
        // An unknown key in an auth block.
        let (k, _, _, key, msg) = err(&with("auth: {anonymous: true}", "auth: {anon: true}"));
        assert_eq!((k, key.as_str()), ("schema", "tools[1].auth.anon"), "{msg}");
        // A policy name no config defines.
        let (k, l, _, key, msg) = err(&with("finance_team]}\n    guard", "finanse]}\n    guard"));
        assert_eq!(
            (k, l, key.as_str()),
            ("invalid", 19, "tools[0].auth.policies[1]")
        );
        assert!(msg.contains("no policy named `finanse`"), "{msg}");
        assert!(msg.contains("finance_team"), "{msg}");
        // A role policy with an empty name list.
        for empty in ["roles:", "roles:finance,,hr", "roles: ,"] {
            let (k, _, _, key, msg) = err(&with("roles:finance,hr", empty));
            assert_eq!((k, key.as_str()), ("invalid", "tools[0].auth.policies[0]"));
            assert!(msg.contains("at least one non-empty role name"), "{msg}");
        }
        let (_, _, _, key, msg) = err(&with(
            "fallback_policy: finance_team",
            "fallback_policy: nope",
        ));
        assert_eq!(key, "fallback_policy");
        assert!(msg.contains("no policy named `nope`"), "{msg}");
        let (_, _, _, key, msg) = err(&with("per_row: {needs_resource: true}", "per_row: {}"));
        assert_eq!(key, "policies.per_row");
        assert!(msg.contains("requires nothing"), "{msg}");
        let (_, _, _, key, msg) = err(&with("[agent:cmo]", "[boss:cmo]"));
        assert_eq!(key, "policies.the_cmo.principals[0]");
        assert!(msg.contains("unknown principal form"), "{msg}");
        let (k, _, _, key, _) = err(&with("kind: quota, max_uses: 2", "kind: quota"));
        assert_eq!((k, key.as_str()), ("schema", "tools[1].guard.max_uses"));
        let (k, _, _, key, _) = err(&with("kind: quota", "kind: licence"));
        assert_eq!((k, key.as_str()), ("schema", "tools[1].guard.kind"));
        let (_, _, _, key, _) = err(&with("probe_budget: 3", "probe_budget: 5000"));
        assert_eq!(key, "probe_budget");
        let (_, _, _, key, _) = err(&with("grants: {cmo:", "grants: {Bad Name:"));
        assert_eq!(key, "grants.Bad Name");
        let (k, _, _, key, _) = err(&with("limit: 5}", "limit: 5, extra: 1}"));
        assert_eq!(
            (k, key.as_str()),
            ("schema", "model.script[0].search.extra")
        );
    }
}
