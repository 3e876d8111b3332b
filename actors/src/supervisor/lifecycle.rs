//! An agent actor's life, as the supervisor keeps it: spawning it into the agent's seat,
//! restarting it after a failure within its [`RestartBudget`](crate::restart::RestartBudget),
//! leaving it down when that is spent or its start fails, and bringing it back.
//!
//! Each start that is a restart bumps the agent's generation, which with the host's start time
//! names who holds the agent's seat (its incarnation) on the presence board; a wake from sleep
//! (`supervisor/sleep.rs`) is not a restart and keeps the seat. An agent that is down says why
//! ([`DownReason`]). One down because its store could not be written is not restarted into the
//! same failure: its store is probed on a blocking thread on the
//! [`ProbeBackoff`](crate::restart::ProbeBackoff) schedule, each probe tagged with the down
//! period it was made for so that a stale answer changes nothing, and a probe that passes
//! revives the agent with a fresh budget. A reload on demand revives every agent that is down,
//! whatever the reason.
//!
//! Nothing here reads or decides about runs: a restarted actor resumes its unsettled runs
//! from the store on its own.

use std::path::PathBuf;
use std::time::Instant;

use ractor::{Actor, ActorRef};
use tracing::{debug, error, info, warn};

use consort_core::directory::ActorState;

use super::{Down, DownReason, HostSupervisor, SupervisorMsg, SupervisorState};
use crate::ActorsError;
use crate::agent::{AgentActor, AgentArgs};
use crate::store::RunStore;

impl SupervisorState {
    /// Tells the presence board who holds `agent`'s seat now, and whether (and why not) its
    /// actor is up.
    pub(super) fn publish_seat(&self, agent: &str) {
        if let Some(slot) = self.slots.get(agent) {
            // An asleep agent is up: the next message wakes it.
            let actor = match (&slot.actor, &slot.down) {
                (Some(_), _) | (None, None) => ActorState::Up,
                (None, Some(down)) if down.reason == DownReason::StoreNotWritable => {
                    ActorState::StoreNotWritable
                }
                (None, Some(_)) => ActorState::Down,
            };
            self.board.set_seat(
                agent,
                actor,
                format!("{}-{}", self.epoch_ms, slot.generation),
            );
        }
    }
}

