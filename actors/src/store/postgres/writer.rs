//! The store writer's thread for the PostgreSQL backend: one connection for every agent of
//! the host, and group commit across agents.
//!
//! It takes the same jobs as the SQLite writer (see `store::writer`) and keeps the same
//! promises: the jobs waiting when it wakes (up to [`MAX_BATCH`]) run in one transaction, each
//! write in a savepoint of its own (a write that fails rolls back alone), the transaction
//! commits once, and only then is any job of the batch answered, reads included. Jobs run in
//! the order they were sent. Unlike SQLite, one transaction holds the writes of many agents: a
//! batch costs one commit, however many agents wrote.
//!
//! A store is addressed as in SQLite, by its path under the data folder
//! (`<data>/agents/<agent>/runs.db`); here the path only names the agent, and nothing is
//! written to the data folder. A lost connection is replaced at the next batch.
//!
//! It decides nothing about runs; it orders and commits what it is handed.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use tracing::{error, warn};

use super::Database;
use crate::store::writer::{CommitFailure, Counts, Deliver, Job, MAX_BATCH, guarded, not_open};

/// The agent a store path names: `<data>/agents/<agent>/runs.db` (the layout of
/// [`crate::DataFolder::store_path`]).
pub(crate) fn agent_of(path: &Path) -> Option<&str> {
    path.parent()?.file_name()?.to_str()
}

/// The writer thread: batches until every handle is dropped.
pub(in crate::store) fn run(mut db: Database, queue: &mpsc::Receiver<Job>, counts: &Counts) {
    // Stores open for writing (an agent actor that is up); reads need no opening.
    let mut open: HashSet<Arc<Path>> = HashSet::new();
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        if db.is_closed() {
            match db.reconnect() {
                Ok(fresh) => db = fresh,
                Err(e) => {
                    warn!(error = %e, "the PostgreSQL run store is not reachable; this batch fails");
                }
            }
        }
        let writes = jobs
            .iter()
            .any(|job| matches!(job, Job::Work { writes: true, .. }));
        let in_transaction = writes
            && db
                .begin_batch()
                .inspect_err(|e| {
                    // Each write's own transaction then stands alone.
                    warn!(error = %e, "could not open a batch transaction");
                })
                .is_ok();
        let mut held: Vec<Deliver> = Vec::with_capacity(jobs.len());
        let mut panicked = false;
        for job in jobs {
            match job {
                Job::Open { path, answer, .. } => {
                    open.insert(path);
                    let _unwanted = answer.send(Ok(()));
                }
                Job::Close { path } => {
                    open.remove(&path);
                }
                Job::Work { path, writes, work } => {
                    if writes {
                        counts.writes.fetch_add(1, Ordering::Relaxed);
                    }
                    let delivered = match agent_of(&path) {
                        Some(_) if writes && !open.contains(&path) => {
                            guarded(work, Err(not_open(&path)))
                        }
                        Some(agent) => {
                            let agent = agent.to_owned();
                            let mut store = db.store(&agent);
                            guarded(work, Ok(&mut store))
                        }
                        None => guarded(work, Err(not_open(&path))),
                    };
                    match delivered {
                        Some(deliver) => held.push(deliver),
                        None => panicked = true,
                    }
                }
            }
        }
        let committed = if !in_transaction {
            Ok(())
        } else if panicked {
            // A job that panicked may have left its savepoint half done: nothing of the batch
            // is kept, and every asker hears so.
            let _rolled_back = db.rollback_batch();
            Err(CommitFailure {
                detail: "a job of the batch failed; the batch was rolled back".into(),
                not_writable: false,
            })
        } else {
            counts.time_commit(|| db.commit_batch()).map_err(|e| {
                error!(error = %e, "group commit failed; the batch's writes are rolled back");
                CommitFailure {
                    detail: e.to_string(),
                    not_writable: false,
                }
            })
        };
        for deliver in held {
            deliver(committed.as_ref().map(|_| ()));
        }
    }
}
