//! The client's cache of peer hosts: one connection per peer, and the dial failure that sets
//! its backoff.
//!
//! Both halves of an endpoint write here: the client when it dials, and the server when a peer
//! dials in ([`adopt`]), because a connection a peer opened is as good as one we opened, and
//! fresher after the peer restarted. Slots are locked one at a time and never across the
//! outer map's lock, so a slow dial to one peer never blocks requests to another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The cached connection of each peer host.
pub(super) type Peers = Mutex<HashMap<String, Arc<tokio::sync::Mutex<PeerSlot>>>>;

/// What a client knows of one peer host.
#[derive(Default)]
pub(super) struct PeerSlot {
    pub(super) connection: Option<quinn::Connection>,
    /// The last dial that failed, if none succeeded since.
    pub(super) last_failure: Option<DialFailure>,
    pub(super) backoff: Duration,
}

/// A dial that failed: when, and why (the words a request that shared it reports).
pub(super) struct DialFailure {
    pub(super) at: Instant,
    pub(super) reason: String,
}

/// Locks a std mutex, taking over a poisoned one: a panic elsewhere must not cut a host off.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes a connection `peer_host` dialed in our cached connection to it. The peer dials only
/// when it has no connection to us, so this one is at least as fresh as ours: after a restart
/// it replaces the connection to the peer's previous process, and it proves the peer is up.
pub(super) async fn adopt(peers: &Peers, peer_host: &str, connection: &quinn::Connection) {
    let slot = lock(peers).entry(peer_host.to_owned()).or_default().clone();
    let mut slot = slot.lock().await;
    let replaced = slot
        .connection
        .as_ref()
        .is_some_and(|cached| cached.stable_id() != connection.stable_id());
    if replaced {
        tracing::info!(
            peer_host,
            "the peer dialed in; its connection replaces ours"
        );
    }
    slot.connection = Some(connection.clone());
    slot.last_failure = None;
    slot.backoff = Duration::ZERO;
}
