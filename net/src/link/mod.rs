//! Links: QUIC between hosts, mutual TLS pinned to host keys, one request frame and one
//! response frame per bidirectional stream.
//!
//! A [`LinkEndpoint`] is both the server of its host (it accepts connections from any host in
//! its [`KeyRing`] and hands each request to a [`FrameHandler`], naming the authenticated
//! peer host) and its client (it dials peers lazily, keeps one connection per peer host, and
//! runs many requests at once as concurrent streams on it).
//!
//! Framing: a request is everything a stream carries up to its end (FIN), at most
//! [`MAX_FRAME`] bytes, decoded by [`crate::codec::decode_frame`]; likewise the response. QUIC
//! already delimits streams, so no length prefix is needed, and quinn refuses a stream longer
//! than the limit as it reads (it never buffers beyond it). A stream that is too long or
//! undecodable is answered with `Frame::Refused { reason: Malformed, .. }` and closed; the
//! connection and the host keep serving.
//!
//! There is no plaintext mode and no way to skip key pinning. This module moves frames; it
//! never decides whether a call is allowed and never looks inside envelopes.

mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::codec::{Frame, MAX_FRAME, RefusalReason, decode_frame, encode_frame};
use crate::error::{CodecError, LinkError};
use crate::keys::{HostKey, KeyRing, PublicKey};
use tls::{Identity, SharedRing};

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
    /// After a failed dial, requests to that peer fail at once for this long, doubling on each
    /// further failure up to `max_redial_backoff`; a success resets it.
    pub redial_backoff: Duration,
    /// Upper bound of the redial backoff.
    pub max_redial_backoff: Duration,
    /// How many requests a peer may have in flight on one connection.
    pub max_concurrent_streams: u32,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            redial_backoff: Duration::from_millis(100),
            max_redial_backoff: Duration::from_secs(5),
            max_concurrent_streams: 256,
        }
    }
}

/// The boxed future a [`FrameHandler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Frame> + Send + 'static>>;

/// What a host does with a request frame from an authenticated peer host: answer it with one
/// response frame. Closures `Fn(String, Frame) -> impl Future<Output = Frame>` implement it;
/// [`channel_handler`] turns it into a bounded channel for an actor to drain.
pub trait FrameHandler: Send + Sync + 'static {
    /// Answers `frame`, sent by the host `peer_host` (authenticated by its pinned key).
    fn handle(&self, peer_host: String, frame: Frame) -> HandlerFuture;
}

impl<F, Fut> FrameHandler for F
where
    F: Fn(String, Frame) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Frame> + Send + 'static,
{
    fn handle(&self, peer_host: String, frame: Frame) -> HandlerFuture {
        Box::pin(self(peer_host, frame))
    }
}

/// A request waiting in the channel of a [`channel_handler`].
#[derive(Debug)]
pub struct InboundRequest {
    /// The authenticated host that sent it.
    pub peer_host: String,
    /// The request frame.
    pub frame: Frame,
    /// Where the response goes. Dropping it answers `Refused { reason: Internal, .. }`.
    pub respond: oneshot::Sender<Frame>,
}

/// A handler that forwards requests into a bounded channel (for an actor, e.g. the host
/// supervisor, to drain). When the channel is full the peer is answered
/// `Refused { reason: Saturated, .. }` at once instead of queueing without end.
pub fn channel_handler(capacity: usize) -> (Arc<dyn FrameHandler>, mpsc::Receiver<InboundRequest>) {
    let (sender, receiver) = mpsc::channel(capacity.max(1));
    let handler = move |peer_host: String, frame: Frame| {
        let (respond, response) = oneshot::channel();
        let queued = sender.try_send(InboundRequest {
            peer_host,
            frame,
            respond,
        });
        async move {
            match queued {
                Ok(()) => response.await.unwrap_or_else(|_| Frame::Refused {
                    reason: RefusalReason::Internal,
                    text: "the host dropped the request without answering".into(),
                }),
                Err(mpsc::error::TrySendError::Full(_)) => Frame::Refused {
                    reason: RefusalReason::Saturated,
                    text: "the host is saturated; try again later".into(),
                },
                Err(mpsc::error::TrySendError::Closed(_)) => Frame::Refused {
                    reason: RefusalReason::Internal,
                    text: "the host is shutting down".into(),
                },
            }
        }
    };
    (Arc::new(handler), receiver)
}

