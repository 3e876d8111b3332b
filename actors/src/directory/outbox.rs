//! The sender's side of durable delivery: deliveries to another host are journaled here before
//! they are sent, and kept while that host cannot be reached, to be carried once it is back.
//!
//! One small SQLite file per host (`<data>/outbox.db`), used only from blocking threads (never
//! a tokio worker). A row is written before the `Deliver` frame leaves and removed once the
//! peer answered with a receipt; a row that stays is carried by [`carry`] with the same
//! delivery id, which the receiving agent dedupes, so carrying again after a crash of either
//! host never delivers twice. This module decides nothing about a delivery: consent and
//! refusals are the receiving agent's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

use consort_core::RunId;
use consort_core::directory::Receipt;

use super::carry_schedule::{AttemptFailure, CARRY_EVERY, wait_after_failure};
use crate::routing::{RemoteCalls, RemoteFailure};

/// One journaled delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub sender: String,
    pub host: String,
    pub agent: String,
    pub run: Option<RunId>,
    pub delivery_id: String,
    pub text: String,
}

/// The host's outbox file.
#[derive(Clone, Debug)]
pub(crate) struct Outbox {
    path: Arc<PathBuf>,
    /// Rung when a delivery is handed to the carrier, which then tries it at once.
    handed: Arc<Notify>,
}

impl Outbox {
    pub(crate) fn new(data_root: &Path) -> Self {
        Self {
            path: Arc::new(data_root.join("outbox.db")),
            handed: Arc::new(Notify::new()),
        }
    }

