//! The sender's side of durable delivery: deliveries to another host are journaled here before
//! they are sent, and kept while that host cannot be reached, to be carried once it is back.
//!
//! One small SQLite file per host (`<data>/outbox.db`), used only from blocking threads (never
//! a tokio worker). A row is written before the `Deliver` frame leaves and removed once the
//! peer answered with a receipt; a row that stays is carried by [`carry`] with the same
//! delivery id, which the receiving agent dedupes, so carrying again after a crash of either
//! host never delivers twice. This module decides nothing about a delivery: consent and
//! refusals are the receiving agent's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tracing::{info, warn};

use consort_core::RunId;
use consort_core::directory::Receipt;

use crate::routing::{RemoteCalls, RemoteFailure};

/// How often journaled deliveries are tried again.
pub(crate) const CARRY_EVERY: Duration = Duration::from_secs(2);

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
}

impl Outbox {
    pub(crate) fn new(data_root: &Path) -> Self {
        Self {
            path: Arc::new(data_root.join("outbox.db")),
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
        }
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

/// Carries journaled deliveries for as long as the host runs: each one again with its id, every
/// [`CARRY_EVERY`], until its peer's host answers with a receipt.
pub(crate) async fn carry(outbox: Outbox, remote: Arc<dyn RemoteCalls>) {
    outbox.adopt_unfinished().await;
    loop {
        tokio::time::sleep(CARRY_EVERY).await;
        let pending = match outbox.all().await {
            Ok(pending) => pending,
            Err(e) => {
                warn!(error = %e, "outbox: journaled deliveries could not be read");
                continue;
            }
        };
        for p in pending {
            let asker =
                (p.sender != consort_core::directory::OPERATOR_SENDER).then(|| p.sender.clone());
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
                }
                Err(RemoteFailure::Unreachable(_)) => {}
                Err(RemoteFailure::Refused(detail)) => {
                    // The peer's host answered without a receipt (starting, or refusing the
                    // frame): keep it; a refusal of the delivery itself comes as a receipt.
                    warn!(agent = %p.agent, delivery_id = %p.delivery_id, %detail, "outbox: not taken yet");
                }
            }
        }
    }
}

/// The receipt of a journaled delivery still waiting.
pub(crate) fn queued(delivery_id: &str) -> Receipt {
    Receipt::Queued {
        delivery_id: delivery_id.to_owned(),
    }
}
