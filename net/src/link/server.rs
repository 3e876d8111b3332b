//! The server half of a link: accepting peers, and answering each request stream with one
//! response frame from the host's [`FrameHandler`] (or, for an operator, its
//! [`OperatorHandler`]).
//!
//! A connection is served whoever dialed it: the accept loop serves connections peers open,
//! and the client hands over the ones it dials ([`spawn_serving`]), since one connection per
//! peer carries requests both ways. Every request re-checks the peer's pin, so a host removed
//! from the key ring loses its connection at its next request. A stream that is too long or
//! undecodable is answered `Malformed` and the connection keeps serving.
//!
//! The key the handshake proved says what the peer is, and what it may send: a host's key
//! reaches the [`FrameHandler`] with every frame but an operator request; an operator's key
//! reaches the [`OperatorHandler`] with operator requests only (read up to
//! [`MAX_OPERATOR_REQUEST`] bytes), never a call, reply or any other host frame, and its
//! connection never becomes a cached connection to a host. This module moves frames only:
//! what a request means is the handlers' business.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::CLOSE_NOT_PINNED;
use super::peers::{Peers, adopt};
use super::tls::{self, SharedRing};
use crate::chain::operator::{MAX_OPERATOR_REQUEST, OperatorAnswer, OperatorRequest};
use crate::codec::{Frame, MAX_FRAME, RefusalReason, decode_frame, encode_frame};
use crate::keys::PublicKey;

/// The boxed future a [`FrameHandler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Frame> + Send + 'static>>;

/// The boxed future an [`OperatorHandler`] returns.
pub type OperatorFuture = Pin<Box<dyn Future<Output = OperatorAnswer> + Send + 'static>>;

/// An operator the link authenticated: the name its key has in the operator ring, and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorPeer {
    /// The operator's name in fleet.yaml.
    pub name: String,
    /// The key its TLS handshake proved.
    pub key: PublicKey,
}

/// What a host does with an operator request from an authenticated operator: verify it (the
/// link only proved who is on the other end) and answer it.
pub trait OperatorHandler: Send + Sync + 'static {
    /// Answers `request`, sent by `operator`.
    fn handle(&self, operator: OperatorPeer, request: OperatorRequest) -> OperatorFuture;
}

impl<F, Fut> OperatorHandler for F
where
    F: Fn(OperatorPeer, OperatorRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OperatorAnswer> + Send + 'static,
{
    fn handle(&self, operator: OperatorPeer, request: OperatorRequest) -> OperatorFuture {
        Box::pin(self(operator, request))
    }
}

/// Who is on the other end of an accepted connection.
enum Peer {
    Host { name: String, key: PublicKey },
    Operator(OperatorPeer),
}

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

/// What serving a connection needs, shared by the accept loop and dialed connections (kept
/// apart from [`Inner`](super::Inner) so that serving tasks never keep the endpoint's handle
/// alive).
#[derive(Clone)]
pub(super) struct Serving {
    pub(super) ring: SharedRing,
    pub(super) handler: Arc<dyn FrameHandler>,
    /// The operators' keys (empty when the host serves no operators).
    pub(super) operators: SharedRing,
    pub(super) operator_handler: Option<Arc<dyn OperatorHandler>>,
    pub(super) request_timeout: Duration,
    pub(super) peers: Arc<Peers>,
}

/// Accepts peers until the endpoint closes; each connection is served on its own task.
pub(super) async fn accept_loop(endpoint: quinn::Endpoint, serving: Serving) {
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
                match peer_of(&connection, &serving) {
                    Some(Peer::Host { name, key }) => {
                        adopt(&serving.peers, &name, &connection).await;
                        serve_connection(connection, name, key, serving).await;
                    }
                    Some(Peer::Operator(operator)) => {
                        serve_operator(connection, operator, serving).await;
                    }
                    None => {
                        // The verifier accepted the key, so a ring changed during the handshake.
                        tracing::warn!(%remote, "refusing peer: its key left the key ring");
                        connection.close(CLOSE_NOT_PINNED.into(), b"unknown host");
                    }
                }
            }
            .instrument(tracing::Span::current()),
        );
    }
}

