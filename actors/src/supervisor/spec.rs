//! What a host is built from ([`HostSpec`]): the agents it serves and the other hosts' agents
//! it may call, where their stores live, the settings its agent actors start with, and the
//! seams an embedding app plugs in (models, tools, MCP servers, links to other hosts, remote
//! A2A agents).
//!
//! A spec is plain data, read once: the supervisor takes it at start and keeps it as it was
//! given, but for the agents' configs, which a reload replaces in place. Building one checks
//! nothing; what it names is checked where it is used (agent.yaml when it is loaded, a store
//! when its agent's actor opens it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use consort_config::AgentSet;

use super::RemoteCalls;
use crate::agent::AgentOptions;
use crate::directory::DirectorySpec;
use crate::model::Model;
use crate::restart::{ProbeBackoff, RestartBudget};
use crate::tools::Tool;

/// Everything a host is built from.
#[derive(Clone)]
pub struct HostSpec {
    /// Agents this host serves.
    pub agents: AgentSet,
    /// Agents of the fleet served by other hosts.
    pub remote_agents: Vec<String>,
    /// The data folder (one run store per agent, unless `store` keeps them elsewhere).
    pub data_dir: PathBuf,
    /// Where the agents' run stores are kept: SQLite files in `data_dir` (the default) or a
    /// PostgreSQL database.
    pub store: crate::store::StoreBackend,
    /// Settings every agent actor is started with.
    pub options: AgentOptions,
    /// How often an agent actor may be restarted before it is left down.
    pub restart: RestartBudget,
    /// How often the store of an agent that is down because its store could not be written
    /// is probed.
    pub store_probe: ProbeBackoff,
    /// Models set by an embedding app, by agent (instead of the declared one).
    pub models: BTreeMap<String, Arc<dyn Model>>,
    /// Tools registered by an embedding app, by agent.
    pub tools: BTreeMap<String, Vec<Arc<dyn Tool>>>,
    /// How agents reach the MCP servers their `kind: mcp` entries declare; `None` leaves
    /// those entries without tools (a use is told the host has no MCP client).
    pub tool_servers: Option<Arc<dyn crate::tools::ToolServers>>,
    /// How calls and replies reach agents on other hosts; `None` for a single host.
    pub remote: Option<Arc<dyn RemoteCalls>>,
    /// How calls reach the remote A2A agents agents declare (`a2a_agents:`); `None` refuses
    /// such calls as unreachable.
    pub a2a: Option<Arc<dyn crate::a2a::A2aCalls>>,
    /// How often agent.yaml files are checked for changes; `None` turns watching off.
    pub watch_config: Option<Duration>,
    /// How often each store's WAL is checkpointed.
    pub checkpoint_every: Duration,
    /// This host's name in its fleet (`local` for a host of its own).
    pub host_name: String,
    /// The fleet's goals and placements, for the peer directory.
    pub directory: DirectorySpec,
    /// The most agent store connections kept open at once (see [`StoreWriter`](crate::store::StoreWriter)).
    pub max_open_stores: usize,
}

impl HostSpec {
    /// A spec for `agents` with their stores under `data_dir` and default settings.
    pub fn new(agents: AgentSet, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            agents,
            remote_agents: Vec::new(),
            data_dir: data_dir.into(),
            store: crate::store::StoreBackend::default(),
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
        }
    }
}
