//! `consort fleet status|drain|resume|restart|reload|approve|jobs`: an operator's commands to
//! the hosts of a fleet, signed with the operator's key and sent over the QUIC links.
//!
//! A thin user of `consort_fleet::operator::FleetOperator`: it reads the arguments, sends one
//! command to every host (or those named with `--host`), prints one section per host (or, with
//! `--json`, one array with an object per host) and exits 1 when a host gave no answer.
//! Printing is `output::fleet`'s; nothing is decided here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use consort_config::FleetConfig;
use consort_fleet::operator::{FleetOperator, all_answered};
use consort_net::{HostKey, LinkConfig, OperatorCommand, RunId};

use crate::{output, print_json};

/// Which fleet, as which operator, to which hosts.
#[derive(Args)]
pub(crate) struct FleetTarget {
    /// The fleet declaration (hosts, their addresses and keys, and `operators:`).
    #[arg(long)]
    fleet: PathBuf,
    /// The operator's key (written by `consort keygen`; its public key listed under
    /// `operators:` in fleet.yaml).
    #[arg(long)]
    key: PathBuf,
    /// Only this host (repeatable); default every host of the fleet.
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
    /// One JSON array, an object per host.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub(crate) enum FleetCommand {
    /// Each host's agents (up, restarts), runs by status, links to the other hosts, last
    /// failed run, and whether it is draining.
    Status {
        #[command(flatten)]
        to: FleetTarget,
    },
    /// Stop admitting new root runs (accepted runs finish); `--undo` admits again.
    Drain {
        /// Admit new root runs again (as `resume`).
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        to: FleetTarget,
    },
    /// Admit new root runs again after a drain.
    Resume {
        #[command(flatten)]
        to: FleetTarget,
    },
    /// Restart an agent's actor: its accepted runs resume from the store.
    Restart {
        agent: String,
        #[command(flatten)]
        to: FleetTarget,
    },
    /// Make hosts re-read every agent.yaml now.
    Reload {
        #[command(flatten)]
        to: FleetTarget,
    },
    /// Approve (or deny) the gated tool a blocked run waits on.
    Approve {
        run_id: String,
        #[arg(long)]
        deny: bool,
        #[command(flatten)]
        to: FleetTarget,
    },
    /// A page of each host's runs, newest first (an operator sees every run).
    Jobs {
        #[arg(long)]
        agent: Option<String>,
        /// Rows in the page (default 100, at most 1,000).
        #[arg(long)]
        limit: Option<u32>,
        /// Continue after the page that printed this cursor (use with one --host).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        to: FleetTarget,
    },
}

pub(crate) async fn fleet(command: FleetCommand) -> Result<ExitCode> {
    let (command, to) = match command {
        FleetCommand::Status { to } => (OperatorCommand::Status, to),
        FleetCommand::Drain { undo: false, to } => (OperatorCommand::Drain, to),
        FleetCommand::Drain { undo: true, to } | FleetCommand::Resume { to } => {
            (OperatorCommand::Resume, to)
        }
        FleetCommand::Restart { agent, to } => (OperatorCommand::Restart { agent }, to),
        FleetCommand::Reload { to } => (OperatorCommand::Reload, to),
        FleetCommand::Approve { run_id, deny, to } => (
            OperatorCommand::Decide {
                run: RunId::parse(&run_id)?,
                approve: !deny,
            },
            to,
        ),
        FleetCommand::Jobs {
            agent,
            limit,
            cursor,
            to,
        } => (
            OperatorCommand::Jobs {
                agent,
                limit: limit.unwrap_or(100),
                cursor,
            },
            to,
        ),
    };
    let fleet = FleetConfig::load(&to.fleet)?;
    let key = HostKey::read(&to.key)?;
    let link = LinkConfig {
        dial_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(30),
        ..LinkConfig::default()
    };
    let operator = FleetOperator::new(&fleet, key, link)
        .with_context(|| format!("cannot act as an operator with {}", to.key.display()))?;
    let answers = operator.send(&command, &to.hosts).await?;
    operator.close().await;
    if to.json {
        print_json(&answers)?;
    } else {
        println!("{}", output::fleet_answers(&command, &answers));
    }
    Ok(if all_answered(&command, &answers) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
