//! One owner per agent store in PostgreSQL: a lease with an epoch (fencing).
//!
//! A database may hold many agents' runs and be shared by hosts that fail over to one another.
//! Two hosts writing one agent's runs would corrupt them (each resumes the other's unsettled
//! runs), and an OS lock cannot span machines. So each agent's store has a row in
//! `consort.leases`: who holds it, until when (the server's clock, so hosts' clocks never
//! matter), and an epoch that goes up each time another host takes it.
//!
//! - A host's store writer takes the lease of every agent it serves before the host starts,
//!   and renews it every third of its time to live.
//! - Every batch that writes checks, in its own transaction and just before it commits, that
//!   each agent it wrote is still leased to this host at the epoch it took
//!   ([`Leases::fence`], `FOR SHARE`: a takeover waits for the commit, and a batch after the
//!   takeover sees the new epoch and rolls back). A host that lost a lease (paused,
//!   partitioned, taken over) therefore writes nothing more, whatever its own clock says.
//! - A lease held by another host is refused ([`OnHeld::Refuse`], the default), waited for
//!   until it ends ([`OnHeld::Standby`]), or taken at once ([`OnHeld::TakeOver`], which bumps
//!   the epoch: the holder's next batch is refused).
//! - A host that stops releases its leases, so a successor takes them at once.
//!
//! A paused holder may be paused inside a transaction, holding row locks a successor needs:
//! the writer's session ends a transaction left idle longer than the lease's time to live
//! (`idle_in_transaction_session_timeout`), so those locks never outlive the lease.
//!
//! This module decides who may write an agent's rows; it records nothing else.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ::postgres::Client;
use tracing::{info, warn};

use crate::ActorsError;
use crate::store::folder_lock::Holder;

/// The lease table, created with the store's schema.
pub(super) const LEASE_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS consort.leases (
    agent       TEXT COLLATE "C" PRIMARY KEY,
    holder      TEXT NOT NULL,
    holder_info TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
"#;

/// What a host does when an agent's store is leased to another host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnHeld {
    /// Refuse to start, naming the holder.
    #[default]
    Refuse,
    /// Wait until the lease ends (its holder stopped renewing it), then take it.
    Standby,
    /// Take it now: the holder's next write is refused.
    TakeOver,
}

/// How a host holds the leases of its agents' PostgreSQL stores (see the module doc). Set with
/// [`HostSpecBuilder::store_lease`](crate::HostSpecBuilder::store_lease); SQLite stores are
/// owned through the data folder's lock instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLease {
    ttl: Duration,
    on_held: OnHeld,
}

impl Default for StoreLease {
    fn default() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
            on_held: OnHeld::Refuse,
        }
    }
}

impl StoreLease {
    /// How long a lease lasts without renewal by default.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
    /// The shortest time to live accepted (renewal is every third of it).
    pub const MIN_TTL: Duration = Duration::from_secs(1);

    /// A lease that lasts `ttl` without renewal (at least [`StoreLease::MIN_TTL`]): how long a
    /// standby waits after its holder stops, and how long a paused holder can go unnoticed.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Self::MIN_TTL);
        self
    }

    /// What to do when another host holds an agent's lease.
    pub fn on_held(mut self, on_held: OnHeld) -> Self {
        self.on_held = on_held;
        self
    }

    /// The lease's time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What the host does when another host holds a lease.
    pub fn when_held(&self) -> OnHeld {
        self.on_held
    }
}

/// The leases one store writer holds, by agent, and when they are next renewed.
pub(crate) struct Leases {
    /// This writer's id in the table (unique per host start).
    holder: String,
    /// Who this writer is, for another host's refusal.
    info: String,
    settings: StoreLease,
    /// The epoch each held lease was taken at.
    held: HashMap<String, i64>,
    renew_at: Instant,
}

/// An agent's lease, as the table has it when another host holds it.
struct HeldElsewhere {
    info: String,
    left_ms: i64,
}

impl Leases {
    /// The leases host `host` will hold, with `settings`.
    pub(crate) fn new(host: &str, settings: StoreLease) -> Self {
        let holder = Holder::this_process(host);
        let nonce: u64 = rand::random();
        Self {
            holder: format!("{host}/{}/{nonce:016x}", holder.pid),
            info: holder.describe(),
            settings,
            held: HashMap::new(),
            renew_at: Instant::now() + settings.ttl / 3,
        }
    }

