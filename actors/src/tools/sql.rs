//! The `sql` tool: one read-only SQLite statement against a database file of the agent's own.
//!
//! This module owns [`SqlTool`] and everything that bounds one query: what it may bind, what
//! it may do (an authorizer that allows only reads, on a connection opened read-only with
//! `query_only`), how long it may run (a progress handler past the deadline interrupts it), how
//! long one value may grow (`SQLITE_LIMIT_LENGTH`) and how much of the result is shown (rows
//! and bytes). Where the database file may be is consort-config's rule; here the checked,
//! canonical path is opened as it was checked or not at all.
//!
//! It must not write anything, anywhere, nor bind an env value the tool's declaration does not
//! name: a caller (a peer agent on another host, too) writes the input, and the model writes the
//! SQL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde_json::{Value, json};

use consort_config::Approval;

use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::model::ToolSpec;

/// Most rows a query answer shows; the rest are counted.
pub const SQL_MAX_ROWS: usize = 200;

/// Most bytes of rows a query answer shows: an answer goes into the run's events and the
/// model's context, so a huge value is cut, not carried.
pub const SQL_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The longest string or blob a query may make (`SQLITE_LIMIT_LENGTH`): `zeroblob(1e9)` fails
/// at once instead of taking a gigabyte of memory.
pub const SQL_MAX_VALUE_BYTES: usize = 1024 * 1024;

/// Virtual machine instructions between two looks at the clock: small enough that a query
/// stops within a millisecond or so of its deadline, large enough that looking costs nothing.
const PROGRESS_EVERY_OPS: i32 = 1_000;

/// Pragmas that only describe the schema, whatever their argument; every other pragma is
/// refused, since many change the connection (`query_only = OFF`) or the file.
const SCHEMA_PRAGMAS: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
];

/// SQL functions refused although the statement only reads: they reach outside the database.
const REFUSED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// A read-only SQL query against a SQLite file that belongs to the agent.
///
/// Read-only is enforced by SQLite itself: the file is opened with `SQLITE_OPEN_READ_ONLY` and
/// `query_only`, an authorizer allows only reads, and a statement SQLite does not call
/// read-only is refused before it runs. Named parameters are bound, never spliced: `:input` is
/// the run's input text, and `:KEY` the agent's env value of a key listed in `bind_env`; no
/// other parameter is bound.
pub struct SqlTool {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The SQLite file, opened read-only. Canonical: a path whose canonical form differs when
    /// a query runs (a symlink appeared on the way) is refused.
    pub database: PathBuf,
    /// Whether a use waits for an operator's approval.
    pub approval: Approval,
    /// The env keys a query may bind as `:KEY`, besides `:input`.
    pub bind_env: Vec<String>,
    /// How long one query may run.
    pub timeout: Duration,
}

impl Tool for SqlTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "one read-only SQLite statement"}},
                "required": ["query"],
                "additionalProperties": false,
            }),
        }
    }

    fn approval(&self) -> Approval {
        self.approval
    }

    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        let query = input
            .get("query")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let bounds = QueryBounds {
            database: self.database.clone(),
            timeout: self.timeout,
            max_rows: SQL_MAX_ROWS,
            max_bytes: SQL_MAX_OUTPUT_BYTES,
        };
        // Only what the declaration names leaves the env for the blocking thread.
        let bindings = Bindings::new(ctx.input, &self.bind_env, ctx.env);
        Box::pin(async move {
            let query = query.ok_or_else(|| {
                ToolError::InvalidInput("expected {\"query\": \"<one SQL statement>\"}".into())
            })?;
            tokio::task::spawn_blocking(move || run_query(&bounds, &query, &bindings))
                .await
                .map_err(|e| ToolError::Failed(format!("sql tool task failed: {e}")))?
        })
    }
}

/// The values a query may bind: the run's input, and the env values the tool names.
#[derive(Clone, Debug)]
struct Bindings {
    input: String,
    env: BTreeMap<String, Option<String>>,
}

impl Bindings {
    fn new(input: &str, bind_env: &[String], env: &BTreeMap<String, String>) -> Self {
        Self {
            input: input.to_owned(),
            env: bind_env
                .iter()
                .map(|k| (k.clone(), env.get(k).cloned()))
                .collect(),
        }
    }

