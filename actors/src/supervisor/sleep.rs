//! Agents that sleep: a host serves far more agents than it keeps actors for.
//!
//! An agent's actor is spawned when a message first needs it ([`HostSupervisor::wake`]) and
//! retired once it has been idle for its idle time (`AgentOptions::idle_after`): the actor
//! reports [`SupervisorMsg::Idle`] on its timer, and the supervisor asks it to retire
//! (`AgentMsg::Retire`) and waits for the answer. While it waits it routes nothing, so no
//! message can be sent to an actor on its way out; a message that arrives afterwards wakes a
//! new one. An asleep agent holds its slot (its config and seat) and nothing else: no actor,
//! no store connection, no file. Sleeping is not a restart: the agent's seat (its
//! incarnation in the peer directory) stays the same across it.
//!
//! At start, the host wakes only the agents that may hold unsettled runs, so that it never
//! opens every store to find out. [`AwakeMarkers`] keeps one empty file per such agent,
//! `<data>/awake/<agent>`: written before the agent's actor starts (so before it can accept a
//! run) and removed only when the agent is retired idle (nothing unsettled). A host restarted
//! after a crash finds exactly the agents with runs to resume. A data folder from before the
//! markers (no `awake` folder) wakes every agent that has a store, once.
//!
//! A host on PostgreSQL wakes instead the agents the database says hold unsettled runs: the
//! database is shared with the hosts that fail over to one another, the markers are not.
//!
//! This module decides nothing about runs and never writes a store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ractor::{ActorId, ActorRef};
use tracing::{debug, info, warn};

use super::{HostSupervisor, SupervisorMsg, SupervisorState};
use crate::ActorsError;
use crate::agent::AgentMsg;
use crate::data::DataFolder;
use crate::store::Durability;

/// How long the supervisor waits for an actor's answer to a retirement before it leaves the
/// actor up (the supervisor routes nothing while it waits).
const RETIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The marker files of the agents that may hold unsettled runs.
#[derive(Clone, Debug)]
pub(crate) struct AwakeMarkers {
    dir: PathBuf,
    /// Whether a marker is pushed to disk before the agent starts (full durability).
    sync: bool,
}

impl AwakeMarkers {
    pub(crate) fn new(data_root: &Path, durability: Durability) -> Self {
        Self {
            dir: data_root.join("awake"),
            sync: durability == Durability::Full,
        }
    }

    /// The agents among `served` to wake at start: the marked ones, or, in a data folder
    /// that has no markers yet, every one with a store.
    pub(crate) fn to_wake<'a>(
        &self,
        data: &DataFolder,
        served: impl Iterator<Item = &'a String>,
    ) -> Vec<String> {
        let served: Vec<&String> = served.collect();
        // A PostgreSQL store may hold runs another host left (a failover): what to resume is
        // in the database, not in this host's markers.
        match data.agents_with_unsettled_runs() {
            Ok(None) => {}
            Ok(Some(unsettled)) => {
                return served
                    .into_iter()
                    .filter(|n| unsettled.contains(n))
                    .cloned()
                    .collect();
            }
            Err(e) => {
                warn!(error = %e, "the run store could not say which agents hold unsettled runs; waking every agent");
                return served.into_iter().cloned().collect();
            }
        }
        match std::fs::read_dir(&self.dir) {
            Ok(entries) => {
                let marked: std::collections::HashSet<String> = entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                served
                    .into_iter()
                    .filter(|name| marked.contains(name.as_str()))
                    .cloned()
                    .collect()
            }
            Err(_) => served
                .into_iter()
                .filter(|name| data.store_path(name).is_file())
                .cloned()
                .collect(),
        }
    }

    /// Marks `agent` as possibly holding unsettled runs; done before its actor starts.
    pub(crate) fn mark(&self, agent: &str) -> Result<(), ActorsError> {
        let path = self.dir.join(agent);
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&path, b""))
            .and_then(|()| {
                if self.sync {
                    std::fs::File::open(&self.dir)?.sync_all()
                } else {
                    Ok(())
                }
            });
        written.map_err(|source| match source.kind() {
            // No room for an empty file: the store has none either; the supervisor probes.
            std::io::ErrorKind::StorageFull
            | std::io::ErrorKind::QuotaExceeded
            | std::io::ErrorKind::FileTooLarge => ActorsError::StoreNotWritable {
                path: path.clone(),
                detail: source.to_string(),
            },
            _ => ActorsError::file(&path, source),
        })
    }

    /// Unmarks `agent`: it was retired with nothing unsettled.
    pub(crate) fn unmark(&self, agent: &str) {
        let path = self.dir.join(agent);
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            // A marker left behind only wakes the agent at the next start, for nothing.
            warn!(%agent, %error, "the agent's awake marker was not removed");
        }
    }
}

impl HostSupervisor {
    /// The actor of `agent`, spawned if the agent sleeps; `None` if it is down or not served
    /// here. A failed start leaves the agent down, as a failed restart does.
    pub(super) async fn wake(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        agent: &str,
    ) -> Option<ActorRef<AgentMsg>> {
        let slot = state.slots.get(agent)?;
        if let Some(actor) = &slot.actor {
            return Some(actor.clone());
        }
        if slot.down.is_some() {
            return None;
        }
        match Self::spawn_agent_as(myself, state, agent, false).await {
            Ok(()) => {
                debug!(%agent, "asleep agent woken");
                Self::actor(state, agent)
            }
            Err(error) => {
                warn!(%agent, %error, "an asleep agent did not start");
                Self::down_after_start_failure(myself, state, agent, error);
                None
            }
        }
    }

    /// An actor reported itself idle: ask it to retire, and let the agent sleep if it does.
    pub(super) async fn retire_idle(state: &mut SupervisorState, agent: &str, id: ActorId) {
        let Some(actor) = state
            .slots
            .get(agent)
            .and_then(|slot| slot.actor.clone())
            .filter(|actor| actor.get_id() == id)
        else {
            return;
        };
        let timeout_ms = RETIRE_TIMEOUT.as_millis() as u64;
        // Counted in like every message to an agent (see `agent::tell`).
        state.metrics.mailbox().increment(1.0);
        match ractor::call_t!(actor, AgentMsg::Retire, timeout_ms) {
            Ok(true) => {
                if let Some(slot) = state.slots.get_mut(agent) {
                    slot.actor = None;
                }
                state.markers.unmark(agent);
                state.publish_seat(agent);
                info!(%agent, "agent asleep until a message needs it");
            }
            Ok(false) => debug!(%agent, "an idle agent had work again; it stays up"),
            Err(error) => {
                // A message that could not be sent never reached the mailbox.
                if matches!(
                    error,
                    ractor::RactorErr::Messaging(ractor::MessagingErr::SendErr(_))
                ) {
                    state.metrics.mailbox().decrement(1.0);
                }
                debug!(%agent, %error, "an idle agent did not answer its retirement");
            }
        }
    }
}
