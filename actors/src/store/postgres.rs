//! The PostgreSQL run store: every agent's runs and events in one database, for hosts that
//! fail over to one another (a new host on the same database resumes the runs the old one
//! accepted) or that outgrow a local disk. SQLite stays the embedded default.
//!
//! Layout: a schema `consort` with two tables, `runs` and `events`, keyed by the agent's name
//! first (`PRIMARY KEY (agent, id)`, `PRIMARY KEY (agent, run_id, seq)`). Agent names are
//! unique in a fleet, so one database serves a whole fleet, and a host that takes over another
//! host's agents finds their runs. [`Database`] is one connection; [`PostgresStore`] is one
//! agent's view of it and implements [`RunLog`] with the SQLite store's guarantees: the run row
//! and its first event in one savepoint (the primary key turns a replayed call into
//! [`Inserted::Existing`]), an append's events, status and cost in one savepoint, listings in
//! the same order (ids compare in byte order: `COLLATE "C"`) with the same cursors.
//!
//! Group commit: the store writer (`postgres/writer.rs`) runs a batch of many agents' writes in
//! one transaction, each write in a savepoint of its own, and commits once. Outside a batch a
//! write is its own transaction.
//!
//! This module must never block an async worker: the client runs a small runtime of its own
//! and must be used, and dropped, on the writer's thread or a blocking thread. It never keeps
//! the connection URL anywhere it could be printed ([`PostgresUrl`]'s `Debug` hides it). It
//! decides nothing about runs; it records.

use std::collections::HashMap;
use std::path::PathBuf;

use ::postgres::types::ToSql;
use ::postgres::{Client, NoTls, Statement};
use tracing::debug;

use consort_core::Transition;
use consort_net::{Hop, RunId};

use super::rows;
use super::{Applied, Inserted, NewRun, RunLog};
use crate::ActorsError;
use crate::run::{EventRecord, RunCounts, RunRecord, RunStatus, now_ms};

pub(super) mod lease;
pub(super) mod writer;

#[cfg(test)]
pub(crate) mod test_server;
#[cfg(test)]
mod tests;

/// The schema and tables, created if missing. Each column matches the SQLite store's of the
/// same name; `agent` leads every key. Ids and names compare in byte order (`COLLATE "C"`),
/// as SQLite compares text, so pages and cursors are the same on both backends.
const SCHEMA: &str = r#"
CREATE SCHEMA IF NOT EXISTS consort;
CREATE TABLE IF NOT EXISTS consort.runs (
    agent              TEXT COLLATE "C" NOT NULL,
    id                 TEXT COLLATE "C" NOT NULL,
    status             TEXT COLLATE "C" NOT NULL,
    channel            TEXT NOT NULL,
    parent_run         TEXT COLLATE "C",
    parent_agent       TEXT,
    tool_use_id        TEXT,
    hop_depth          BIGINT NOT NULL,
    input              TEXT NOT NULL,
    output             TEXT,
    error              TEXT,
    chain              TEXT NOT NULL,
    created_at_ms      BIGINT NOT NULL,
    settled_at_ms      BIGINT,
    model_turns        BIGINT NOT NULL DEFAULT 0,
    tool_calls         BIGINT NOT NULL DEFAULT 0,
    calls_placed       BIGINT NOT NULL DEFAULT 0,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    principal          TEXT COLLATE "C",
    principal_roles    TEXT,
    desc_model_turns   BIGINT NOT NULL DEFAULT 0,
    desc_tool_calls    BIGINT NOT NULL DEFAULT 0,
    desc_calls_placed  BIGINT NOT NULL DEFAULT 0,
    desc_input_tokens  BIGINT NOT NULL DEFAULT 0,
    desc_output_tokens BIGINT NOT NULL DEFAULT 0,
    origin             TEXT,
    PRIMARY KEY (agent, id)
);
CREATE INDEX IF NOT EXISTS runs_by_parent ON consort.runs (agent, parent_run);
CREATE INDEX IF NOT EXISTS runs_by_status ON consort.runs (agent, status);
CREATE INDEX IF NOT EXISTS runs_by_created ON consort.runs (agent, created_at_ms DESC, id);
CREATE INDEX IF NOT EXISTS runs_by_id ON consort.runs (id);
CREATE TABLE IF NOT EXISTS consort.events (
    agent  TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    seq    BIGINT NOT NULL,
    at_ms  BIGINT NOT NULL,
    kind   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (agent, run_id, seq)
);
"#;

