//! The embedded default backend: one agent's runs in one SQLite database (WAL) of its own,
//! [`RunStore`], and its [`RunLog`] implementation. Opening the file and its schema are
//! `store/schema.rs`, decoding rows `store/rows.rs`, whether a store that could not be written
//! takes writes again `store/probe.rs`. Like every backend it records and decides nothing.

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};

use consort_net::{Hop, RunId};

use crate::ActorsError;
use consort_core::Transition;
use consort_core::step::CostDelta;

use super::{Applied, Inserted, NewRun, RunLog, rows};

use crate::run::{EventRecord, RunRecord, RunStatus, now_ms};

/// One agent's SQLite run store (the embedded default backend).
pub(crate) struct RunStore {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    /// Whether the runs table has the principal columns.
    pub(super) has_principal: bool,
    /// Whether the runs table has the descendants' cost columns.
    pub(super) has_descendants: bool,
    /// Whether the runs table has the origin column.
    pub(super) has_origin: bool,
    /// The read of one run by id, for the columns this table has.
    pub(super) select_run: String,
}

impl RunStore {
    fn err(&self, source: rusqlite::Error) -> ActorsError {
        ActorsError::sqlite(&self.path, source)
    }

    /// Opens the writer's batch transaction: the appends that follow, each in its own
    /// savepoint, commit together in [`RunStore::commit_batch`].
    pub(crate) fn begin_batch(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE")
    }

    /// Commits the batch transaction; if the commit fails, rolls it back so the connection is
    /// usable again, and says why.
    pub(crate) fn commit_batch(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("COMMIT").inspect_err(|_| {
            // Nothing of the batch stays; the askers hear that the commit failed.
            let _already_ended = self.conn.execute_batch("ROLLBACK");
        })
    }

