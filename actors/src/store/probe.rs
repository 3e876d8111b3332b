//! Whether an agent's store can be written again: the check the supervisor makes, on a
//! blocking thread, while an agent is down because its store could not be written.
//!
//! A write that is rolled back proves nothing here: in WAL mode its pages never leave SQLite's
//! page cache. So the probe asks for the two things a commit needs. First, that the store's
//! files can grow: it writes [`PROBE_HEADROOM`] bytes into a file of its own beside the store,
//! starting where the store's largest file ends, syncs them and removes the file (a file-size
//! limit refuses bytes past it, a full disk refuses the blocks). Second, that SQLite can commit
//! to the store: it sets the store's `user_version` to the value it already has, in a
//! transaction that commits (one frame in the write-ahead log; nothing a run reads changes).
//!
//! The probe never reads or writes runs or events and decides nothing: it reports.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::RunStore;
use crate::ActorsError;

/// How much room beyond the store's largest file the probe asks for: more than a busy batch
/// of commits takes, so an agent revived on a passing probe gets work done before room could
/// be short again.
pub(crate) const PROBE_HEADROOM: u64 = 1 << 20;

/// The bytes are written in chunks of this size.
const CHUNK: usize = 64 * 1024;

impl RunStore {
    /// Whether the store at `path` can take writes again: `Ok` when its files can grow by
    /// [`PROBE_HEADROOM`] and SQLite commits a write to it; else why not
    /// ([`ActorsError::StoreNotWritable`] while there is no room). Run it off the async
    /// workers: it writes and syncs a megabyte.
    pub(crate) fn probe_writable(path: &Path) -> Result<(), ActorsError> {
        let end = [path.to_owned(), beside(path, "-wal")]
            .iter()
            .filter_map(|file| std::fs::metadata(file).ok())
            .map(|meta| meta.len())
            .max()
            .unwrap_or(0);
        let room = beside(path, "-probe");
        let grown = grow(&room, end);
        // Removed whatever the write did; a file left behind (a crash right here) is rewritten
        // from the start by the next probe.
        if let Err(e) = std::fs::remove_file(&room)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(file = %room.display(), error = %e, "probe file not removed");
        }
        grown.map_err(|source| ActorsError::file(path, source))?;
        if path.is_file() {
            commit_unchanged(path)?;
        }
        Ok(())
    }
}

/// `path` with `suffix` appended to its file name (SQLite names its own files so: `-wal`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes [`PROBE_HEADROOM`] bytes into `file` from `offset` on and syncs them. The bytes vary:
/// a filesystem that compresses could store zeros without allocating anything.
fn grow(file: &Path, offset: u64) -> std::io::Result<()> {
    let mut out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(file)?;
    let mut chunk = vec![0u8; CHUNK];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ offset;
    for byte in &mut chunk {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *byte = seed.to_le_bytes()[0];
    }
    out.seek(SeekFrom::Start(offset))?;
    let mut left = PROBE_HEADROOM;
    while left > 0 {
        let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.sync_data()
}

/// Commits a write to the store that changes nothing a reader sees: `user_version` set to the
/// value it has.
fn commit_unchanged(path: &Path) -> Result<(), ActorsError> {
    let err = |source| ActorsError::sqlite(path, source);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    conn.busy_timeout(Duration::from_secs(1)).map_err(err)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(err)?;
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE; PRAGMA user_version = {version}; COMMIT;"
    ))
    .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Durability, RunLog};

    #[test]
    fn a_store_with_room_passes_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let mut store = RunStore::open(&path, Durability::Normal).unwrap();
        RunStore::probe_writable(&path).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with("-probe")), "{names:?}");
        // The store still opens and reads as before.
        assert!(store.runs().unwrap().is_empty());
        drop(store);
        let mut reopened = RunStore::open(&path, Durability::Normal).unwrap();
        assert!(reopened.runs().unwrap().is_empty());
    }

    #[test]
    fn a_store_not_created_yet_is_probed_for_room_only() {
        let dir = tempfile::tempdir().unwrap();
        RunStore::probe_writable(&dir.path().join("runs.db")).unwrap();
        assert!(!dir.path().join("runs.db").exists());
    }

    #[test]
    fn a_folder_that_is_gone_is_an_error_not_a_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("runs.db");
        let error = RunStore::probe_writable(&path).unwrap_err();
        assert!(matches!(error, ActorsError::Io { .. }), "{error}");
    }
}
