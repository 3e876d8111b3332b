//! The server half of a link: accepting peers, and answering each request stream with one
//! response frame from the host's [`FrameHandler`].
//!
//! A connection is served whoever dialed it: the accept loop serves connections peers open,
//! and the client hands over the ones it dials ([`spawn_serving`]), since one connection per
//! peer carries requests both ways. Every request re-checks the peer's pin, so a host removed
//! from the key ring loses its connection at its next request. A stream that is too long or
//! undecodable is answered `Malformed` and the connection keeps serving. This module moves
//! frames only: what a request means is the handler's business.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::CLOSE_NOT_PINNED;
use super::peers::{Peers, adopt};
use super::tls::{self, SharedRing};
use crate::codec::{Frame, MAX_FRAME, RefusalReason, decode_frame, encode_frame};
use crate::keys::PublicKey;

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

/// What serving a connection needs, shared by the accept loop and dialed connections (kept
/// apart from [`Inner`](super::Inner) so that serving tasks never keep the endpoint's handle
/// alive).
#[derive(Clone)]
pub(super) struct Serving {
    pub(super) ring: SharedRing,
    pub(super) handler: Arc<dyn FrameHandler>,
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
