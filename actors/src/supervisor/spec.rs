//! What a host is built from ([`HostSpec`]): the agents it serves and the other hosts' agents
//! it may call, where their stores live, the settings its agent actors start with, and the
//! seams an embedding app plugs in (models, tools, MCP servers, links to other hosts, remote
//! A2A agents).
//!
//! A spec is plain data, read once: the supervisor takes it at start and keeps it as it was
//! given, but for the agents' configs, which a reload replaces in place. An app builds one with
//! [`HostSpec::builder`] (or [`HostSpec::new`] for the defaults); its fields are the crate's
//! own, so a setting added later never breaks an app, and an app reads back what it needs
//! through the accessors. Building one checks nothing; what it names is checked where it is
//! used (agent.yaml when it is loaded, a store when its agent's actor opens it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use consort_config::AgentSet;

use super::RemoteCalls;
use crate::a2a::A2aCalls;
use crate::directory::DirectorySpec;
use crate::model::Model;
use crate::restart::{ProbeBackoff, RestartBudget};
use crate::store::{FolderLock, StoreBackend, StoreLease};
use crate::tools::{Tool, ToolServers};
use crate::{ActorsError, AgentOptions};

/// Everything a host is built from: see [`HostSpec::builder`].
#[derive(Clone)]
pub struct HostSpec {
    /// Agents this host serves.
    pub(crate) agents: AgentSet,
    /// Agents of the fleet served by other hosts.
    pub(crate) remote_agents: Vec<String>,
    /// The data folder (one run store per agent, unless `store` keeps them elsewhere).
    pub(crate) data_dir: PathBuf,
    /// Where the agents' run stores are kept: SQLite files in `data_dir` (the default) or a
    /// PostgreSQL database.
    pub(crate) store: StoreBackend,
    /// Settings every agent actor is started with.
    pub(crate) options: AgentOptions,
    /// How often an agent actor may be restarted before it is left down.
    pub(crate) restart: RestartBudget,
    /// How often the store of an agent that is down because its store could not be written
    /// is probed.
    pub(crate) store_probe: ProbeBackoff,
    /// Models set by an embedding app, by agent (instead of the declared one).
    pub(crate) models: BTreeMap<String, Arc<dyn Model>>,
    /// Tools registered by an embedding app, by agent.
    pub(crate) tools: BTreeMap<String, Vec<Arc<dyn Tool>>>,
    /// How agents reach the MCP servers their `kind: mcp` entries declare; `None` leaves
    /// those entries without tools (a use is told the host has no MCP client).
    pub(crate) tool_servers: Option<Arc<dyn ToolServers>>,
    /// How calls and replies reach agents on other hosts; `None` for a single host.
    pub(crate) remote: Option<Arc<dyn RemoteCalls>>,
    /// How calls reach the remote A2A agents agents declare (`a2a_agents:`); `None` refuses
    /// such calls as unreachable.
    pub(crate) a2a: Option<Arc<dyn A2aCalls>>,
    /// How often agent.yaml files are checked for changes; `None` turns watching off.
    pub(crate) watch_config: Option<Duration>,
    /// How often each store's WAL is checkpointed.
    pub(crate) checkpoint_every: Duration,
    /// This host's name in its fleet (`local` for a host of its own).
    pub(crate) host_name: String,
    /// The fleet's goals and placements, for the peer directory.
    pub(crate) directory: DirectorySpec,
    /// The most agent store connections kept open at once (see the store writer).
    pub(crate) max_open_stores: usize,
    /// The data folder's lock, when the caller took it before writing there; `Host::spawn`
    /// takes it (once: a spec cloned and spawned again locks the folder anew).
    pub(crate) folder_lock: Arc<std::sync::Mutex<Option<FolderLock>>>,
    /// How the host holds the leases of its agents' PostgreSQL stores.
    pub(crate) store_lease: StoreLease,
}

impl HostSpec {
    /// A spec for `agents` with their stores under `data_dir` and default settings: the same
    /// as `HostSpec::builder(agents, data_dir).build()`.
    pub fn new(agents: AgentSet, data_dir: impl Into<PathBuf>) -> Self {
        Self::builder(agents, data_dir).build()
    }

    /// Starts a spec for `agents` with their stores under `data_dir`. Every other setting has
    /// its default until a method of the builder sets it: SQLite stores in `data_dir`, default
    /// agent options, restart budget and store probe, no models or tools of the app's own, no
    /// MCP client, no links to other hosts, no A2A client, agent.yaml files re-read on change
    /// (every 500 ms), stores checkpointed every 5 s, the host named `local`, an empty
    /// directory and at most 128 store connections open at once.
    pub fn builder(agents: AgentSet, data_dir: impl Into<PathBuf>) -> HostSpecBuilder {
        HostSpecBuilder {
            spec: Self {
                agents,
                remote_agents: Vec::new(),
                data_dir: data_dir.into(),
                store: StoreBackend::default(),
                options: AgentOptions::default(),
                restart: RestartBudget::default(),
                store_probe: ProbeBackoff::default(),
                models: BTreeMap::new(),
                tools: BTreeMap::new(),
                tool_servers: None,
                remote: None,
                a2a: None,
                watch_config: Some(Duration::from_millis(500)),
                checkpoint_every: Duration::from_secs(5),
                host_name: "local".to_owned(),
                directory: DirectorySpec::default(),
                max_open_stores: crate::store::DEFAULT_MAX_OPEN,
                folder_lock: Arc::default(),
                store_lease: StoreLease::default(),
            },
        }
    }

