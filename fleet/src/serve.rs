//! One host of a multi-host fleet, put together: the host behind `consort serve`.
//!
//! [`ServedHost::start`] reads `fleet.yaml`, loads every host's agents (so peers on other
//! hosts count as existing and each agent lives on exactly one host), keeps this host's own,
//! reads and checks its key against the key `fleet.yaml` pins for it, binds the QUIC link on
//! the host's fleet address (mutual TLS pinned to every host's key, no plaintext fallback),
//! starts the supervisor with [`LinkRemote`] as its way to other hosts, and serves the HTTP
//! API (on loopback unless an auth file is given). Its host auth file, when given, names the
//! bearer tokens of HTTP callers and the roles an origin (`api:<name>`) holds on this host, for
//! its own runs and for calls from other hosts alike. It writes `<data>/serve.json` with the
//! API's URL and the link address.
//!
//! The link also accepts the keys fleet.yaml lists under `operators:`, for operator requests
//! only (answered by [`crate::operator`]'s inbound side).
//!
//! The host key lives, unless `--key` says otherwise, at `keys/<host>.key` next to
//! `fleet.yaml` ([`default_key_path`]), as written by `consort keygen --out keys --name <host>`.
//!
//! The host's run stores are where fleet.yaml's `store:` for it says (SQLite files in the data
//! folder by default, or a PostgreSQL database whose URL an environment variable holds;
//! [`store_backend`]); a URL that is missing or a server that cannot be reached stops the start
//! with an error.
//!
//! It must not decide call rules or verify envelopes itself; it only wires parts together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::info;

use consort_actors::store::PostgresUrl;
use consort_actors::store::StoreBackend;
use consort_actors::{ActorsError, AgentOptions, DataFolder, FolderLock, Host, HostSpec};
use consort_config::{AgentSet, FleetConfig, StoreConfig};
use consort_net::{HostKey, KeyRing, LinkConfig, LinkEndpoint, OperatorAccess, PublicKey};

use crate::FleetError;
use crate::MetricsExport;
use crate::api;
use crate::auth::HostAuth;
use crate::dashboard::FleetSight;
use crate::listener::{self, HostCheck, HttpBounds};
use crate::operator::OperatorInbound;
use crate::remote::{ALLOWED_SKEW_MS, FleetMap, Inbound, InboundLimits, LinkRemote};

/// Where a host's key is kept when `--key` is not given: `keys/<host>.key` beside fleet.yaml.
pub fn default_key_path(fleet_file: &Path, host: &str) -> PathBuf {
    fleet_file
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("keys")
        .join(format!("{host}.key"))
}

/// The store backend of a host: `url_env` (the CLI's `--store-url-env`) when given, a
/// PostgreSQL store whose URL that variable holds; else what fleet.yaml's `store:` says. The
/// URL is read from the environment here, at start: a missing one is
/// [`ActorsError::StoreUrlMissing`].
pub fn store_backend(
    declared: &StoreConfig,
    url_env: Option<&str>,
) -> Result<StoreBackend, ActorsError> {
    let var = match (url_env, declared) {
        (Some(var), _) => var,
        (None, StoreConfig::Postgres { url_env }) => url_env,
        (None, StoreConfig::Sqlite) => return Ok(StoreBackend::Sqlite),
    };
    PostgresUrl::from_env(var).map(StoreBackend::Postgres)
}

/// How to serve one host of a fleet.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The fleet declaration.
    pub fleet_file: PathBuf,
    /// Which host of the fleet this process is.
    pub host: String,
    /// Where the run stores live.
    pub data_dir: PathBuf,
    /// The host key file; `None` means [`default_key_path`].
    pub key_file: Option<PathBuf>,
    /// Address of the HTTP API (loopback).
    pub listen_http: SocketAddr,
    /// Settings every agent actor is started with.
    pub agent_options: AgentOptions,
    /// Timeouts of the link to other hosts.
    pub link: LinkConfig,
    /// The host auth file (bearer tokens of HTTP callers, and the roles the origin of a call
    /// holds on this host), if any. Without one the API may listen on loopback only.
    pub auth: Option<consort_config::HostAuthConfig>,
    /// Names (besides loopback and the bound address) the API answers to in `Host`.
    pub allow_hosts: Vec<String>,
    /// Bounds on the API's connections and requests.
    pub http: HttpBounds,
    /// The installed Prometheus recorder's handle, rendered at `GET /metrics`; `None` (no
    /// recorder installed) makes that route answer 404.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The environment variable holding a PostgreSQL URL for this host's run stores, instead
    /// of what fleet.yaml's `store:` says; `None` keeps fleet.yaml's.
    pub store_url_env: Option<String>,
    /// How the host holds its agents' PostgreSQL store leases (refuse a held one by default).
    pub lease: consort_actors::store::StoreLease,
}