/// Taken while the schema is created: two hosts starting on a fresh database at once would
/// otherwise race on `CREATE TABLE IF NOT EXISTS` (which is not safe under concurrency).
const SCHEMA_LOCK: i64 = 0x636f_6e73_6f72_7400;

/// The run columns in the order `rows::raw_pg_run` reads them (the SQLite store's order).
const RUN_COLUMNS: &str = "id, agent, status, channel, parent_run, parent_agent, tool_use_id, \
     hop_depth, input, output, error, created_at_ms, settled_at_ms, model_turns, tool_calls, \
     calls_placed, input_tokens, output_tokens, principal, principal_roles, desc_model_turns, \
     desc_tool_calls, desc_calls_placed, desc_input_tokens, desc_output_tokens, origin";

/// The statuses of runs that have not settled (what a restarted host resumes).
const UNSETTLED: &str = "status IN ('queued', 'running', 'waiting', 'blocked')";

/// A PostgreSQL connection URL (`postgresql://user@host:port/db` or `host=… user=…`). Its
/// `Debug` and `Display` never show it: it may hold a password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// A URL given directly (an embedding app, a test).
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL held by the environment variable `var` (how fleet.yaml's `url_env` and the
    /// CLI's `--store-url-env` name it: the URL itself is never written in a file).
    pub fn from_env(var: &str) -> Result<Self, ActorsError> {
        match std::env::var(var) {
            Ok(url) if !url.trim().is_empty() => Ok(Self(url)),
            _ => Err(ActorsError::StoreUrlMissing {
                var: var.to_owned(),
            }),
        }
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresUrl(<hidden>)")
    }
}

/// One connection to the database, with its prepared statements and whether the store
/// writer has a batch transaction open on it.
pub(crate) struct Database {
    client: Client,
    url: PostgresUrl,
    statements: HashMap<String, Statement>,
    in_batch: bool,
    /// Whether the tables are known to exist (they are never dropped: no need to ask again).
    schema_seen: bool,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("in_batch", &self.in_batch)
            .finish_non_exhaustive()
    }
}

fn pg(store: &str) -> impl Fn(::postgres::Error) -> ActorsError + '_ {
    move |source| ActorsError::postgres(store, &source)
}

impl Database {
    /// Connects and creates the schema if it is missing (a host's store writer).
    pub(crate) fn connect(url: &PostgresUrl) -> Result<Self, ActorsError> {
        let mut db = Self::connect_only(url)?;
        db.create_schema()?;
        Ok(db)
    }

    /// Connects without creating anything, for reading only (inspection): every transaction
    /// of this connection is read-only, so a reader can never write a run by mistake.
    pub(crate) fn connect_read_only(url: &PostgresUrl) -> Result<Self, ActorsError> {
        let mut db = Self::connect_only(url)?;
        db.client
            .batch_execute("SET default_transaction_read_only = on")
            .map_err(pg("connect"))?;
        Ok(db)
    }

    fn connect_only(url: &PostgresUrl) -> Result<Self, ActorsError> {
        let client = Client::connect(&url.0, NoTls).map_err(pg("connect"))?;
        Ok(Self {
            client,
            url: url.clone(),
            statements: HashMap::new(),
            in_batch: false,
            schema_seen: false,
        })
    }

