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

/// The most bytes of text one page carries (its runs' inputs, outputs and errors, or its
/// events' data): a page that would carry more ends early, with the cursor that continues it.
pub const PAGE_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The most bytes of one run's input, output or error a listing shows; the rest is cut with a
/// marker that says how much there was and where to read it whole (`GET /runs/{id}`).
pub const LISTED_TEXT_BYTES: usize = 4 * 1024;
/// What a row costs a page besides its texts (ids, status, times, costs as JSON).
const ROW_OVERHEAD_BYTES: usize = 512;

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

/// `run` as a listing shows it: its input, output and error cut at [`LISTED_TEXT_BYTES`], each
/// with a marker saying how long it was and where to read it whole.
pub fn listed(mut run: RunRecord) -> RunRecord {
    let id = run.id.clone();
    cut_listed(&mut run.input, &id);
    if let Some(output) = run.output.as_mut() {
        cut_listed(output, &id);
    }
    if let Some(error) = run.error.as_mut() {
        cut_listed(error, &id);
    }
    run
}

fn cut_listed(text: &mut String, id: &RunId) {
    if text.len() <= LISTED_TEXT_BYTES {
        return;
    }
    let total = text.len();
    let mut end = LISTED_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "… [cut: {total} bytes in all; GET /runs/{id} has all of it]"
    ));
}

fn text_bytes(run: &RunRecord) -> usize {
    run.input.len()
        + run.output.as_ref().map_or(0, String::len)
        + run.error.as_ref().map_or(0, String::len)
        + ROW_OVERHEAD_BYTES
}

impl RunPage {
    /// The page as the API lists it: every run [`listed`], and no more runs than fit in
    /// [`PAGE_MAX_BYTES`] (at least one): a page that ends early continues after its last run.
    pub fn bounded(self) -> Self {
        let mut used = 0;
        let mut runs = Vec::with_capacity(self.runs.len());
        let total = self.runs.len();
        for run in self.runs {
            let run = listed(run);
            let size = text_bytes(&run);
            if !runs.is_empty() && used + size > PAGE_MAX_BYTES {
                break;
            }
            used += size;
            runs.push(run);
        }
        let next = if runs.len() < total {
            runs.last().map(|r| RunCursor::after(r).to_string())
        } else {
            self.next
        };
        Self { runs, next }
    }
}

impl EventPage {
    /// The page as the API lists it: no more events than fit in [`PAGE_MAX_BYTES`] (at least
    /// one, whole: an event log is never cut), continuing after the last one shown.
    pub fn bounded(self) -> Self {
        let mut used = 0;
        let total = self.events.len();
        let mut events = Vec::with_capacity(total);
        for event in self.events {
            let size = event.data().to_string().len() + ROW_OVERHEAD_BYTES;
            if !events.is_empty() && used + size > PAGE_MAX_BYTES {
                break;
            }
            used += size;
            events.push(event);
        }
        let next_after = if events.len() < total {
            events.last().map(|e: &EventRecord| e.seq)
        } else {
            self.next_after
        };
        Self { events, next_after }
    }
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

    fn run_with(input_bytes: usize, n: u64) -> RunRecord {
        let who = (
            crate::visibility::Identity::Absent,
            crate::visibility::Origin::Absent,
        );
        let mut run = crate::store::NewRun::root(
            (RunId::random(), "cfo"),
            crate::run::Channel::Api,
            "é".repeat(input_bytes / 2),
            who,
            None,
        )
        .record(n);
        run.output = Some("x".repeat(input_bytes));
        run
    }

    #[test]
    fn a_listing_cuts_long_texts_and_says_where_they_are_whole() {
        let run = listed(run_with(64 * 1024, 1));
        assert!(
            run.input.len() < LISTED_TEXT_BYTES + 100,
            "{}",
            run.input.len()
        );
        assert!(
            run.input.contains("65536 bytes in all"),
            "{}",
            &run.input[run.input.len() - 80..]
        );
        assert!(run.input.contains(&format!("GET /runs/{}", run.id)));
        let output = run.output.expect("output");
        assert!(output.len() < LISTED_TEXT_BYTES + 100);
        let short = listed(run_with(10, 1));
        assert_eq!(short.input, "é".repeat(5), "a short text is shown whole");
    }

    #[test]
    fn a_page_of_large_runs_ends_within_its_byte_bound_and_continues() {
        let runs: Vec<RunRecord> = (0..1000).map(|n| run_with(64 * 1024, 1000 - n)).collect();
        let page = merge_runs(runs, 1000).bounded();
        let bytes: usize = page.runs.iter().map(text_bytes).sum();
        assert!(bytes <= PAGE_MAX_BYTES, "{bytes}");
        assert!(page.runs.len() < 1000 && !page.runs.is_empty());
        let last = page.runs.last().expect("a run");
        assert_eq!(page.next, Some(RunCursor::after(last).to_string()));
        // A page that fits keeps its own cursor.
        let small: Vec<RunRecord> = (0..3).map(|n| run_with(10, 10 - n)).collect();
        let page = merge_runs(small, 2).bounded();
        assert_eq!(page.runs.len(), 2);
        assert!(page.next.is_some());
    }

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
