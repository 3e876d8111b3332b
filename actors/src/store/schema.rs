//! The store's file: its schema, the columns added since the first layout, and opening a
//! store for writing (creating or upgrading it) or for reading only (never changing it).
//!
//! A store written by an older version opens as it is: a writer adds the columns it lacks, a
//! reader reads defaults in their place. The WAL is checkpointed from a connection of its own,
//! off the writer's commit path.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::{Durability, RunStore};
use crate::ActorsError;

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    id            TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    status        TEXT NOT NULL,
    channel       TEXT NOT NULL,
    parent_run    TEXT,
    parent_agent  TEXT,
    tool_use_id   TEXT,
    hop_depth     INTEGER NOT NULL,
    input         TEXT NOT NULL,
    output        TEXT,
    error         TEXT,
    chain         TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER,
    model_turns   INTEGER NOT NULL DEFAULT 0,
    tool_calls    INTEGER NOT NULL DEFAULT 0,
    calls_placed  INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_parent ON runs(parent_run);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    at_ms  INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"#;

pub(super) const RUN_COLUMNS: &str = "id, agent, status, channel, parent_run, parent_agent, tool_use_id, \
     hop_depth, input, output, error, created_at_ms, settled_at_ms, model_turns, tool_calls, \
     calls_placed, input_tokens, output_tokens";

/// The principal columns, added to stores created before runs carried a principal. A store
/// without them (opened read-only) reads NULL, and [`RunStore::decode`] falls back to the
/// channel: `agent:<caller>` for a peer run, `anonymous` otherwise.
pub(super) const PRINCIPAL_COLUMNS: &str = "principal, principal_roles";
pub(super) const NO_PRINCIPAL_COLUMNS: &str = "NULL, NULL";

/// The descendants' cost columns (what replies carried back), added to stores created before
/// tree costs existed; a store without them (opened read-only) reads zeros.
pub(super) const DESCENDANT_COLUMNS: &str =
    "desc_model_turns, desc_tool_calls, desc_calls_placed, desc_input_tokens, desc_output_tokens";
pub(super) const NO_DESCENDANT_COLUMNS: &str = "0, 0, 0, 0, 0";

/// The origin column (who started the run's call tree), added to stores created before runs
/// carried an origin. A store without it (opened read-only) reads NULL, and decoding
/// (`rows::decode`) falls back to the run's own principal for a root run and `unknown` for any
/// other.
pub(super) const ORIGIN_COLUMN: &str = "origin";
pub(super) const NO_ORIGIN_COLUMN: &str = "NULL";

/// The column names of the runs table (one schema read, for the checks of optional columns).
fn run_columns(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT name FROM pragma_table_info('runs')")?;
    let names = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(names)
}

