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
//! One connection per peer host carries requests both ways: a connection a peer dials in is
//! served *and* becomes the cached connection for our own requests to that peer, so a peer's
//! new incarnation that dials in replaces a connection to its previous process at once.
//! A link notices a peer that went away: an endpoint closes its connections with
//! `CLOSE_SHUTDOWN` when it shuts down; a request the peer does not acknowledge (at the
//! transport level) within [`LinkConfig::ack_timeout`], or that fails because the connection
//! died, drops the cached connection and is sent once more on a fresh dial before the peer is
//! called unreachable. Errors say what happened: refused at the handshake, no answer within the
//! deadline, connection lost (and why).
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
    /// How long [`LinkEndpoint::close`] waits for peers to acknowledge the close.
    pub shutdown_grace: Duration,
}

/// The application close code of a connection whose host is shutting down.
pub(crate) const CLOSE_SHUTDOWN: u32 = 2;
/// The application close code of a connection dropped by its own side (reset or re-keyed).
const CLOSE_RESET: u32 = 0;
/// The application close code of a connection whose peer's key is not (or no longer) pinned.
const CLOSE_NOT_PINNED: u32 = 1;

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

/// The boxed future a [`FrameHandler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Frame> + Send + 'static>>;

/// What a host does with a request frame from an authenticated peer host: answer it with one
/// response frame. Closures `Fn(String, Frame) -> impl Future<Output = Frame>` implement it.
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
    config: LinkConfig,
    transport: Arc<quinn::TransportConfig>,
    serving: Serving,
    accept_task: tokio::task::JoinHandle<()>,
}

/// The cached connection of each peer host.
type Peers = Mutex<HashMap<String, Arc<tokio::sync::Mutex<PeerSlot>>>>;

/// What serving a connection needs, shared by the accept loop and dialed connections (kept
/// apart from [`Inner`] so that serving tasks never keep the endpoint's handle alive).
#[derive(Clone)]
struct Serving {
    ring: SharedRing,
    handler: Arc<dyn FrameHandler>,
    request_timeout: Duration,
    peers: Arc<Peers>,
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
    /// The last dial that failed, if none succeeded since.
    last_failure: Option<DialFailure>,
    backoff: Duration,
}

struct DialFailure {
    at: Instant,
    reason: String,
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