/// The authenticated host (or operator) on the other end of an accepted connection. A key is
/// never both (fleet.yaml refuses an operator key that is a host's); a host's is looked up first.
fn peer_of(connection: &quinn::Connection, serving: &Serving) -> Option<Peer> {
    let identity = connection.peer_identity()?;
    let chain = identity
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    let key = tls::certificate_key(chain.first()?)?;
    if let Some(host) = tls::read_ring(&serving.ring).host_for(&key) {
        return Some(Peer::Host {
            name: host.to_owned(),
            key,
        });
    }
    serving.operator_handler.as_ref()?;
    let name = tls::read_ring(&serving.operators)
        .host_for(&key)?
        .to_owned();
    Some(Peer::Operator(OperatorPeer { name, key }))
}

/// Serves the operator requests of one operator connection, each on its own task. The
/// connection is never cached as a link to a host, and never carries this host's requests.
async fn serve_operator(connection: quinn::Connection, operator: OperatorPeer, serving: Serving) {
    let Some(handler) = serving.operator_handler.clone() else {
        connection.close(CLOSE_NOT_PINNED.into(), b"no operators served");
        return;
    };
    let remote = connection.remote_address();
    let span = tracing::info_span!("link_operator", operator = %operator.name,
        key = %operator.key.fingerprint(), %remote);
    async {
        tracing::info!("operator connected");
        loop {
            let (send, recv) = match connection.accept_bi().await {
                Ok(streams) => streams,
                Err(error) => {
                    tracing::debug!(%error, "operator connection ended");
                    return;
                }
            };
            if tls::read_ring(&serving.operators).key(&operator.name) != Some(&operator.key) {
                tracing::warn!("refusing operator: its key is no longer listed; closing");
                connection.close(CLOSE_NOT_PINNED.into(), b"key no longer listed");
                return;
            }
            tokio::spawn(
                serve_operator_stream(
                    send,
                    recv,
                    operator.clone(),
                    handler.clone(),
                    serving.request_timeout,
                )
                .instrument(tracing::Span::current()),
            );
        }
    }
    .instrument(span)
    .await;
}

/// Whether a frame may come from a host peer: every request but an operator's, which only an
/// operator's key may send.
fn host_may_send(frame: &Frame) -> bool {
    !matches!(frame, Frame::OperatorRequest(_))
}

/// Answers one operator request stream: at most [`MAX_OPERATOR_REQUEST`] bytes, decoded, and
/// handed on only if it is an operator request.
async fn serve_operator_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    operator: OperatorPeer,
    handler: Arc<dyn OperatorHandler>,
    request_timeout: Duration,
) {
    let malformed = |text: String| Frame::Refused {
        reason: RefusalReason::Malformed,
        text,
    };
    let read = tokio::time::timeout(request_timeout, recv.read_to_end(MAX_OPERATOR_REQUEST)).await;
    let response = match read {
        Err(_) => {
            tracing::warn!("operator did not finish its request in time; dropping the stream");
            let _ = recv.stop(2u32.into());
            let _ = send.reset(2u32.into());
            return;
        }
        Ok(Err(quinn::ReadToEndError::TooLong)) => {
            tracing::warn!("operator sent an oversized request");
            let _ = recv.stop(1u32.into());
            malformed(format!(
                "an operator request is at most {MAX_OPERATOR_REQUEST} bytes"
            ))
        }
        Ok(Err(quinn::ReadToEndError::Read(error))) => {
            tracing::debug!(%error, "operator request stream failed");
            return;
        }
        Ok(Ok(bytes)) => match decode_frame(&bytes) {
            Ok(Frame::OperatorRequest(request)) => {
                Frame::OperatorAnswer(handler.handle(operator, request).await)
            }
            Ok(other) => {
                tracing::warn!(
                    frame = other.kind(),
                    "refused: an operator may send only operator requests"
                );
                malformed("an operator may send only operator requests".into())
            }
            Err(error) => {
                tracing::warn!(%error, "operator sent an undecodable frame");
                malformed(format!("undecodable frame: {error}"))
            }
        },
    };
    respond(send, &response).await;
}

/// Serves the requests `peer_host` sends on a connection we dialed.
pub(super) fn spawn_serving(
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
            Ok(frame) if host_may_send(&frame) => handler.handle(peer_host, frame).await,
            Ok(frame) => {
                tracing::warn!(
                    frame = frame.kind(),
                    "refused: a host may not send operator requests"
                );
                malformed("operator requests are taken only from an operator's key".into())
            }
            Err(error) => {
                tracing::warn!(%error, "peer sent an undecodable frame");
                malformed(format!("undecodable frame: {error}"))
            }
        },
    };
    respond(send, &response).await;
}

/// Sends one response frame and finishes the stream.
async fn respond(mut send: quinn::SendStream, response: &Frame) {
    let bytes = match encode_frame(response) {
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