    /// The value of the statement parameter `name` as SQLite reports it (`:KEY`, `@KEY`,
    /// `$KEY`, `?NNN`), or an error the model can act on.
    fn value(&self, name: &str) -> Result<&str, ToolError> {
        let key = name
            .strip_prefix([':', '@', '$'])
            .ok_or_else(|| ToolError::InvalidInput(self.unbindable(name)))?;
        if key == "input" {
            return Ok(&self.input);
        }
        match self.env.get(key) {
            Some(Some(value)) => Ok(value),
            Some(None) => Err(ToolError::Failed(format!(
                "sql: parameter {name} is listed in the tool's bind_env, but the agent's env has \
                 no {key}"
            ))),
            None => Err(ToolError::InvalidInput(self.unbindable(name))),
        }
    }

    fn unbindable(&self, name: &str) -> String {
        let mut bindable = vec![":input (the run's input)".to_owned()];
        bindable.extend(self.env.keys().map(|k| format!(":{k}")));
        format!(
            "parameter {name} cannot be bound; this tool binds only {}. Write any other value \
             into the query as a literal",
            bindable.join(", ")
        )
    }
}

/// What one query may use.
#[derive(Clone, Debug)]
struct QueryBounds {
    database: PathBuf,
    timeout: Duration,
    max_rows: usize,
    max_bytes: usize,
}

/// What the connection's hooks saw, read after SQLite reports an error.
#[derive(Default)]
struct HookReports {
    timed_out: AtomicBool,
    refusal: Mutex<Option<String>>,
}

fn run_query(bounds: &QueryBounds, query: &str, bindings: &Bindings) -> Result<String, ToolError> {
    let deadline = Instant::now() + bounds.timeout;
    let conn = open_bounded(&bounds.database)?;
    let reports = Arc::new(HookReports::default());
    let hooked = Arc::clone(&reports);
    conn.authorizer(Some(
        move |ctx: AuthContext<'_>| match read_only_authorization(&ctx.action) {
            Ok(()) => Authorization::Allow,
            Err(refusal) => {
                if let Ok(mut first) = hooked.refusal.lock() {
                    first.get_or_insert(refusal);
                }
                Authorization::Deny
            }
        },
    ));
    let hooked = Arc::clone(&reports);
    conn.progress_handler(
        PROGRESS_EVERY_OPS,
        Some(move || {
            let late = Instant::now() >= deadline;
            if late {
                hooked.timed_out.store(true, Ordering::Relaxed);
            }
            late
        }),
    );
    let fail = |e: rusqlite::Error| sql_error(e, &reports, bounds.timeout);

    let mut stmt = conn.prepare(query).map_err(fail)?;
    // The authorizer is not asked about everything that writes: preparing `VACUUM INTO` asks
    // it nothing (only the ATTACH it runs inside is asked about, once the statement runs).
    // SQLite's own verdict on the prepared statement refuses it before anything runs.
    if !stmt.readonly() {
        return Err(ToolError::Forbidden(
            "sql: this statement would write; the tool runs only statements that read (SELECT, \
             WITH … SELECT)"
                .into(),
        ));
    }
    for index in 1..=stmt.parameter_count() {
        let Some(name) = stmt.parameter_name(index).map(str::to_owned) else {
            return Err(ToolError::InvalidInput(
                "positional parameters (?) have no value; use :input for the run's input".into(),
            ));
        };
        let value = bindings.value(&name)?;
        stmt.raw_bind_parameter(index, value).map_err(fail)?;
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let mut answer = Answer::new(&columns, bounds.max_rows, bounds.max_bytes);
    let mut rows = stmt.raw_query();
    loop {
        let row = match rows.next() {
            Ok(Some(row)) => row,
            Ok(None) => break,
            // Counting rows that are not shown ran out of time: what is shown stands.
            Err(_) if answer.is_full() && reports.timed_out.load(Ordering::Relaxed) => {
                answer.stop_counting();
                break;
            }
            Err(e) => return Err(fail(e)),
        };
        if answer.is_full() {
            answer.count_hidden_row();
            continue;
        }
        let mut cells = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            cells.push(row.get_ref(i).map_err(fail)?);
        }
        answer.push_row(&cells);
    }
    Ok(answer.finish())
}