impl ServeOptions {
    /// Host `host` of the fleet in `fleet_file`, its stores in `data_dir`, with everything else
    /// as a bare `consort serve` has it: the default key path, the HTTP API on a free loopback
    /// port, no auth file, no metrics recorder, the stores fleet.yaml names. Set the fields to
    /// change the rest.
    pub fn new(fleet_file: PathBuf, host: &str, data_dir: PathBuf) -> Self {
        Self {
            fleet_file,
            host: host.to_owned(),
            data_dir,
            key_file: None,
            listen_http: SocketAddr::from(([127, 0, 0, 1], 0)),
            agent_options: AgentOptions::default(),
            link: LinkConfig::default(),
            auth: None,
            allow_hosts: Vec::new(),
            http: HttpBounds::default(),
            metrics: None,
            store_url_env: None,
            lease: consort_actors::store::StoreLease::default(),
        }
    }
}

/// A fleet host serving its link and its API.
pub struct ServedHost {
    /// The running host.
    pub host: Host,
    /// The host's name in the fleet.
    pub name: String,
    /// Where the API listens.
    pub http_addr: SocketAddr,
    /// Where the link listens.
    pub link_addr: SocketAddr,
    /// The link endpoint (close it on shutdown).
    pub endpoint: LinkEndpoint,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<()>,
}

/// The fleet's parts that concern one host, checked: its agents, the others' agents, the
/// fleet map and its key.
pub struct Prepared {
    /// The agents this host serves.
    pub local: AgentSet,
    /// The agents other hosts of the fleet serve.
    pub remote_agents: Vec<String>,
    /// Which host serves each agent, and where each host listens.
    pub map: FleetMap,
    /// This host's key.
    pub key: HostKey,
    /// Where this host's link listens.
    pub link_addr: SocketAddr,
    /// The fleet's goals and directory settings (members checked against the fleet).
    pub goals: consort_config::GoalsConfig,
    /// The fleet's operators: name -> key (fleet.yaml's `operators:`).
    pub operators: KeyRing,
    /// Where this host keeps its run stores (fleet.yaml's `store:`).
    pub store: StoreConfig,
}

/// Reads fleet.yaml and the key of `host`; every error names the file (and line) at fault.
pub fn prepare(
    fleet_file: &Path,
    host: &str,
    key_file: Option<&Path>,
) -> Result<Prepared, FleetError> {
    prepare_in(fleet_file, host, key_file, None)
}

