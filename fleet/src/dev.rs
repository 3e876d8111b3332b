//! Serving agent folders in one process: the host behind `consort dev`.
//!
//! [`DevHost::start`] loads the folders (each an agent folder or a folder of agent folders),
//! starts the host and binds its HTTP API. It writes `<data>/serve.json` with the API's URL so
//! other commands run in the same folder find the host without flags. Its run stores are SQLite
//! files in the data folder unless [`DevOptions::store`] says PostgreSQL. It never decides call
//! rules; it only wires parts together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::{info, warn};

use consort_actors::{AgentOptions, FolderLock, Host, HostSpec};
use consort_config::AgentSet;

use crate::FleetError;
use crate::MetricsExport;
use crate::api;
use crate::auth::HostAuth;
use crate::listener::{self, HostCheck, HttpBounds};

/// The compiled snapshot of the agent set in a host's data folder: read instead of the
/// agent.yaml files that did not change since the host last loaded them (see
/// [`AgentSet::load_cached`]).
pub const AGENT_SET_SNAPSHOT: &str = "agent-set.snapshot";

/// Says what a load through the snapshot did: how many agents it took and parsed, and why it
/// was discarded or not written (the host starts either way).
pub(crate) fn log_snapshot(file: &std::path::Path, report: &consort_config::SnapshotReport) {
    info!(
        from_snapshot = report.from_snapshot,
        parsed = report.parsed,
        written = ?report.written,
        "agents loaded"
    );
    if let Some(why) = &report.discarded {
        warn!(snapshot = %file.display(), "agent set snapshot discarded, the agents were parsed: {why}");
    }
    if let Some(why) = &report.write_failed {
        warn!(snapshot = %file.display(), "agent set snapshot not written: {why}");
    }
}

/// How to serve.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Agent folders, or folders of agent folders.
    pub dirs: Vec<PathBuf>,
    /// Where the run stores live.
    pub data_dir: PathBuf,
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// Settings every agent actor is started with.
    pub agent_options: AgentOptions,
    /// The host auth file (bearer tokens of HTTP callers), if any. Without one the API may
    /// listen on loopback only.
    pub auth: Option<consort_config::HostAuthConfig>,
    /// Names (besides loopback and the bound address) the API answers to in `Host`.
    pub allow_hosts: Vec<String>,
    /// Bounds on the API's connections and requests.
    pub http: HttpBounds,
    /// The installed Prometheus recorder's handle, rendered at `GET /metrics`; `None` (no
    /// recorder installed) makes that route answer 404.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Where the agents' run stores are kept (SQLite files in `data_dir` by default).
    pub store: consort_actors::store::StoreBackend,
    /// How the host holds its agents' PostgreSQL store leases (refuse a held one by default).
    pub lease: consort_actors::store::StoreLease,
}

impl DevOptions {
    /// The agents under `dirs`, their stores in `data_dir`, with everything else as a bare
    /// `consort dev` has it but the address: the API on a free loopback port, no auth file, no
    /// metrics recorder, SQLite stores. Set the fields to change the rest.
    pub fn new(dirs: Vec<PathBuf>, data_dir: PathBuf) -> Self {
        Self {
            dirs,
            data_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            agent_options: AgentOptions::default(),
            auth: None,
            allow_hosts: Vec::new(),
            http: HttpBounds::default(),
            metrics: None,
            store: Default::default(),
            lease: consort_actors::store::StoreLease::default(),
        }
    }
}

/// A host serving its API.
pub struct DevHost {
    /// The running host.
    pub host: Host,
    /// Where the API listens (the port is known once bound).
    pub addr: SocketAddr,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<()>,
    /// What loading the agents through the data folder's snapshot did.
    pub snapshot: consort_config::SnapshotReport,
}

impl DevHost {
    /// Loads the agents, starts the host and serves its API.
    pub async fn start(options: DevOptions) -> Result<Self, FleetError> {
        listener::check_listen(options.listen, options.auth.is_some())?;
        // First: nothing is written to a data folder another host holds (the snapshot below).
        let lock = FolderLock::acquire(&options.data_dir, "local")?;
        let snapshot = options.data_dir.join(AGENT_SET_SNAPSHOT);
        let (agents, report) = AgentSet::load_cached(&options.dirs, &[], &snapshot)?;
        log_snapshot(&snapshot, &report);
        let goals = consort_config::load_dev_goals(&options.dirs, &agents)?;
        let auth = options
            .auth
            .as_ref()
            .map_or_else(HostAuth::none, HostAuth::new);
        // What an origin (`api:<name>`) holds here bounds what a called agent acts with.
        let agent_options = options
            .agent_options
            .with_host_grants(auth.grants().clone());
        // The ports this host listens on, which its outbound clients never reach.
        let own = crate::outbound::OwnListeners::default();
        let spec = HostSpec::builder(agents, options.data_dir.clone())
            .folder_lock(lock)
            .store(options.store.clone())
            .store_lease(options.lease)
            .directory(crate::directory_spec(&goals, Default::default()))
            .tool_servers(Arc::new(crate::McpClient))
            .options(agent_options)
            .a2a(Arc::new(crate::a2a_client::A2aClient::new(own.clone())?))
            .build();
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| FleetError::Bind {
                    addr: options.listen.to_string(),
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| FleetError::Bind {
            addr: options.listen.to_string(),
            source,
        })?;
        own.add(addr.port());
        let (host, _supervisor) = Host::spawn(spec).await?;
        let app = api::router(
            host.clone(),
            Arc::new(auth),
            HostCheck::new(addr, &options.allow_hosts),
            &options.http,
        )
        .layer(axum::Extension(MetricsExport(options.metrics.clone())));
        let server = tokio::spawn(listener::serve(listener, app, options.http.clone()));
        let url = format!("http://{addr}");
        let note = serde_json::json!({"url": url, "pid": std::process::id()});
        let _ = std::fs::write(options.data_dir.join("serve.json"), note.to_string());
        info!(%url, agents = ?host.agents(), "serving");
        Ok(Self {
            host,
            addr,
            server,
            snapshot: report,
        })
    }
}
