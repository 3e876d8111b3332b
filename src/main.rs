//! The `consort` command line: serve agents, start runs, inspect them, approve gated tools.
//!
//! Every subcommand is a thin user of the library: `dev` assembles a host with
//! `consort_fleet::dev`, the others talk to a host through the client SDK (`--at URL`) or read a
//! stopped host's data folder (`--data DIR`). Listings take `--json`.

mod directory_cli;
mod file_size_limit;
mod fleet_cli;
mod metrics_install;
mod operator_cli;
mod output;
mod telemetry;
mod visibility_cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use consort_actors::page::{RunCursor, page_size};
use consort_actors::store::Durability;
use consort_actors::visibility::{Identity, Principal};
use consort_actors::{AgentOptions, Channel, DataFolder, RunRecord, RunStatus};
use consort_config::AgentSet;
use consort_core::step::Decision;
use consort_fleet::dev::{DevHost, DevOptions};
use consort_fleet::listener::HttpBounds;
use consort_fleet::{Client, HostAuth};
use consort_net::RunId;

const DEFAULT_URL: &str = "http://127.0.0.1:7400";

#[derive(Parser)]
#[command(
    name = "consort",
    version,
    about = "A runtime for fleets of AI agents that delegate to each other"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr: text or json.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How logs are written on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
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
enum JobsCommand {
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
enum RunsCommand {
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
struct DevArgs {
    /// Agent folders, or folders of agent folders.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Export traces to this OTLP/HTTP collector (base URL, e.g. http://127.0.0.1:4318);
    /// default: the OTEL_EXPORTER_OTLP_ENDPOINT variable. Without either, nothing is exported.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Data folder (run stores).
    #[arg(long, default_value = ".consort")]
    data: PathBuf,
    /// Address of the HTTP API (loopback). With --ask the default is a free port.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Run one request to the end, print the answer and the runs it produced, and exit.
    #[arg(long, num_args = 2, value_names = ["AGENT", "INPUT"])]
    ask: Option<Vec<String>>,
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Commit durability: normal (survives a process crash) or full (survives power loss).
    #[arg(long, default_value = "normal")]
    durability: String,
    /// Host auth file: bearer tokens of HTTP callers and their roles (see docs/SECURITY.md).
    /// Without one the API listens on loopback only.
    #[arg(long)]
    auth: Option<PathBuf>,
    /// A name the API answers to in the Host header, besides loopback and its address
    /// (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// Who the --ask request comes from: api:<token-name> (with that token's roles in --auth)
    /// or anonymous (the default). Every run it leads to acts for this origin.
    #[arg(long = "as", value_name = "PRINCIPAL", requires = "ask")]
    as_principal: Option<String>,
    /// Keep the run stores in PostgreSQL, at the URL this environment variable holds (the
    /// default is one SQLite file per agent under --data).
    #[arg(long, value_name = "VAR")]
    store_url_env: Option<String>,
    #[arg(long)]
    json: bool,
}

/// Where a serving host is, and who is asking.
#[derive(Args, Clone)]
struct At {
    /// URL of a serving host (default: $CONSORT_AT, then ./.consort/serve.json, then 127.0.0.1:7400).
    #[arg(long)]
    at: Option<String>,
    /// Bearer token sent to the host: runs act for its principal, and the host decides by it
    /// what may be read and done (default: $CONSORT_TOKEN).
    #[arg(long)]
    token: Option<String>,
}

impl At {
    pub(crate) fn client(&self) -> Client {
        Client::new(&resolve_url(&self.at))
            .with_token(directory_cli::token_or_env(self.token.clone()))
    }
}

/// A serving host or a data folder.
#[derive(Args, Clone)]
struct Source {
    #[arg(long, conflicts_with = "data")]
    at: Option<String>,
    /// Bearer token sent to the host (default: $CONSORT_TOKEN).
    #[arg(long, conflicts_with = "data")]
    token: Option<String>,
    /// Read a (stopped or serving) host's data folder directly.
    #[arg(long)]
    data: Option<PathBuf>,
    /// With --data: the host keeps its run stores in PostgreSQL, at the URL this environment
    /// variable holds.
    #[arg(long, value_name = "VAR", requires = "data")]
    store_url_env: Option<String>,
}

impl Source {
    /// The data folder `--data` names, with its stores where `--store-url-env` says.
    fn folder(&self, dir: &Path) -> Result<DataFolder> {
        let store = consort_fleet::store_backend(
            &consort_config::StoreConfig::Sqlite,
            self.store_url_env.as_deref(),
        )?;
        Ok(DataFolder::with_store(dir, &store))
    }

