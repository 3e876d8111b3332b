//! One writer per data folder: the OS file lock a host holds on `<data>/consort.lock` for as
//! long as its store writer runs.
//!
//! Two hosts writing one folder corrupt each other's runs (each resumes the other's unsettled
//! runs, and a finished run takes a second reply). So a host takes an exclusive lock on the
//! folder's lock file before it opens any store, and a second host on the same folder refuses to
//! start, naming who holds it (pid, host name, machine, since when). The lock is the OS's
//! (`flock` on Unix, `LockFileEx` on Windows): a process that dies, even by SIGKILL, releases
//! it, so a crash never leaves a stale lock to clean up. The file's contents only describe the
//! holder; they are never what decides.
//!
//! Readers take no lock: `DataFolder` opens stores read-only, so `consort jobs list --data`
//! and the other inspection commands work beside a live host.
//!
//! A holder in this same process (an embedding app that stopped its host and starts it again)
//! is waited for a little while: the old host's writer lets go once its last job is done.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use crate::ActorsError;

/// The lock file's name in a data folder.
pub(crate) const LOCK_FILE: &str = "consort.lock";

/// How long a host waits for a holder in its own process to let the folder go.
const SAME_PROCESS_GRACE: Duration = Duration::from_secs(5);

/// A data folder's lock: while it is held, no other host writes the folder. Released when
/// dropped, or by the OS when the process dies.
///
/// A host takes its folder's lock itself ([`Host::spawn`](crate::Host::spawn)); a program that
/// writes the folder before it starts the host takes it first and hands it over with
/// [`HostSpecBuilder::folder_lock`](crate::HostSpecBuilder::folder_lock).
#[derive(Debug)]
pub struct FolderLock {
    /// The locked file: closing it releases the lock.
    _file: File,
    path: PathBuf,
}

/// Who holds a data folder, as its lock file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    /// The consort host's name.
    pub(crate) host: String,
    /// The machine it runs on.
    pub(crate) machine: String,
    /// When it took the folder, Unix milliseconds.
    pub(crate) since_ms: u64,
}

impl Holder {
    /// This process, as host `host`, from now.
    pub(crate) fn this_process(host: &str) -> Self {
        Self {
            pid: std::process::id(),
            host: host.to_owned(),
            machine: machine_name(),
            since_ms: crate::run::now_ms(),
        }
    }

    /// The holder a lock file describes, if it can be read (a holder may be writing it).
    fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The holder in words: "pid 4242 (host alpha on box1) since 2026-12-05T12:00:00Z".
    pub(crate) fn describe(&self) -> String {
        let since = SystemTime::UNIX_EPOCH + Duration::from_millis(self.since_ms);
        format!(
            "pid {} (host {} on {}) since {}",
            self.pid,
            self.host,
            self.machine,
            humantime::format_rfc3339_seconds(since)
        )
    }
}

impl FolderLock {
    /// Takes `data_dir`'s lock for host `host` (creating the folder if needed), or says who
    /// holds it ([`ActorsError::DataFolderInUse`]). A holder in this process (a host stopped a
    /// moment ago) is waited for a few seconds.
    pub fn acquire(data_dir: &Path, host: &str) -> Result<Self, ActorsError> {
        Self::acquire_within(data_dir, host, SAME_PROCESS_GRACE)
    }

    /// [`FolderLock::acquire`], waiting up to `grace` for a holder in this process, or one
    /// whose lock file cannot be read yet (it is writing or emptying it).
    fn acquire_within(data_dir: &Path, host: &str, grace: Duration) -> Result<Self, ActorsError> {
        let io = |source| ActorsError::Io {
            path: data_dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let path = data_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let give_up = Instant::now() + grace;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let holder = Holder::read(&path);
                    let transient = holder.as_ref().is_none_or(|h| h.pid == std::process::id());
                    if transient && Instant::now() < give_up {
                        std::thread::sleep(Duration::from_millis(25));
                        continue;
                    }
                    return Err(ActorsError::DataFolderInUse {
                        path: data_dir.to_owned(),
                        holder: holder.map_or_else(
                            || "another process (its lock file is being written)".to_owned(),
                            |h| h.describe(),
                        ),
                    });
                }
                Err(TryLockError::Error(source)) => return Err(io(source)),
            }
        }
        // Only the holder writes the file, and only now: a reader sees the old holder, the new
        // one, or (for a moment) an empty file.
        let holder = Holder::this_process(host);
        let text = serde_json::to_string(&holder)
            .map_err(|e| ActorsError::Actor(format!("the lock file did not encode: {e}")))?;
        file.set_len(0).map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.flush().map_err(io)?;
        debug!(path = %path.display(), "data folder locked");
        Ok(Self { _file: file, path })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // The lock goes with the file; emptying it first tells a reader nobody holds it. A
        // crash skips this, and the next holder overwrites what is left.
        if let Err(e) = std::fs::write(&self.path, b"") {
            warn!(path = %self.path.display(), error = %e, "the lock file was not emptied");
        }
    }
}

/// This machine's name, for the lock file (`unknown` when the OS does not say).
fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = FolderLock::acquire(dir.path(), "alpha").expect("first lock");
        // A second open file description conflicts even in this process; the grace for a
        // holder in this process ends, and the refusal names the holder.
        let grace = Duration::from_millis(100);
        let start = Instant::now();
        let second = FolderLock::acquire_within(dir.path(), "beta", grace);
        match second {
            Err(ActorsError::DataFolderInUse { path, holder }) => {
                assert_eq!(path, dir.path());
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                );
                assert!(holder.contains("host alpha"), "{holder}");
            }
            other => panic!("expected DataFolderInUse, got {other:?}"),
        }
        assert!(start.elapsed() >= grace);
        drop(first);
        FolderLock::acquire(dir.path(), "beta").expect("free once the first lets go");
    }

    #[test]
    fn a_holder_in_this_process_that_lets_go_is_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = FolderLock::acquire(dir.path(), "alpha").expect("first lock");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(first);
        });
        FolderLock::acquire(dir.path(), "alpha").expect("taken once the first lets go");
        release.join().expect("released");
    }

    #[test]
    fn a_holder_reads_back_as_written() {
        let holder = Holder {
            pid: 4242,
            host: "alpha".into(),
            machine: "box1".into(),
            since_ms: 1_764_936_000_000,
        };
        assert_eq!(
            holder.describe(),
            "pid 4242 (host alpha on box1) since 2025-12-05T12:00:00Z"
        );
    }
}