    fn open(path: &Path) -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS pending (
                sender TEXT NOT NULL, host TEXT NOT NULL, agent TEXT NOT NULL, run TEXT,
                delivery_id TEXT NOT NULL, text TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
                queued INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (sender, agent, delivery_id)
            ) WITHOUT ROWID;",
        )?;
        Ok(conn)
    }

    /// Runs `work` on a blocking thread with a connection to the outbox.
    async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || Self::open(&path).and_then(|c| work(&c)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// Journals `p` (a repeat of the same id keeps the first).
    pub(crate) async fn journal(&self, p: &Pending) -> Result<(), String> {
        let p = p.clone();
        self.with(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO pending (sender, host, agent, run, delivery_id, text, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    p.sender,
                    p.host,
                    p.agent,
                    p.run.as_ref().map(RunId::as_str),
                    p.delivery_id,
                    p.text,
                    i64::try_from(crate::run::now_ms()).unwrap_or(i64::MAX)
                ],
            )
            .map(|_| ())
        })
        .await
    }

    /// Hands a journaled delivery to the carrier: its host could not be reached. Until then a
    /// row belongs to the sender that is waiting for its receipt, so nothing sends it twice.
    pub(crate) async fn mark_queued(&self, sender: &str, agent: &str, delivery_id: &str) {
        let (s, a, d) = (sender.to_owned(), agent.to_owned(), delivery_id.to_owned());
        if let Err(e) = self
            .with(move |c| {
                c.execute(
                    "UPDATE pending SET queued = 1 WHERE sender = ?1 AND agent = ?2 AND delivery_id = ?3",
                    params![s, a, d],
                )
                .map(|_| ())
            })
            .await
        {
            warn!(error = %e, "outbox: a delivery could not be handed to the carrier; it is carried after the next restart");
            return;
        }
        // A permit is kept if the carrier is busy: it reads the outbox again when it is done.
        self.handed.notify_one();
    }

    /// At start: rows a previous process was still sending are the carrier's now.
    async fn adopt_unfinished(&self) {
        if !self.path.exists() {
            return;
        }
        if let Err(e) = self
            .with(|c| c.execute("UPDATE pending SET queued = 1", []).map(|_| ()))
            .await
        {
            warn!(error = %e, "outbox: unfinished deliveries could not be adopted");
        }
    }

    /// Removes a delivery the peer answered.
    pub(crate) async fn done(&self, sender: &str, agent: &str, delivery_id: &str) {
        let (s, a, d) = (sender.to_owned(), agent.to_owned(), delivery_id.to_owned());
        if let Err(e) = self
            .with(move |c| {
                c.execute(
                    "DELETE FROM pending WHERE sender = ?1 AND agent = ?2 AND delivery_id = ?3",
                    params![s, a, d],
                )
                .map(|_| ())
            })
            .await
        {
            warn!(error = %e, "outbox: an answered delivery could not be removed; it will be carried again (the peer dedupes it)");
        }
    }

    /// Whether a delivery is journaled and not answered yet.
    pub(crate) async fn is_pending(&self, sender: &str, agent: &str, delivery_id: &str) -> bool {
        let (s, a, d) = (sender.to_owned(), agent.to_owned(), delivery_id.to_owned());
        self.with(move |c| {
            c.query_row(
                "SELECT 1 FROM pending WHERE sender = ?1 AND agent = ?2 AND delivery_id = ?3",
                params![s, a, d],
                |_| Ok(()),
            )
            .optional()
        })
        .await
        .ok()
        .flatten()
        .is_some()
    }

    async fn all(&self) -> Result<Vec<Pending>, String> {
        if !self.path.exists() {
            return Ok(Vec::new());
        }
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT sender, host, agent, run, delivery_id, text FROM pending WHERE queued = 1 ORDER BY created_at_ms",
            )?;
            let rows = stmt
                .query_map([], |row| {
                    Ok(Pending {
                        sender: row.get(0)?,
                        host: row.get(1)?,
                        agent: row.get(2)?,
                        run: row
                            .get::<_, Option<String>>(3)?
                            .and_then(|r| RunId::parse(&r).ok()),
                        delivery_id: row.get(4)?,
                        text: row.get(5)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
    }
}

/// Where the carrier stands with one journaled delivery it could not carry yet.
#[derive(Clone, Copy, Debug)]
struct Tries {
    /// Failed attempts in a row.
    failures: u32,
    /// Not tried again before this.
    next_at: Instant,
}

/// A journaled delivery's key in the outbox.
type Key = (String, String, String);

fn key_of(p: &Pending) -> Key {
    (p.sender.clone(), p.agent.clone(), p.delivery_id.clone())
}

/// What one attempt at a delivery came to, and how long it took.
struct Tried {
    pending: Pending,
    failed: Option<AttemptFailure>,
    took: Duration,
}

/// Carries journaled deliveries for as long as the host runs: each one again with its id until
/// its peer's host answers with a receipt. A delivery handed over is tried at once, then on
/// the [`carry_schedule`](super::carry_schedule) backoff (milliseconds at first, never more
/// than [`CARRY_EVERY`] apart); the outbox is read again at least every [`CARRY_EVERY`].
pub(crate) async fn carry(outbox: Outbox, remote: Arc<dyn RemoteCalls>) {
    outbox.adopt_unfinished().await;
    let mut tries: HashMap<Key, Tries> = HashMap::new();
    loop {
        let read = outbox.all().await;
        let unread = read.is_err();
        let due = match read {
            Ok(pending) => {
                let kept: HashSet<Key> = pending.iter().map(key_of).collect();
                tries.retain(|key, _| kept.contains(key));
                let now = Instant::now();
                pending
                    .into_iter()
                    .filter(|p| tries.get(&key_of(p)).is_none_or(|t| t.next_at <= now))
                    .collect()
            }
            // Nothing is forgotten: the schedule stands and the file is read again later.
            Err(e) => {
                warn!(error = %e, "outbox: journaled deliveries could not be read");
                Vec::new()
            }
        };
        for tried in carry_due(&outbox, &remote, due).await {
            let key = key_of(&tried.pending);
            let Some(failure) = tried.failed else {
                tries.remove(&key);
                continue;
            };
            let failures = tries.get(&key).map_or(0, |t| t.failures).saturating_add(1);
            let wait = wait_after_failure(failures, failure, tried.took, rand::random::<f64>());
            tries.insert(
                key,
                Tries {
                    failures,
                    next_at: Instant::now() + wait,
                },
            );
        }
        let rescan = Instant::now() + CARRY_EVERY;
        // A file that could not be read is read again a whole pass later, not in a loop.
        let next = match tries.values().map(|t| t.next_at).min() {
            Some(at) if !unread => at.min(rescan),
            _ => rescan,
        };
        tokio::select! {
            () = outbox.handed.notified() => {}
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

/// Tries every delivery in `due` once, the peer hosts' in parallel, each host's in the order
/// they were journaled; once a host cannot be reached, its other deliveries share that
/// failure without a dial each.
async fn carry_due(
    outbox: &Outbox,
    remote: &Arc<dyn RemoteCalls>,
    due: Vec<Pending>,
) -> Vec<Tried> {
    let mut by_host: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
    for p in due {
        by_host.entry(p.host.clone()).or_default().push(p);
    }
    let mut hosts = JoinSet::new();
    for (_, deliveries) in by_host {
        let (outbox, remote) = (outbox.clone(), remote.clone());
        hosts.spawn(async move {
            let mut tried = Vec::with_capacity(deliveries.len());
            let mut unreachable: Option<Duration> = None;
            for p in deliveries {
                if let Some(took) = unreachable {
                    tried.push(Tried {
                        pending: p,
                        failed: Some(AttemptFailure::Unreachable),
                        took,
                    });
                    continue;
                }
                let started = Instant::now();
                let failed = carry_one(&outbox, remote.as_ref(), &p).await;
                let took = started.elapsed();
                if failed == Some(AttemptFailure::Unreachable) {
                    unreachable = Some(took);
                }
                tried.push(Tried {
                    pending: p,
                    failed,
                    took,
                });
            }
            tried
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = hosts.join_next().await {
        match joined {
            Ok(tried) => all.extend(tried),
            // The rows stay journaled: the next pass tries them again.
            Err(e) => warn!(error = %e, "outbox: a carrying task failed"),
        }
    }
    all
}

/// Sends one journaled delivery again; `None` once its peer answered with a receipt (and the
/// row is removed).
async fn carry_one(
    outbox: &Outbox,
    remote: &dyn RemoteCalls,
    p: &Pending,
) -> Option<AttemptFailure> {
    let asker = (p.sender != consort_core::directory::OPERATOR_SENDER).then(|| p.sender.clone());
    match remote
        .deliver(
            p.host.clone(),
            asker,
            p.agent.clone(),
            p.run.clone(),
            p.delivery_id.clone(),
            p.text.clone(),
        )
        .await
    {
        Ok(receipt) => {
            info!(agent = %p.agent, delivery_id = %p.delivery_id, receipt = receipt.code(), "outbox: a journaled delivery was carried");
            outbox.done(&p.sender, &p.agent, &p.delivery_id).await;
            None
        }
        Err(RemoteFailure::Unreachable(_)) => Some(AttemptFailure::Unreachable),
        Err(RemoteFailure::Refused(detail)) => {
            // The peer's host answered without a receipt (starting, or refusing the frame):
            // keep it; a refusal of the delivery itself comes as a receipt.
            warn!(agent = %p.agent, delivery_id = %p.delivery_id, %detail, "outbox: not taken yet");
            Some(AttemptFailure::Refused)
        }
    }
}

/// The receipt of a journaled delivery still waiting.
pub(crate) fn queued(delivery_id: &str) -> Receipt {
    Receipt::Queued {
        delivery_id: delivery_id.to_owned(),
    }
}
