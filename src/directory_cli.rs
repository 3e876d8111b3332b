//! The peer directory's subcommands of the CLI: `directory observe | wait | deliver |
//! delivery | attention` (the packet itself, `consort directory`, is in `main.rs`).
//!
//! Thin users of the client SDK: every command asks a serving host over HTTP and prints what it
//! answers, with exit codes a script can act on. Nothing here decides who may see what.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Subcommand;

use consort_actors::directory::WaitRequest;
use consort_core::directory::{DeliveryOutcome, WaitOutcome, WaitUntil};
use consort_net::RunId;

use crate::{At, output, print_json, print_scoped};

#[derive(Subcommand)]
pub(crate) enum DirectoryCommand {
    /// What you may see of one agent and one of its runs: typed state, and an excerpt of a
    /// run you may read.
    Observe {
        agent: String,
        #[arg(long)]
        run: Option<String>,
        /// Excerpt source: events (the log's last lines) or output (its first lines).
        #[arg(long, default_value = "events")]
        source: String,
        #[arg(long, default_value_t = 20)]
        lines: usize,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
    /// Wait, pinned to the agent's incarnation, for a run to settle (or block, or change).
    Wait {
        agent: String,
        run: String,
        /// settled, blocked (blocked or settled) or changed.
        #[arg(long, default_value = "settled")]
        until: String,
        /// The state-change sequence already seen: only a later change ends the wait.
        #[arg(long, default_value_t = 0)]
        after_seq: u64,
        /// The incarnation to pin to (default: the one there now).
        #[arg(long)]
        incarnation: Option<String>,
        #[arg(long, default_value_t = 30)]
        timeout_secs: u64,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
    /// Deliver a message to an agent: into one of its runs (--run) or as a new run. Exit 0
    /// active, 5 stalled (enqueued, nothing followed), 4 timeout (nothing resent), 3 rejected.
    Deliver {
        agent: String,
        message: String,
        /// The idempotency key: the same id and message again gets the first receipt.
        #[arg(long)]
        id: String,
        #[arg(long)]
        run: Option<String>,
        /// How long to wait for the receipt.
        #[arg(long, default_value_t = 10)]
        timeout_secs: u64,
        /// How long after the receipt to watch for activity (default: the host's
        /// `activity_window_s`).
        #[arg(long)]
        window_ms: Option<u64>,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
    /// The receipt of your earlier delivery: exit 0 enqueued, 5 unknown_delivery, 6 queued, 4
    /// unreachable (the host that holds it could not be asked: look again later).
    Delivery {
        agent: String,
        #[arg(long)]
        id: String,
        #[arg(long)]
        run: Option<String>,
        #[command(flatten)]
        at: At,
    },
    /// What in a goal needs a decision (typed facts only; assigns nothing).
    Attention {
        #[arg(long)]
        goal: Option<String>,
        #[command(flatten)]
        at: At,
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn token_or_env(token: Option<String>) -> Option<String> {
    token.or_else(|| std::env::var("CONSORT_TOKEN").ok())
}

/// `consort directory observe | wait | attention`.
pub(crate) async fn directory_command(command: DirectoryCommand) -> Result<ExitCode> {
    match command {
        DirectoryCommand::Observe {
            agent,
            run,
            source,
            lines,
            at,
            json,
        } => {
            let observation = at
                .client()
                .observe(&agent, run.as_deref(), &source, lines)
                .await?;
            print_scoped(
                &observation,
                json,
                observation.scope_gap.is_some(),
                output::observation,
            )
        }
        DirectoryCommand::Wait {
            agent,
            run,
            until,
            after_seq,
            incarnation,
            timeout_secs,
            at,
            json,
        } => {
            let until = WaitUntil::parse(&until).ok_or_else(|| {
                anyhow!("--until `{until}` is not one of: settled, blocked, changed")
            })?;
            let request = WaitRequest {
                agent,
                run: RunId::parse(&run)?,
                until,
                after_seq,
                incarnation,
            };
            let answered = at
                .client()
                .wait_peer(&request, Duration::from_secs(timeout_secs))
                .await;
            let answer = match answered {
                Ok(answer) => answer,
                // The caller may not wait on that run: a scope gap, as for the other commands.
                Err(consort_fleet::FleetError::Api { code, message, .. })
                    if matches!(code.as_str(), "audience_not_authorized" | "unknown") =>
                {
                    eprintln!("consort: no wait: {message}");
                    return Ok(ExitCode::from(3));
                }
                Err(e) => return Err(e.into()),
            };
            if json {
                print_json(&answer)?;
            } else {
                println!("{}", output::wait_answer(&answer));
            }
            Ok(match answer.outcome {
                WaitOutcome::Matched { .. } => ExitCode::SUCCESS,
                WaitOutcome::Timeout { .. } => ExitCode::from(4),
                _ => ExitCode::from(5),
            })
        }
        DirectoryCommand::Deliver {
            agent,
            message,
            id,
            run,
            timeout_secs,
            window_ms,
            at,
            json,
        } => {
            let outcome = at
                .client()
                .deliver(
                    &agent,
                    run.as_deref(),
                    &message,
                    &id,
                    Duration::from_secs(timeout_secs),
                    window_ms.map(Duration::from_millis),
                )
                .await?;
            if json {
                print_json(&outcome)?;
            } else {
                println!("{}", output::delivery(&outcome));
            }
            Ok(match outcome {
                DeliveryOutcome::Active { .. } => ExitCode::SUCCESS,
                DeliveryOutcome::Stalled { .. } => ExitCode::from(5),
                DeliveryOutcome::Timeout { .. } => ExitCode::from(4),
                DeliveryOutcome::Queued { .. } => ExitCode::from(6),
                _ => ExitCode::from(3),
            })
        }
        DirectoryCommand::Delivery { agent, id, run, at } => {
            let receipt = at
                .client()
                .delivery_status(&agent, run.as_deref(), &id)
                .await?;
            print_json(&receipt)?;
            Ok(match receipt {
                consort_core::directory::Receipt::Enqueued { .. } => ExitCode::SUCCESS,
                consort_core::directory::Receipt::UnknownDelivery { .. } => ExitCode::from(5),
                consort_core::directory::Receipt::Queued { .. } => ExitCode::from(6),
                // Not known either way, as a delivery's timeout: the same exit code.
                consort_core::directory::Receipt::Unreachable { .. } => ExitCode::from(4),
                _ => ExitCode::from(3),
            })
        }
        DirectoryCommand::Attention { goal, at, json } => {
            let rollup = at.client().attention(goal.as_deref()).await?;
            print_scoped(&rollup, json, rollup.scope_gap.is_some(), output::attention)
        }
    }
}

/// The URL of a host serving `data` right now (its serve.json names a live process).
pub(crate) fn serving_url(data: &Path) -> Option<String> {
    let note: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("serve.json")).ok()?).ok()?;
    let pid = note["pid"].as_u64()?;
    Path::new("/proc")
        .join(pid.to_string())
        .exists()
        .then(|| note["url"].as_str().map(str::to_owned))?
}