    /// The data folder's lock the builder was given, or `host_name`'s lock taken now.
    pub(crate) fn take_folder_lock(&self) -> Result<FolderLock, ActorsError> {
        let given = self
            .folder_lock
            .lock()
            .ok()
            .and_then(|mut slot| slot.take());
        match given {
            Some(lock) => Ok(lock),
            None => FolderLock::acquire(&self.data_dir, &self.host_name),
        }
    }

    /// The agents this host serves, as the spec was built (a reload replaces the host's own
    /// copy, never this one).
    pub fn agents(&self) -> &AgentSet {
        &self.agents
    }

    /// The data folder.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Where the agents' run stores are kept.
    pub fn store(&self) -> &StoreBackend {
        &self.store
    }

    /// The settings every agent actor is started with.
    pub fn options(&self) -> &AgentOptions {
        &self.options
    }

    /// This host's name in its fleet.
    pub fn host_name(&self) -> &str {
        &self.host_name
    }

    /// The agents of the fleet served by other hosts.
    pub fn remote_agents(&self) -> &[String] {
        &self.remote_agents
    }
}

/// A [`HostSpec`] being built; see [`HostSpec::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct HostSpecBuilder {
    spec: HostSpec,
}

impl HostSpecBuilder {
    /// Agents of the fleet served by other hosts (they count as existing peers).
    pub fn remote_agents(mut self, agents: Vec<String>) -> Self {
        self.spec.remote_agents = agents;
        self
    }

    /// Where the agents' run stores are kept (default: SQLite files in the data folder).
    pub fn store(mut self, store: StoreBackend) -> Self {
        self.spec.store = store;
        self
    }

    /// The settings every agent actor is started with.
    pub fn options(mut self, options: AgentOptions) -> Self {
        self.spec.options = options;
        self
    }

    /// How often an agent actor may be restarted before it is left down.
    pub fn restart(mut self, restart: RestartBudget) -> Self {
        self.spec.restart = restart;
        self
    }

    /// How often the store of an agent that is down because its store could not be written
    /// is probed.
    pub fn store_probe(mut self, store_probe: ProbeBackoff) -> Self {
        self.spec.store_probe = store_probe;
        self
    }

    /// The app's own model for `agent`, instead of the one its config declares.
    pub fn model(mut self, agent: impl Into<String>, model: Arc<dyn Model>) -> Self {
        self.spec.models.insert(agent.into(), model);
        self
    }

    /// A tool of the app's own for `agent`, after those registered for it before.
    pub fn tool(mut self, agent: impl Into<String>, tool: Arc<dyn Tool>) -> Self {
        self.spec.tools.entry(agent.into()).or_default().push(tool);
        self
    }

    /// How agents reach the MCP servers their `kind: mcp` entries declare (what `consort dev`
    /// and `consort serve` set: `consort_fleet::McpClient`). Without one, a use of such a tool
    /// is told the host reaches no MCP servers.
    pub fn tool_servers(mut self, servers: Arc<dyn ToolServers>) -> Self {
        self.spec.tool_servers = Some(servers);
        self
    }

    /// How calls and replies reach agents on other hosts.
    pub fn remote(mut self, remote: Arc<dyn RemoteCalls>) -> Self {
        self.spec.remote = Some(remote);
        self
    }

    /// How calls reach the remote A2A agents the agents declare (`a2a_agents:`).
    pub fn a2a(mut self, a2a: Arc<dyn A2aCalls>) -> Self {
        self.spec.a2a = Some(a2a);
        self
    }

    /// How often agent.yaml files are checked for changes; `None` turns watching off (agents
    /// built in code have no agent.yaml to watch).
    pub fn watch_config(mut self, every: Option<Duration>) -> Self {
        self.spec.watch_config = every;
        self
    }

    /// How often each store's WAL is checkpointed.
    pub fn checkpoint_every(mut self, every: Duration) -> Self {
        self.spec.checkpoint_every = every;
        self
    }

    /// This host's name in its fleet.
    pub fn host_name(mut self, name: impl Into<String>) -> Self {
        self.spec.host_name = name.into();
        self
    }

    /// The fleet's goals and placements, for the peer directory.
    pub fn directory(mut self, directory: DirectorySpec) -> Self {
        self.spec.directory = directory;
        self
    }

    /// The most agent store connections kept open at once.
    pub fn max_open_stores(mut self, max: usize) -> Self {
        self.spec.max_open_stores = max;
        self
    }

    /// The data folder's lock, taken by the caller before it wrote anything there (the CLI
    /// takes it first thing). Without one, [`Host::spawn`](crate::Host::spawn) takes it.
    pub fn folder_lock(self, lock: FolderLock) -> Self {
        if let Ok(mut slot) = self.spec.folder_lock.lock() {
            *slot = Some(lock);
        }
        self
    }

    /// How the host holds the leases of its agents' PostgreSQL stores: how long one lasts
    /// without renewal, and whether a lease another host holds is refused (the default),
    /// waited for (a standby) or taken now. SQLite stores are owned through the data folder's
    /// lock instead.
    pub fn store_lease(mut self, lease: StoreLease) -> Self {
        self.spec.store_lease = lease;
        self
    }

    /// The spec.
    pub fn build(self) -> HostSpec {
        self.spec
    }
}