/// As [`prepare`]; with a data folder, the fleet's agents are loaded through the compiled
/// snapshot kept in it (see [`crate::dev::AGENT_SET_SNAPSHOT`]).
fn prepare_in(
    fleet_file: &Path,
    host: &str,
    key_file: Option<&Path>,
    data_dir: Option<&Path>,
) -> Result<Prepared, FleetError> {
    let fleet = FleetConfig::load(fleet_file)?;
    let Some(me) = fleet.host(host) else {
        return Err(FleetError::UnknownHost {
            host: host.to_owned(),
            file: fleet.file.display().to_string(),
            known: fleet
                .hosts
                .iter()
                .map(|h| h.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let (set, placements) = match data_dir {
        Some(data) => {
            let file = data.join(crate::dev::AGENT_SET_SNAPSHOT);
            let (loaded, report) = fleet.agents_cached(&file)?;
            crate::dev::log_snapshot(&file, &report);
            loaded
        }
        None => fleet.agents()?,
    };
    let key_path = key_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_key_path(&fleet.file, host));
    let key = HostKey::read(&key_path).map_err(consort_net::NetError::from)?;
    if key.public().to_bytes() != me.public_key {
        return Err(FleetError::WrongKey {
            host: host.to_owned(),
            key_file: key_path.display().to_string(),
            file: fleet.file.display().to_string(),
            actual: key.public().to_string(),
        });
    }
    let mut ring = KeyRing::new();
    let mut addresses = BTreeMap::new();
    for h in &fleet.hosts {
        let public = PublicKey::from_bytes(&h.public_key).ok_or_else(|| FleetError::BadPin {
            host: h.name.clone(),
            file: fleet.file.display().to_string(),
        })?;
        ring.insert(h.name.clone(), public)
            .map_err(consort_net::NetError::from)?;
        addresses.insert(h.name.clone(), h.address);
    }
    let mut operators = KeyRing::new();
    for o in &fleet.operators {
        let public =
            PublicKey::from_bytes(&o.public_key).ok_or_else(|| FleetError::BadOperatorKey {
                operator: o.name.clone(),
                file: fleet.file.display().to_string(),
            })?;
        operators
            .insert(o.name.clone(), public)
            .map_err(consort_net::NetError::from)?;
    }
    let mut local = set;
    local
        .agents
        .retain(|name, _| placements.get(name).map(String::as_str) == Some(host));
    let remote_agents = placements
        .iter()
        .filter(|(_, h)| h.as_str() != host)
        .map(|(a, _)| a.clone())
        .collect();
    Ok(Prepared {
        local,
        remote_agents,
        map: FleetMap {
            host: host.to_owned(),
            placements,
            addresses,
            ring,
        },
        key,
        link_addr: me.address,
        goals: fleet.declared_goals().clone(),
        operators,
        store: me.store.clone(),
    })
}

impl ServedHost {
    /// Serves the host with the default `InboundLimits`.
    pub async fn start(options: ServeOptions) -> Result<Self, FleetError> {
        Self::start_with_limits(options, InboundLimits::default()).await
    }

    /// Serves the host, refusing chains from other hosts beyond `limits`. The chain depth
    /// checked on the link is at least the deepest `limits.max_depth` of this host's agents:
    /// each agent still refuses, with its own limit, a chain deeper than it allows.
    pub(crate) async fn start_with_limits(
        options: ServeOptions,
        limits: InboundLimits,
    ) -> Result<Self, FleetError> {
        listener::check_listen(options.listen_http, options.auth.is_some())?;
        // First: nothing is written to a data folder another host holds (the snapshot that
        // `prepare_in` keeps there, serve.json).
        let lock = FolderLock::acquire(&options.data_dir, &options.host)?;
        let prepared = prepare_in(
            &options.fleet_file,
            &options.host,
            options.key_file.as_deref(),
            Some(&options.data_dir),
        )?;
        let store = store_backend(&prepared.store, options.store_url_env.as_deref())?;
        let deepest = prepared
            .local
            .agents
            .values()
            .map(|agent| agent.limits.max_depth as usize)
            .max()
            .unwrap_or(0);
        let limits = InboundLimits {
            max_chain_depth: limits.max_chain_depth.max(deepest),
            ..limits
        };
        std::fs::create_dir_all(&options.data_dir).map_err(|source| FleetError::Io {
            path: options.data_dir.display().to_string(),
            source,
        })?;
        let map = Arc::new(prepared.map);
        let inbound = Arc::new(
            Inbound::new(
                map.clone(),
                DataFolder::with_store(options.data_dir.clone(), &store),
                options.agent_options.reply_cap,
            )
            .with_limits(limits)
            .with_key(prepared.key.clone()),
        );
        let operators = Arc::new(OperatorInbound::new(
            &options.host,
            prepared.operators,
            ALLOWED_SKEW_MS,
        ));
        let endpoint = LinkEndpoint::bind_with_operators(
            prepared.link_addr,
            &options.host,
            prepared.key.clone(),
            map.ring.clone(),
            inbound.handler(),
            OperatorAccess {
                keys: operators.keys().clone(),
                handler: operators.handler(),
            },
            options.link.clone(),
        )
        .map_err(consort_net::NetError::from)?;
        operators.set_links(endpoint.view());
        let link_addr = endpoint.local_addr().map_err(consort_net::NetError::from)?;
        let remote = LinkRemote::new(map.clone(), prepared.key, endpoint.clone());

        let auth = options
            .auth
            .as_ref()
            .map_or_else(HostAuth::none, HostAuth::new);
        // What an origin (`api:<name>`) holds here bounds what a called agent acts with, for
        // calls from this host's runs and from other hosts' alike.
        let agent_options = options
            .agent_options
            .with_host_grants(auth.grants().clone());
        // The ports this host listens on (link and API), which its outbound clients never reach.
        let own = crate::outbound::OwnListeners::default();
        own.add(link_addr.port());
        let spec = HostSpec::builder(prepared.local, options.data_dir.clone())
            .folder_lock(lock)
            .store(store)
            .store_lease(options.lease)
            .remote_agents(prepared.remote_agents)
            .host_name(options.host.clone())
            .directory(crate::directory_spec(
                &prepared.goals,
                map.placements.clone(),
            ))
            .options(agent_options)
            .remote(Arc::new(remote))
            .a2a(Arc::new(crate::a2a_client::A2aClient::new(own.clone())?))
            .tool_servers(Arc::new(crate::McpClient))
            .build();

        let listener = TcpListener::bind(options.listen_http)
            .await
            .map_err(|source| FleetError::Bind {
                addr: options.listen_http.to_string(),
                source,
            })?;
        let http_addr = listener.local_addr().map_err(|source| FleetError::Bind {
            addr: options.listen_http.to_string(),
            source,
        })?;
        own.add(http_addr.port());
        let (host, _supervisor) = Host::spawn(spec).await?;
        inbound.set_inbox(host.inbox());
        operators.set_host(host.clone());
        let app = api::router(
            host.clone(),
            Arc::new(auth),
            HostCheck::new(http_addr, &options.allow_hosts),
            &options.http,
        )
        // The dashboard's fleet view: the other hosts, where each agent lives, the links.
        .layer(axum::Extension(FleetSight::new(
            &options.host,
            map.placements.clone(),
            endpoint.view(),
        )))
        .layer(axum::Extension(MetricsExport(options.metrics.clone())));
        let server = tokio::spawn(listener::serve(listener, app, options.http.clone()));
        let url = format!("http://{http_addr}");
        let note = serde_json::json!({
            "url": url, "pid": std::process::id(), "host": options.host,
            "link": link_addr.to_string(),
        });
        let _ = std::fs::write(options.data_dir.join("serve.json"), note.to_string());
        info!(%url, host = %options.host, link = %link_addr, agents = ?host.agents(), "serving");
        Ok(Self {
            host,
            name: options.host,
            http_addr,
            link_addr,
            endpoint,
            server,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_fleet_yamls_unless_the_flag_names_a_variable() {
        assert!(matches!(
            store_backend(&StoreConfig::Sqlite, None),
            Ok(StoreBackend::Sqlite)
        ));
        let declared = StoreConfig::Postgres {
            url_env: "CONSORT_TEST_UNSET_DECLARED_URL".into(),
        };
        let missing = store_backend(&declared, None).unwrap_err();
        assert!(
            matches!(&missing, ActorsError::StoreUrlMissing { var } if var == "CONSORT_TEST_UNSET_DECLARED_URL"),
            "{missing}"
        );
        // The flag wins over fleet.yaml: its variable is the one read (any set variable holds
        // a "URL" here; nothing connects).
        let flagged = store_backend(&declared, Some("PATH")).unwrap();
        assert!(matches!(flagged, StoreBackend::Postgres(_)));
        let missing =
            store_backend(&StoreConfig::Sqlite, Some("CONSORT_TEST_UNSET_FLAG_URL")).unwrap_err();
        assert!(missing.to_string().contains("CONSORT_TEST_UNSET_FLAG_URL"));
    }
}
