//! The client half of a link: sending a request frame to a peer host and waiting for its
//! response, over the one cached connection to that host.
//!
//! This module owns the request path of [`LinkEndpoint`]: reusing or dialing the connection
//! (with a shared dial and a backoff after failures), the exchange on one stream, and the
//! retry: a request on a cached connection that turns out to be dead is sent once more on a
//! fresh dial, which is safe because every frame of the protocol is idempotent. Failures are
//! worded for an operator (refused at the handshake, no answer, connection lost and why). It
//! must not serve requests; a dialed connection is handed to the server half for that.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::QuicClientConfig;

use super::peers::{DialFailure, lock};
use super::server::spawn_serving;
use super::tls;
use super::{CLOSE_RESET, CLOSE_SHUTDOWN, LinkEndpoint};
use crate::codec::{Frame, MAX_FRAME, decode_frame, encode_frame};
use crate::error::{CodecError, LinkError};
use crate::keys::PublicKey;

impl LinkEndpoint {
    /// Sends `frame` to `peer_host` at `addr` and waits for its response.
    ///
    /// Reuses the connection to that host (dialing it if there is none, or if it closed or the
    /// address changed). If a reused connection turns out to be dead (the request could not
    /// be sent, the peer did not acknowledge it within
    /// [`LinkConfig::ack_timeout`](super::LinkConfig::ack_timeout), or the connection closed
    /// before the response), it is dropped and the request is sent once more on a fresh dial:
    /// every frame of the protocol is idempotent (calls dedupe on the child run id), so this is
    /// safe. Only then is the peer called unreachable.
    pub async fn request(
        &self,
        peer_host: &str,
        addr: SocketAddr,
        frame: &Frame,
    ) -> Result<Frame, LinkError> {
        let request = encode_frame(frame).map_err(LinkError::Encode)?;
        self.request_bytes(peer_host, addr, &request).await
    }

    /// As [`LinkEndpoint::request`], with the request's bytes given as they are (unchecked):
    /// for tests and tools that probe a host with hand-made, truncated or garbage frames.
    pub async fn request_bytes(
        &self,
        peer_host: &str,
        addr: SocketAddr,
        request: &[u8],
    ) -> Result<Frame, LinkError> {
        let attempt = async {
            let (connection, reused) = self.connection(peer_host, addr).await?;
            match self.exchange(peer_host, &connection, request).await {
                Err(failure) if reused && failure.connection_is_dead(&connection) => {
                    tracing::info!(peer_host, reason = %failure, "cached connection is dead; redialing once");
                    self.forget(peer_host, &connection);
                    let (fresh, _) = self.connection(peer_host, addr).await?;
                    self.exchange(peer_host, &fresh, request)
                        .await
                        .map_err(|failure| self.fail(peer_host, &fresh, failure))
                }
                result => result.map_err(|failure| self.fail(peer_host, &connection, failure)),
            }
        };
        tokio::time::timeout(self.inner.config.request_timeout, attempt)
            .await
            .map_err(|_| LinkError::Timeout(peer_host.to_owned()))?
    }

    /// Closes and forgets the connection to `peer_host`, so that the next request dials
    /// afresh. For a caller whose request timed out: the peer may have restarted since, and a
    /// connection to its previous process would only time out again.
    pub fn reset_peer(&self, peer_host: &str) {
        let slot = lock(&self.inner.serving.peers).remove(peer_host);
        if let Some(slot) = slot
            && let Ok(slot) = slot.try_lock()
            && let Some(connection) = &slot.connection
        {
            connection.close(CLOSE_RESET.into(), b"reset by the caller");
        }
    }

