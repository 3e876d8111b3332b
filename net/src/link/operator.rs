//! [`OperatorLink`]: an operator's client-only endpoint, to send signed fleet commands to
//! hosts.
//!
//! It dials each host with the operator's key as its TLS client identity (a host accepts it
//! only if fleet.yaml lists the key under `operators:`) and pins the host's key exactly as
//! hosts pin each other's ([`tls::client_config`]): there is no plaintext mode and no way to
//! skip the pin. One fresh connection per request: an operator sends a handful of commands,
//! so nothing is cached, nothing is retried (a request could have run), and nothing is served:
//! the endpoint has no server configuration and never accepts a stream.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use quinn::crypto::rustls::QuicClientConfig;

use super::CLOSE_RESET;
use super::client::{closed_reason, handshake};
use super::config::LinkConfig;
use super::peers::lock;
use super::tls::{self, Identity};
use crate::codec::{Frame, MAX_FRAME, decode_frame, encode_frame};
use crate::error::{CodecError, LinkError};
use crate::keys::{HostKey, PublicKey};

/// An operator's end of its links to hosts: dials, never serves.
pub struct OperatorLink {
    identity: Identity,
    config: LinkConfig,
    transport: Arc<quinn::TransportConfig>,
    /// One client socket per address family, bound on first use.
    endpoints: Mutex<Endpoints>,
}

#[derive(Default)]
struct Endpoints {
    v4: Option<quinn::Endpoint>,
    v6: Option<quinn::Endpoint>,
}

impl OperatorLink {
    /// A client for the operator `name` holding `key`, with `config`'s dial and request
    /// timeouts. Binds no socket yet.
    pub fn new(name: &str, key: &HostKey, config: LinkConfig) -> Result<Self, LinkError> {
        let identity = Identity::new(name, key).map_err(|e| LinkError::Setup(e.to_string()))?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(config.idle_timeout)
                    .map_err(|e| LinkError::Setup(e.to_string()))?,
            ))
            .max_concurrent_bidi_streams(0u32.into())
            .max_concurrent_uni_streams(0u32.into());
        Ok(Self {
            identity,
            config,
            transport: Arc::new(transport),
            endpoints: Mutex::new(Endpoints::default()),
        })
    }

    /// Sends `frame` to `host` at `addr`, which must present `pinned`, and returns its answer.
    pub async fn request(
        &self,
        host: &str,
        addr: SocketAddr,
        pinned: PublicKey,
        frame: &Frame,
    ) -> Result<Frame, LinkError> {
        let bytes = encode_frame(frame).map_err(LinkError::Encode)?;
        self.request_bytes(host, addr, pinned, &bytes).await
    }

    /// As [`OperatorLink::request`], with the request's bytes as they are (for tests that send
    /// the same signed bytes twice, or bytes no encoder would make).
    pub async fn request_bytes(
        &self,
        host: &str,
        addr: SocketAddr,
        pinned: PublicKey,
        request: &[u8],
    ) -> Result<Frame, LinkError> {
        let endpoint = self.endpoint(addr)?;
        let connection = self.dial(&endpoint, host, addr, pinned).await?;
        let exchanged = tokio::time::timeout(
            self.config.request_timeout,
            exchange(host, &connection, request),
        )
        .await
        .unwrap_or_else(|_| Err(LinkError::Timeout(host.to_owned())));
        connection.close(CLOSE_RESET.into(), b"operator request done");
        exchanged
    }

    /// Waits (at most the link's shutdown grace) until every connection's close was
    /// acknowledged, so hosts drop them at once.
    pub async fn close(&self) {
        let endpoints: Vec<quinn::Endpoint> = {
            let endpoints = lock(&self.endpoints);
            endpoints
                .v4
                .iter()
                .chain(endpoints.v6.iter())
                .cloned()
                .collect()
        };
        for endpoint in endpoints {
            let _ = tokio::time::timeout(self.config.shutdown_grace, endpoint.wait_idle()).await;
        }
    }

    /// The client socket for `addr`'s family, bound on first use (an IPv6 socket does not
    /// reach IPv4 addresses everywhere, so each family has its own).
    fn endpoint(&self, addr: SocketAddr) -> Result<quinn::Endpoint, LinkError> {
        let mut endpoints = lock(&self.endpoints);
        let (slot, bind): (&mut Option<quinn::Endpoint>, SocketAddr) = if addr.is_ipv4() {
            (&mut endpoints.v4, SocketAddr::from(([0, 0, 0, 0], 0)))
        } else {
            (&mut endpoints.v6, SocketAddr::from(([0u16; 8], 0)))
        };
        if let Some(endpoint) = slot {
            return Ok(endpoint.clone());
        }
        let endpoint =
            quinn::Endpoint::client(bind).map_err(|e| LinkError::Setup(e.to_string()))?;
        *slot = Some(endpoint.clone());
        Ok(endpoint)
    }

    async fn dial(
        &self,
        endpoint: &quinn::Endpoint,
        host: &str,
        addr: SocketAddr,
        pinned: PublicKey,
    ) -> Result<quinn::Connection, LinkError> {
        let client_tls = tls::client_config(&self.identity, host, pinned)?;
        let client_crypto =
            QuicClientConfig::try_from(client_tls).map_err(|e| LinkError::Setup(e.to_string()))?;
        let mut client_config = quinn::ClientConfig::new(Arc::new(client_crypto));
        client_config.transport_config(self.transport.clone());
        let unreachable = |reason: String| LinkError::Unreachable {
            host: host.to_owned(),
            reason,
        };
        let connecting = endpoint
            .connect_with(client_config, addr, tls::SERVER_NAME)
            .map_err(|e| unreachable(format!("cannot dial {addr}: {e}")))?;
        handshake(connecting, addr, self.config.dial_timeout)
            .await
            .map_err(unreachable)
    }
}

