//! `agent.yaml`: one agent's declaration.
//!
//! TYPES ONLY for now: parsing and validation are being written (see the crate docs).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// One agent, as declared in its folder's `agent.yaml`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentConfig {
    pub name: String,
    pub description: String,
    /// Peers this agent's model may call (`agents.can_call`).
    pub can_call: Vec<String>,
    /// Peers this agent consents to serve (`agents.accept_from`).
    pub accept_from: Vec<String>,
    pub model: ModelConfig,
    pub tools: Vec<ToolConfig>,
    /// Visible to this agent's own tools only.
    pub env: BTreeMap<String, String>,
    /// The agent's folder, absolute.
    pub dir: PathBuf,
    /// The `agent.yaml` file, absolute.
    pub file: PathBuf,
}

/// Which model drives the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    /// The deterministic script model: step `i` is played on the agent's `i`-th model turn.
    Script { steps: Vec<ScriptStep> },
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
}

#[derive(Clone, Debug, PartialEq)]
pub struct CallStep {
    pub agent: String,
    pub input: String,
    /// How many calls this entry places (default 1, at least 1).
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolStep {
    pub name: String,
    pub input: String,
}

/// A tool declared in `agent.yaml`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolConfig {
    pub name: String,
    pub description: String,
    pub kind: ToolKind,
    pub approval: Approval,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolKind {
    /// A read-only SQL query against a SQLite file that belongs to the agent.
    Sql { database: PathBuf },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Approval {
    #[default]
    None,
    Required,
}

/// The agents one host serves (or one fleet declares), by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentSet {
    pub agents: BTreeMap<String, AgentConfig>,
}
