//! The host's run feed: a notice each time a run's stored state changes.
//!
//! Agent actors publish to it when a commit lands: a run stored (a root run's insert, a call's
//! admission) and every append to a run's log, each with the run's record as the commit left
//! it and the sequence number of its log's last event. Followers (the HTTP API's live streams)
//! subscribe, then read the store: a notice is a hint to read again, never the source of
//! truth, so a follower that falls behind (the channel is bounded and drops its oldest
//! notices) re-reads what it missed and loses nothing.
//!
//! Publishing costs nothing while nobody follows: the record is cloned only when the channel
//! has a receiver. A notice carries the run as a listing shows it ([`crate::page::listed`]:
//! long inputs, outputs and errors cut), and the channel keeps at most `FEED_CAPACITY`
//! notices however slowly its followers read, so a follower that never reads holds a few
//! megabytes of the host at most. The feed decides nothing and reads no store.

use std::sync::Arc;

use tokio::sync::broadcast;

use consort_net::RunId;

use crate::run::RunRecord;

/// Notices kept for a follower that has not read them yet; one that falls further behind is
/// told it lagged.
const FEED_CAPACITY: usize = 1024;

/// One committed change of one run.
#[derive(Clone, Debug)]
pub struct RunChange {
    /// The run as the commit left it, as a listing shows it (long texts cut; `GET /runs/{id}`
    /// has them whole).
    pub record: Arc<RunRecord>,
    /// The sequence number of the last event now in the run's log.
    pub last_seq: u64,
}

impl RunChange {
    /// The run's id.
    pub fn id(&self) -> &RunId {
        &self.record.id
    }
}

/// The feed; cheap to clone (one per host, shared by its agent actors and its handle).
#[derive(Clone, Debug)]
pub struct RunFeed {
    changes: broadcast::Sender<RunChange>,
}

impl Default for RunFeed {
    fn default() -> Self {
        Self {
            changes: broadcast::channel(FEED_CAPACITY).0,
        }
    }
}

impl RunFeed {
    /// Notices of every change committed after this call.
    pub fn subscribe(&self) -> broadcast::Receiver<RunChange> {
        self.changes.subscribe()
    }

    /// Publishes the change `record` describes, if anyone follows.
    pub(crate) fn publish(&self, record: &RunRecord, last_seq: u64) {
        if self.changes.receiver_count() == 0 {
            return;
        }
        // A receiver may have gone between the check and the send: that is no failure.
        let _ = self.changes.send(RunChange {
            record: Arc::new(crate::page::listed(record.clone())),
            last_seq,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Channel, RunStatus};
    use crate::store::NewRun;
    use crate::visibility::{Identity, Origin};

    fn record(n: u8, status: RunStatus) -> RunRecord {
        let id = RunId::child_of(
            &RunId::parse(&format!("run_{}", "0".repeat(32))).unwrap(),
            &n.to_string(),
        );
        let mut record = NewRun {
            id,
            agent: "cfo".into(),
            channel: Channel::Api,
            parent_run: None,
            parent_agent: None,
            tool_use_id: None,
            chain: vec![],
            input: "August".into(),
            identity: Identity::Absent,
            origin: Origin::Absent,
            budget: None,
        }
        .record(1);
        record.status = status;
        record
    }

    #[test]
    fn a_follower_gets_each_change_after_it_subscribed() {
        let feed = RunFeed::default();
        feed.publish(&record(1, RunStatus::Running), 1);
        let mut follower = feed.subscribe();
        feed.publish(&record(2, RunStatus::Running), 1);
        feed.publish(&record(2, RunStatus::Succeeded), 4);
        let first = follower.try_recv().ok();
        let second = follower.try_recv().ok();
        assert_eq!(
            first.map(|c| c.id().clone()),
            Some(record(2, RunStatus::Running).id)
        );
        assert_eq!(
            second.map(|c| (c.record.status, c.last_seq)),
            Some((RunStatus::Succeeded, 4))
        );
        assert!(follower.try_recv().is_err());
    }

    #[test]
    fn a_follower_that_falls_behind_is_told_it_lagged() {
        let feed = RunFeed::default();
        let mut follower = feed.subscribe();
        for seq in 0..(FEED_CAPACITY as u64 + 10) {
            feed.publish(&record(1, RunStatus::Running), seq);
        }
        assert!(matches!(
            follower.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(10))
        ));
    }
}
