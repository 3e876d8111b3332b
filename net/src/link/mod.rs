//! Links: QUIC between hosts, mutual TLS pinned to host keys, one request frame and one
//! response frame per bidirectional stream.
//!
//! A [`LinkEndpoint`] is both the server of its host (it accepts connections from any host in
//! its [`KeyRing`] and hands each request to a [`FrameHandler`], naming the authenticated
//! peer host) and its client (it dials peers lazily, keeps one connection per peer host, and
//! runs many requests at once as concurrent streams on it).
//!
//! Framing: a request is everything a stream carries up to its end (FIN), at most
//! [`MAX_FRAME`](crate::MAX_FRAME) bytes, decoded by [`crate::codec::decode_frame`]; likewise
//! the response. QUIC already delimits streams, so no length prefix is needed, and quinn
//! refuses a stream longer than the limit as it reads (it never buffers beyond it). A stream
//! that is too long or undecodable is answered with `Frame::Refused { reason: Malformed, .. }`
//! and closed; the connection and the host keep serving.
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
//! Operators: a host bound with [`LinkEndpoint::bind_with_operators`] also accepts, at the
//! handshake, the keys of the fleet's operators, and hands their operator requests (and only
//! those) to an [`OperatorHandler`]. An operator's CLI dials with [`OperatorLink`], a
//! client-only endpoint whose TLS identity is the operator's key and which pins each host's
//! key exactly as hosts pin each other's; it never serves.
//!
//! There is no plaintext mode and no way to skip key pinning. This module moves frames; it
//! never decides whether a call is allowed and never looks inside envelopes.
//!
//! The halves are child modules: `client` (requests out), `server` (requests in, and the
//! [`FrameHandler`] and [`OperatorHandler`] they reach), `peers` (the connection cache both
//! write), `operator` (the operator's client), `config` and `tls`. This module owns the
//! endpoint itself: binding it, its key rings, what it knows of each peer, and closing it.

mod client;
mod config;
mod operator;
mod peers;
mod rtt;
mod server;
mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use quinn::crypto::rustls::QuicServerConfig;
use tracing::Instrument;

use crate::error::LinkError;
use crate::keys::{HostKey, KeyRing};
use peers::lock;
use server::{Serving, accept_loop};
use tls::{Identity, SharedRing};

pub use config::LinkConfig;
pub use operator::OperatorLink;
pub use rtt::LINK_RTT;
pub use server::{FrameHandler, HandlerFuture, OperatorFuture, OperatorHandler, OperatorPeer};

/// The operators a host serves: their keys (operator name -> key) and what answers them.
#[derive(Clone)]
pub struct OperatorAccess {
    /// The operators' keys, as fleet.yaml lists them under `operators:`.
    pub keys: KeyRing,
    /// What answers their requests.
    pub handler: Arc<dyn OperatorHandler>,
}

/// What an endpoint knows of its link to one peer host, right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerLinkState {
    /// A connection is open.
    Connected,
    /// A dial (or the adoption of a connection the peer opened) is under way.
    Dialing,
    /// No connection is open: never needed yet, closed, or the last dial failed.
    NotConnected {
        /// Why the last dial failed, or how the last connection ended, if known.
        last_error: Option<String>,
    },
}

/// One peer host and [`PeerLinkState`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerLink {
    /// The peer host.
    pub host: String,
    /// Its link's state.
    pub state: PeerLinkState,
}

