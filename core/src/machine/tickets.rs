//! Tickets: which of the agent's store jobs are durable, and what waits for them.
//!
//! Every job the driver hands its store (an append, a root run's insert, a call's admission)
//! takes the next ticket from the machine; the store commits one agent's jobs in the order
//! they were sent, so "ticket `t` is committed" means every job up to `t` is. What lets
//! something out of a run (a call, a tool's side effect, a settle notice, an answer to
//! whoever asked) waits for the ticket of the run's last write. Plain bookkeeping: nothing here
//! decides what waits.

use std::collections::{BTreeMap, HashMap};

use crate::RunId;

/// Something held until a ticket commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// Resume the suspended drive of this run.
    Drive(RunId),
    /// Answer an asker with this verdict.
    Answer(super::drive::Answer),
}

/// The agent's jobs out at its store, and what waits for their commits.
#[derive(Debug, Default)]
pub(crate) struct Tickets {
    /// The last ticket handed out.
    issued: u64,
    /// The highest ticket known committed.
    committed: u64,
    /// Each run's last write not yet known committed.
    last_write: HashMap<RunId, u64>,
    /// What waits for which ticket.
    waiters: BTreeMap<u64, Vec<Waiter>>,
}

impl Tickets {
    pub(crate) fn issued(&self) -> u64 {
        self.issued
    }

    /// Whether no job is out and nothing waits for one.
    pub(crate) fn is_quiet(&self) -> bool {
        self.committed >= self.issued && self.waiters.is_empty()
    }

    /// The next ticket, for a job that writes no run's log (a call's admission).
    pub(crate) fn issue(&mut self) -> u64 {
        self.issued += 1;
        self.issued
    }

    /// The next ticket, for a job that writes run `id`'s log.
    pub(crate) fn issue_for(&mut self, id: &RunId) -> u64 {
        let ticket = self.issue();
        self.last_write.insert(id.clone(), ticket);
        ticket
    }

    /// The ticket of run `id`'s last write, if it is not committed yet.
    pub(crate) fn uncommitted(&self, id: &RunId) -> Option<u64> {
        self.last_write
            .get(id)
            .copied()
            .filter(|t| *t > self.committed)
    }

    /// Holds `waiter` until `ticket` commits.
    pub(crate) fn wait(&mut self, ticket: u64, waiter: Waiter) {
        self.waiters.entry(ticket).or_default().push(waiter);
    }

    /// `ticket` committed: returns what waited for it (and for every ticket before it), in
    /// ticket order.
    pub(crate) fn committed(&mut self, ticket: u64) -> Vec<Waiter> {
        self.committed = self.committed.max(ticket);
        let committed = self.committed;
        self.last_write.retain(|_, t| *t > committed);
        let later = self.waiters.split_off(&(committed + 1));
        std::mem::replace(&mut self.waiters, later)
            .into_values()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_releases_what_waited_for_it_and_for_every_ticket_before() {
        let (a, b) = (RunId::random(), RunId::random());
        let mut t = Tickets::default();
        let t1 = t.issue_for(&a);
        let t2 = t.issue();
        let t3 = t.issue_for(&b);
        assert_eq!((t1, t2, t3), (1, 2, 3));
        assert_eq!(t.uncommitted(&a), Some(1));
        t.wait(t1, Waiter::Drive(a.clone()));
        t.wait(t3, Waiter::Drive(b.clone()));
        assert!(!t.is_quiet());
        assert_eq!(t.committed(2), vec![Waiter::Drive(a.clone())]);
        assert_eq!(t.uncommitted(&a), None);
        assert_eq!(t.uncommitted(&b), Some(3));
        assert_eq!(
            t.committed(1),
            vec![],
            "a late, lower commit changes nothing"
        );
        assert_eq!(t.committed(3), vec![Waiter::Drive(b)]);
        assert!(t.is_quiet());
        assert_eq!(t.issued(), 3);
    }
}
