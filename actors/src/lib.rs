//! consort-actors: one host's agents, as supervised actors, and the runs they execute.
//!
//! The crate owns the host supervisor ([`supervisor`]), one actor per agent (`agent`), the
//! run engine inside it, the model and tool seams ([`model`], [`tools`], [`script`]), the call
//! guards (from consort-core),
//! the restart budget and the store probe's backoff (`restart`) and each agent's own SQLite
//! run store ([`store`]). Tool
//! visibility: the pure decisions ([`visibility`], from consort-core; reading the operator
//! command's files is `visibility_files`), tool guards (`guard`) and the one authorization
//! pipeline with its T2 probe (`tool_guard`), and the meta-tools over an agent's catalog
//! (`meta_tools`). Each run's span, a child of the span that placed its call on any host, is
//! [`run_span`]. The
//! typed handle [`Host`] is what apps, the CLI and the HTTP API drive.
//!
//! It never opens a network socket and never parses YAML: config comes from consort-config,
//! envelopes from consort-net, and links to other hosts plug in through
//! [`supervisor::RemoteCalls`], remote A2A agents through [`a2a::A2aCalls`].

pub mod a2a;
mod agent;
mod agent_options;
mod asker;
mod data;
mod declared_model;
pub mod directory;
mod error;
mod fault;
pub mod feed;
mod guard;
mod host;
mod inbox;
mod meta_tools;
pub mod metrics;
pub mod page;
/// The model seam and the real-model adapters (consort-models).
pub use consort_models as model;
mod presence;
mod restart;
mod routing;
pub mod run;
pub mod run_span;
pub mod script;
pub mod store;
pub mod supervisor;
mod tool_guard;
pub mod tools;
mod visibility_files;

/// Tool visibility's pure decisions live in consort-core; re-exported so
/// `consort_actors::visibility::…` and `crate::visibility::…` keep working.
pub use consort_core::visibility;

pub use agent_options::AgentOptions;
pub use consort_core::step::CallOutcome;
pub use data::DataFolder;
pub use error::ActorsError;
pub use feed::{RunChange, RunFeed};
pub use guard::{Guard, GuardContext, GuardVerdict};
pub use host::{Decided, Host};
pub use inbox::HostInbox;
pub use meta_tools::{AgentCatalog, MetaAnswer};
pub use presence::PresenceBoard;
pub use restart::{ProbeBackoff, RestartBudget};
pub use run::{Channel, Cost, EventRecord, RunCounts, RunRecord, RunStatus};
pub use store::FolderLock;
pub use supervisor::{HostSpec, HostSpecBuilder};
pub use visibility_files::visibility_from_files;
