//! The host's presence board: each agent's open runs by status and the last run it settled.
//!
//! Agent actors write to it as their commits land (a run stored, a status change, a settle),
//! so it never shows a state the store would not; the supervisor reads it to answer the
//! directory without sending a message to any agent, so a busy mailbox never delays a
//! presence answer and a directory of thousands of agents costs one pass over a map. It holds
//! what a restart rebuilds: a restarted actor resets its entry from the store's unsettled runs.
//! It decides nothing; what the counts mean as presence is `consort_core::directory`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use consort_core::directory::{ActorState, LastSettled, WorkState};
use consort_core::{RunId, RunStatus};

/// The board; cheap to clone (one per host, shared by its agent actors and its supervisor).
#[derive(Clone, Debug, Default)]
pub struct PresenceBoard {
    agents: Arc<Mutex<HashMap<String, AgentRuns>>>,
    /// Each served agent: its actor's state (up, down, down on its store), and who holds its
    /// seat (incarnation).
    seats: Arc<Mutex<HashMap<String, (ActorState, String)>>>,
    /// Woken on every change, for waits that watch a run.
    changed: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct AgentRuns {
    /// Open runs: their status and since when they have had it.
    open: HashMap<RunId, (RunStatus, u64)>,
    /// Open runs with a delivered message no model turn has read yet, and since when.
    unread: HashMap<RunId, u64>,
    last_settled: Option<LastSettled>,
}

impl PresenceBoard {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, AgentRuns>> {
        // A panic while holding the lock leaves counts, not a broken invariant: go on.
        self.agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A run of `agent` is stored with `status` (or moved to it) as of `at_ms`.
    pub fn saw(&self, agent: &str, run: &RunId, status: RunStatus, at_ms: u64) {
        let mut agents = self.lock();
        let entry = agents.entry(agent.to_owned()).or_default();
        if status.is_settled() {
            entry.open.remove(run);
            entry.unread.remove(run);
            entry.last_settled = Some(LastSettled {
                run: run.clone(),
                status,
                at_ms,
            });
        } else {
            let since = match entry.open.get(run) {
                Some((old, since)) if *old == status => *since,
                _ => at_ms,
            };
            entry.open.insert(run.clone(), (status, since));
        }
        drop(agents);
        self.changed.notify_waiters();
    }

    /// What a transition of `agent`'s run `run` records, as it is handed to the store: a
    /// message delivered into the run waits until a model turn reads it (the rollup's stalled
    /// deliveries come from this).
    pub(crate) fn recorded(&self, agent: &str, run: &RunId, transition: &consort_core::Transition) {
        for event in transition.events() {
            match event {
                consort_core::RunEvent::MessageReceived(_) => {
                    self.message_delivered(agent, run, crate::run::now_ms());
                }
                consort_core::RunEvent::ModelTurn(_) => self.messages_read(agent, run),
                _ => {}
            }
        }
    }

    /// A message was delivered into `run` at `at_ms` (the oldest unread one keeps its time).
    pub fn message_delivered(&self, agent: &str, run: &RunId, at_ms: u64) {
        let mut agents = self.lock();
        let entry = agents.entry(agent.to_owned()).or_default();
        entry.unread.entry(run.clone()).or_insert(at_ms);
    }

    /// A model turn of `run` read what was delivered into it.
    pub fn messages_read(&self, agent: &str, run: &RunId) {
        if let Some(entry) = self.lock().get_mut(agent) {
            entry.unread.remove(run);
        }
    }

    /// Resolves when any run on the board changes after this call (register, then re-check
    /// what you wait for, then await: a change between the two is not missed).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// `agent`'s actor (re)started with these unsettled runs (status, since when): they
    /// replace its open runs.
    pub fn reset(&self, agent: &str, open: impl IntoIterator<Item = (RunId, RunStatus, u64)>) {
        let mut agents = self.lock();
        let entry = agents.entry(agent.to_owned()).or_default();
        entry.open = open
            .into_iter()
            .map(|(run, status, since)| (run, (status, since)))
            .collect();
        drop(agents);
        self.changed.notify_waiters();
    }

    /// The supervisor's word on `agent`'s actor (up, or down and why) and its incarnation.
    pub fn set_seat(&self, agent: &str, actor: ActorState, incarnation: String) {
        self.seats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent.to_owned(), (actor, incarnation));
        self.changed.notify_waiters();
    }

    /// The state of `agent`'s actor and who holds its seat; `None` when this host does not
    /// serve it.
    pub fn seat(&self, agent: &str) -> Option<(ActorState, String)> {
        self.seats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .cloned()
    }

    /// `agent`'s work state (empty for an agent that has stored nothing since start).
    pub fn work(&self, agent: &str) -> WorkState {
        let agents = self.lock();
        let mut work = WorkState::default();
        if let Some(entry) = agents.get(agent) {
            for (status, since) in entry.open.values() {
                work.count(*status);
                // A gate is not a run that stopped advancing: blocked runs have their own since.
                let slot = if *status == RunStatus::Blocked {
                    &mut work.blocked_since_ms
                } else {
                    &mut work.oldest_change_ms
                };
                *slot = Some(slot.map_or(*since, |o| o.min(*since)));
            }
            work.unread_since_ms = entry.unread.values().min().copied();
            work.last_settled = entry.last_settled.clone();
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> RunId {
        RunId::parse(&format!("run_{n:032x}")).unwrap()
    }

    #[test]
    fn counts_open_runs_by_status_and_keeps_the_last_settled() {
        let board = PresenceBoard::default();
        board.saw("cfo", &id(1), RunStatus::Running, 1);
        board.saw("cfo", &id(2), RunStatus::Blocked, 2);
        board.saw("cfo", &id(1), RunStatus::Waiting, 3);
        let w = board.work("cfo");
        assert_eq!((w.running, w.waiting, w.blocked), (0, 1, 1));
        board.saw("cfo", &id(1), RunStatus::Succeeded, 4);
        let w = board.work("cfo");
        assert_eq!(w.open(), 1);
        assert_eq!(w.last_settled.map(|l| (l.run, l.at_ms)), Some((id(1), 4)));
        assert_eq!(board.work("cmo"), WorkState::default());
    }

    #[test]
    fn a_run_keeps_its_since_until_its_status_changes() {
        let board = PresenceBoard::default();
        board.saw("cfo", &id(1), RunStatus::Running, 10);
        board.saw("cfo", &id(1), RunStatus::Running, 20);
        board.saw("cfo", &id(2), RunStatus::Blocked, 30);
        let w = board.work("cfo");
        assert_eq!(
            (w.oldest_change_ms, w.blocked_since_ms),
            (Some(10), Some(30))
        );
        // The blocked run is no run that stopped advancing: it has its own since.
        board.saw("cfo", &id(1), RunStatus::Waiting, 40);
        assert_eq!(board.work("cfo").oldest_change_ms, Some(40));
    }

    #[test]
    fn a_restart_replaces_open_runs_and_keeps_the_last_settled() {
        let board = PresenceBoard::default();
        board.saw("cfo", &id(1), RunStatus::Succeeded, 1);
        board.saw("cfo", &id(2), RunStatus::Running, 2);
        board.reset("cfo", [(id(3), RunStatus::Waiting, 3)]);
        let w = board.work("cfo");
        assert_eq!((w.running, w.waiting), (0, 1));
        assert!(w.last_settled.is_some());
    }
}
