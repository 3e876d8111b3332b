//! consort: a runtime for fleets of AI agents that delegate to each other across hosts.
//!
//! This facade is what an app that embeds consort needs, and no more: a [`Host`] built from a
//! [`HostSpec`] ([`HostSpec::builder`]) over agents declared in folders ([`AgentSet::load`]) or
//! in code ([`AgentConfig::builder`], [`AgentSet::from_agents`]); the [`Model`] and [`Tool`]
//! traits an app implements to give agents models and tools of its own, with what
//! implementing them takes; the records a host's reads return; and the typed errors. Start
//! with [`Host::spawn_linked`] to put a host under your own ractor supervisor; see
//! `examples/embedded`.
//!
//! Every item is named at this root, one `pub use` per line: the list is checked against
//! `tests/public_api.txt` (see `tests/public_api.rs`), so a change to what an embedder can
//! name shows up as a diff in review. The crates behind it (`consort-config`, `consort-core`,
//! `consort-models`, `consort-net`, `consort-actors`, `consort-fleet`) are not re-exported
//! whole: what they make public for one another (the link glue, the HTTP API, the CLI) is not
//! a promise to embedders. The CLI binary uses them directly.

// The host and how it is built.
pub use consort_actors::AgentOptions;
pub use consort_actors::Decided;
pub use consort_actors::FolderLock;
pub use consort_actors::Host;
pub use consort_actors::HostSpec;
pub use consort_actors::HostSpecBuilder;
pub use consort_actors::RestartBudget;
pub use consort_actors::store::OnHeld;
pub use consort_actors::store::PostgresUrl;
pub use consort_actors::store::StoreBackend;
pub use consort_actors::store::StoreLease;
pub use consort_actors::supervisor::AgentStatus;
pub use consort_actors::supervisor::Reloaded;
pub use consort_actors::visibility::Identity;
pub use consort_fleet::McpClient;

// Agents, declared in code or read from their folders.
pub use consort_config::AgentConfig;
pub use consort_config::AgentConfigBuilder;
pub use consort_config::AgentSet;
pub use consort_config::CallStep;
pub use consort_config::Limits;
pub use consort_config::ModelConfig;
pub use consort_config::ScriptStep;
pub use consort_config::ToolStep;
pub use consort_config::TreeLimits;

// Runs, as a host's reads return them.
pub use consort_actors::Channel;
pub use consort_actors::Cost;
pub use consort_actors::EventRecord;
pub use consort_actors::RunCounts;
pub use consort_actors::RunRecord;
pub use consort_actors::RunStatus;
pub use consort_core::RunId;

// A model of the app's own: the trait and what implementing it takes.
pub use consort_models::Message;
pub use consort_models::Model;
pub use consort_models::ModelFuture;
pub use consort_models::ModelReply;
pub use consort_models::ModelRequest;
pub use consort_models::ModelStep;
pub use consort_models::ToolSpec;
pub use consort_models::ToolUse;

// A tool of the app's own: the trait and what implementing it takes.
pub use consort_actors::tools::Tool;
pub use consort_actors::tools::ToolContext;
pub use consort_actors::tools::ToolFuture;
pub use consort_actors::tools::ToolServers;

// Typed errors (each `#[non_exhaustive]`), and the refusal a refused request carries.
pub use consort_actors::ActorsError;
pub use consort_actors::tools::ToolError;
pub use consort_config::ConfigError;
pub use consort_core::Refusal;
pub use consort_fleet::FleetError;
pub use consort_models::ModelError;