/// One host's end of its links: the server for its peers and the client to them. Cheap to
/// clone; all clones share one socket and one set of connections.
#[derive(Clone)]
pub struct LinkEndpoint {
    inner: Arc<Inner>,
}

struct Inner {
    host_name: String,
    endpoint: quinn::Endpoint,
    identity: Identity,
    ring: SharedRing,
    config: LinkConfig,
    transport: Arc<quinn::TransportConfig>,
    peers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<PeerSlot>>>>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

/// What a client knows of one peer host.
#[derive(Default)]
struct PeerSlot {
    connection: Option<quinn::Connection>,
    /// Requests fail fast until then, after a failed dial.
    failed_until: Option<Instant>,
    last_failure: String,
    backoff: Duration,
}

impl LinkEndpoint {
    /// Binds `addr` and starts serving with the default [`LinkConfig`]. Must run inside a
    /// tokio runtime.
    pub fn bind(
        addr: SocketAddr,
        host_name: &str,
        key: HostKey,
        ring: KeyRing,
        handler: Arc<dyn FrameHandler>,
    ) -> Result<Self, LinkError> {
        Self::bind_with_config(addr, host_name, key, ring, handler, LinkConfig::default())
    }

    /// Binds `addr` and starts serving. `ring` must hold every host this one talks to (its
    /// own entry is not needed). Must run inside a tokio runtime.
    pub fn bind_with_config(
        addr: SocketAddr,
        host_name: &str,
        key: HostKey,
        ring: KeyRing,
        handler: Arc<dyn FrameHandler>,
        config: LinkConfig,
    ) -> Result<Self, LinkError> {
        let setup = |error: &dyn std::fmt::Display| LinkError::Setup(error.to_string());
        let identity = Identity::new(host_name, &key).map_err(|e| setup(&e))?;
        let ring: SharedRing = Arc::new(RwLock::new(ring));

        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(config.keep_alive))
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(config.idle_timeout).map_err(|e| setup(&e))?,
            ))
            .max_concurrent_bidi_streams(config.max_concurrent_streams.into())
            .max_concurrent_uni_streams(0u32.into());
        let transport = Arc::new(transport);

        let server_tls = tls::server_config(&identity, ring.clone())?;
        let server_crypto = QuicServerConfig::try_from(server_tls).map_err(|e| setup(&e))?;
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server_config.transport_config(transport.clone());

        let endpoint_config = quinn::EndpointConfig::new(Arc::new(tls::ResetKey::derive(&key)));
        let socket = std::net::UdpSocket::bind(addr).map_err(|e| setup(&e))?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| LinkError::Setup("no tokio runtime is running".into()))?;
        let endpoint = quinn::Endpoint::new(endpoint_config, Some(server_config), socket, runtime)
            .map_err(|e| setup(&e))?;

        let accept_task = tokio::spawn(
            accept_loop(
                endpoint.clone(),
                ring.clone(),
                handler,
                config.request_timeout,
            )
            .instrument(tracing::info_span!("link_accept", host = %host_name)),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                host_name: host_name.to_owned(),
                endpoint,
                identity,
                ring,
                config,
                transport,
                peers: Mutex::new(HashMap::new()),
                accept_task,
            }),
        })
    }

    /// The address actually bound (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, LinkError> {
        self.inner
            .endpoint
            .local_addr()
            .map_err(|e| LinkError::Setup(e.to_string()))
    }

    /// This host's name.
    pub fn host_name(&self) -> &str {
        &self.inner.host_name
    }

    /// Replaces the key ring (after a fleet reload). Outgoing connections are dropped and
    /// redialed under the new pins; an incoming connection whose host left the ring or changed
    /// key is closed at its next request.
    pub fn set_key_ring(&self, ring: KeyRing) {
        *self
            .inner
            .ring
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = ring;
        let slots: Vec<_> = lock(&self.inner.peers)
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            if let Ok(slot) = slot.try_lock()
                && let Some(connection) = &slot.connection
            {
                connection.close(0u32.into(), b"key ring changed");
            }
        }
    }

    /// Sends `frame` to `peer_host` at `addr` and waits for its response.
    ///
    /// Reuses the connection to that host (dialing it if there is none, or if it closed or the
    /// address changed). If a reused connection turns out to be dead before the request was
    /// fully sent, the request is sent once more on a fresh connection: every frame of the
    /// protocol is idempotent (calls dedupe on the child run id), so this is safe.
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
                Err(Exchange::NotSent(reason)) if reused => {
                    tracing::debug!(peer_host, %reason, "cached connection is dead; redialing");
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
        let slot = lock(&self.inner.peers).remove(peer_host);
        if let Some(slot) = slot
            && let Ok(slot) = slot.try_lock()
            && let Some(connection) = &slot.connection
        {
            connection.close(0u32.into(), b"reset by the caller");
        }
    }

    /// Closes every connection and stops serving; waits until peers were told.
    pub async fn close(&self) {
        self.inner.accept_task.abort();
        self.inner
            .endpoint
            .close(0u32.into(), b"host shutting down");
        self.inner.endpoint.wait_idle().await;
    }

    /// The open connection to `peer_host`, dialing if needed; `true` if it was reused.
    async fn connection(
        &self,
        peer_host: &str,
        addr: SocketAddr,
    ) -> Result<(quinn::Connection, bool), LinkError> {
        let slot = lock(&self.inner.peers)
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
        if let Some(until) = slot.failed_until
            && Instant::now() < until
        {
            return Err(LinkError::Unreachable {
                host: peer_host.to_owned(),
                reason: format!("{} (redial backoff)", slot.last_failure),
            });
        }
        match self.dial(peer_host, addr).await {
            Ok(connection) => {
                slot.connection = Some(connection.clone());
                slot.failed_until = None;
                slot.backoff = Duration::ZERO;
                Ok((connection, false))
            }
            Err(error) => {
                let config = &self.inner.config;
                slot.backoff = (slot.backoff * 2)
                    .max(config.redial_backoff)
                    .min(config.max_redial_backoff);
                slot.failed_until = Some(Instant::now() + slot.backoff);
                if let LinkError::Unreachable { reason, .. } = &error {
                    slot.last_failure.clone_from(reason);
                }
                Err(error)
            }
        }
    }

    async fn dial(
        &self,
        peer_host: &str,
        addr: SocketAddr,
    ) -> Result<quinn::Connection, LinkError> {
        let pinned: PublicKey = *tls::read_ring(&self.inner.ring)
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
            .map_err(|e| unreachable(e.to_string()))?;
        match tokio::time::timeout(self.inner.config.dial_timeout, connecting).await {
            Ok(Ok(connection)) => {
                tracing::debug!(peer_host, %addr, "link connected");
                Ok(connection)
            }
            Ok(Err(error)) => Err(unreachable(error.to_string())),
            Err(_) => Err(unreachable(format!(
                "no handshake within {:?}",
                self.inner.config.dial_timeout
            ))),
        }
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
        let response = recv
            .read_to_end(MAX_FRAME)
            .await
            .map_err(|error| match error {
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
            Exchange::NotSent(reason) | Exchange::Lost(reason) => {
                let Some(closed) = connection.close_reason() else {
                    return LinkError::ConnectionLost { host, reason };
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
                    reason: format!("{reason}: {closed}"),
                }
            }
            Exchange::BadResponse(source) => LinkError::BadResponse { host, source },
        }
    }

    /// Drops the cached connection to `peer_host` if it is still `connection`.
    fn forget(&self, peer_host: &str, connection: &quinn::Connection) {
        let slot = lock(&self.inner.peers).get(peer_host).cloned();
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

impl std::fmt::Debug for LinkEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEndpoint")
            .field("host_name", &self.inner.host_name)
            .field("local_addr", &self.inner.endpoint.local_addr().ok())
            .finish_non_exhaustive()
    }
}