/// The application close code of a connection whose host is shutting down.
pub(crate) const CLOSE_SHUTDOWN: u32 = 2;
/// The application close code of a connection dropped by its own side (reset or re-keyed).
const CLOSE_RESET: u32 = 0;
/// The application close code of a connection whose peer's key is not (or no longer) pinned.
const CLOSE_NOT_PINNED: u32 = 1;

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
    /// Samples each open connection's round trip for the host's metrics (see `rtt`).
    rtt_task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.rtt_task.abort();
    }
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
        Self::bind_serving(addr, host_name, key, ring, handler, None, config)
    }

    /// As [`LinkEndpoint::bind_with_config`], and also serving the fleet's operators: a client
    /// whose key is in `operators.keys` passes the handshake, and its operator requests (only
    /// those) reach `operators.handler`.
    pub fn bind_with_operators(
        addr: SocketAddr,
        host_name: &str,
        key: HostKey,
        ring: KeyRing,
        handler: Arc<dyn FrameHandler>,
        operators: OperatorAccess,
        config: LinkConfig,
    ) -> Result<Self, LinkError> {
        Self::bind_serving(addr, host_name, key, ring, handler, Some(operators), config)
    }

    fn bind_serving(
        addr: SocketAddr,
        host_name: &str,
        key: HostKey,
        ring: KeyRing,
        handler: Arc<dyn FrameHandler>,
        operators: Option<OperatorAccess>,
        config: LinkConfig,
    ) -> Result<Self, LinkError> {
        let setup = |error: &dyn std::fmt::Display| LinkError::Setup(error.to_string());
        let identity = Identity::new(host_name, &key).map_err(|e| setup(&e))?;
        let ring: SharedRing = Arc::new(RwLock::new(ring));
        let (operator_keys, operator_handler) = match operators {
            Some(access) => (access.keys, Some(access.handler)),
            None => (KeyRing::new(), None),
        };
        let operator_ring: SharedRing = Arc::new(RwLock::new(operator_keys));

        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(config.keep_alive))
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(config.idle_timeout).map_err(|e| setup(&e))?,
            ))
            .max_concurrent_bidi_streams(config.max_concurrent_streams.into())
            .max_concurrent_uni_streams(0u32.into());
        let transport = Arc::new(transport);

        let server_tls = tls::server_config(&identity, ring.clone(), operator_ring.clone())?;
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
            operators: operator_ring,
            operator_handler,
            request_timeout: config.request_timeout,
            peers: Arc::new(Mutex::new(HashMap::new())),
        };
        let accept_task = tokio::spawn(
            accept_loop(endpoint.clone(), serving.clone())
                .instrument(tracing::info_span!("link_accept", host = %host_name)),
        );
        let (sampled_host, sampled_peers) = (host_name.to_owned(), serving.peers.clone());
        let rtt_task = tokio::spawn(async move {
            rtt::sample(&sampled_host, sampled_peers, rtt::SAMPLE_EVERY).await;
        });
        Ok(Self {
            inner: Arc::new(Inner {
                host_name: host_name.to_owned(),
                endpoint,
                identity,
                config,
                transport,
                serving,
                accept_task,
                rtt_task,
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

    /// What this endpoint knows of its link to every other host of its key ring, by host name:
    /// connected, dialing, or not connected with the last failure it saw. It reports what the
    /// connection cache holds and dials nothing.
    pub fn peer_links(&self) -> Vec<PeerLink> {
        self.view().peer_links()
    }

    /// A [`LinkView`] of this endpoint, for a handler that reports its links: it does not keep
    /// the endpoint alive (a handler holding the endpoint itself would, through the endpoint's
    /// own reference to its handler).
    pub fn view(&self) -> LinkView {
        LinkView {
            host_name: self.inner.host_name.clone(),
            ring: self.inner.serving.ring.clone(),
            peers: self.inner.serving.peers.clone(),
        }
    }

    /// Closes every connection with `CLOSE_SHUTDOWN` and stops serving; waits (at most
    /// [`LinkConfig::shutdown_grace`]) until peers acknowledged, so that they drop their
    /// connections to this process at once instead of finding out by timeouts.
    pub async fn close(&self) {
        self.inner.accept_task.abort();
        self.inner.rtt_task.abort();
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
}

/// What an endpoint knows of its peers, readable without holding the endpoint (see
/// [`LinkEndpoint::view`]).
#[derive(Clone)]
pub struct LinkView {
    host_name: String,
    ring: SharedRing,
    peers: Arc<peers::Peers>,
}

impl LinkView {
    /// See [`LinkEndpoint::peer_links`].
    pub fn peer_links(&self) -> Vec<PeerLink> {
        let hosts: Vec<String> = tls::read_ring(&self.ring)
            .iter()
            .map(|(host, _)| host.to_owned())
            .filter(|host| host != &self.host_name)
            .collect();
        let slots = lock(&self.peers).clone();
        hosts
            .into_iter()
            .map(|host| {
                let state = match slots.get(&host) {
                    None => PeerLinkState::NotConnected { last_error: None },
                    Some(slot) => match slot.try_lock() {
                        Err(_) => PeerLinkState::Dialing,
                        Ok(slot) => match (&slot.connection, &slot.last_failure) {
                            (Some(connection), _) => match connection.close_reason() {
                                None => PeerLinkState::Connected,
                                Some(closed) => PeerLinkState::NotConnected {
                                    last_error: Some(client::closed_reason(&closed)),
                                },
                            },
                            (None, failure) => PeerLinkState::NotConnected {
                                last_error: failure.as_ref().map(|f| f.reason.clone()),
                            },
                        },
                    },
                };
                PeerLink { host, state }
            })
            .collect()
    }
}

impl std::fmt::Debug for LinkView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkView")
            .field("host_name", &self.host_name)
            .finish_non_exhaustive()
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

#[cfg(test)]
mod tests;