    fn create_schema(&mut self) -> Result<(), ActorsError> {
        let mut tx = self.client.transaction().map_err(pg("schema"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(pg("schema"))?;
        tx.batch_execute(SCHEMA).map_err(pg("schema"))?;
        tx.batch_execute(lease::LEASE_SCHEMA)
            .map_err(pg("schema"))?;
        tx.commit().map_err(pg("schema"))?;
        self.schema_seen = true;
        Ok(())
    }

    /// The connection itself (the writer's leases run their statements on it).
    pub(in crate::store) fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Whether the connection is gone (the server restarted or the network dropped it).
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// A new connection to the same database, schema checked (what the writer does when its
    /// connection is gone).
    pub(crate) fn reconnect(&self) -> Result<Self, ActorsError> {
        Self::connect(&self.url)
    }

    /// One agent's store on this connection.
    pub(crate) fn store<'d>(&'d mut self, agent: &'d str) -> PostgresStore<'d> {
        PostgresStore { db: self, agent }
    }

    /// Whether the tables exist (a database no host has written to yet has none).
    pub(crate) fn has_schema(&mut self) -> Result<bool, ActorsError> {
        if self.schema_seen {
            return Ok(true);
        }
        let row = self
            .client
            .query_one("SELECT to_regclass('consort.runs') IS NOT NULL", &[])
            .map_err(pg("schema"))?;
        self.schema_seen = row.try_get(0).map_err(pg("schema"))?;
        Ok(self.schema_seen)
    }

    /// The agents that have runs here, sorted.
    pub(crate) fn agents(&mut self) -> Result<Vec<String>, ActorsError> {
        if !self.has_schema()? {
            return Ok(Vec::new());
        }
        let rows = self.query(
            "agents",
            "SELECT DISTINCT agent FROM consort.runs ORDER BY agent",
            &[],
        )?;
        rows.iter()
            .map(|row| row.try_get(0).map_err(pg("agents")))
            .collect()
    }

    /// The agents with runs that have not settled, sorted.
    pub(crate) fn agents_with_unsettled_runs(&mut self) -> Result<Vec<String>, ActorsError> {
        if !self.has_schema()? {
            return Ok(Vec::new());
        }
        let sql =
            format!("SELECT DISTINCT agent FROM consort.runs WHERE {UNSETTLED} ORDER BY agent");
        let rows = self.query("agents", &sql, &[])?;
        rows.iter()
            .map(|row| row.try_get(0).map_err(pg("agents")))
            .collect()
    }

    /// Whether `agent` has any run here.
    pub(crate) fn has_agent(&mut self, agent: &str) -> Result<bool, ActorsError> {
        if !self.has_schema()? {
            return Ok(false);
        }
        let rows = self.query(
            agent,
            "SELECT 1 FROM consort.runs WHERE agent = $1 LIMIT 1",
            &[&agent],
        )?;
        Ok(!rows.is_empty())
    }

    /// The agent whose store holds run `id` (the first by name if several do), if any.
    pub(crate) fn agent_of_run(&mut self, id: &RunId) -> Result<Option<String>, ActorsError> {
        if !self.has_schema()? {
            return Ok(None);
        }
        let rows = self.query(
            "runs",
            "SELECT agent FROM consort.runs WHERE id = $1 ORDER BY agent LIMIT 1",
            &[&id.as_str()],
        )?;
        rows.first()
            .map(|row| row.try_get(0).map_err(pg("runs")))
            .transpose()
    }

    /// Opens the writer's batch transaction: the writes that follow, each in its own
    /// savepoint, commit together in [`Database::commit_batch`].
    pub(super) fn begin_batch(&mut self) -> Result<(), ::postgres::Error> {
        self.client.batch_execute("BEGIN")?;
        self.in_batch = true;
        Ok(())
    }

    /// Commits the batch transaction. A failed commit leaves nothing of the batch (PostgreSQL
    /// rolls a failed commit back), and the connection is usable again.
    pub(super) fn commit_batch(&mut self) -> Result<(), ::postgres::Error> {
        self.in_batch = false;
        self.client.batch_execute("COMMIT").inspect_err(|_| {
            // After a broken connection the server has rolled back already.
            let _already_ended = self.client.batch_execute("ROLLBACK");
        })
    }

    /// Rolls the batch transaction back (nothing of it stays).
    pub(super) fn rollback_batch(&mut self) -> Result<(), ::postgres::Error> {
        self.in_batch = false;
        self.client.batch_execute("ROLLBACK")
    }

    /// Runs `sql` through the connection's prepared statements: each statement is parsed
    /// once per connection, not once per call (a round trip saved on every write).
    fn query(
        &mut self,
        store: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<::postgres::Row>, ActorsError> {
        let statement = self.prepared(store, sql)?;
        self.client.query(&statement, params).map_err(pg(store))
    }

    fn prepared(&mut self, store: &str, sql: &str) -> Result<Statement, ActorsError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(pg(store))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `f` atomically: in a savepoint inside the writer's batch (a failure rolls back
    /// this write only, and leaves the batch's transaction usable), in a transaction of its
    /// own otherwise. Reads inside a batch take a savepoint too: a failed statement would
    /// otherwise abort the whole batch.
    fn atomically<T>(
        &mut self,
        store: &str,
        writes: bool,
        f: impl FnOnce(&mut Self) -> Result<T, ActorsError>,
    ) -> Result<T, ActorsError> {
        let (open, keep, undo) = match (self.in_batch, writes) {
            (true, _) => (
                "SAVEPOINT consort_write",
                "RELEASE SAVEPOINT consort_write",
                "ROLLBACK TO SAVEPOINT consort_write; RELEASE SAVEPOINT consort_write",
            ),
            (false, true) => ("BEGIN", "COMMIT", "ROLLBACK"),
            // A single read outside a batch needs no transaction.
            (false, false) => return f(self),
        };
        self.client.batch_execute(open).map_err(pg(store))?;
        match f(self) {
            Ok(value) => {
                self.client.batch_execute(keep).map_err(pg(store))?;
                Ok(value)
            }
            Err(e) => {
                if let Err(undone) = self.client.batch_execute(undo) {
                    debug!(%store, error = %undone, "rolling back a failed write failed too");
                }
                Err(e)
            }
        }
    }
}

/// One agent's run store in a PostgreSQL [`Database`]: the agent's rows only.
#[derive(Debug)]
pub(crate) struct PostgresStore<'d> {
    db: &'d mut Database,
    agent: &'d str,
}

impl PostgresStore<'_> {
    /// How errors name this store (the [`ActorsError`] variants that carry a path).
    fn label(&self) -> PathBuf {
        PathBuf::from(format!("postgres:{}", self.agent))
    }

    fn corrupt(&self, detail: String) -> ActorsError {
        ActorsError::CorruptStore {
            path: self.label(),
            detail,
        }
    }

    fn decode_runs(&self, rows: &[::postgres::Row]) -> Result<Vec<RunRecord>, ActorsError> {
        let label = self.label();
        rows.iter()
            .map(|row| {
                let raw = rows::raw_pg_run(row).map_err(|e| self.corrupt(e.to_string()))?;
                rows::decode(&label, raw)
            })
            .collect()
    }

    /// This agent's runs that `tail` selects; `$1` is the agent, `params` are `$2` on.
    fn select_runs(
        &mut self,
        tail: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<RunRecord>, ActorsError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM consort.runs WHERE agent = $1 {tail}");
        let agent = self.agent;
        let all = with_agent(&agent, params);
        let rows = self
            .db
            .atomically(agent, false, |db| db.query(agent, &sql, &all))?;
        self.decode_runs(&rows)
    }

    /// The one number `sql` selects; `$1` is the agent, `params` are `$2` on.
    fn count(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<i64, ActorsError> {
        let agent = self.agent;
        let all = with_agent(&agent, params);
        let rows = self
            .db
            .atomically(agent, false, |db| db.query(agent, sql, &all))?;
        match rows.first() {
            Some(row) => row.try_get(0).map_err(pg(agent)),
            None => Ok(0),
        }
    }
}

/// `agent` as `$1`, then `params`.
fn with_agent<'p>(
    agent: &'p &str,
    params: &[&'p (dyn ToSql + Sync)],
) -> Vec<&'p (dyn ToSql + Sync)> {
    let mut all: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len() + 1);
    all.push(agent);
    all.extend_from_slice(params);
    all
}

