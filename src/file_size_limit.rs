//! A file-size limit must fail a write, not end the host.
//!
//! A write past the process's file-size limit (`RLIMIT_FSIZE`, e.g. systemd's `LimitFSIZE=`)
//! raises `SIGXFSZ`, whose default action ends the process. Caught, the write fails with
//! `EFBIG` instead, which SQLite reports like a full disk: the agent whose store could not
//! grow goes down as `store_not_writable` and comes back by itself once the limit is raised
//! (the supervisor in consort-actors owns that). This module only catches the signal and says
//! so in the log; it decides nothing about stores or agents.

use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, warn};

/// At most one warning per this long: every failed write raises the signal again.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Catches `SIGXFSZ` for the life of the process. Call it inside the runtime.
pub(crate) fn catch_file_size_signal() {
    let mut signals = match signal(SignalKind::from_raw(libc::SIGXFSZ)) {
        Ok(signals) => signals,
        Err(e) => {
            warn!(
                "cannot catch SIGXFSZ: a write past a file-size limit would end this process: {e}"
            );
            return;
        }
    };
    tokio::spawn(async move {
        let mut warned: Option<Instant> = None;
        while signals.recv().await.is_some() {
            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                warned = Some(Instant::now());
                warn!(
                    "a write went past this process's file-size limit (RLIMIT_FSIZE) and failed; an agent whose store cannot grow is down until the limit is raised"
                );
            } else {
                debug!("another write went past the file-size limit");
            }
        }
    });
}
