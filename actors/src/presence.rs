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

use consort_core::directory::{LastSettled, WorkState};
use consort_core::{RunId, RunStatus};

/// The board; cheap to clone (one per host, shared by its agent actors and its supervisor).
#[derive(Clone, Debug, Default)]
pub struct PresenceBoard {
    agents: Arc<Mutex<HashMap<String, AgentRuns>>>,
}

#[derive(Debug, Default)]
struct AgentRuns {
    open: HashMap<RunId, RunStatus>,
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
            entry.last_settled = Some(LastSettled {
                run: run.clone(),
                status,
                at_ms,
            });
        } else {
            entry.open.insert(run.clone(), status);
        }
    }

    /// `agent`'s actor (re)started with these unsettled runs: they replace its open runs.
    pub fn reset(&self, agent: &str, open: impl IntoIterator<Item = (RunId, RunStatus)>) {
        let mut agents = self.lock();
        let entry = agents.entry(agent.to_owned()).or_default();
        entry.open = open.into_iter().collect();
    }

    /// `agent` left the host (removed on reload).
    pub fn forget(&self, agent: &str) {
        self.lock().remove(agent);
    }

    /// `agent`'s work state (empty for an agent that has stored nothing since start).
    pub fn work(&self, agent: &str) -> WorkState {
        let agents = self.lock();
        let mut work = WorkState::default();
        if let Some(entry) = agents.get(agent) {
            for status in entry.open.values() {
                work.count(*status);
            }
            work.last_settled = entry.last_settled.clone();
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> RunId {
        RunId::parse(&format!("run_{:032x}", n)).unwrap()
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
    fn a_restart_replaces_open_runs_and_keeps_the_last_settled() {
        let board = PresenceBoard::default();
        board.saw("cfo", &id(1), RunStatus::Succeeded, 1);
        board.saw("cfo", &id(2), RunStatus::Running, 2);
        board.reset("cfo", [(id(3), RunStatus::Waiting)]);
        let w = board.work("cfo");
        assert_eq!((w.running, w.waiting), (0, 1));
        assert!(w.last_settled.is_some());
        board.forget("cfo");
        assert_eq!(board.work("cfo"), WorkState::default());
    }
}
