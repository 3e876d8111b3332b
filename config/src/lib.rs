//! consort-config: the declarations an operator writes, read and checked.
//!
//! This crate owns `agent.yaml` (one agent: its peers, model, tools and env), `fleet.yaml`
//! (hosts, their keys, the agents each serves and where it stores their runs, and the
//! operators' keys), the goals that scope the peer directory
//! (`goals`: named sets of agents that may see each other, and the directory's settings;
//! declared in fleet.yaml or in the `goals.yaml` of a `consort dev` folder), the
//! tool-visibility declarations of agent.yaml (`visibility`) and the host auth file of HTTP
//! bearer tokens (`host_auth`).
//! It parses and validates; every error names the file, line, column and key. It decides
//! nothing: what the declarations mean for a call (consent, guards) is consort-core's. It must
//! never start anything, open a network connection or touch a run store: it is plain data in,
//! plain data (or a typed error) out.

mod agent;
mod error;
mod fleet;
mod goals;
mod host_auth;
mod visibility;
mod yaml;

pub use agent::{
    A2aAgentConfig, AgentConfig, AgentConfigBuilder, AgentSet, AllowedNetworks, Approval, CallStep,
    CommandModel, DEFAULT_A2A_TIMEOUT_MS, DEFAULT_SQL_TIMEOUT_MS, FileStamp, Limits,
    MAX_A2A_TIMEOUT_MS, MAX_SQL_TIMEOUT_MS, MAX_WAIT_S, MIN_A2A_TIMEOUT_MS, ModelConfig,
    OpenAiModel, ScriptStep, SnapshotReport, ToolChoice, ToolConfig, ToolKind, ToolStep,
    TreeLimits, check_name,
};
pub use agent::{
    DEFAULT_MCP_CONNECT_TIMEOUT_MS, DEFAULT_MCP_TIMEOUT_MS, MAX_MCP_TIMEOUT_MS, MCP_TOOL_SEPARATOR,
    McpServerConfig, McpTransport,
};
pub use error::ConfigError;
pub use fleet::{FleetAgents, FleetConfig, HostConfig, OperatorConfig, StoreConfig};
pub use goals::{DirectorySettings, GoalConfig, GoalsConfig, load_dev_goals};
pub use host_auth::{
    AnonymousAccess, HostAuthConfig, IdentityHookConfig, TokenConfig, TokenSecret,
};
pub use visibility::{GrantConfig, GuardConfig, PolicyConfig, ToolAuthConfig, VisibilityConfig};
