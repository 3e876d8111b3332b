//! [`LinkConfig`]: the timeouts and limits of a link endpoint, with defaults for one fleet on
//! one network.
//!
//! Plain data. The values tie into each other (a request's deadline bounds its dial, the ack
//! timeout is what lets a request to a restarted peer be retried in time), so each field's
//! docs say what it bounds; this module must not read them from anywhere but its caller.

use std::time::Duration;

/// Timeouts and limits of a link endpoint.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// How long one dial (QUIC and TLS handshake) may take before the peer is `Unreachable`.
    pub dial_timeout: Duration,
    /// How long a whole request (dial, send, handler, response) may take.
    pub request_timeout: Duration,
    /// Keep-alive interval of idle connections, so NATs and the idle timeout leave them up.
    pub keep_alive: Duration,
    /// A connection with no traffic at all (not even keep-alives) for this long is closed.
    pub idle_timeout: Duration,
    /// After a failed dial, the next dial to that peer waits until this long after the failure,
    /// doubling on each further failure up to `max_redial_backoff`; a success, or the peer
    /// dialing in, resets it. A request is never refused without a dial tried for it: requests
    /// that waited while a dial failed share that dial's failure, later ones wait and dial.
    pub redial_backoff: Duration,
    /// Upper bound of the redial backoff.
    pub max_redial_backoff: Duration,
    /// How many requests a peer may have in flight on one connection.
    pub max_concurrent_streams: u32,
    /// How long the peer may take to acknowledge a request's bytes (QUIC acknowledgements,
    /// sent by the peer's transport whatever its handler is doing). A connection whose peer
    /// does not is taken for dead (the peer crashed or restarted): it is dropped and the
    /// request is sent once more on a fresh dial.
    pub ack_timeout: Duration,
    /// How long [`LinkEndpoint::close`](super::LinkEndpoint::close) waits for peers to
    /// acknowledge the close.
    pub shutdown_grace: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            redial_backoff: Duration::from_millis(100),
            max_redial_backoff: Duration::from_secs(1),
            max_concurrent_streams: 256,
            ack_timeout: Duration::from_millis(1500),
            shutdown_grace: Duration::from_secs(1),
        }
    }
}
