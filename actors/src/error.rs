//! The one error type of consort-actors.

use std::path::PathBuf;

/// Errors from the run store, the tools, the models and the actors of one host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActorsError {
    /// The run store (an agent's SQLite database) could not be opened or written.
    #[error("run store {path}: {source}")]
    Store {
        /// The store file.
        path: PathBuf,
        #[source]
        /// What SQLite said.
        source: rusqlite::Error,
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