/// Opens `database` read-only with the limits every query runs under, after checking that its
/// canonical path is still the one configured.
fn open_bounded(database: &Path) -> Result<Connection, ToolError> {
    let canonical = std::fs::canonicalize(database)
        .map_err(|e| ToolError::Failed(format!("sql: the database cannot be opened: {e}")))?;
    if canonical != database {
        return Err(ToolError::Forbidden(
            "sql: the database path leads elsewhere than when the agent's config was loaded (a \
             symlink changed); the tool will not follow it"
                .into(),
        ));
    }
    let fail = |e: rusqlite::Error| ToolError::Failed(format!("sql: {e}"));
    let conn = Connection::open_with_flags(
        &canonical,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail)?;
    conn.execute_batch("PRAGMA query_only = ON;")
        .map_err(fail)?;
    let max_value = i32::try_from(SQL_MAX_VALUE_BYTES).unwrap_or(i32::MAX);
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, max_value)
        .map_err(fail)?;
    // No other database can be attached, whatever slips past the authorizer.
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
        .map_err(fail)?;
    Ok(conn)
}

/// Whether a read-only query may take `action`: reads, selects, recursive CTEs, functions other
/// than [`REFUSED_FUNCTIONS`] and the [`SCHEMA_PRAGMAS`]. `Err` is the refusal the model reads.
fn read_only_authorization(action: &AuthAction<'_>) -> Result<(), String> {
    match action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => Ok(()),
        AuthAction::Function { function_name } => {
            if REFUSED_FUNCTIONS
                .iter()
                .any(|f| f.eq_ignore_ascii_case(function_name))
            {
                Err(format!("the function {function_name}() is not allowed"))
            } else {
                Ok(())
            }
        }
        AuthAction::Pragma { pragma_name, .. } => {
            if SCHEMA_PRAGMAS
                .iter()
                .any(|p| p.eq_ignore_ascii_case(pragma_name))
            {
                Ok(())
            } else {
                Err(format!(
                    "PRAGMA {pragma_name} is not allowed; the pragmas allowed describe the \
                     schema: {}",
                    SCHEMA_PRAGMAS.join(", ")
                ))
            }
        }
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
            Err("ATTACH and DETACH are not allowed; the tool reads only its own database".into())
        }
        AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => {
            Err("transactions are not allowed; send one statement that reads".into())
        }
        other => Err(format!(
            "{} is not allowed; the tool only reads",
            action_name(other)
        )),
    }
}

/// A refused action as SQL words for the model (`CreateTable` → `CREATE TABLE`), without its
/// arguments.
fn action_name(action: &AuthAction<'_>) -> String {
    let debug = format!("{action:?}");
    let variant = debug.split([' ', '{', '(']).next().unwrap_or_default();
    let mut words = String::new();
    for (i, c) in variant.chars().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            words.push(' ');
        }
        words.push(c.to_ascii_uppercase());
    }
    words
}

/// The error a failed statement becomes: the hooks' reports first, since SQLite's own text
/// ("interrupted", "not authorized") does not say why.
fn sql_error(e: rusqlite::Error, reports: &HookReports, timeout: Duration) -> ToolError {
    if reports.timed_out.load(Ordering::Relaxed) {
        return ToolError::TimedOut {
            limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
    }
    // A denial fails the statement as SQLITE_AUTH or, for a function, as a plain error.
    if let Some(refusal) = reports.refusal.lock().ok().and_then(|mut r| r.take()) {
        return ToolError::Forbidden(format!("sql: {refusal}"));
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::TooBig) => ToolError::TooLarge {
            limit_bytes: SQL_MAX_VALUE_BYTES as u64,
        },
        Some(ErrorCode::AuthorizationForStatementDenied) => {
            ToolError::Forbidden("sql: the statement is not allowed".into())
        }
        _ => ToolError::Failed(format!("sql: {e}")),
    }
}