/// How one exchange failed, which decides whether it may be retried.
enum Exchange {
    /// The request was not fully sent: the peer cannot have handled it.
    NotSent(String),
    /// The request was sent but the response was lost.
    Lost(String),
    /// The response arrived but was not a frame.
    BadResponse(CodecError),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    ring: SharedRing,
    handler: Arc<dyn FrameHandler>,
    request_timeout: Duration,
) {
    while let Some(incoming) = endpoint.accept().await {
        let ring = ring.clone();
        let handler = handler.clone();
        let remote = incoming.remote_address();
        tokio::spawn(
            async move {
                match incoming.await {
                    Ok(connection) => {
                        serve_connection(connection, ring, handler, request_timeout).await
                    }
                    Err(error) => {
                        tracing::warn!(%remote, %error, "refusing peer: handshake failed")
                    }
                }
            }
            .instrument(tracing::Span::current()),
        );
    }
}

/// The authenticated host on the other end of an accepted connection.
fn peer_of(connection: &quinn::Connection, ring: &SharedRing) -> Option<(String, PublicKey)> {
    let identity = connection.peer_identity()?;
    let chain = identity
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    let key = tls::certificate_key(chain.first()?)?;
    let host = tls::read_ring(ring).host_for(&key)?.to_owned();
    Some((host, key))
}

