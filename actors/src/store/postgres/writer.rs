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
//! Every agent's store is written only under its lease (`lease.rs`): a store is opened once its
//! lease is held, a write of an agent whose lease was lost is refused before it runs, and a
//! batch that wrote checks every lease it wrote under in its own transaction before it commits
//! (it rolls back, whole, if another host took one). Leases are renewed between batches, and let
//! go when the host stops ([`Job::Release`]) or the writer ends.
//!
//! It decides nothing about runs; it orders and commits what it is handed.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use tracing::{error, warn};

use super::Database;
use super::lease::Leases;
use crate::ActorsError;
use crate::store::writer::{CommitFailure, Counts, Deliver, Job, MAX_BATCH, guarded, not_open};

/// The agent a store path names: `<data>/agents/<agent>/runs.db` (the layout of
/// [`crate::DataFolder::store_path`]).
pub(crate) fn agent_of(path: &Path) -> Option<&str> {
    path.parent()?.file_name()?.to_str()
}

/// The writer thread: batches until every handle is dropped, under `leases`.
pub(in crate::store) fn run(
    mut db: Database,
    mut leases: Leases,
    queue: &mpsc::Receiver<Job>,
    counts: &Counts,
) {
    // Stores open for writing (an agent actor that is up); reads need no opening.
    let mut open: HashSet<Arc<Path>> = HashSet::new();
    loop {
        let first = match queue.recv_timeout(leases.renewal_in()) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                leases.renew_if_due(db.client_mut());
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        if db.is_closed() {
            match db.reconnect() {
                Ok(mut fresh) => match leases.bound_session(fresh.client_mut()) {
                    Ok(()) => db = fresh,
                    Err(e) => {
                        warn!(error = %e, "a new PostgreSQL connection could not be bounded; this batch fails");
                    }
                },
                Err(e) => {
                    warn!(error = %e, "the PostgreSQL run store is not reachable; this batch fails");
                }
            }
        }
        // A store opens once its lease is held: taken here, outside the batch's transaction
        // (a rolled-back batch must not take a lease back).
        let mut opened: Vec<Result<(), ActorsError>> = Vec::new();
        for job in &jobs {
            if let Job::Open { path, .. } = job {
                opened.push(match agent_of(path) {
                    Some(agent) => leases.ensure(db.client_mut(), agent),
                    None => Ok(()),
                });
            }
        }
        let mut opened = opened.into_iter();
        let writes = jobs
            .iter()
            .any(|job| matches!(job, Job::Work { writes: true, .. }));
        let in_transaction = writes
            && db
                .begin_batch()
                .inspect_err(|e| {
                    // Without the batch's transaction no lease can be checked: its writes fail.
                    warn!(error = %e, "could not open a batch transaction");
                })
                .is_ok();
        let mut held: Vec<Deliver> = Vec::with_capacity(jobs.len());
        let mut written: Vec<String> = Vec::new();
        let mut panicked = false;
        let mut release = false;
        for job in jobs {
            match job {
                Job::Open { path, answer, .. } => {
                    let result = opened.next().unwrap_or(Ok(()));
                    if result.is_ok() {
                        open.insert(path);
                    }
                    let _unwanted = answer.send(result);
                }
                Job::Close { path } => {
                    open.remove(&path);
                }
                Job::Release => release = true,
                Job::Work { path, writes, work } => {
                    if writes {
                        counts.writes.fetch_add(1, Ordering::Relaxed);
                    }
                    let delivered = match agent_of(&path) {
                        Some(_) if writes && !open.contains(&path) => {
                            guarded(work, Err(not_open(&path)))
                        }
                        Some(agent) if writes && (!in_transaction || !leases.holds(agent)) => {
                            guarded(work, Err(unleased(agent, in_transaction)))
                        }
                        Some(agent) => {
                            let agent = agent.to_owned();
                            if writes && !written.contains(&agent) {
                                written.push(agent.clone());
                            }
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
        } else if let Err(detail) = leases.fence(db.client_mut(), &written) {
            let _rolled_back = db.rollback_batch();
            Err(CommitFailure {
                detail,
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
        if release {
            leases.release_all(db.client_mut());
        }
        leases.renew_if_due(db.client_mut());
    }
    leases.release_all(db.client_mut());
}

/// Why a write of `agent` is refused before it runs: its lease is not held (lost to another
/// host, or let go as the host stopped), or no batch transaction could check it.
fn unleased(agent: &str, in_transaction: bool) -> ActorsError {
    let detail = if in_transaction {
        "this host does not hold the lease of the agent's store (another host took it over, or this host is stopping): nothing is written"
    } else {
        "no transaction could be opened to check the lease of the agent's store: nothing is written"
    };
    ActorsError::Postgres {
        store: agent.to_owned(),
        detail: detail.to_owned(),
    }
}
