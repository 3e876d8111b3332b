//! The multi-host subcommands of the CLI: `keygen`, `serve` and `edges --fleet` (an
//! operator's `consort fleet ...` commands are `operator_cli`'s).
//!
//! Thin users of the library: `serve` assembles one host with `consort_fleet::serve`, `keygen`
//! writes a key with `consort_net::HostKey`, `edges --fleet` resolves the consent graph of a
//! whole fleet with `consort_config::FleetConfig`. No call rule is decided here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use serde_json::json;

use consort_actors::AgentOptions;
use consort_actors::store::Durability;
use consort_config::{FleetConfig, HostAuthConfig};
use consort_fleet::listener::HttpBounds;
use consort_fleet::{ServeOptions, ServedHost, default_key_path};
use consort_net::{HostKey, LinkConfig};

use crate::output;

#[derive(Args)]
pub(crate) struct KeygenArgs {
    /// Folder to write the key into (made if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// The host (or operator) the key is for: writes `<out>/<name>.key` (default
    /// `<out>/host.key`).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The fleet declaration.
    #[arg(long)]
    pub fleet: PathBuf,
    /// Which host of the fleet this process is.
    #[arg(long)]
    pub host: String,
    /// Data folder (run stores); default `.consort/<host>`.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The host key; default `keys/<host>.key` next to fleet.yaml.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Address of the HTTP API; port 0 picks a free one. Beyond loopback it needs --auth.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen_http: SocketAddr,
    /// Host auth file: bearer tokens of HTTP callers and their roles (see docs/SECURITY.md),
    /// which are also the roles an origin holds here when a call reaches this host
    /// (docs/VISIBILITY.md).
    #[arg(long)]
    pub auth: Option<PathBuf>,
    /// A name the API answers to in the Host header, besides loopback and its address
    /// (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Commit durability: normal (survives a process crash) or full (survives power loss).
    #[arg(long, default_value = "normal")]
    pub durability: String,
    /// Keep the run stores in PostgreSQL, at the URL this environment variable holds (instead
    /// of what fleet.yaml's `store:` for the host says).
    #[arg(long, value_name = "VAR")]
    pub store_url_env: Option<String>,
    #[command(flatten)]
    pub(crate) lease: crate::cli_args::LeaseArgs,
    /// Export traces to this OTLP/HTTP collector (base URL, e.g. http://127.0.0.1:4318);
    /// default: the OTEL_EXPORTER_OTLP_ENDPOINT variable. Without either, nothing is exported.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

pub(crate) fn keygen(args: KeygenArgs) -> Result<ExitCode> {
    let name = args.name.as_deref().unwrap_or("host");
    // The name becomes a file name inside --out: a host name's rule keeps it there
    // (`../../x` would write outside it).
    consort_config::check_name(name).map_err(|why| anyhow!("--name: {why}"))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let file = args.out.join(format!("{name}.key"));
    let key = HostKey::generate();
    key.write_new(&file)?;
    let public = key.public().to_string();
    if args.json {
        println!(
            "{}",
            json!({"key_file": file.display().to_string(), "public_key": public})
        );
    } else {
        eprintln!("consort: wrote {} (mode 0600)", file.display());
        println!("{public}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let durability = Durability::parse(&args.durability).ok_or_else(|| {
        anyhow!(
            "--durability must be normal or full, not `{}`",
            args.durability
        )
    })?;
    let data_dir = args
        .data
        .clone()
        .unwrap_or_else(|| PathBuf::from(".consort").join(&args.host));
    let agent_options = AgentOptions::default().with_durability(durability);
    let link = LinkConfig {
        dial_timeout: std::time::Duration::from_secs(3),
        request_timeout: std::time::Duration::from_secs(10),
        ..LinkConfig::default()
    };
    let key_note = args
        .key
        .clone()
        .unwrap_or_else(|| default_key_path(&args.fleet, &args.host));
    let served = ServedHost::start(ServeOptions {
        fleet_file: args.fleet.clone(),
        host: args.host.clone(),
        data_dir: data_dir.clone(),
        key_file: args.key.clone(),
        listen_http: args.listen_http,
        agent_options,
        link,
        auth: args.auth.as_deref().map(HostAuthConfig::load).transpose()?,
        allow_hosts: args.allow_hosts.clone(),
        http: HttpBounds::default(),
        metrics: Some(crate::metrics_install::install()?),
        store_url_env: args.store_url_env.clone(),
        lease: args.lease.lease(),
    })
    .await
    .with_context(|| format!("cannot serve host `{}`", args.host))?;
    eprintln!(
        "consort: serving host {} ({}) on http://{}, link on {} (data in {}, key {})",
        served.name,
        served.host.agents().join(", "),
        served.http_addr,
        served.link_addr,
        data_dir.display(),
        key_note.display(),
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        _ = served.server => {}
    }
    // Close the links first: peers learn at once that this process is gone (and drop their
    // connections to it) instead of finding out by timeouts after a restart.
    served.endpoint.close().await;
    served.host.stop();
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn edges(fleet_file: &std::path::Path, as_json: bool) -> Result<ExitCode> {
    let fleet = FleetConfig::load(fleet_file)?;
    let (set, placements) = fleet.agents()?;
    let edges = consort_core::ConsentGraph::of(&set).edges();
    let host = |agent: &str| placements.get(agent).cloned().unwrap_or_default();
    if as_json {
        let rows: Vec<_> = edges
            .iter()
            .map(|e| {
                json!({
                    "caller": e.caller, "caller_host": host(&e.caller),
                    "callee": e.callee, "callee_host": host(&e.callee),
                    "status": e.status.as_str(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let rows: Vec<Vec<String>> = edges
            .iter()
            .map(|e| {
                vec![
                    e.caller.clone(),
                    host(&e.caller),
                    e.callee.clone(),
                    host(&e.callee),
                    e.status.as_str().to_owned(),
                ]
            })
            .collect();
        println!(
            "{}",
            output::table(
                &["CALLER", "CALLER_HOST", "CALLEE", "CALLEE_HOST", "STATUS"],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}
