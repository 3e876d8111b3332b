//! The `consort` command line: serve agents, start runs, inspect them, approve gated tools.
//!
//! Every subcommand is a thin user of the library: `dev` assembles a host with
//! `consort_fleet::dev`, the others talk to a host through the client SDK (`--at URL`) or read a
//! stopped host's data folder (`--data DIR`). Listings take `--json`.

mod cli_args;
mod dev_cli;
mod directory_cli;
mod file_size_limit;
mod fleet_cli;
mod metrics_install;
mod operator_cli;
mod output;
mod telemetry;
mod visibility_cli;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Parser;
use serde_json::json;

use consort_actors::page::{RunCursor, page_size};
use consort_actors::{DataFolder, RunRecord, RunStatus};
use consort_config::AgentSet;
use consort_core::step::Decision;
use consort_fleet::Client;
use consort_net::RunId;

pub(crate) use cli_args::*;

const DEFAULT_URL: &str = "http://127.0.0.1:7400";

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
        Command::Dev(args) => dev_cli::dev(args).await,
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