    fn client(&self) -> Client {
        Client::new(&resolve_url(&self.at))
            .with_token(directory_cli::token_or_env(self.token.clone()))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = match init_tracing(&cli) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("consort: {e:#}");
            return ExitCode::from(1);
        }
    };
    let code = run_to_end(cli);
    // After the runtime: spans of runs that settled are sent before the process exits.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}

fn run_to_end(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("consort: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("consort: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Logs on stderr, and with an OTLP endpoint (`dev` and `serve` only) trace export; the
/// returned handle flushes the exporter.
fn init_tracing(cli: &Cli) -> Result<Option<telemetry::Telemetry>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match &cli.command {
        Command::Dev(args) if args.ask.is_none() => "info",
        Command::Serve(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let fmt = if cli.log_format == LogFormat::Json {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    // Only the commands that serve agents export traces; the host names the service.
    let exporting = match &cli.command {
        Command::Dev(args) => telemetry::endpoint(args.otlp_endpoint.as_deref())
            .map(|endpoint| (endpoint, "dev".to_owned())),
        Command::Serve(args) => telemetry::endpoint(args.otlp_endpoint.as_deref())
            .map(|endpoint| (endpoint, args.host.clone())),
        _ => None,
    };
    // Each layer has its own filter: RUST_LOG (or the command's default) decides what is
    // logged, never what is traced, so `--ask`'s quiet log still exports every run span.
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    match exporting {
        None => {
            registry.init();
            Ok(None)
        }
        Some((endpoint, host)) => {
            let (otel, telemetry) = telemetry::otlp_layer(&endpoint, &host)?;
            registry.with(otel.with_filter(telemetry::traced())).init();
            Ok(Some(telemetry))
        }
    }
}

fn resolve_url(at: &Option<String>) -> String {
    if let Some(url) = at {
        return url.trim_end_matches('/').to_owned();
    }
    if let Ok(url) = std::env::var("CONSORT_AT") {
        return url;
    }
    let note = Path::new(".consort").join("serve.json");
    if let Some(url) = std::fs::read_to_string(note)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["url"].as_str().map(str::to_owned))
    {
        return url;
    }
    DEFAULT_URL.to_owned()
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(value)?;
    match writeln!(std::io::stdout().lock(), "{text}") {
        // A reader that stopped reading (`| head`) is not an error of this command.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Prints a directory answer (JSON or `text`); exit 3 when the caller's scope could not be
/// established (`scope_gap`), as every directory command does.
fn print_scoped<T: serde::Serialize>(
    value: &T,
    json: bool,
    scope_gap: bool,
    text: impl FnOnce(&T) -> String,
) -> Result<ExitCode> {
    if json {
        print_json(value)?;
    } else {
        println!("{}", text(value));
    }
    Ok(if scope_gap {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

async fn run(cli: Cli) -> Result<ExitCode> {
    file_size_limit::catch_file_size_signal();
    match cli.command {
        Command::Dev(args) => dev(args).await,
        Command::Keygen(args) => fleet_cli::keygen(args),
        Command::Serve(args) => fleet_cli::serve(args).await,
        Command::Fleet { command } => operator_cli::fleet(command).await,
        Command::Edges {
            fleet: Some(file),
            json,
            ..
        } => fleet_cli::edges(&file, json),
        Command::Run {
            agent,
            input,
            wait,
            timeout_secs,
            max_runs,
            max_tokens,
            max_wall_s,
            at,
            json,
        } => {
            let client = at.client();
            let budget = consort_core::TreeLimits {
                max_runs,
                max_tokens,
                max_wall_s,
            };
            let mut run = if budget.is_unbounded() {
                client.start_run(&agent, &input, "cli").await?
            } else {
                budget
                    .check()
                    .map_err(|e| anyhow!("--{}", e.replace('_', "-")))?;
                client
                    .start_run_with_budget(&agent, &input, "cli", &budget)
                    .await?
            };
            if wait {
                run = client
                    .wait(run.id.as_str(), Duration::from_secs(timeout_secs))
                    .await?;
            }
            if json {
                print_json(&run)?;
            } else if wait {
                print_settled(&run);
            } else {
                println!("{}", run.id);
            }
            Ok(exit_for(&run, wait))
        }
        Command::Jobs {
            command:
                JobsCommand::List {
                    agent,
                    limit,
                    cursor,
                    source,
                    json,
                },
        } => {
            let page = match &source.data {
                Some(dir) => {
                    let cursor = cursor
                        .as_deref()
                        .map(|c| {
                            RunCursor::parse(c).ok_or_else(|| {
                                anyhow!("--cursor `{c}` is not a cursor `jobs list` printed")
                            })
                        })
                        .transpose()?;
                    let data = source.folder(dir)?;
                    // A blocking read (the PostgreSQL client must not run on an async worker).
                    tokio::task::spawn_blocking(move || {
                        data.runs_page(agent.as_deref(), cursor.as_ref(), None, page_size(limit))
                    })
                    .await??
                }
                None => {
                    source
                        .client()
                        .jobs_page(agent.as_deref(), cursor.as_deref(), limit)
                        .await?
                }
            };
            if json {
                print_json(&page)?;
            } else {
                println!("{}", output::runs_table(&page.runs));
                if let Some(next) = &page.next {
                    eprintln!("more runs: consort jobs list --cursor {next}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs {
            command:
                RunsCommand::Show {
                    run_id,
                    follow: true,
                    source,
                    json,
                },
        } => {
            let id = RunId::parse(&run_id)?;
            if source.data.is_some() {
                bail!(
                    "--follow reads a running host's live stream; drop --data (a data folder is read as it stands)"
                );
            }
            let client = source.client();
            // An unknown or hidden run fails here, before anything is printed.
            let run = client.run(id.as_str()).await?;
            if !json {
                println!(
                    "run {} of {}: events as they are stored, until it settles",
                    run.id, run.agent
                );
                println!("events:");
            }
            let settled = client
                .follow_events(id.as_str(), 0, |event| {
                    if json {
                        println!("{}", json!({"event": event}));
                    } else {
                        println!("{}", output::event_line(&event));
                    }
                })
                .await?;
            if json {
                println!("{}", json!({"run": settled}));
            } else {
                print!("\n{}", output::run_fields(&settled));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs {
            command:
                RunsCommand::Show {
                    run_id,
                    follow: false,
                    source,
                    json,
                },
        } => {
            let id = RunId::parse(&run_id)?;
            let (run, events) = match &source.data {
                Some(dir) => {
                    let data = source.folder(dir)?;
                    let key = id.clone();
                    let (run, events) = tokio::task::spawn_blocking(move || {
                        Ok::<_, consort_actors::ActorsError>((data.run(&key)?, data.events(&key)))
                    })
                    .await??;
                    let run =
                        run.ok_or_else(|| anyhow!("no run with id {id} in {}", dir.display()))?;
                    (run, events?)
                }
                None => {
                    let client = source.client();
                    (
                        client.run(id.as_str()).await?,
                        client.events(id.as_str()).await?,
                    )
                }
            };
            if json {
                print_json(&json!({"run": run, "events": events}))?;
            } else {
                print!("{}", output::run_detail(&run, &events));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs {
            command:
                RunsCommand::Cancel {
                    run_id,
                    reason,
                    at,
                    json,
                },
        } => {
            let id = RunId::parse(&run_id)?;
            let run = at.client().cancel(id.as_str(), reason.as_deref()).await?;
            if json {
                print_json(&run)?;
            } else {
                print!("{}", output::run_fields(&run));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Approve {
            run_id,
            deny,
            gate,
            record_result,
            record_error,
            at,
            json,
        } => {
            let client = at.client();
            let decision = match (record_result, record_error) {
                (Some(content), _) => Decision::Record {
                    content,
                    is_error: false,
                },
                (None, Some(content)) => Decision::Record {
                    content,
                    is_error: true,
                },
                (None, None) => Decision::from(!deny),
            };
            // Name the gate waiting now: a retry of this command then answers "already
            // decided" instead of deciding whatever gate the run waits on next.
            let gate = match gate {
                Some(gate) => Some(gate),
                None => client.waiting_gate(&run_id).await?.map(|g| g.id),
            };
            let decided = client
                .decide_gate(&run_id, gate.as_deref(), &decision)
                .await?;
            if json {
                print_json(&decided)?;
            } else {
                let what = match decision {
                    Decision::Approve => "approved",
                    Decision::Deny => "denied",
                    _ => "recorded the result of",
                };
                let again = if decided.already_decided {
                    " (already decided: nothing changed)"
                } else {
                    ""
                };
                println!(
                    "{what} gate {}{again}: run {} is {}",
                    decided.gate, decided.run.id, decided.run.status
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Directory {
            command: Some(command),
            ..
        } => directory_cli::directory_command(command).await,
        Command::Directory {
            command: None,
            goal,
            at,
            data,
            json,
        } => {
            let token = at.token.clone();
            let packet = match data.as_deref().map(|d| (d, directory_cli::serving_url(d))) {
                Some((dir, None)) => {
                    let folder = DataFolder::new(dir);
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    consort_actors::directory::offline_packet(&folder, goal.as_deref(), now)?
                }
                Some((_, Some(url))) => {
                    Client::new(&url)
                        .with_token(directory_cli::token_or_env(token))
                        .directory(goal.as_deref())
                        .await?
                }
                None => at.client().directory(goal.as_deref()).await?,
            };
            print_scoped(&packet, json, packet.scope_gap.is_some(), output::directory)
        }
        Command::Reload { at } => {
            let reloaded = at.client().reload().await?;
            if reloaded.changed.is_empty() {
                println!("no agent.yaml changed");
            } else {
                println!("reloaded: {}", reloaded.changed.join(", "));
            }
            if !reloaded.revived.is_empty() {
                println!("revived: {}", reloaded.revived.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Visibility(args) => visibility_cli::visibility(args),
        Command::Tools { command } => visibility_cli::tools(command),
        Command::Edges { dirs, json, .. } => {
            if dirs.is_empty() {
                bail!("give agent folders (or folders of agent folders)");
            }
            let set = AgentSet::load(&dirs)?;
            let edges = consort_core::ConsentGraph::of(&set).edges();
            if json {
                print_json(&edges)?;
            } else {
                let rows: Vec<Vec<String>> = edges
                    .iter()
                    .map(|e| {
                        vec![
                            e.caller.clone(),
                            e.callee.clone(),
                            e.status.as_str().to_owned(),
                        ]
                    })
                    .collect();
                println!("{}", output::table(&["CALLER", "CALLEE", "STATUS"], &rows));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn exit_for(run: &RunRecord, waited: bool) -> ExitCode {
    if waited && run.status == RunStatus::Failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_settled(run: &RunRecord) {
    match run.status {
        RunStatus::Succeeded => println!("{}", run.output.as_deref().unwrap_or_default()),
        RunStatus::Failed => println!(
            "run {} failed: {}",
            run.id,
            run.error.as_deref().unwrap_or_default()
        ),
        other => println!("run {} is still {other}", run.id),
    }
}

async fn dev(args: DevArgs) -> Result<ExitCode> {
    let durability = Durability::parse(&args.durability).ok_or_else(|| {
        anyhow!(
            "--durability must be normal or full, not `{}`",
            args.durability
        )
    })?;
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("creating data folder {}", args.data.display()))?;
    let default_listen: SocketAddr = if args.ask.is_some() {
        SocketAddr::from(([127, 0, 0, 1], 0))
    } else {
        SocketAddr::from(([127, 0, 0, 1], 7400))
    };
    let agent_options = AgentOptions::default().with_durability(durability);
    let auth = args
        .auth
        .as_deref()
        .map(consort_config::HostAuthConfig::load)
        .transpose()?;
    let identity = ask_identity(args.as_principal.as_deref(), auth.as_ref())?;
    let dev = DevHost::start(DevOptions {
        dirs: args.dirs.clone(),
        data_dir: args.data.clone(),
        listen: args.listen.unwrap_or(default_listen),
        agent_options,
        auth,
        allow_hosts: args.allow_hosts.clone(),
        http: HttpBounds::default(),
        metrics: Some(metrics_install::install()?),
        store: consort_fleet::store_backend(
            &consort_config::StoreConfig::Sqlite,
            args.store_url_env.as_deref(),
        )?,
    })
    .await?;
    let url = format!("http://{}", dev.addr);
    eprintln!(
        "consort: serving {} on {url} (data in {})",
        dev.host.agents().join(", "),
        args.data.display()
    );

    let Some(ask) = args.ask else {
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = dev.server => {}
        }
        dev.host.stop();
        return Ok(ExitCode::SUCCESS);
    };
    let [agent, input] =
        <[String; 2]>::try_from(ask).map_err(|_| anyhow!("--ask takes AGENT INPUT"))?;
    if !dev.host.agents().contains(&agent) {
        bail!(
            "no agent named `{agent}` is served (agents: {})",
            dev.host.agents().join(", ")
        );
    }
    let started = dev
        .host
        .start_run_as(&agent, &input, Channel::Cli, identity)
        .await?;
    let mut notices = dev.host.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut told_blocked = std::collections::BTreeSet::new();
    let run = loop {
        let run = dev
            .host
            .wait(&started.id, Duration::from_millis(500))
            .await?;
        if run.status.is_settled() {
            break run;
        }
        for blocked in produced(&dev.host, &started.id)
            .await?
            .into_iter()
            .filter(|r| r.status == RunStatus::Blocked)
        {
            if told_blocked.insert(blocked.id.clone()) {
                eprintln!(
                    "consort: run {} ({}) waits for approval: consort approve {} --at {url}",
                    blocked.id, blocked.agent, blocked.id
                );
            }
        }
        if tokio::time::Instant::now() >= deadline {
            break run;
        }
        while notices.try_recv().is_ok() {}
    };
    let runs = produced(&dev.host, &started.id).await?;
    if args.json {
        print_json(&json!({"run": run, "answer": run.output, "runs": runs}))?;
    } else {
        print_settled(&run);
        println!();
        println!("{}", output::runs_table(&runs));
    }
    dev.host.stop();
    Ok(if run.status == RunStatus::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The identity of `dev --ask --as PRINCIPAL`: a token's principal with its roles in the auth
/// file, or anonymous. An agent never starts a request of its own accord.
fn ask_identity(
    principal: Option<&str>,
    auth: Option<&consort_config::HostAuthConfig>,
) -> Result<Identity> {
    let Some(text) = principal else {
        return Ok(Identity::Absent);
    };
    let principal = Principal::parse(text).context("--as")?;
    if let Principal::Agent(_) = principal {
        bail!("--as: a request comes from api:<token-name> or anonymous, not from an agent");
    }
    let auth = auth.map_or_else(HostAuth::none, HostAuth::new);
    Ok(Identity::from_principal(&principal, auth.grants()))
}

/// Resolves on Ctrl-C or SIGTERM: unsettled runs stay in the stores and resume on restart.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The root run and every run it produced, transitively, oldest first.
async fn produced(host: &consort_actors::Host, root: &RunId) -> Result<Vec<RunRecord>> {
    let all = host.jobs(None).await?;
    let mut ids = vec![root.clone()];
    let mut out: Vec<RunRecord> = Vec::new();
    while let Some(id) = ids.pop() {
        if let Some(run) = all.iter().find(|r| r.id == id) {
            out.push(run.clone());
        }
        ids.extend(
            all.iter()
                .filter(|r| r.parent_run.as_ref() == Some(&id))
                .map(|r| r.id.clone()),
        );
    }
    out.sort_by(|a, b| {
        a.created_at_ms
            .cmp(&b.created_at_ms)
            .then(a.hop_depth.cmp(&b.hop_depth))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
