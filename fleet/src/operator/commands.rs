//! What each fleet command does on a host, through the [`Host`] handle only: the facts of a
//! status, a drain or resume, an agent's restart, a reload, a decision on a gated tool, a page
//! of runs. Store reads run on a blocking thread.
//!
//! A command's failure is an [`OperatorAnswer::Failed`] with a stable code; no message leaves
//! the host with an absolute path in it. This module never verifies a request (that was done
//! before it is called) and decides nothing about a run.

use consort_actors::page::{RunCursor, page_size};
use consort_actors::supervisor::Down;
use consort_actors::{ActorsError, Host, RunCounts};
use consort_core::step::Decision;
use consort_net::{LinkView, OperatorAnswer, OperatorCommand, PeerLinkState};

use super::{
    AgentLine, AgentSeat, Decided, DownLine, DrainState, HostStatus, JobsPage, LastFailure,
    LinkLine, Reloaded, Restarted,
};
use crate::api::without_absolute_paths;

/// Runs `command` for `operator` on `host` (named `here` in the fleet), whose links `links`
/// shows.
pub(super) async fn run(
    command: OperatorCommand,
    operator: &str,
    here: &str,
    host: &Host,
    links: Option<&LinkView>,
) -> OperatorAnswer {
    let here = here.to_owned();
    let answered = match command {
        OperatorCommand::Status => status(here, host, links).await.and_then(json),
        OperatorCommand::Drain => drain(here, host, true).await.and_then(json),
        OperatorCommand::Resume => drain(here, host, false).await.and_then(json),
        OperatorCommand::Restart { agent } => host
            .restart_agent(&agent)
            .await
            .map_err(Failure::from)
            .and_then(|seat| {
                json(Restarted {
                    host: here,
                    agent: AgentSeat {
                        name: seat.name,
                        up: seat.up,
                        restarts: seat.restarts,
                        down: seat.down.map(down_line),
                    },
                })
            }),
        OperatorCommand::Reload => {
            host.reload()
                .await
                .map_err(Failure::from)
                .and_then(|reloaded| {
                    json(Reloaded {
                        host: here,
                        changed: reloaded.changed,
                        revived: reloaded.revived,
                    })
                })
        }
        // The run's log records the decision as this operator's.
        OperatorCommand::Decide { run, approve } => host
            .decide_as(
                &run,
                None,
                Decision::from(approve),
                &format!("operator:{operator}"),
            )
            .await
            .map_err(Failure::from)
            .and_then(|decided| {
                json(Decided {
                    host: here,
                    approved: approve,
                    gate: decided.gate,
                    already_decided: decided.already_decided,
                    run: decided.run,
                })
            }),
        OperatorCommand::Jobs {
            agent,
            limit,
            cursor,
        } => jobs(here, host, agent, limit, cursor).await.and_then(json),
    };
    match answered {
        Ok(json) => OperatorAnswer::Done { json },
        Err(failure) => OperatorAnswer::Failed {
            code: failure.code,
            message: failure.message,
        },
    }
}

/// A command that did not complete: its stable code and the words for the operator.
#[derive(Debug)]
struct Failure {
    code: String,
    message: String,
}

impl Failure {
    fn new(code: &str, message: impl AsRef<str>) -> Self {
        Self {
            code: code.to_owned(),
            message: without_absolute_paths(message.as_ref()),
        }
    }
}

impl From<ActorsError> for Failure {
    fn from(error: ActorsError) -> Self {
        let code = match &error {
            ActorsError::UnknownRun(_) => "unknown_run",
            ActorsError::UnknownAgent(_) => "unknown_agent",
            ActorsError::Refused(refusal) => refusal.code(),
            ActorsError::InvalidConfig(_) => "invalid_config",
            _ => "internal",
        };
        if code == "internal" || code == "invalid_config" {
            tracing::warn!("operator command failed: {error}");
        }
        Self::new(code, error.to_string())
    }
}

fn json(value: impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string(&value)
        .map_err(|e| Failure::new("internal", format!("the answer could not be written: {e}")))
}

async fn status(
    here: String,
    host: &Host,
    links: Option<&LinkView>,
) -> Result<HostStatus, Failure> {
    let seats = host.agent_status().await?;
    let draining = host.draining().await?;
    let (counts, failed) = (host.run_counts().await?, host.last_failed_run().await?);
    let runs = counts
        .iter()
        .fold(RunCounts::default(), |total, (_, c)| total.plus(*c));
    let agents = seats
        .into_iter()
        .map(|seat| AgentLine {
            runs: counts
                .iter()
                .find(|(agent, _)| agent == &seat.name)
                .map(|(_, c)| *c)
                .unwrap_or_default(),
            name: seat.name,
            up: seat.up,
            restarts: seat.restarts,
            down: seat.down.map(down_line),
        })
        .collect();
    let links = links
        .map(LinkView::peer_links)
        .unwrap_or_default()
        .into_iter()
        .map(|peer| {
            let (state, last_error) = match peer.state {
                PeerLinkState::Connected => ("connected", None),
                PeerLinkState::Dialing => ("dialing", None),
                PeerLinkState::NotConnected { last_error } => ("not_connected", last_error),
            };
            LinkLine {
                host: peer.host,
                state: state.to_owned(),
                last_error,
            }
        })
        .collect();
    Ok(HostStatus {
        host: here,
        draining,
        unsettled: runs.unsettled(),
        runs,
        agents,
        links,
        last_failure: failed.map(|run| LastFailure {
            run: run.id,
            agent: run.agent,
            error: run.error.as_deref().map(without_absolute_paths),
            settled_at_ms: run.settled_at_ms,
        }),
    })
}

fn down_line(down: Down) -> DownLine {
    DownLine {
        reason: down.reason.as_str().to_owned(),
        since_ms: down.since_ms,
        detail: without_absolute_paths(&down.detail),
    }
}

async fn drain(here: String, host: &Host, draining: bool) -> Result<DrainState, Failure> {
    let draining = host.set_draining(draining).await?;
    let counts = host.run_counts().await?;
    let unsettled = counts.iter().map(|(_, c)| c.unsettled()).sum();
    Ok(DrainState {
        host: here,
        draining,
        unsettled,
    })
}

async fn jobs(
    here: String,
    host: &Host,
    agent: Option<String>,
    limit: u32,
    cursor: Option<String>,
) -> Result<JobsPage, Failure> {
    let cursor = match cursor {
        None => None,
        Some(text) => Some(RunCursor::parse(&text).ok_or_else(|| {
            Failure::new(
                "bad_cursor",
                format!("`{text}` is not a cursor a page of runs gave"),
            )
        })?),
    };
    let limit = page_size(Some(usize::try_from(limit).unwrap_or(usize::MAX)));
    // An operator sees every run: no owner filter.
    let page = host
        .jobs_page(agent.as_deref(), cursor.as_ref(), None, limit)
        .await?;
    Ok(JobsPage { host: here, page })
}