    /// The open connection to `peer_host`, dialing if needed; `true` if it was reused.
    pub(super) async fn connection(
        &self,
        peer_host: &str,
        addr: SocketAddr,
    ) -> Result<(quinn::Connection, bool), LinkError> {
        let asked = Instant::now();
        let slot = lock(&self.inner.serving.peers)
            .entry(peer_host.to_owned())
            .or_default()
            .clone();
        // Holding the slot while dialing makes concurrent requests share one dial.
        let mut slot = slot.lock().await;
        if let Some(connection) = &slot.connection {
            if connection.close_reason().is_none() && connection.remote_address() == addr {
                return Ok((connection.clone(), true));
            }
            slot.connection = None;
        }
        if let Some(failure) = &slot.last_failure {
            // A dial that failed while this request waited for it is this request's dial too.
            if failure.at >= asked {
                return Err(LinkError::Unreachable {
                    host: peer_host.to_owned(),
                    reason: failure.reason.clone(),
                });
            }
            if let Some(wait) = (failure.at + slot.backoff).checked_duration_since(Instant::now()) {
                tokio::time::sleep(wait).await;
            }
        }
        match self.dial(peer_host, addr).await {
            Ok((connection, peer_key)) => {
                slot.connection = Some(connection.clone());
                slot.last_failure = None;
                slot.backoff = Duration::ZERO;
                // The peer may send its own requests on this connection too.
                spawn_serving(
                    connection.clone(),
                    peer_host.to_owned(),
                    peer_key,
                    self.inner.serving.clone(),
                );
                Ok((connection, false))
            }
            Err(error) => {
                let config = &self.inner.config;
                slot.backoff = (slot.backoff * 2)
                    .max(config.redial_backoff)
                    .min(config.max_redial_backoff);
                let reason = match &error {
                    LinkError::Unreachable { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                slot.last_failure = Some(DialFailure {
                    at: Instant::now(),
                    reason,
                });
                Err(error)
            }
        }
    }

    /// A new connection to `peer_host`, and the key it was pinned to.
    async fn dial(
        &self,
        peer_host: &str,
        addr: SocketAddr,
    ) -> Result<(quinn::Connection, PublicKey), LinkError> {
        let pinned: PublicKey = *tls::read_ring(&self.inner.serving.ring)
            .key(peer_host)
            .ok_or_else(|| LinkError::UnknownHost(peer_host.to_owned()))?;
        let client_tls = tls::client_config(&self.inner.identity, peer_host, pinned)?;
        let client_crypto =
            QuicClientConfig::try_from(client_tls).map_err(|e| LinkError::Setup(e.to_string()))?;
        let mut client_config = quinn::ClientConfig::new(Arc::new(client_crypto));
        client_config.transport_config(self.inner.transport.clone());

        let unreachable = |reason: String| {
            tracing::warn!(peer_host, %addr, %reason, "cannot reach peer host");
            LinkError::Unreachable {
                host: peer_host.to_owned(),
                reason,
            }
        };
        let connecting = self
            .inner
            .endpoint
            .connect_with(client_config, addr, tls::SERVER_NAME)
            .map_err(|e| unreachable(format!("cannot dial {addr}: {e}")))?;
        let connection = handshake(connecting, addr, self.inner.config.dial_timeout)
            .await
            .map_err(unreachable)?;
        tracing::debug!(peer_host, %addr, "link connected");
        Ok((connection, pinned))
    }

    /// One request/response on a new stream of `connection`.
    async fn exchange(
        &self,
        peer_host: &str,
        connection: &quinn::Connection,
        request: &[u8],
    ) -> Result<Frame, Exchange> {
        let (mut send, mut recv) = connection
            .open_bi()
            .await
            .map_err(|e| Exchange::NotSent(e.to_string()))?;
        send.write_all(request)
            .await
            .map_err(|e| Exchange::NotSent(e.to_string()))?;
        send.finish()
            .map_err(|e| Exchange::NotSent(e.to_string()))?;
        // The peer's transport acknowledges the request's bytes within a few round trips
        // whatever its handler does; silence means nobody holds this connection any more. Most
        // answers come long before `ack_timeout`, so the acknowledgement is looked at only
        // then, once: watching it on every request costs a wake-up per ACK.
        let ack_timeout = self.inner.config.ack_timeout;
        let read = recv.read_to_end(MAX_FRAME);
        tokio::pin!(read);
        let read = tokio::select! {
            read = &mut read => read,
            () = tokio::time::sleep(ack_timeout) => {
                // A zero timeout polls `stopped` once: ready when the request was acknowledged
                // (or the connection failed, which the read then reports).
                let acknowledged = tokio::time::timeout(Duration::ZERO, send.stopped()).await;
                if acknowledged.is_err() {
                    return Err(Exchange::Unacknowledged(ack_timeout));
                }
                read.await
            }
        };
        let response = read.map_err(|error| match error {
            quinn::ReadToEndError::TooLong => {
                Exchange::BadResponse(CodecError::TooLarge { limit: MAX_FRAME })
            }
            quinn::ReadToEndError::Read(error) => Exchange::Lost(error.to_string()),
        })?;
        decode_frame(&response).map_err(|error| {
            tracing::warn!(peer_host, %error, "peer host sent an undecodable response");
            Exchange::BadResponse(error)
        })
    }

    /// Turns an exchange failure into the caller's error, dropping a dead connection.
    fn fail(
        &self,
        peer_host: &str,
        connection: &quinn::Connection,
        failure: Exchange,
    ) -> LinkError {
        let host = peer_host.to_owned();
        match failure {
            Exchange::BadResponse(source) => LinkError::BadResponse { host, source },
            Exchange::Unacknowledged(_) if connection.close_reason().is_none() => {
                self.forget(peer_host, connection);
                LinkError::ConnectionLost {
                    host,
                    reason: failure.to_string(),
                }
            }
            Exchange::NotSent(_) | Exchange::Lost(_) | Exchange::Unacknowledged(_) => {
                let Some(closed) = connection.close_reason() else {
                    return LinkError::ConnectionLost {
                        host,
                        reason: failure.to_string(),
                    };
                };
                self.forget(peer_host, connection);
                // In TLS 1.3 the client finishes its handshake before the server has checked
                // the client's certificate; a server refusing our key closes the connection
                // with a TLS alert right after. That is a refusal at the handshake.
                if let quinn::ConnectionError::ConnectionClosed(close) = &closed {
                    let code = u64::from(close.error_code);
                    if (0x100..0x200).contains(&code) {
                        tracing::warn!(peer_host, %closed, "peer host refused our key at the handshake");
                        return LinkError::Unreachable {
                            host,
                            reason: format!("the peer refused our key at the handshake: {closed}"),
                        };
                    }
                }
                LinkError::ConnectionLost {
                    host,
                    reason: closed_reason(&closed),
                }
            }
        }
    }

    /// Drops the cached connection to `peer_host` if it is still `connection`.
    fn forget(&self, peer_host: &str, connection: &quinn::Connection) {
        let slot = lock(&self.inner.serving.peers).get(peer_host).cloned();
        if let Some(slot) = slot
            && let Ok(mut slot) = slot.try_lock()
            && slot
                .connection
                .as_ref()
                .is_some_and(|cached| cached.stable_id() == connection.stable_id())
        {
            slot.connection = None;
        }
    }
}

/// How one exchange failed, which decides whether it may be retried.
#[derive(Debug)]
enum Exchange {
    /// The request was not fully sent: the peer cannot have handled it.
    NotSent(String),
    /// The request was sent but the peer's transport did not acknowledge it in time.
    Unacknowledged(Duration),
    /// The request was sent but the response was lost.
    Lost(String),
    /// The response arrived but was not a frame.
    BadResponse(CodecError),
}

impl Exchange {
    /// Whether the failure says the connection is gone (so a fresh dial may succeed), rather
    /// than that the peer answered badly or dropped this one stream.
    fn connection_is_dead(&self, connection: &quinn::Connection) -> bool {
        match self {
            Self::NotSent(_) | Self::Unacknowledged(_) => true,
            Self::Lost(_) => connection.close_reason().is_some(),
            Self::BadResponse(_) => false,
        }
    }
}

impl std::fmt::Display for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotSent(reason) => write!(f, "the request could not be sent: {reason}"),
            Self::Unacknowledged(within) => write!(
                f,
                "the peer did not acknowledge the request within {within:?} (it stopped or restarted)"
            ),
            Self::Lost(reason) => write!(f, "connection lost before the response: {reason}"),
            Self::BadResponse(error) => write!(f, "bad response: {error}"),
        }
    }
}