    fn select_runs(
        &self,
        filter: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunRecord>, ActorsError> {
        let sql = format!(
            "SELECT {} FROM runs WHERE {filter} ORDER BY created_at_ms DESC, id",
            self.columns()
        );
        self.query_runs(&sql, params)
    }

    /// The runs a `SELECT` of [`Self::columns`] finds, decoded.
    fn query_runs(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunRecord>, ActorsError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let raws = stmt
            .query_map(params, rows::raw_run)
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        raws.into_iter()
            .map(|raw| rows::decode(&self.path, raw))
            .collect()
    }
}

impl RunLog for RunStore {
    fn insert_run(&mut self, new: NewRun) -> Result<Inserted, ActorsError> {
        // No read first: the insert itself says whether the run existed (`ON CONFLICT`).
        let now = now_ms();
        let chain = serde_json::to_string(&new.chain).map_err(|e| ActorsError::CorruptStore {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let depth = new.chain.len() as i64;
        let (principal, roles) = crate::run::identity_text(&new.identity);
        let roles = serde_json::to_string(&roles).unwrap_or_else(|_| "[]".to_owned());
        let path = self.path.clone();
        // A savepoint, not a transaction: inside the writer's group commit it nests in the
        // batch's transaction (a failure rolls back this run only); alone it is one.
        let tx = self
            .conn
            .savepoint()
            .map_err(|source| ActorsError::sqlite(&path, source))?;
        let inserted = exec(
            &tx,
            "INSERT INTO runs (id, agent, status, channel, parent_run, parent_agent, \
                 tool_use_id, hop_depth, input, chain, created_at_ms, principal, principal_roles, \
                 origin) \
                 VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
                 ON CONFLICT(id) DO NOTHING",
            params![
                new.id.as_str(),
                new.agent,
                new.channel.to_string(),
                new.parent_run.as_ref().map(RunId::as_str),
                new.parent_agent,
                new.tool_use_id,
                depth,
                new.input,
                chain,
                now as i64,
                principal,
                roles,
                new.origin.to_string(),
            ],
        )
        .map_err(|source| ActorsError::sqlite(&path, source))?;
        if inserted == 1 {
            let created = new.created_event();
            exec(
                &tx,
                "INSERT INTO events (run_id, seq, at_ms, kind, data) VALUES (?1, 1, ?2, ?3, ?4)",
                params![
                    new.id.as_str(),
                    now as i64,
                    created.kind(),
                    created.data().to_string()
                ],
            )
            .map_err(|source| ActorsError::sqlite(&path, source))?;
        }
        tx.commit()
            .map_err(|source| ActorsError::sqlite(&path, source))?;
        if inserted == 1 {
            // Exactly the row just written: what a read of it would decode to.
            return Ok(Inserted::Created(new.record(now)));
        }
        let record = self
            .run(&new.id)?
            .ok_or_else(|| ActorsError::UnknownRun(new.id.to_string()))?;
        Ok(Inserted::Existing(record))
    }

    fn append(&mut self, id: &RunId, update: Transition) -> Result<Applied, ActorsError> {
        let path = self.path.clone();
        let e = |source| ActorsError::sqlite(&path, source);
        let now = now_ms();
        // A savepoint: see insert_run.
        let tx = self.conn.savepoint().map_err(e)?;
        let current: Option<(String, i64)> = query_one(
            &tx,
            "SELECT status, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1) \
                 FROM runs WHERE id = ?1",
            params![id.as_str()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(e)?;
        let Some((status_text, mut seq)) = current else {
            return Err(ActorsError::UnknownRun(id.to_string()));
        };
        let status = RunStatus::parse(&status_text).ok_or_else(|| ActorsError::CorruptStore {
            path: path.clone(),
            detail: format!("run {id}: unknown status `{status_text}`"),
        })?;
        let events = update.appended_events(status);
        for event in &events {
            seq += 1;
            exec(
                &tx,
                "INSERT INTO events (run_id, seq, at_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    id.as_str(),
                    seq,
                    now as i64,
                    event.kind(),
                    event.data().to_string()
                ],
            )
            .map_err(e)?;
        }
        // One statement for the counts and the status, and none when neither moves.
        let (c, d) = (update.cost(), update.descendants());
        let counts_move = c != CostDelta::default() || d != CostDelta::default();
        let next = update.next_status(status);
        let status_moves = next != status || update.status().is_some();
        if counts_move || status_moves {
            let settled = next.is_settled().then_some(now as i64);
            let (output, error) = if status_moves {
                (update.output(), update.error())
            } else {
                (None, None)
            };
            exec(
                &tx,
                "UPDATE runs SET model_turns = model_turns + ?2, tool_calls = tool_calls + ?3, \
                 calls_placed = calls_placed + ?4, input_tokens = input_tokens + ?5, \
                 output_tokens = output_tokens + ?6, desc_model_turns = desc_model_turns + ?7, \
                 desc_tool_calls = desc_tool_calls + ?8, desc_calls_placed = desc_calls_placed + ?9, \
                 desc_input_tokens = desc_input_tokens + ?10, \
                 desc_output_tokens = desc_output_tokens + ?11, status = ?12, \
                 output = COALESCE(?13, output), error = COALESCE(?14, error), \
                 settled_at_ms = COALESCE(?15, settled_at_ms) WHERE id = ?1",
                params![
                    id.as_str(),
                    c.model_turns as i64,
                    c.tool_calls as i64,
                    c.calls_placed as i64,
                    c.input_tokens as i64,
                    c.output_tokens as i64,
                    d.model_turns as i64,
                    d.tool_calls as i64,
                    d.calls_placed as i64,
                    d.input_tokens as i64,
                    d.output_tokens as i64,
                    next.as_str(),
                    output,
                    error,
                    settled.filter(|_| status_moves)
                ],
            )
            .map_err(e)?;
        }
        tx.commit().map_err(e)?;
        let record = self
            .run(id)?
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        Ok(Applied {
            record,
            last_seq: seq.max(0) as u64,
        })
    }

    fn run(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        let row = self
            .conn
            .prepare_cached(&self.select_run)
            .and_then(|mut stmt| stmt.query_row(params![id.as_str()], rows::raw_run))
            .optional()
            .map_err(|e| self.err(e))?;
        row.map(|raw| rows::decode(&self.path, raw)).transpose()
    }

    fn has_run(&mut self, id: &RunId) -> Result<bool, ActorsError> {
        query_one(
            &self.conn,
            "SELECT 1 FROM runs WHERE id = ?1",
            params![id.as_str()],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
        .map_err(|e| self.err(e))
    }

    fn chain(&mut self, id: &RunId) -> Result<Vec<Hop>, ActorsError> {
        let text: Option<String> = query_one(
            &self.conn,
            "SELECT chain FROM runs WHERE id = ?1",
            params![id.as_str()],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| self.err(e))?;
        let text = text.ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        serde_json::from_str(&text).map_err(|e| ActorsError::CorruptStore {
            path: self.path.clone(),
            detail: format!("chain of {id}: {e}"),
        })
    }

    fn runs(&mut self) -> Result<Vec<RunRecord>, ActorsError> {
        self.select_runs("1 = 1", params![])
    }

    fn runs_page(
        &mut self,
        cursor: Option<&crate::page::RunCursor>,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, ActorsError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (ms, id) = crate::page::RunCursor::sql_bounds(cursor);
        let sql = format!(
            "SELECT {} FROM runs WHERE (created_at_ms < ?1 OR (created_at_ms = ?1 AND id > ?2)) \
             AND (?3 IS NULL OR principal = ?3) ORDER BY created_at_ms DESC, id LIMIT ?4",
            self.columns()
        );
        self.query_runs(&sql, params![ms, id, owner, limit])
    }

    fn unsettled(&mut self) -> Result<Vec<RunRecord>, ActorsError> {
        self.select_runs(
            "status IN ('queued', 'running', 'waiting', 'blocked')",
            params![],
        )
    }

    #[cfg(test)]
    fn count_unsettled(&mut self) -> Result<usize, ActorsError> {
        let n: i64 = query_one(
            &self.conn,
            "SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running', 'waiting', 'blocked')",
            [],
            |row| row.get(0),
        )
        .map_err(|e| self.err(e))?;
        Ok(n.max(0) as usize)
    }

    fn status_counts(&mut self) -> Result<crate::run::RunCounts, ActorsError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        let mut counts = crate::run::RunCounts::default();
        for (status, n) in rows {
            if let Some(status) = RunStatus::parse(&status) {
                counts.add(status, u64::try_from(n).unwrap_or(0));
            }
        }
        Ok(counts)
    }

    fn last_failed(&mut self) -> Result<Option<RunRecord>, ActorsError> {
        let sql = format!(
            "SELECT {} FROM runs WHERE status = 'failed'              ORDER BY settled_at_ms DESC, created_at_ms DESC, id LIMIT 1",
            self.columns()
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let raw = stmt
            .query_map([], rows::raw_run)
            .map_err(|e| self.err(e))?
            .next()
            .transpose()
            .map_err(|e| self.err(e))?;
        raw.map(|raw| rows::decode(&self.path, raw)).transpose()
    }

    fn count_children(&mut self, parent: &RunId) -> Result<u64, ActorsError> {
        let n: i64 = query_one(
            &self.conn,
            "SELECT COUNT(*) FROM runs WHERE parent_run = ?1",
            params![parent.as_str()],
            |row| row.get(0),
        )
        .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    fn last_seq(&mut self, id: &RunId) -> Result<u64, ActorsError> {
        let seq: i64 = self
            .conn
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1")
            .and_then(|mut stmt| stmt.query_row(params![id.as_str()], |row| row.get(0)))
            .map_err(|e| self.err(e))?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    fn events_after(
        &mut self,
        id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, ActorsError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, at_ms, kind, data FROM events WHERE run_id = ?1 AND seq > ?2 \
                 ORDER BY seq LIMIT ?3",
            )
            .map_err(|e| self.err(e))?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![id.as_str(), after, limit], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        rows.into_iter()
            .map(|row| {
                rows::decode_event(id, row).map_err(|detail| ActorsError::CorruptStore {
                    path: self.path.clone(),
                    detail,
                })
            })
            .collect()
    }
}

/// Runs one statement through the connection's statement cache: the hot statements of the
/// engine are parsed once per connection, not once per call.
fn exec(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// One row through the statement cache.
fn query_one<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached(sql)?.query_row(params, f)
}