impl RunLog for PostgresStore<'_> {
    fn insert_run(&mut self, new: NewRun) -> Result<Inserted, ActorsError> {
        let now = now_ms() as i64;
        let chain = serde_json::to_string(&new.chain).map_err(|e| self.corrupt(e.to_string()))?;
        let depth = new.chain.len() as i64;
        let (principal, roles) = crate::run::identity_text(&new.identity);
        let roles = serde_json::to_string(&roles).unwrap_or_else(|_| "[]".to_owned());
        let created = new.created_event();
        let (kind, data) = (created.kind(), created.data().to_string());
        let (id, channel, origin) = (
            new.id.as_str(),
            new.channel.to_string(),
            new.origin.to_string(),
        );
        let parent_run = new.parent_run.as_ref().map(RunId::as_str);
        let agent = self.agent;
        // The row and its first event in one statement (one round trip): the event is written
        // for each row the insert returns, so for a new run only.
        let insert = format!(
            "WITH created AS (INSERT INTO consort.runs (agent, id, status, channel, parent_run, \
             parent_agent, tool_use_id, hop_depth, input, chain, created_at_ms, principal, \
             principal_roles, origin) \
             VALUES ($1, $2, 'queued', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (agent, id) DO NOTHING RETURNING {RUN_COLUMNS}), \
             first_event AS (INSERT INTO consort.events (agent, run_id, seq, at_ms, kind, data) \
             SELECT agent, id, 1, $10, $14, $15 FROM created) \
             SELECT {RUN_COLUMNS} FROM created"
        );
        // The row, its first event and the read of the row that exists are one savepoint: the
        // primary key decides between a new run and a replayed one.
        let (rows, fresh) = self.db.atomically(agent, true, |db| {
            let rows = db.query(
                agent,
                &insert,
                &[
                    &agent,
                    &id,
                    &channel,
                    &parent_run,
                    &new.parent_agent,
                    &new.tool_use_id,
                    &depth,
                    &new.input,
                    &chain,
                    &now,
                    &principal,
                    &roles,
                    &origin,
                    &kind,
                    &data,
                ],
            )?;
            if rows.is_empty() {
                let sql =
                    format!("SELECT {RUN_COLUMNS} FROM consort.runs WHERE agent = $1 AND id = $2");
                return Ok((db.query(agent, &sql, &[&agent, &id])?, false));
            }
            Ok((rows, true))
        })?;
        let record = self
            .decode_runs(&rows)?
            .into_iter()
            .next()
            .ok_or_else(|| ActorsError::UnknownRun(new.id.to_string()))?;
        Ok(if fresh {
            Inserted::Created(record)
        } else {
            Inserted::Existing(record)
        })
    }

    fn append(&mut self, id: &RunId, update: Transition) -> Result<Applied, ActorsError> {
        let now = now_ms() as i64;
        let agent = self.agent;
        let label = self.label();
        let key = id.as_str();
        // The update's events and the run's new state in one statement (one round trip); with
        // no events the arrays are empty and nothing is inserted.
        let update_sql = format!(
            "WITH appended AS (INSERT INTO consort.events (agent, run_id, seq, at_ms, kind, data) \
             SELECT $1, $2, s, $17, k, d FROM unnest($18::bigint[], $19::text[], $20::text[]) \
             AS e(s, k, d)) \
             UPDATE consort.runs SET model_turns = model_turns + $3, tool_calls = tool_calls + $4, \
             calls_placed = calls_placed + $5, input_tokens = input_tokens + $6, \
             output_tokens = output_tokens + $7, desc_model_turns = desc_model_turns + $8, \
             desc_tool_calls = desc_tool_calls + $9, desc_calls_placed = desc_calls_placed + $10, \
             desc_input_tokens = desc_input_tokens + $11, \
             desc_output_tokens = desc_output_tokens + $12, status = $13, \
             output = COALESCE($14, output), error = COALESCE($15, error), \
             settled_at_ms = COALESCE($16, settled_at_ms) \
             WHERE agent = $1 AND id = $2 RETURNING {RUN_COLUMNS}"
        );
        let (rows, seq) = self.db.atomically(agent, true, |db| {
            // `FOR UPDATE`: two hosts on one database (a failover in progress) append to a
            // run one after the other, never with the same sequence numbers.
            let current = db.query(
                agent,
                "SELECT status, (SELECT COALESCE(MAX(seq), 0) FROM consort.events \
                 WHERE agent = $1 AND run_id = $2) FROM consort.runs \
                 WHERE agent = $1 AND id = $2 FOR UPDATE",
                &[&agent, &key],
            )?;
            let Some(row) = current.first() else {
                return Err(ActorsError::UnknownRun(id.to_string()));
            };
            let status_text: String = row.try_get(0).map_err(pg(agent))?;
            let mut seq: i64 = row.try_get(1).map_err(pg(agent))?;
            let status =
                RunStatus::parse(&status_text).ok_or_else(|| ActorsError::CorruptStore {
                    path: label.clone(),
                    detail: format!("run {id}: unknown status `{status_text}`"),
                })?;
            let events = update.appended_events(status);
            let mut seqs = Vec::with_capacity(events.len());
            let mut kinds = Vec::with_capacity(events.len());
            let mut datas = Vec::with_capacity(events.len());
            for event in &events {
                seq += 1;
                seqs.push(seq);
                kinds.push(event.kind().to_owned());
                datas.push(event.data().to_string());
            }
            let next = update.next_status(status);
            // As the SQLite store: output, error and settlement change only with the status.
            let changes = next != status || update.status().is_some();
            let output = update.output().filter(|_| changes);
            let error = update.error().filter(|_| changes);
            let settled = (changes && next.is_settled()).then_some(now);
            let (c, d) = (update.cost(), update.descendants());
            let rows = db.query(
                agent,
                &update_sql,
                &[
                    &agent,
                    &key,
                    &(c.model_turns as i64),
                    &(c.tool_calls as i64),
                    &(c.calls_placed as i64),
                    &(c.input_tokens as i64),
                    &(c.output_tokens as i64),
                    &(d.model_turns as i64),
                    &(d.tool_calls as i64),
                    &(d.calls_placed as i64),
                    &(d.input_tokens as i64),
                    &(d.output_tokens as i64),
                    &(if changes { next } else { status }).as_str(),
                    &output,
                    &error,
                    &settled,
                    &now,
                    &seqs,
                    &kinds,
                    &datas,
                ],
            )?;
            Ok((rows, seq))
        })?;
        let record = self
            .decode_runs(&rows)?
            .into_iter()
            .next()
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        Ok(Applied {
            record,
            last_seq: seq.max(0) as u64,
        })
    }

    fn run(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        let runs = self.select_runs("AND id = $2", &[&id.as_str()])?;
        Ok(runs.into_iter().next())
    }

    fn chain(&mut self, id: &RunId) -> Result<Vec<Hop>, ActorsError> {
        let agent = self.agent;
        let rows = self.db.atomically(agent, false, |db| {
            db.query(
                agent,
                "SELECT chain FROM consort.runs WHERE agent = $1 AND id = $2",
                &[&agent, &id.as_str()],
            )
        })?;
        let row = rows
            .first()
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        let text: String = row.try_get(0).map_err(pg(agent))?;
        serde_json::from_str(&text).map_err(|e| self.corrupt(format!("chain of {id}: {e}")))
    }

    fn runs(&mut self) -> Result<Vec<RunRecord>, ActorsError> {
        self.select_runs("ORDER BY created_at_ms DESC, id", &[])
    }

    fn runs_page(
        &mut self,
        cursor: Option<&crate::page::RunCursor>,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, ActorsError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (ms, id) = crate::page::RunCursor::sql_bounds(cursor);
        self.select_runs(
            "AND (created_at_ms < $2 OR (created_at_ms = $2 AND id > $3)) \
             AND ($4::text IS NULL OR principal = $4) ORDER BY created_at_ms DESC, id LIMIT $5",
            &[&ms, &id, &owner, &limit],
        )
    }

    fn unsettled(&mut self) -> Result<Vec<RunRecord>, ActorsError> {
        self.select_runs(
            &format!("AND {UNSETTLED} ORDER BY created_at_ms DESC, id"),
            &[],
        )
    }

    #[cfg(test)]
    fn count_unsettled(&mut self) -> Result<usize, ActorsError> {
        let sql = format!("SELECT COUNT(*) FROM consort.runs WHERE agent = $1 AND {UNSETTLED}");
        let n = self.count(&sql, &[])?;
        Ok(n.max(0) as usize)
    }

    fn status_counts(&mut self) -> Result<RunCounts, ActorsError> {
        let agent = self.agent;
        let rows = self.db.atomically(agent, false, |db| {
            db.query(
                agent,
                "SELECT status, COUNT(*) FROM consort.runs WHERE agent = $1 GROUP BY status",
                &[&agent],
            )
        })?;
        let mut counts = RunCounts::default();
        for row in rows {
            let status: String = row.try_get(0).map_err(pg(agent))?;
            let n: i64 = row.try_get(1).map_err(pg(agent))?;
            if let Some(status) = RunStatus::parse(&status) {
                counts.add(status, u64::try_from(n).unwrap_or(0));
            }
        }
        Ok(counts)
    }

    fn last_failed(&mut self) -> Result<Option<RunRecord>, ActorsError> {
        // NULLS LAST: SQLite sorts NULL first ascending, so last descending, the same.
        let runs = self.select_runs(
            "AND status = 'failed' \
             ORDER BY settled_at_ms DESC NULLS LAST, created_at_ms DESC, id LIMIT 1",
            &[],
        )?;
        Ok(runs.into_iter().next())
    }

    fn count_children(&mut self, parent: &RunId) -> Result<u64, ActorsError> {
        let n = self.count(
            "SELECT COUNT(*) FROM consort.runs WHERE agent = $1 AND parent_run = $2",
            &[&parent.as_str()],
        )?;
        Ok(n.max(0) as u64)
    }

    fn last_seq(&mut self, id: &RunId) -> Result<u64, ActorsError> {
        let seq = self.count(
            "SELECT COALESCE(MAX(seq), 0) FROM consort.events WHERE agent = $1 AND run_id = $2",
            &[&id.as_str()],
        )?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    fn events_after(
        &mut self,
        id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, ActorsError> {
        let agent = self.agent;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.db.atomically(agent, false, |db| {
            db.query(
                agent,
                "SELECT seq, at_ms, kind, data FROM consort.events \
                 WHERE agent = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                &[&agent, &id.as_str(), &after, &limit],
            )
        })?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0).map_err(pg(agent))?;
                let at: i64 = row.try_get(1).map_err(pg(agent))?;
                let kind: String = row.try_get(2).map_err(pg(agent))?;
                let data: String = row.try_get(3).map_err(pg(agent))?;
                rows::decode_event(id, (seq, at, kind, data)).map_err(|detail| self.corrupt(detail))
            })
            .collect()
    }
}