/// One request and its response on a new stream.
async fn exchange(
    host: &str,
    connection: &quinn::Connection,
    request: &[u8],
) -> Result<Frame, LinkError> {
    let lost = |connection: &quinn::Connection, detail: String| {
        lost_or_refused(host, connection.close_reason(), detail)
    };
    let (mut send, mut recv) = connection
        .open_bi()
        .await
        .map_err(|e| lost(connection, e.to_string()))?;
    send.write_all(request)
        .await
        .map_err(|e| lost(connection, e.to_string()))?;
    send.finish().map_err(|e| lost(connection, e.to_string()))?;
    let response = recv
        .read_to_end(MAX_FRAME)
        .await
        .map_err(|error| match error {
            quinn::ReadToEndError::TooLong => LinkError::BadResponse {
                host: host.to_owned(),
                source: CodecError::TooLarge { limit: MAX_FRAME },
            },
            quinn::ReadToEndError::Read(error) => lost(connection, error.to_string()),
        })?;
    decode_frame(&response).map_err(|source| LinkError::BadResponse {
        host: host.to_owned(),
        source,
    })
}

/// The error of an exchange whose connection failed: a TLS alert right after the handshake
/// is the host refusing the operator's key (in TLS 1.3 the client finishes its handshake
/// before the server has checked the client's certificate), anything else a lost connection.
fn lost_or_refused(
    host: &str,
    closed: Option<quinn::ConnectionError>,
    detail: String,
) -> LinkError {
    let host = host.to_owned();
    match closed {
        Some(quinn::ConnectionError::ConnectionClosed(close))
            if (0x100..0x200).contains(&u64::from(close.error_code)) =>
        {
            LinkError::Unreachable {
                host,
                reason: format!(
                    "the host refused the operator's key at the handshake ({close}); is it listed under `operators:` in the fleet.yaml the host serves?"
                ),
            }
        }
        Some(closed) => LinkError::ConnectionLost {
            host,
            reason: closed_reason(&closed),
        },
        None => LinkError::ConnectionLost {
            host,
            reason: detail,
        },
    }
}