    /// The session bound of the writer's connection (see the module doc).
    pub(crate) fn bound_session(&self, client: &mut Client) -> Result<(), ActorsError> {
        let ms = self.settings.ttl.as_millis();
        client
            .batch_execute(&format!("SET idle_in_transaction_session_timeout = {ms}"))
            .map_err(|e| ActorsError::postgres("lease", &e))
    }

    /// Takes the lease of each of `agents`, as the settings say to when another host holds
    /// one: refused (an error naming the holder), waited for, or taken.
    pub(crate) fn acquire_all(
        &mut self,
        client: &mut Client,
        agents: &[String],
    ) -> Result<(), ActorsError> {
        for agent in agents {
            self.acquire(client, agent, self.settings.on_held)?;
        }
        Ok(())
    }

    /// Takes `agent`'s lease if this writer does not hold it (an agent that joined on a
    /// reload); never waits.
    pub(crate) fn ensure(&mut self, client: &mut Client, agent: &str) -> Result<(), ActorsError> {
        if self.held.contains_key(agent) {
            return Ok(());
        }
        let on_held = match self.settings.on_held {
            OnHeld::Standby => OnHeld::Refuse,
            other => other,
        };
        self.acquire(client, agent, on_held)
    }

    fn acquire(
        &mut self,
        client: &mut Client,
        agent: &str,
        on_held: OnHeld,
    ) -> Result<(), ActorsError> {
        let mut said_standing_by = false;
        loop {
            let force = on_held == OnHeld::TakeOver;
            if let Some(epoch) = self.try_take(client, agent, force)? {
                if said_standing_by || force {
                    info!(agent, epoch, "took over the lease of the agent's store");
                }
                self.held.insert(agent.to_owned(), epoch);
                return Ok(());
            }
            let elsewhere = held_elsewhere(client, agent)?;
            if on_held != OnHeld::Standby {
                return Err(ActorsError::StoreLeased {
                    agent: agent.to_owned(),
                    holder: elsewhere.info,
                    expires_in_ms: u64::try_from(elsewhere.left_ms).unwrap_or(0),
                });
            }
            if !said_standing_by {
                warn!(agent, holder = %elsewhere.info, expires_in_ms = elsewhere.left_ms, "standing by: another host holds the lease of the agent's store; taking it when the lease ends");
                said_standing_by = true;
            }
            let wait = u64::try_from(elsewhere.left_ms)
                .unwrap_or(0)
                .clamp(50, 1_000);
            std::thread::sleep(Duration::from_millis(wait));
        }
    }