impl HostSupervisor {
    /// Spawns `name`'s actor. Its seat (incarnation) changes only when `fresh` (a restart),
    /// not when an asleep agent wakes.
    pub(super) async fn spawn_agent_as(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        fresh: bool,
    ) -> Result<(), ActorsError> {
        let Some(slot) = state.slots.get(name) else {
            return Err(ActorsError::UnknownAgent(name.to_owned()));
        };
        state.markers.mark(name)?;
        let args = AgentArgs {
            config: slot.config.clone(),
            store_path: state.data.store_path(name),
            writer: state.writer.clone(),
            model: state.spec.models.get(name).cloned(),
            extra_tools: state.spec.tools.get(name).cloned().unwrap_or_default(),
            tool_servers: state.spec.tool_servers.clone(),
            supervisor: myself.clone(),
            fleet_agents: state.fleet_agents.clone(),
            options: state.spec.options.clone(),
            board: state.board.clone(),
            feed: state.feed.clone(),
            metrics: state.metrics.clone(),
            goals: state
                .spec
                .directory
                .goals_of(name)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let (actor, _) = Actor::spawn_linked(None, AgentActor, args, myself.get_cell())
            .await
            .map_err(|e| match e {
                // A store that cannot be written stays typed: the caller probes it.
                ractor::SpawnErr::StartupFailed(failure) => {
                    match failure.downcast::<ActorsError>() {
                        Ok(error) if error.is_store_not_writable() => *error,
                        Ok(error) => {
                            ActorsError::Actor(format!("agent {name} did not start: {error}"))
                        }
                        Err(other) => {
                            ActorsError::Actor(format!("agent {name} did not start: {other}"))
                        }
                    }
                }
                other => ActorsError::Actor(format!("agent {name} did not start: {other}")),
            })?;
        if let Some(slot) = state.slots.get_mut(name) {
            slot.actor = Some(actor);
            if fresh {
                slot.generation = slot.generation.wrapping_add(1);
            }
            slot.down = None;
        }
        state.publish_seat(name);
        Ok(())
    }

    /// Spawns `name`'s actor anew after a failure, a restart or a revival: a new seat.
    pub(super) async fn spawn_agent(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
    ) -> Result<(), ActorsError> {
        Self::spawn_agent_as(myself, state, name, true).await
    }

    /// Leaves `name` down for `reason`. An agent down on its store is probed from now on.
    pub(super) fn go_down(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        reason: DownReason,
        detail: String,
    ) {
        let (backoff, settle) = (state.spec.store_probe, state.spec.restart.window);
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        slot.down = Some(Down {
            reason,
            since_ms: crate::run::now_ms(),
            detail,
        });
        slot.down_period += 1;
        if reason == DownReason::StoreNotWritable {
            slot.probe_attempt =
                backoff.start_at(slot.probe_attempt, slot.revived_at, Instant::now(), settle);
            Self::schedule_probe(myself, state, name);
        }
        state.publish_seat(name);
    }

    /// Probes `name`'s store after the backoff's next wait; the answer comes back as
    /// [`SupervisorMsg::StoreProbed`].
    fn schedule_probe(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState, name: &str) {
        let Some(slot) = state.slots.get(name) else {
            return;
        };
        let wait = state.spec.store_probe.delay(slot.probe_attempt);
        let (me, agent, down_period) = (myself.clone(), name.to_owned(), slot.down_period);
        let path = state.data.store_path(name);
        debug!(agent = %name, wait_ms = wait.as_millis() as u64, "store probe scheduled");
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let probed = probe_store(path).await;
            let message = SupervisorMsg::StoreProbed {
                agent,
                down_period,
                probed,
            };
            if me.cast(message).is_err() {
                debug!("the supervisor stopped; a store probe's answer is dropped");
            }
        });
    }

    /// A probe's answer: revive the agent if its store takes writes again, else probe later.
    pub(super) async fn store_probed(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        down_period: u64,
        probed: Result<(), ActorsError>,
    ) {
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        let waiting = slot.actor.is_none()
            && slot.down_period == down_period
            && slot
                .down
                .as_ref()
                .is_some_and(|d| d.reason == DownReason::StoreNotWritable);
        if !waiting {
            debug!(agent = %name, "a stale store probe's answer is dropped");
            return;
        }
        // A pass counts as an attempt too: if the revived agent is down on its store again
        // soon, the next down period waits longer (see `ProbeBackoff::start_at`).
        slot.probe_attempt = slot.probe_attempt.saturating_add(1);
        match probed {
            Ok(()) => {
                let down_s = slot.down.as_ref().map_or(0, |d| {
                    crate::run::now_ms().saturating_sub(d.since_ms) / 1000
                });
                slot.restarts.clear();
                slot.revived_at = Some(Instant::now());
                slot.down_period += 1;
                slot.total_restarts += 1;
                match Self::spawn_agent(myself, state, name).await {
                    Ok(()) => {
                        info!(agent = %name, down_s, "store writable again: the agent is back with a fresh restart budget; its runs resume");
                    }
                    Err(e) => {
                        error!(agent = %name, "store writable again, but the agent did not start: {e}");
                        Self::down_after_start_failure(myself, state, name, e);
                    }
                }
            }
            Err(e) => {
                let detail = e.to_string();
                if let Some(down) = &mut slot.down {
                    down.detail.clone_from(&detail);
                }
                if e.is_store_not_writable() {
                    debug!(agent = %name, error = %detail, "store still not writable");
                } else {
                    warn!(agent = %name, error = %detail, "store probe failed");
                }
                Self::schedule_probe(myself, state, name);
            }
        }
    }

    /// After a start that failed: down on its store when that is why, else down as not started.
    pub(super) fn down_after_start_failure(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        error: ActorsError,
    ) {
        let reason = if error.is_store_not_writable() {
            DownReason::StoreNotWritable
        } else {
            DownReason::StartFailed
        };
        Self::go_down(myself, state, name, reason, error.to_string());
    }

    /// Restarts every agent that is down, each with a fresh restart budget (a reload on
    /// demand: the operator says the cause is dealt with). Returns the agents started.
    pub(super) async fn revive_all(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Vec<String> {
        let down: Vec<String> = state
            .slots
            .iter()
            .filter(|(_, slot)| slot.actor.is_none() && slot.down.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        let mut revived = Vec::new();
        for name in down {
            if let Some(slot) = state.slots.get_mut(&name) {
                slot.restarts.clear();
                slot.down_period += 1;
                slot.total_restarts += 1;
            }
            match Self::spawn_agent(myself, state, &name).await {
                Ok(()) => {
                    info!(agent = %name, "reload: the agent was down and is back with a fresh restart budget; its runs resume");
                    revived.push(name);
                }
                Err(e) => {
                    error!(agent = %name, "reload: the agent is down and did not start: {e}");
                    Self::down_after_start_failure(myself, state, &name, e);
                }
            }
        }
        revived
    }

    /// An agent's actor stopped or failed: restart it within its budget, or leave it down,
    /// and first ask its store whether it takes writes when that is why the actor failed.
    pub(super) async fn agent_stopped(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        reason: String,
        not_writable: bool,
    ) {
        let budget = state.spec.restart;
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        slot.actor = None;
        state.publish_seat(name);
        if not_writable {
            // Restarted now, it would fail on its first write: ask the store first. A store
            // that takes writes again (a passing hiccup) leaves the decision to the budget.
            if let Err(probe) = probe_store(state.data.store_path(name)).await {
                warn!(agent = %name, %reason, probe = %probe, "agent actor failed: its store is not writable; it is down until a probe finds the store writable again");
                Self::go_down(myself, state, name, DownReason::StoreNotWritable, reason);
                return;
            }
        }
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        if budget.admit(&mut slot.restarts, Instant::now()) {
            slot.total_restarts += 1;
            warn!(agent = %name, %reason, "agent actor failed; restarting it (its runs resume from the store)");
            if let Err(e) = Self::spawn_agent(myself, state, name).await {
                error!(agent = %name, "restart failed: {e}");
                Self::down_after_start_failure(myself, state, name, e);
            }
        } else if not_writable {
            error!(agent = %name, %reason, "agent actor failed past its restart budget on a store that is not writable; it is down until a probe finds the store writable again");
            Self::go_down(myself, state, name, DownReason::StoreNotWritable, reason);
        } else {
            error!(agent = %name, %reason, "agent actor failed past its restart budget; it is down until a reload or a host restart");
            Self::go_down(myself, state, name, DownReason::RestartBudgetSpent, reason);
        }
    }
}

/// Whether the store at `path` takes writes again, asked on a blocking thread.
async fn probe_store(path: PathBuf) -> Result<(), ActorsError> {
    tokio::task::spawn_blocking(move || RunStore::probe_writable(&path))
        .await
        .map_err(|e| ActorsError::Actor(format!("a store probe did not finish: {e}")))?
}
