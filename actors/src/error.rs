//! The one error type of consort-actors, and which SQLite and OS failures mean that a store
//! could not be written (a full disk, a file-size limit, a failed write) rather than something
//! wrong with the store or the run.
//!
//! It classifies errors; what to do about a store that is not writable is the supervisor's.

use std::path::{Path, PathBuf};

use rusqlite::ffi;

/// Errors from the run store, the tools, the models and the actors of one host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActorsError {
    /// The run store (an agent's SQLite database) could not be opened or written.
    #[error("run store {path}: {detail}")]
    Store {
        /// The store file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The run store could not be written: its disk is full, a file-size limit was reached,
    /// or the disk failed a write (SQLite's `SQLITE_FULL` and its write-side `SQLITE_IOERR`
    /// codes, or the OS's "no space", "file too large" and "quota exceeded"). Nothing of the
    /// failed write is in the store, and the same write can succeed once there is room again.
    #[error("run store {path} is not writable: {detail}")]
    StoreNotWritable {
        /// The store file.
        path: PathBuf,
        /// What SQLite or the OS said.
        detail: String,
    },
    /// A stored row did not decode (a corrupted or foreign database).
    #[error("run store {path}: corrupt row: {detail}")]
    CorruptStore {
        /// The store file.
        path: PathBuf,
        /// What did not decode.
        detail: String,
    },
    /// A group commit of the store writer failed: none of its writes is in the store.
    #[error("run store {path}: commit failed: {detail}")]
    Commit {
        /// The store file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The PostgreSQL run store could not be reached, or a statement on it failed. Nothing of
    /// the failed write is in the store.
    #[error("PostgreSQL run store ({store}): {detail}")]
    Postgres {
        /// What was being reached: `connect`, or the agent whose store was read or written.
        store: String,
        /// What the client or the server said.
        detail: String,
    },
    /// The PostgreSQL run store's URL is read from an environment variable that is not set.
    #[error(
        "the PostgreSQL run store's URL is read from the environment variable {var}, which is not set (or not UTF-8)"
    )]
    StoreUrlMissing {
        /// The variable's name.
        var: String,
    },
    /// Another host holds the data folder: one host writes a data folder at a time.
    #[error(
        "data folder {path} is in use by {holder}: one host writes a data folder at a time (stop that host first; read-only commands such as `consort jobs list --data` work beside it)"
    )]
    DataFolderInUse {
        /// The data folder.
        path: PathBuf,
        /// Who holds it, as its lock file says: pid, host name, machine, since when.
        holder: String,
    },
    /// Another host holds the lease of an agent's PostgreSQL store: one host writes an agent's
    /// runs at a time.
    #[error(
        "the PostgreSQL store of agent `{agent}` is held by {holder}, whose lease runs {expires_in_ms} ms more: one host writes an agent's runs at a time (start this host as a standby to take over when that lease ends, or take it over now if that host is gone)"
    )]
    StoreLeased {
        /// The agent whose store is held.
        agent: String,
        /// Who holds it: pid, host name, machine, since when.
        holder: String,
        /// How long the holder's lease runs without renewal (the server's clock).
        expires_in_ms: u64,
    },
    /// No run with this id exists in the stores asked.
    #[error("no run with id {0}")]
    UnknownRun(String),
    /// No agent with this name is served here.
    #[error("no agent named `{0}` is served by this host")]
    UnknownAgent(String),
    /// The request was refused (before anything was written).
    #[error("{0}")]
    Refused(consort_core::Refusal),
    /// A config re-read found errors; the previous config stays in force.
    #[error("{0}")]
    InvalidConfig(String),
    /// Another host could not answer.
    #[error("{0}")]
    Remote(String),
    /// An actor could not be spawned or reached.
    #[error("actor: {0}")]
    Actor(String),
    /// Reading a data folder failed.
    #[error("{path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        #[source]
        /// What the OS said.
        source: std::io::Error,
    },
}

impl ActorsError {
    /// A SQLite failure on the store at `path`: [`ActorsError::StoreNotWritable`] when it says
    /// the store could not be written, [`ActorsError::Store`] otherwise.
    pub(crate) fn sqlite(path: &Path, source: rusqlite::Error) -> Self {
        if sqlite_not_writable(&source) {
            Self::StoreNotWritable {
                path: path.to_owned(),
                detail: source.to_string(),
            }
        } else {
            Self::Store {
                path: path.to_owned(),
                detail: source.to_string(),
            }
        }
    }

