//! Listing an agent's MCP servers: asking each due server for its tools, each inside its own
//! bound and all at once, and recording what they answered in the agent's [`ServerSlots`].
//!
//! The agent actor runs [`list_due`] on a task of its own (a slow server never holds up its
//! mailbox) and hands the answers to [`ServerSlots::take_listings`]; which turns and uses
//! waited for them is the actor's to know.

use std::time::Instant;

use tracing::{info, warn};

use super::{DueListing, ListedTool, ServerSlots, ToolError};

/// What one MCP server listed (or why it could not): its entry, which opening, the answer.
pub(crate) type Listed = (String, u64, Result<Vec<ListedTool>, ToolError>);

/// Lists the `due` servers at once, each within its bound.
pub(crate) async fn list_due(due: Vec<DueListing>) -> Vec<Listed> {
    let mut tasks = tokio::task::JoinSet::new();
    for d in due {
        tasks.spawn(async move {
            let result = match tokio::time::timeout(d.bound, d.server.list()).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::ServerTimedOut {
                    server: d.name.clone(),
                    limit_ms: u64::try_from(d.bound.as_millis()).unwrap_or(u64::MAX),
                }),
            };
            (d.name, d.opened, result)
        });
    }
    let mut listings = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(listing) => listings.push(listing),
            Err(e) => warn!("an MCP listing task ended abnormally: {e}"),
        }
    }
    listings
}

impl ServerSlots {
    /// Records what agent `agent`'s servers listed, logging each answer and each tool left out.
    pub(crate) fn take_listings(&mut self, agent: &str, listings: Vec<Listed>, now: Instant) {
        for (server, opened, result) in listings {
            match &result {
                Ok(tools) => {
                    info!(%agent, %server, tools = tools.len(), "MCP server listed its tools");
                }
                Err(e) => {
                    warn!(%agent, %server, error = %e, "MCP server could not be listed; its tools are left out until a later turn asks again");
                }
            }
            for why in self.listed(&server, opened, result, now) {
                warn!(%agent, %server, "an MCP tool is left out: {why}");
            }
        }
    }
}