/// The text a query answers with, built row by row within a row budget and a byte budget. It
/// never holds more than `max_bytes` of header and rows: a value is cut to the room left before
/// it is copied, so a huge text costs only what is shown.
#[derive(Debug)]
struct Answer {
    text: String,
    header_len: usize,
    columns: usize,
    max_rows: usize,
    max_bytes: usize,
    shown: usize,
    hidden: usize,
    cut: bool,
    counting_stopped: bool,
}

impl Answer {
    fn new(columns: &[String], max_rows: usize, max_bytes: usize) -> Self {
        let mut answer = Self {
            text: String::new(),
            header_len: 0,
            columns: columns.len(),
            max_rows,
            max_bytes,
            shown: 0,
            hidden: 0,
            cut: false,
            counting_stopped: false,
        };
        for (i, column) in columns.iter().enumerate() {
            if i > 0 {
                answer.push_str(" | ");
            }
            answer.push_str(column);
        }
        answer.header_len = answer.text.len();
        answer
    }

    /// No further row is shown: the row or the byte budget is spent.
    fn is_full(&self) -> bool {
        self.cut || self.shown >= self.max_rows
    }

    fn count_hidden_row(&mut self) {
        self.hidden += 1;
    }

    fn stop_counting(&mut self) {
        self.counting_stopped = true;
    }

    fn push_row(&mut self, cells: &[ValueRef<'_>]) {
        if self.is_full() {
            self.hidden += 1;
            return;
        }
        self.shown += 1;
        self.push_str("\n");
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                self.push_str(" | ");
            }
            match *cell {
                ValueRef::Null => self.push_str("NULL"),
                ValueRef::Integer(v) => self.push_str(&v.to_string()),
                ValueRef::Real(v) => self.push_str(&v.to_string()),
                ValueRef::Text(t) => self.push_text(t),
                ValueRef::Blob(b) => self.push_str(&format!("<{} bytes>", b.len())),
            }
        }
    }

    fn room(&self) -> usize {
        self.max_bytes.saturating_sub(self.text.len())
    }

    fn push_str(&mut self, s: &str) {
        self.push_text(s.as_bytes());
    }

    /// Appends as much of `bytes` as fits, cut at a character boundary; invalid UTF-8 shows as
    /// U+FFFD. Marks the answer cut when not everything fit.
    fn push_text(&mut self, bytes: &[u8]) {
        if self.cut {
            return;
        }
        // Look at no more than could be shown, whatever the value's size, and not at half a
        // character where the window ends.
        let mut end = bytes.len().min(self.room());
        while end < bytes.len() && end > 0 && bytes[end] & 0b1100_0000 == 0b1000_0000 {
            end -= 1;
        }
        for chunk in bytes[..end].utf8_chunks() {
            if !self.push_piece(chunk.valid()) {
                return;
            }
            if !chunk.invalid().is_empty() && !self.push_piece("\u{FFFD}") {
                return;
            }
        }
        if end < bytes.len() {
            self.cut = true;
        }
    }

    /// Appends `piece` if it fits whole; otherwise as much as fits, and the answer is cut.
    fn push_piece(&mut self, piece: &str) -> bool {
        let room = self.room();
        if piece.len() <= room {
            self.text.push_str(piece);
            return true;
        }
        let mut end = room;
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&piece[..end]);
        self.cut = true;
        false
    }

    fn finish(self) -> String {
        let total = self.shown + self.hidden;
        let single_value = self.columns == 1 && total == 1;
        let mut out = if single_value {
            self.text
                .get(self.header_len + 1..)
                .unwrap_or_default()
                .to_owned()
        } else {
            self.text
        };
        if self.cut {
            out.push_str(&format!(
                "\n… (output cut at {} bytes; select fewer rows or columns, or substr() of long values)",
                self.max_bytes
            ));
        }
        if self.counting_stopped {
            out.push_str(&format!(
                "\n… (at least {} more rows not shown; counting stopped at the time limit)",
                self.hidden
            ));
        } else if self.hidden > 0 {
            out.push_str(&format!("\n… ({} more rows not shown)", self.hidden));
        }
        if total == 0 {
            out.push_str("\n(no rows)");
        }
        out
    }
}

#[cfg(test)]
mod tests;