/// What a closed connection says about its peer, in words.
pub(super) fn closed_reason(closed: &quinn::ConnectionError) -> String {
    match closed {
        quinn::ConnectionError::ApplicationClosed(close)
            if close.error_code == quinn::VarInt::from_u32(CLOSE_SHUTDOWN) =>
        {
            "connection lost: the peer host shut down".into()
        }
        quinn::ConnectionError::Reset => {
            "connection lost: the peer host restarted (it reset the connection)".into()
        }
        quinn::ConnectionError::TimedOut => {
            "connection lost: no packets from the peer within the idle timeout".into()
        }
        other => format!("connection lost: {other}"),
    }
}

/// Waits for a dialed connection's handshake within `dial_timeout`; the error says what
/// happened (no answer, refused, no answer in time) in words for the log and the caller.
pub(super) async fn handshake(
    connecting: quinn::Connecting,
    addr: SocketAddr,
    dial_timeout: Duration,
) -> Result<quinn::Connection, String> {
    match tokio::time::timeout(dial_timeout, connecting).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(quinn::ConnectionError::TimedOut)) => {
            Err(format!("dialed {addr}: no answer to the handshake"))
        }
        Ok(Err(error)) => Err(format!("dialed {addr}: refused at the handshake: {error}")),
        Err(_) => Err(format!(
            "dialed {addr}: no answer to the handshake within {dial_timeout:?}"
        )),
    }
}
