//! Pages of runs and events: what a listing returns at most, and the cursor that continues it.
//!
//! Runs are listed newest first, ordered by `(created_at_ms DESC, id ASC)`; a [`RunCursor`] is
//! the last run of a page, and the next page starts strictly after it, so a run created
//! between two pages never shows twice and never moves one already shown. Events are listed
//! oldest first by their sequence number, which only grows.
//!
//! This module holds the page shapes and the merge of several stores' pages (pure); the SQL
//! lives in the store.

use std::fmt;

use serde::{Deserialize, Serialize};

use consort_net::RunId;

use crate::run::{EventRecord, RunRecord};

/// Rows a page holds when the caller does not say.
pub const PAGE_DEFAULT: usize = 100;
/// The most rows one page may hold.
pub const PAGE_MAX: usize = 1_000;

/// A page size as asked, clamped to `1..=PAGE_MAX` (`None`: [`PAGE_DEFAULT`]).
pub fn page_size(asked: Option<usize>) -> usize {
    asked.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX)
}

/// Where a listing of runs continues: after this run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCursor {
    /// The last listed run's creation time.
    pub created_at_ms: u64,
    /// The last listed run's id.
    pub id: RunId,
}

impl RunCursor {
    /// What a store's query bounds a page with: the creation time and id to continue after
    /// (`i64::MAX` and the empty id for the first page, so that every run qualifies).
    pub(crate) fn sql_bounds(cursor: Option<&Self>) -> (i64, &str) {
        match cursor {
            Some(c) => (
                i64::try_from(c.created_at_ms).unwrap_or(i64::MAX),
                c.id.as_str(),
            ),
            None => (i64::MAX, ""),
        }
    }

    /// The cursor after `run`.
    pub fn after(run: &RunRecord) -> Self {
        Self {
            created_at_ms: run.created_at_ms,
            id: run.id.clone(),
        }
    }

    /// Reads a cursor as [`fmt::Display`] writes it (`<ms>.<run id>`); `None` if it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (ms, id) = text.split_once('.')?;
        Some(Self {
            created_at_ms: ms.parse().ok()?,
            id: RunId::parse(id).ok()?,
        })
    }
}

impl fmt::Display for RunCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.id)
    }
}

/// One page of runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// Pass as `cursor` to get the next page; `None` on the last page.
    pub next: Option<String>,
}

/// One page of a run's events, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    /// The events.
    pub events: Vec<EventRecord>,
    /// Pass as `after` to get the next page; `None` on the last page.
    pub next_after: Option<u64>,
}

/// Merges pages read from several stores (each in listing order, each holding up to
/// `limit + 1` rows after the same cursor) into one page of at most `limit`.
pub fn merge_runs(mut runs: Vec<RunRecord>, limit: usize) -> RunPage {
    runs.sort_by(|a, b| {
        b.created_at_ms
            .cmp(&a.created_at_ms)
            .then_with(|| a.id.as_str().cmp(b.id.as_str()))
    });
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = more
        .then(|| runs.last().map(|r| RunCursor::after(r).to_string()))
        .flatten();
    RunPage { runs, next }
}

/// A page of events from up to `limit + 1` events read after the cursor.
pub fn events_page(mut events: Vec<EventRecord>, limit: usize) -> EventPage {
    let more = events.len() > limit;
    events.truncate(limit);
    let next_after = more.then(|| events.last().map(|e| e.seq)).flatten();
    EventPage { events, next_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_clamped() {
        assert_eq!(page_size(None), PAGE_DEFAULT);
        assert_eq!(page_size(Some(0)), 1);
        assert_eq!(page_size(Some(5)), 5);
        assert_eq!(page_size(Some(1_000_000)), PAGE_MAX);
    }

    #[test]
    fn cursors_read_back_what_they_write() {
        let id = RunId::random();
        let cursor = RunCursor {
            created_at_ms: 1_700_000_000_123,
            id,
        };
        assert_eq!(RunCursor::parse(&cursor.to_string()), Some(cursor));
        for bad in ["", "12", "x.y", "12.", ".abc", "-1.abc"] {
            assert_eq!(RunCursor::parse(bad), None, "{bad}");
        }
    }
}