        let endpoint_config = quinn::EndpointConfig::new(Arc::new(tls::reset_key(&key)));
        let socket = std::net::UdpSocket::bind(addr).map_err(|e| setup(&e))?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| LinkError::Setup("no tokio runtime is running".into()))?;
        let endpoint = quinn::Endpoint::new(endpoint_config, Some(server_config), socket, runtime)
            .map_err(|e| setup(&e))?;

        let serving = Serving {
            ring,
            handler,
            request_timeout: config.request_timeout,
            peers: Arc::new(Mutex::new(HashMap::new())),
        };
        let accept_task = tokio::spawn(
            accept_loop(endpoint.clone(), serving.clone())
                .instrument(tracing::info_span!("link_accept", host = %host_name)),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                host_name: host_name.to_owned(),
                endpoint,
                identity,
                config,
                transport,
                serving,
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
            .serving
            .ring
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = ring;
        let slots: Vec<_> = lock(&self.inner.serving.peers)
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            if let Ok(slot) = slot.try_lock()
                && let Some(connection) = &slot.connection
            {
                connection.close(CLOSE_RESET.into(), b"key ring changed");
            }
        }
    }

    /// Sends `frame` to `peer_host` at `addr` and waits for its response.
    ///
    /// Reuses the connection to that host (dialing it if there is none, or if it closed or the
    /// address changed). If a reused connection turns out to be dead (the request could not
    /// be sent, the peer did not acknowledge it within [`LinkConfig::ack_timeout`], or the
    /// connection closed before the response), it is dropped and the request is sent once more
    /// on a fresh dial: every frame of the protocol is idempotent (calls dedupe on the child
    /// run id), so this is safe. Only then is the peer called unreachable.
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

    /// Closes every connection with `CLOSE_SHUTDOWN` and stops serving; waits (at most
    /// [`LinkConfig::shutdown_grace`]) until peers acknowledged, so that they drop their
    /// connections to this process at once instead of finding out by timeouts.
    pub async fn close(&self) {
        self.inner.accept_task.abort();
        self.inner
            .endpoint
            .close(CLOSE_SHUTDOWN.into(), b"host shutting down");
        let grace = self.inner.config.shutdown_grace;
        if tokio::time::timeout(grace, self.inner.endpoint.wait_idle())
            .await
            .is_err()
        {
            tracing::debug!(?grace, "peers did not acknowledge the close in time");
        }
    }

    /// The open connection to `peer_host`, dialing if needed; `true` if it was reused.
    async fn connection(
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
        let dial_timeout = self.inner.config.dial_timeout;
        match tokio::time::timeout(dial_timeout, connecting).await {
            Ok(Ok(connection)) => {
                tracing::debug!(peer_host, %addr, "link connected");
                Ok((connection, pinned))
            }
            Ok(Err(quinn::ConnectionError::TimedOut)) => Err(unreachable(format!(
                "dialed {addr}: no answer to the handshake"
            ))),
            Ok(Err(error)) => Err(unreachable(format!(
                "dialed {addr}: refused at the handshake: {error}"
            ))),
            Err(_) => Err(unreachable(format!(
                "dialed {addr}: no answer to the handshake within {dial_timeout:?}"
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

impl std::fmt::Debug for LinkEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEndpoint")
            .field("host_name", &self.inner.host_name)
            .field("local_addr", &self.inner.endpoint.local_addr().ok())
            .finish_non_exhaustive()
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
fn closed_reason(closed: &quinn::ConnectionError) -> String {
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn accept_loop(endpoint: quinn::Endpoint, serving: Serving) {
    while let Some(incoming) = endpoint.accept().await {
        let serving = serving.clone();
        let remote = incoming.remote_address();
        tokio::spawn(
            async move {
                let connection = match incoming.await {
                    Ok(connection) => connection,
                    Err(error) => {
                        tracing::warn!(%remote, %error, "refusing peer: handshake failed");
                        return;
                    }
                };
                let Some((peer_host, peer_key)) = peer_of(&connection, &serving.ring) else {
                    // The verifier accepted the key, so the ring changed during the handshake.
                    tracing::warn!(%remote, "refusing peer: its key left the key ring");
                    connection.close(CLOSE_NOT_PINNED.into(), b"unknown host");
                    return;
                };
                adopt(&serving.peers, &peer_host, &connection).await;
                serve_connection(connection, peer_host, peer_key, serving).await;
            }
            .instrument(tracing::Span::current()),
        );
    }
}

/// Makes a connection `peer_host` dialed in our cached connection to it. The peer dials only
/// when it has no connection to us, so this one is at least as fresh as ours: after a restart
/// it replaces the connection to the peer's previous process, and it proves the peer is up.
async fn adopt(peers: &Peers, peer_host: &str, connection: &quinn::Connection) {
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

/// Serves the requests `peer_host` sends on a connection we dialed.
fn spawn_serving(
    connection: quinn::Connection,
    peer_host: String,
    peer_key: PublicKey,
    serving: Serving,
) {
    tokio::spawn(serve_connection(connection, peer_host, peer_key, serving));
}

async fn serve_connection(
    connection: quinn::Connection,
    peer_host: String,
    peer_key: PublicKey,
    serving: Serving,
) {
    let remote = connection.remote_address();
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
            if tls::read_ring(&serving.ring).key(&peer_host) != Some(&peer_key) {
                tracing::warn!("refusing peer: its key is no longer pinned; closing");
                connection.close(CLOSE_NOT_PINNED.into(), b"key no longer pinned");
                return;
            }
            tokio::spawn(
                serve_stream(
                    send,
                    recv,
                    peer_host.clone(),
                    serving.handler.clone(),
                    serving.request_timeout,
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