    /// A PostgreSQL failure while reaching `store`: the server's own message when it sent one
    /// (the client's error alone says only "db error"), else the client's error and its cause.
    pub(crate) fn postgres(store: &str, source: &postgres::Error) -> Self {
        let detail = match source.as_db_error() {
            Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
            None => match std::error::Error::source(source) {
                Some(cause) if !source.to_string().contains(&cause.to_string()) => {
                    format!("{source}: {cause}")
                }
                _ => source.to_string(),
            },
        };
        Self::Postgres {
            store: store.to_owned(),
            detail,
        }
    }

    /// An OS failure on a file of the store at `path`, classified as [`ActorsError::sqlite`]
    /// classifies SQLite's.
    pub(crate) fn file(path: &Path, source: std::io::Error) -> Self {
        if io_not_writable(&source) {
            Self::StoreNotWritable {
                path: path.to_owned(),
                detail: source.to_string(),
            }
        } else {
            Self::Io {
                path: path.to_owned(),
                source,
            }
        }
    }

    /// Whether this is a store that could not be written (see
    /// [`ActorsError::StoreNotWritable`]): a failure that may go away when space returns.
    pub fn is_store_not_writable(&self) -> bool {
        matches!(self, Self::StoreNotWritable { .. })
    }
}

/// SQLite's codes for a write that did not reach the disk. `SQLITE_FULL` is a full disk (or a
/// short write at a file-size limit); a write refused outright (`EFBIG` at a file-size limit)
/// and failed syncs come as these `SQLITE_IOERR` codes. Read errors are not among them: a store
/// that cannot be read does not heal when space returns.
const WRITE_IO_ERRORS: [i32; 6] = [
    ffi::SQLITE_IOERR,
    ffi::SQLITE_IOERR_WRITE,
    ffi::SQLITE_IOERR_FSYNC,
    ffi::SQLITE_IOERR_DIR_FSYNC,
    ffi::SQLITE_IOERR_TRUNCATE,
    ffi::SQLITE_IOERR_SHMSIZE,
];

/// Whether SQLite's error says the store could not be written.
pub(crate) fn sqlite_not_writable(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::SqliteFailure(e, _) => {
            e.code == ffi::ErrorCode::DiskFull
                || (e.code == ffi::ErrorCode::SystemIoFailure
                    && WRITE_IO_ERRORS.contains(&e.extended_code))
        }
        _ => false,
    }
}

/// Whether the OS's error says a file could not grow: no space, too large, over quota.
pub(crate) fn io_not_writable(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::StorageFull | ErrorKind::FileTooLarge | ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(extended_code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(extended_code), None)
    }

    #[test]
    fn a_full_disk_and_failed_writes_are_not_writable() {
        for code in [
            ffi::SQLITE_FULL,
            ffi::SQLITE_IOERR_WRITE,
            ffi::SQLITE_IOERR_FSYNC,
            ffi::SQLITE_IOERR_TRUNCATE,
        ] {
            let error = ActorsError::sqlite(Path::new("runs.db"), sqlite_error(code));
            assert!(error.is_store_not_writable(), "{code}: {error}");
        }
    }

    #[test]
    fn read_errors_corruption_and_locks_stay_store_errors() {
        for code in [
            ffi::SQLITE_IOERR_READ,
            ffi::SQLITE_IOERR_SHORT_READ,
            ffi::SQLITE_CORRUPT,
            ffi::SQLITE_BUSY,
            ffi::SQLITE_READONLY,
            ffi::SQLITE_CONSTRAINT_PRIMARYKEY,
        ] {
            let error = ActorsError::sqlite(Path::new("runs.db"), sqlite_error(code));
            assert!(
                matches!(error, ActorsError::Store { .. }),
                "{code}: {error}"
            );
        }
        let error = ActorsError::sqlite(Path::new("runs.db"), rusqlite::Error::QueryReturnedNoRows);
        assert!(!error.is_store_not_writable());
    }

    #[test]
    fn no_space_too_large_and_over_quota_are_not_writable() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::StorageFull,
            ErrorKind::FileTooLarge,
            ErrorKind::QuotaExceeded,
        ] {
            let error = ActorsError::file(Path::new("runs.db"), Error::from(kind));
            assert!(error.is_store_not_writable(), "{kind:?}");
        }
        let denied = ActorsError::file(
            Path::new("runs.db"),
            Error::from(ErrorKind::PermissionDenied),
        );
        assert!(matches!(denied, ActorsError::Io { .. }));
    }
}