    /// One attempt at `agent`'s lease: the epoch taken, or `None` when another host holds it
    /// and `force` is off. Taking it from another host (ended, or forced) bumps the epoch.
    fn try_take(
        &self,
        client: &mut Client,
        agent: &str,
        force: bool,
    ) -> Result<Option<i64>, ActorsError> {
        let ttl_ms = self.ttl_ms();
        let row = client
            .query_opt(
                "INSERT INTO consort.leases (agent, holder, holder_info, epoch, expires_at) \
                 VALUES ($1, $2, $3, 1, now() + $4::bigint * interval '1 millisecond') \
                 ON CONFLICT (agent) DO UPDATE SET \
                   epoch = CASE WHEN consort.leases.holder = EXCLUDED.holder \
                           THEN consort.leases.epoch ELSE consort.leases.epoch + 1 END, \
                   holder = EXCLUDED.holder, holder_info = EXCLUDED.holder_info, \
                   expires_at = EXCLUDED.expires_at \
                 WHERE consort.leases.holder = EXCLUDED.holder \
                    OR consort.leases.expires_at < now() OR $5 \
                 RETURNING epoch",
                &[&agent, &self.holder, &self.info, &ttl_ms, &force],
            )
            .map_err(|e| ActorsError::postgres(agent, &e))?;
        row.map(|r| r.try_get::<_, i64>(0))
            .transpose()
            .map_err(|e| ActorsError::postgres(agent, &e))
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.settings.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// How long until the next renewal is due.
    pub(crate) fn renewal_in(&self) -> Duration {
        self.renew_at.saturating_duration_since(Instant::now())
    }

    /// Renews every held lease if it is time; a lease found taken by another host is dropped
    /// (its agent's writes are refused from then on) and logged.
    pub(crate) fn renew_if_due(&mut self, client: &mut Client) {
        if Instant::now() < self.renew_at || self.held.is_empty() {
            return;
        }
        self.renew_at = Instant::now() + self.settings.ttl / 3;
        let ttl_ms = self.ttl_ms();
        let agents: Vec<&String> = self.held.keys().collect();
        let renewed = client.query(
            "UPDATE consort.leases SET expires_at = now() + $3::bigint * interval '1 millisecond' \
             WHERE holder = $1 AND agent = ANY($2) RETURNING agent, epoch",
            &[&self.holder, &agents, &ttl_ms],
        );
        let rows = match renewed {
            Ok(rows) => rows,
            Err(e) => {
                warn!(error = %ActorsError::postgres("lease", &e), "could not renew the store leases; trying again");
                self.renew_at = Instant::now() + Duration::from_millis(200);
                return;
            }
        };
        let still: HashMap<String, i64> = rows
            .iter()
            .filter_map(|r| Some((r.try_get(0).ok()?, r.try_get(1).ok()?)))
            .collect();
        self.held.retain(|agent, epoch| {
            let kept = still.get(agent) == Some(epoch);
            if !kept {
                warn!(agent = %agent, "lost the lease of the agent's store to another host: its writes are refused from now on");
            }
            kept
        });
    }

    /// Whether this writer holds `agent`'s lease (as far as it knows: [`Leases::fence`] is
    /// what proves it, in the batch's transaction).
    pub(crate) fn holds(&self, agent: &str) -> bool {
        self.held.contains_key(agent)
    }

    /// In the batch's transaction, just before it commits: each of `agents` is still leased
    /// to this writer at the epoch it took. A lease found taken is dropped, and the batch must
    /// roll back (the error says whose).
    pub(crate) fn fence(&mut self, client: &mut Client, agents: &[String]) -> Result<(), String> {
        if agents.is_empty() {
            return Ok(());
        }
        let rows = client
            .query(
                "SELECT agent, holder, epoch, holder_info FROM consort.leases \
                 WHERE agent = ANY($1) FOR SHARE",
                &[&agents],
            )
            .map_err(|e| ActorsError::postgres("lease", &e).to_string())?;
        let mut lost = Vec::new();
        for agent in agents {
            let row = rows
                .iter()
                .find(|r| r.try_get::<_, &str>(0).ok() == Some(agent.as_str()));
            let ours = row.is_some_and(|r| {
                r.try_get::<_, &str>(1).ok() == Some(self.holder.as_str())
                    && r.try_get::<_, i64>(2).ok() == self.held.get(agent).copied()
            });
            if !ours {
                let by = row
                    .and_then(|r| r.try_get::<_, String>(3).ok())
                    .unwrap_or_else(|| "nobody".to_owned());
                lost.push(format!("{agent} (now held by {by})"));
                self.held.remove(agent);
            }
        }
        if lost.is_empty() {
            return Ok(());
        }
        warn!(agents = ?lost, "a batch wrote stores whose lease another host has taken: it is rolled back");
        Err(format!(
            "this host no longer holds the lease of the store of {}: nothing of the batch was written",
            lost.join(", ")
        ))
    }

    /// Lets every held lease go at once, so a successor takes them without waiting (a host
    /// that stops). Nothing is written after this.
    pub(crate) fn release_all(&mut self, client: &mut Client) {
        if self.held.is_empty() {
            return;
        }
        let agents: Vec<String> = self.held.drain().map(|(agent, _)| agent).collect();
        let released = client.execute(
            "UPDATE consort.leases SET expires_at = now() - interval '1 millisecond' \
             WHERE holder = $1 AND agent = ANY($2)",
            &[&self.holder, &agents],
        );
        if let Err(e) = released {
            warn!(error = %ActorsError::postgres("lease", &e), "the store leases were not released; a successor waits for them to end");
        }
    }
}

/// Who holds `agent`'s lease and for how long more (milliseconds, server clock).
fn held_elsewhere(client: &mut Client, agent: &str) -> Result<HeldElsewhere, ActorsError> {
    let row = client
        .query_opt(
            "SELECT holder_info, \
               GREATEST(0, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint) \
             FROM consort.leases WHERE agent = $1",
            &[&agent],
        )
        .map_err(|e| ActorsError::postgres(agent, &e))?;
    Ok(match row {
        Some(row) => HeldElsewhere {
            info: row.try_get(0).unwrap_or_else(|_| "another host".to_owned()),
            left_ms: row.try_get(1).unwrap_or(0),
        },
        // Released between the two statements: the next attempt takes it.
        None => HeldElsewhere {
            info: "another host".to_owned(),
            left_ms: 0,
        },
    })
}