async fn serve_connection(
    connection: quinn::Connection,
    ring: SharedRing,
    handler: Arc<dyn FrameHandler>,
    request_timeout: Duration,
) {
    let remote = connection.remote_address();
    let Some((peer_host, peer_key)) = peer_of(&connection, &ring) else {
        // The verifier accepted the key, so the ring changed during the handshake.
        tracing::warn!(%remote, "refusing peer: its key left the key ring");
        connection.close(1u32.into(), b"unknown host");
        return;
    };
    let span = tracing::info_span!("link_peer", peer_host = %peer_host, %remote);
    async {
        tracing::debug!("peer connected");
        loop {
            let (send, recv) = match connection.accept_bi().await {
                Ok(streams) => streams,
                Err(error) => {
                    tracing::debug!(%error, "peer connection ended");
                    return;
                }
            };
            // Revocation: a host removed from the ring (or re-keyed) loses its connection.
            if tls::read_ring(&ring).key(&peer_host) != Some(&peer_key) {
                tracing::warn!("refusing peer: its key is no longer pinned; closing");
                connection.close(1u32.into(), b"key no longer pinned");
                return;
            }
            tokio::spawn(
                serve_stream(
                    send,
                    recv,
                    peer_host.clone(),
                    handler.clone(),
                    request_timeout,
                )
                .instrument(tracing::Span::current()),
            );
        }
    }
    .instrument(span)
    .await;
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    peer_host: String,
    handler: Arc<dyn FrameHandler>,
    request_timeout: Duration,
) {
    let malformed = |text: String| Frame::Refused {
        reason: RefusalReason::Malformed,
        text,
    };
    let response = match tokio::time::timeout(request_timeout, recv.read_to_end(MAX_FRAME)).await {
        Err(_) => {
            tracing::warn!("peer did not finish its request in time; dropping the stream");
            let _ = recv.stop(2u32.into());
            let _ = send.reset(2u32.into());
            return;
        }
        Ok(Err(quinn::ReadToEndError::TooLong)) => {
            tracing::warn!("peer sent an oversized frame");
            let _ = recv.stop(1u32.into());
            malformed(format!("frame larger than {MAX_FRAME} bytes"))
        }
        Ok(Err(quinn::ReadToEndError::Read(error))) => {
            tracing::debug!(%error, "request stream failed");
            return;
        }
        Ok(Ok(bytes)) => match decode_frame(&bytes) {
            Ok(frame) => handler.handle(peer_host, frame).await,
            Err(error) => {
                tracing::warn!(%error, "peer sent an undecodable frame");
                malformed(format!("undecodable frame: {error}"))
            }
        },
    };
    let bytes = match encode_frame(&response) {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::error!(%error, "cannot encode our own response");
            match encode_frame(&Frame::Refused {
                reason: RefusalReason::Internal,
                text: "the response could not be encoded".into(),
            }) {
                Ok(bytes) => bytes,
                Err(_) => return,
            }
        }
    };
    if let Err(error) = send.write_all(&bytes).await {
        tracing::debug!(%error, "could not send the response");
        return;
    }
    let _ = send.finish();
}

#[cfg(test)]
mod tests;