impl RunStore {
    /// Opens (creating if needed) the store at `path` for writing.
    ///
    /// A new store is built under a temporary name and renamed into place complete, so a
    /// reader (the HTTP API, the CLI) never finds a store whose tables are half made.
    pub(crate) fn open(path: &Path, durability: Durability) -> Result<Self, ActorsError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ActorsError::file(dir, source))?;
        }
        if !path.exists() {
            let building = path.with_extension("db.new");
            // A leftover of a start that died while building is rebuilt from nothing.
            let _absent = std::fs::remove_file(&building);
            drop(Self::open_in_place(&building, None)?);
            std::fs::rename(&building, path).map_err(|source| ActorsError::file(path, source))?;
        }
        Self::open_in_place(path, Some(durability))
    }

    /// Opens the file at `path` and brings its tables up to date in one transaction.
    /// `durability` is `None` for a store being built under its temporary name: nothing in
    /// it is worth an fsync until it is renamed into place (a crash leaves only the temporary
    /// file, which the next open rebuilds).
    fn open_in_place(path: &Path, durability: Option<Durability>) -> Result<Self, ActorsError> {
        let err = |source| ActorsError::sqlite(path, source);
        let conn = Connection::open(path).map_err(err)?;
        // A store being built keeps no journal and skips every fsync (nothing in it is worth
        // one yet); it becomes a WAL store once its tables are made, below.
        let (journal, sync) = match durability {
            None => ("OFF", "OFF"),
            Some(Durability::Normal) => ("WAL", "NORMAL"),
            Some(Durability::Full) => ("WAL", "FULL"),
        };
        // Automatic checkpoints stall the committing thread; the host checkpoints on a timer.
        conn.execute_batch(&format!(
            "PRAGMA journal_mode={journal}; PRAGMA synchronous={sync}; \
             PRAGMA wal_autocheckpoint=0; PRAGMA busy_timeout=5000; PRAGMA foreign_keys=ON;"
        ))
        .map_err(err)?;
        // One transaction: a reader sees the tables whole or not at all, and a new store
        // costs one commit instead of one per statement.
        conn.execute_batch("BEGIN IMMEDIATE;").map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        let columns = run_columns(&conn).map_err(err)?;
        let has = |name: &str| columns.iter().any(|c| c == name);
        if !has("principal") {
            conn.execute_batch(
                "ALTER TABLE runs ADD COLUMN principal TEXT; \
                 ALTER TABLE runs ADD COLUMN principal_roles TEXT;",
            )
            .map_err(err)?;
        }
        if !has("desc_model_turns") {
            conn.execute_batch(
                "ALTER TABLE runs ADD COLUMN desc_model_turns INTEGER NOT NULL DEFAULT 0; \
                 ALTER TABLE runs ADD COLUMN desc_tool_calls INTEGER NOT NULL DEFAULT 0; \
                 ALTER TABLE runs ADD COLUMN desc_calls_placed INTEGER NOT NULL DEFAULT 0; \
                 ALTER TABLE runs ADD COLUMN desc_input_tokens INTEGER NOT NULL DEFAULT 0; \
                 ALTER TABLE runs ADD COLUMN desc_output_tokens INTEGER NOT NULL DEFAULT 0;",
            )
            .map_err(err)?;
        }
        if !has("origin") {
            conn.execute_batch("ALTER TABLE runs ADD COLUMN origin TEXT;")
                .map_err(err)?;
        }
        conn.execute_batch("COMMIT;").map_err(err)?;
        if durability.is_none() {
            conn.execute_batch("PRAGMA journal_mode=WAL;")
                .map_err(err)?;
        }
        Ok(Self::with_columns(conn, path, true, true, true))
    }

    /// Opens an existing store for reading only (inspection of a stopped or serving host).
    pub(crate) fn open_read_only(path: &Path) -> Result<Self, ActorsError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| ActorsError::sqlite(path, source))?;
        let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
        let columns = run_columns(&conn).unwrap_or_default();
        let has_principal = columns.iter().any(|c| c == "principal");
        let has_descendants = columns.iter().any(|c| c == "desc_model_turns");
        let has_origin = columns.iter().any(|c| c == "origin");
        Ok(Self::with_columns(
            conn,
            path,
            has_principal,
            has_descendants,
            has_origin,
        ))
    }

    /// A store on `conn` whose runs table has these columns; the one-run read is built once
    /// here, not per read (it is on every write's path).
    fn with_columns(
        conn: Connection,
        path: &Path,
        has_principal: bool,
        has_descendants: bool,
        has_origin: bool,
    ) -> Self {
        let mut store = Self {
            conn,
            path: path.to_owned(),
            has_principal,
            has_descendants,
            has_origin,
            select_run: String::new(),
        };
        store.select_run = format!("SELECT {} FROM runs WHERE id = ?1", store.columns());
        store
    }

    /// Folds the write-ahead log of the store at `path` into its database through a
    /// connection of its own, so the agent that writes the store is never held up by it (a
    /// passive checkpoint takes no lock a writer waits on). Run it off the async workers.
    pub(crate) fn checkpoint_file(path: &Path) -> Result<(), ActorsError> {
        let err = |source| ActorsError::sqlite(path, source);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(1))
            .map_err(err)?;
        conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
            .map_err(err)
    }

    /// The run columns this store's table has, in the order rows are read.
    pub(super) fn columns(&self) -> String {
        let principal = if self.has_principal {
            PRINCIPAL_COLUMNS
        } else {
            NO_PRINCIPAL_COLUMNS
        };
        let descendants = if self.has_descendants {
            DESCENDANT_COLUMNS
        } else {
            NO_DESCENDANT_COLUMNS
        };
        let origin = if self.has_origin {
            ORIGIN_COLUMN
        } else {
            NO_ORIGIN_COLUMN
        };
        format!("{RUN_COLUMNS}, {principal}, {descendants}, {origin}")
    }
}
