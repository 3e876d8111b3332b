//! One agent's tools as its actor holds them: the catalog (declared tools, the app's own and
//! what the agent's MCP servers listed, each with its auth), the probe cache of its
//! generation, and the MCP servers with their sessions and listings.
//!
//! The agent actor keeps one [`AgentTools`] and asks it; what a tool use comes to is
//! `meta_tools::resolve`'s to say over [`AgentTools::scope`]. Nothing here runs a tool or
//! lists a server: listing is `tools::list_due` on the actor's task, and the answers come back
//! through [`AgentTools::listed`], which hands back the turns and uses that waited for them.

use std::sync::Arc;
use std::time::Instant;

use consort_config::AgentConfig;
use consort_core::step::TurnAsked;
use consort_net::RunId;

use super::{DueListing, Listed, ServerSlots, Tool, ToolServers};
use crate::meta_tools::{AgentCatalog, UseScope};
use crate::visibility::{Identity, ProbeCache, RoleGrants};

/// One agent's tools, their catalog and its MCP servers.
pub(crate) struct AgentTools {
    /// The agent's tools with their auth, policies, grants and catalog generation.
    pub(crate) catalog: AgentCatalog,
    /// T2 probe outcomes per principal, for the catalog's generation.
    pub(crate) probe_cache: ProbeCache,
    /// The agent's MCP servers (`kind: mcp`): their sessions and what each listed.
    pub(crate) servers: ServerSlots,
    /// Tools registered by an embedding app, beside the declared ones.
    extra: Vec<Arc<dyn Tool>>,
    /// The host's MCP client, which opens the sessions of `servers`.
    client: Option<Arc<dyn ToolServers>>,
    /// Model turns and tool uses that wait for a listing of the servers.
    waiting: Vec<ListingWaiter>,
}

/// Something of a run that waits for a listing of the agent's MCP servers before it goes on.
pub(crate) enum ListingWaiter {
    /// A model turn that would not see the servers' tools yet.
    Turn(RunId, TurnAsked),
    /// A use of a server's tool (a use resumed after a restart, before any turn listed the
    /// servers), counted as in flight by the agent's machine.
    Use(RunId, String),
}

impl AgentTools {
    /// `config`'s tools and the app's `extra` ones; no server is asked for its tools yet (that
    /// waits for the first turn that needs them).
    pub(crate) fn new(
        config: &AgentConfig,
        extra: Vec<Arc<dyn Tool>>,
        client: Option<Arc<dyn ToolServers>>,
    ) -> Self {
        let catalog = AgentCatalog::build(config, &extra, 1);
        let servers =
            ServerSlots::for_config(config, client.as_ref(), ServerSlots::default(), &config.env);
        Self {
            probe_cache: ProbeCache::new(catalog.generation()),
            catalog,
            servers,
            extra,
            client,
            waiting: Vec::new(),
        }
    }

    /// The agent's config changed from `previous` to `config`: an unchanged mcp entry keeps its
    /// session and listing, a changed one is opened again (the old session closes once its
    /// last use is over), and the catalog is built again. Returns the new generation.
    pub(crate) fn reconfigure(&mut self, previous: &AgentConfig, config: &AgentConfig) -> u64 {
        self.servers = ServerSlots::for_config(
            config,
            self.client.as_ref(),
            std::mem::take(&mut self.servers),
            &previous.env,
        );
        self.rebuild(config)
    }

    /// What agent `config`'s servers listed (or why they could not): recorded, and the
    /// catalog built again with their tools. Returns what waited for the listing, once no
    /// listing is out any more.
    pub(crate) fn listed(
        &mut self,
        config: &AgentConfig,
        listings: Vec<Listed>,
    ) -> Vec<ListingWaiter> {
        self.servers
            .take_listings(&config.name, listings, Instant::now());
        self.rebuild(config);
        if self.servers.asking() {
            return Vec::new();
        }
        std::mem::take(&mut self.waiting)
    }

    /// The servers due a listing that a run acting for `identity` may start: never one whose
    /// entry refuses that identity every tool (see `ServerSlots::take_due`).
    pub(crate) fn take_due_for(&mut self, identity: &Identity, now: Instant) -> Vec<DueListing> {
        let catalog = &self.catalog;
        self.servers.take_due(now, |_, stand_in| {
            !catalog.refuses_all_of(stand_in, identity)
        })
    }

    /// `waiter` goes on once the listing that is out is in ([`AgentTools::listed`]).
    pub(crate) fn wait_for_listing(&mut self, waiter: ListingWaiter) {
        self.waiting.push(waiter);
    }

    /// Whether anything waits for a listing.
    pub(crate) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// What resolving a tool use reads (see `meta_tools::resolve`).
    pub(crate) fn scope<'a>(
        &'a mut self,
        host_grants: &'a RoleGrants,
        directory: bool,
    ) -> UseScope<'a> {
        UseScope {
            catalog: &self.catalog,
            probe_cache: &mut self.probe_cache,
            servers: &self.servers,
            host_grants,
            directory,
        }
    }

    /// Builds the catalog again from the config, the app's tools and what the MCP servers
    /// listed, at the next generation (cached probe outcomes of the last one go stale).
    fn rebuild(&mut self, config: &AgentConfig) -> u64 {
        let generation = self.catalog.generation() + 1;
        self.catalog =
            AgentCatalog::build_with_served(config, &self.extra, &self.servers.tools(), generation);
        generation
    }
}
