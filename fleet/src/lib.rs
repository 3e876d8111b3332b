//! consort-fleet: a consort host put together, and the surfaces that reach it.
//!
//! This crate assembles a [`consort_actors::Host`] from agent folders ([`dev`]), serves its
//! HTTP API on loopback (`api`) and offers the Rust client SDK that talks to that API
//! (`client`). A host of a multi-host fleet is assembled by `serve`, whose links to the
//! other hosts are `remote`; an operator's fleet commands to those hosts, both ends, are
//! [`operator`]. Every host's API also serves the dashboard, a web page that reads the same
//! routes (`dashboard`). Calls from its agents to remote A2A agents go out through
//! [`a2a_client`]; agents reach the MCP servers their `kind: mcp` tools declare through the
//! host's MCP client (`mcp_tools`). The CLI is one user of these; an embedding app is another. The crate
//! decides no call rules itself (they live in consort-core's guards) and never touches a run
//! store except through the host handle or the read-only data folder.

pub mod a2a_client;
pub mod access;
mod api;
pub use api::WaitingGate;
mod auth;
pub mod bounds;
mod client;
mod dashboard;
pub mod dev;
mod error;
pub mod listener;
mod mcp_tools;
mod metrics_route;
pub mod operator;
pub mod outbound;
mod remote;
mod serve;
mod trace_header;

pub use auth::HostAuth;
pub use client::Client;
pub use error::FleetError;
pub use mcp_tools::McpClient;
pub use metrics_route::{
    CONTENT_TYPE_PROMETHEUS, MetricsExport, UPKEEP_EVERY, prometheus_builder, run_upkeep,
};
pub use remote::{FleetMap, LinkRemote};
pub use serve::{Prepared, ServeOptions, ServedHost, default_key_path, prepare, store_backend};

/// The directory a host serves, from the fleet's goals and where each agent lives.
pub(crate) fn directory_spec(
    goals: &consort_config::GoalsConfig,
    placement: std::collections::BTreeMap<String, String>,
) -> consort_actors::directory::DirectorySpec {
    consort_actors::directory::DirectorySpec {
        goals: goals
            .goals
            .iter()
            .map(|g| consort_actors::directory::GoalMembers {
                name: g.name.clone(),
                agents: g.agents.clone(),
            })
            .collect(),
        placement,
        row_cap: goals.directory.row_cap,
        presence_deadline: std::time::Duration::from_millis(goals.directory.presence_deadline_ms),
        no_advancement_after: std::time::Duration::from_secs(
            goals.directory.no_advancement_after_s,
        ),
        activity_window: std::time::Duration::from_secs(goals.directory.activity_window_s),
    }
}
