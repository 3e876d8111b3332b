//! The `consort` command line's arguments, as clap reads them: the subcommands and their
//! flags, and the two ways a command reaches a host (`--at URL`, `--data DIR`). What each
//! command does is `main.rs`'s and the `*_cli.rs` modules'.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use consort_actors::DataFolder;
use consort_fleet::Client;

use crate::{directory_cli, fleet_cli, operator_cli, resolve_url, visibility_cli};

#[derive(Parser)]
#[command(
    name = "consort",
    version,
    about = "A runtime for fleets of AI agents that delegate to each other"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log format on stderr: text or json.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// How logs are written on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve agent folders (or folders of agent folders) in one process.
    Dev(DevArgs),
    /// Start a run through a serving host's API.
    Run {
        agent: String,
        input: String,
        /// Wait for the run to settle and print its output.
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
        /// Tree budget: the most runs of the run's whole call tree, this run included (it
        /// narrows the agent's limits.tree.max_runs).
        #[arg(long, value_name = "N")]
        max_runs: Option<u64>,
        /// Tree budget: the most tokens all the tree's model turns may use.
        #[arg(long, value_name = "N")]
        max_tokens: Option<u64>,
        /// Tree budget: the most seconds the tree may work, from this run's creation.
        #[arg(long, value_name = "N")]
        max_wall_s: Option<u64>,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
    /// Runs of a host.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// One run and its event log.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Decide a gate of a run: approve (or deny) its gated tool, or record what a tool in doubt
    /// did. Without --gate, the gate the run waits on is read first and decided by its id, so
    /// running the command again never decides a later gate.
    Approve {
        run_id: String,
        /// Deny: the tool does not run (for a gate in doubt: it is not run again).
        #[arg(long, conflicts_with_all = ["record_result", "record_error"])]
        deny: bool,
        /// The gate to decide (its id, as `runs show` prints it).
        #[arg(long)]
        gate: Option<String>,
        /// A gate in doubt: do not run the tool again; record this as its result.
        #[arg(long, value_name = "TEXT", conflicts_with = "record_error")]
        record_result: Option<String>,
        /// A gate in doubt: do not run the tool again; record this as its failure.
        #[arg(long, value_name = "TEXT")]
        record_error: Option<String>,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
    /// The peer directory of a goal: every registered agent, its work and its presence;
    /// `observe`, `wait` and `attention` for one peer, one run, or what needs a decision.
    #[command(args_conflicts_with_subcommands = true)]
    Directory {
        #[command(subcommand)]
        command: Option<directory_cli::DirectoryCommand>,
        /// The goal (needed when the fleet declares several).
        #[arg(long)]
        goal: Option<String>,
        #[command(flatten)]
        at: At,
        /// Read a host's data folder instead (a serving host there is asked over HTTP; a
        /// stopped one's stores are read: work only, presence unknown).
        #[arg(long, conflicts_with = "at")]
        data: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Make a serving host re-read every agent.yaml now.
    Reload {
        #[command(flatten)]
        at: At,
    },
    /// List every declared edge and whether both sides consented.
    Edges {
        dirs: Vec<PathBuf>,
        /// Resolve the edges of a whole fleet (with each agent's host) instead of folders.
        #[arg(long, conflicts_with = "dirs")]
        fleet: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// One visibility decision from an auth descriptor and caller facts (JSON files).
    Visibility(visibility_cli::VisibilityArgs),
    /// What a principal's runs of an agent would see through search_tools / load_tool.
    Tools {
        #[command(subcommand)]
        command: visibility_cli::ToolsCommand,
    },
    /// Write a new host (or operator) key (mode 0600) and print its public key.
    Keygen(fleet_cli::KeygenArgs),
    /// Serve one host of a multi-host fleet (QUIC link + HTTP API).
    Serve(fleet_cli::ServeArgs),
    /// An operator's commands to the hosts of a fleet, signed with the operator's key and
    /// sent over the QUIC links: status, drain, resume, restart, reload, approve, jobs.
    Fleet {
        #[command(subcommand)]
        command: operator_cli::FleetCommand,
    },
}

#[derive(Subcommand)]
pub(crate) enum JobsCommand {
    /// List runs, newest first, one page at a time (an operator sees every run; any other
    /// token, its own).
    List {
        #[arg(long)]
        agent: Option<String>,
        /// Rows in the page (default 100, at most 1,000).
        #[arg(long)]
        limit: Option<usize>,
        /// Continue after the page that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        source: Source,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum RunsCommand {
    /// Show one run with its events.
    Show {
        run_id: String,
        /// Follow the run live: print each event as it is stored, until the run settles
        /// (needs a running host; not with --data).
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        source: Source,
        /// JSON; with --follow, one JSON object per line (`{"event": …}`, then `{"run": …}`).
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run that has not settled: it settles `failed`, saying who canceled it and why.
    Cancel {
        run_id: String,
        /// Why, recorded with the cancel and in the run's error.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub(crate) struct DevArgs {
    /// Agent folders, or folders of agent folders.
    #[arg(required = true)]
    pub(crate) dirs: Vec<PathBuf>,
    /// Export traces to this OTLP/HTTP collector (base URL, e.g. http://127.0.0.1:4318);
    /// default: the OTEL_EXPORTER_OTLP_ENDPOINT variable. Without either, nothing is exported.
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Data folder (run stores).
    #[arg(long, default_value = ".consort")]
    pub(crate) data: PathBuf,
    /// Address of the HTTP API (loopback). With --ask the default is a free port.
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// Run one request to the end, print the answer and the runs it produced, and exit.
    #[arg(long, num_args = 2, value_names = ["AGENT", "INPUT"])]
    pub(crate) ask: Option<Vec<String>>,
    #[arg(long, default_value_t = 300)]
    pub(crate) timeout_secs: u64,
    /// Commit durability: normal (survives a process crash) or full (survives power loss).
    #[arg(long, default_value = "normal")]
    pub(crate) durability: String,
    /// Host auth file: bearer tokens of HTTP callers and their roles (see docs/SECURITY.md).
    /// Without one the API listens on loopback only.
    #[arg(long)]
    pub(crate) auth: Option<PathBuf>,
    /// A name the API answers to in the Host header, besides loopback and its address
    /// (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub(crate) allow_hosts: Vec<String>,
    /// Who the --ask request comes from: api:<token-name> (with that token's roles in --auth)
    /// or anonymous (the default). Every run it leads to acts for this origin.
    #[arg(long = "as", value_name = "PRINCIPAL", requires = "ask")]
    pub(crate) as_principal: Option<String>,
    /// Keep the run stores in PostgreSQL, at the URL this environment variable holds (the
    /// default is one SQLite file per agent under --data).
    #[arg(long, value_name = "VAR")]
    pub(crate) store_url_env: Option<String>,
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
    #[arg(long)]
    pub(crate) json: bool,
}

/// How a host on a PostgreSQL store holds the leases of its agents' stores (one host writes an
/// agent's runs at a time; see README, "One owner per store").
#[derive(Args, Clone, Debug)]
pub(crate) struct LeaseArgs {
    /// When another host holds an agent's PostgreSQL store: wait as a standby and take it over
    /// once that host's lease ends (it stopped renewing it), instead of refusing to start.
    #[arg(long, conflicts_with = "take_over")]
    pub(crate) standby: bool,
    /// When another host holds an agent's PostgreSQL store: take it now. That host's next write
    /// is refused (fencing) and it writes nothing more; use it when you know that host is gone.
    #[arg(long)]
    pub(crate) take_over: bool,
    /// How long a PostgreSQL store lease lasts without renewal, in seconds (renewed every third
    /// of it): how long a standby waits after its holder dies.
    #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) lease_ttl_secs: u64,
}

impl LeaseArgs {
    /// The lease settings these flags ask for.
    pub(crate) fn lease(&self) -> consort_actors::store::StoreLease {
        use consort_actors::store::{OnHeld, StoreLease};
        let on_held = if self.standby {
            OnHeld::Standby
        } else if self.take_over {
            OnHeld::TakeOver
        } else {
            OnHeld::Refuse
        };
        StoreLease::default()
            .with_ttl(std::time::Duration::from_secs(self.lease_ttl_secs))
            .on_held(on_held)
    }
}

/// Where a serving host is, and who is asking.
#[derive(Args, Clone)]
pub(crate) struct At {
    /// URL of a serving host (default: $CONSORT_AT, then ./.consort/serve.json, then 127.0.0.1:7400).
    #[arg(long)]
    pub(crate) at: Option<String>,
    /// Bearer token sent to the host: runs act for its principal, and the host decides by it
    /// what may be read and done (default: $CONSORT_TOKEN).
    #[arg(long)]
    pub(crate) token: Option<String>,
}

impl At {
    pub(crate) fn client(&self) -> Client {
        Client::new(&resolve_url(&self.at))
            .with_token(directory_cli::token_or_env(self.token.clone()))
    }
}

/// A serving host or a data folder.
#[derive(Args, Clone)]
pub(crate) struct Source {
    #[arg(long, conflicts_with = "data")]
    pub(crate) at: Option<String>,
    /// Bearer token sent to the host (default: $CONSORT_TOKEN).
    #[arg(long, conflicts_with = "data")]
    pub(crate) token: Option<String>,
    /// Read a (stopped or serving) host's data folder directly.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// With --data: the host keeps its run stores in PostgreSQL, at the URL this environment
    /// variable holds.
    #[arg(long, value_name = "VAR", requires = "data")]
    pub(crate) store_url_env: Option<String>,
}

impl Source {
    /// The data folder `--data` names, with its stores where `--store-url-env` says.
    pub(crate) fn folder(&self, dir: &Path) -> Result<DataFolder> {
        let store = consort_fleet::store_backend(
            &consort_config::StoreConfig::Sqlite,
            self.store_url_env.as_deref(),
        )?;
        Ok(DataFolder::with_store(dir, &store))
    }

    pub(crate) fn client(&self) -> Client {
        Client::new(&resolve_url(&self.at))
            .with_token(directory_cli::token_or_env(self.token.clone()))
    }
}
