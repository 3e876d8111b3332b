//! Rows of the runs table to [`RunRecord`]s: column order, the raw row (read from SQLite or
//! from PostgreSQL, in the same column order), and its decoding; rows of the events table to
//! event records the same way for both backends.
//!
//! Decoding never trusts the database: an unknown status or channel, a bad run id or roles that do
//! not parse become [`ActorsError::CorruptStore`] naming the store, never a panic.

use std::path::Path;

use consort_net::RunId;

use crate::ActorsError;
use crate::run::{Channel, Cost, RunRecord, RunStatus, now_ms};

pub(super) struct RawRun {
    id: String,
    agent: String,
    status: String,
    channel: String,
    parent_run: Option<String>,
    parent_agent: Option<String>,
    tool_use_id: Option<String>,
    hop_depth: i64,
    input: String,
    output: Option<String>,
    error: Option<String>,
    created_at_ms: i64,
    settled_at_ms: Option<i64>,
    cost: [u64; 5],
    principal: Option<String>,
    principal_roles: Option<String>,
    descendants: [u64; 5],
    origin: Option<String>,
}

pub(super) fn raw_run(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
    let cost = |i: usize| -> rusqlite::Result<u64> { Ok(row.get::<_, i64>(i)?.max(0) as u64) };
    Ok(RawRun {
        id: row.get(0)?,
        agent: row.get(1)?,
        status: row.get(2)?,
        channel: row.get(3)?,
        parent_run: row.get(4)?,
        parent_agent: row.get(5)?,
        tool_use_id: row.get(6)?,
        hop_depth: row.get(7)?,
        input: row.get(8)?,
        output: row.get(9)?,
        error: row.get(10)?,
        created_at_ms: row.get(11)?,
        settled_at_ms: row.get(12)?,
        cost: [cost(13)?, cost(14)?, cost(15)?, cost(16)?, cost(17)?],
        principal: row.get(18)?,
        principal_roles: row.get(19)?,
        descendants: [cost(20)?, cost(21)?, cost(22)?, cost(23)?, cost(24)?],
        origin: row.get(25)?,
    })
}

/// A PostgreSQL row of the run columns (`postgres::RUN_COLUMNS`, the same order as
/// SQLite's) as a raw run.
pub(super) fn raw_pg_run(row: &::postgres::Row) -> Result<RawRun, ::postgres::Error> {
    let cost = |i: usize| -> Result<u64, ::postgres::Error> {
        Ok(row.try_get::<_, i64>(i)?.max(0) as u64)
    };
    Ok(RawRun {
        id: row.try_get(0)?,
        agent: row.try_get(1)?,
        status: row.try_get(2)?,
        channel: row.try_get(3)?,
        parent_run: row.try_get(4)?,
        parent_agent: row.try_get(5)?,
        tool_use_id: row.try_get(6)?,
        hop_depth: row.try_get(7)?,
        input: row.try_get(8)?,
        output: row.try_get(9)?,
        error: row.try_get(10)?,
        created_at_ms: row.try_get(11)?,
        settled_at_ms: row.try_get(12)?,
        cost: [cost(13)?, cost(14)?, cost(15)?, cost(16)?, cost(17)?],
        principal: row.try_get(18)?,
        principal_roles: row.try_get(19)?,
        descendants: [cost(20)?, cost(21)?, cost(22)?, cost(23)?, cost(24)?],
        origin: row.try_get(25)?,
    })
}

/// A raw row as a run record.
pub(super) fn decode(path: &Path, raw: RawRun) -> Result<RunRecord, ActorsError> {
    let corrupt = |detail: String| ActorsError::CorruptStore {
        path: path.to_owned(),
        detail,
    };
    let id = RunId::parse(&raw.id).map_err(|e| corrupt(e.to_string()))?;
    let status = RunStatus::parse(&raw.status)
        .ok_or_else(|| corrupt(format!("run {id}: unknown status `{}`", raw.status)))?;
    let channel = Channel::parse(&raw.channel)
        .ok_or_else(|| corrupt(format!("run {id}: unknown channel `{}`", raw.channel)))?;
    let parent_run = raw
        .parent_run
        .map(|p| RunId::parse(&p))
        .transpose()
        .map_err(|e| corrupt(e.to_string()))?;
    let created = raw.created_at_ms.max(0) as u64;
    let settled = raw.settled_at_ms.map(|s| s.max(0) as u64);
    let wall_ms = settled.unwrap_or_else(now_ms).saturating_sub(created);
    let principal = raw.principal.unwrap_or_else(|| match &channel {
        Channel::Agent(caller) => format!("agent:{caller}"),
        _ => "anonymous".to_owned(),
    });
    // A run stored before origins: a root run was its own origin; who started a child's
    // tree was never recorded, so it stays unknown.
    let origin = raw.origin.unwrap_or_else(|| match &parent_run {
        None => principal.clone(),
        Some(_) => "unknown".to_owned(),
    });
    let roles = raw
        .principal_roles
        .map(|text| serde_json::from_str::<Vec<String>>(&text))
        .transpose()
        .map_err(|e| corrupt(format!("run {id}: principal roles: {e}")))?
        .unwrap_or_default();
    Ok(RunRecord {
        principal,
        roles,
        origin,
        id,
        agent: raw.agent,
        status,
        channel,
        parent_run,
        parent_agent: raw.parent_agent,
        tool_use_id: raw.tool_use_id,
        hop_depth: raw.hop_depth.clamp(0, u32::MAX as i64) as u32,
        input: raw.input,
        output: raw.output,
        error: raw.error,
        created_at_ms: created,
        settled_at_ms: settled,
        cost: Cost {
            model_turns: raw.cost[0],
            tool_calls: raw.cost[1],
            calls_placed: raw.cost[2],
            input_tokens: raw.cost[3],
            output_tokens: raw.cost[4],
            wall_ms,
        },
        tree_cost: Cost {
            model_turns: raw.cost[0] + raw.descendants[0],
            tool_calls: raw.cost[1] + raw.descendants[1],
            calls_placed: raw.cost[2] + raw.descendants[2],
            input_tokens: raw.cost[3] + raw.descendants[3],
            output_tokens: raw.cost[4] + raw.descendants[4],
            wall_ms,
        },
    })
}

/// One stored event row (`seq, at_ms, kind, data`) of run `id` as an [`EventRecord`], for
/// either backend; the error is what is wrong with the row, for the caller to name its store.
pub(super) fn decode_event(
    id: &RunId,
    (seq, at, kind, data): (i64, i64, String, String),
) -> Result<crate::run::EventRecord, String> {
    let fail = |detail: String| format!("event {seq} of {id}: {detail}");
    let data: serde_json::Value = serde_json::from_str(&data).map_err(|e| fail(e.to_string()))?;
    let event = consort_core::RunEvent::decode(&kind, data).map_err(|e| fail(e.to_string()))?;
    Ok(crate::run::EventRecord {
        run_id: id.clone(),
        seq: seq.max(0) as u64,
        at_ms: at.max(0) as u64,
        event,
    })
}
