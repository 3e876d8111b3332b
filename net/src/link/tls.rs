//! TLS for links: a self-signed certificate made from the host key, and certificate
//! verifiers that accept exactly the keys pinned in the key ring.
//!
//! There are no certificate authorities in a fleet: `fleet.yaml` pins one ed25519 key per
//! host. A certificate here is only a container for that key, so the verifiers ignore names,
//! issuers and validity dates and compare the certificate's SubjectPublicKeyInfo with the pin.
//! The handshake signature (which proves the peer holds the private key) is verified in full
//! with the ring provider; it is never skipped. Only TLS 1.3 and ed25519 are offered.
//!
//! A host's server also accepts, besides the hosts' keys, the keys of the fleet's operators
//! (a ring of their own, empty unless the host serves operators), so that an operator's CLI
//! can dial it with its own key as its client identity.
//!
//! This module does not decide what an authenticated host may ask for; it only says which
//! host (or operator) is on the other end.

use std::sync::{Arc, RwLock};

use ed25519_dalek::VerifyingKey;
use ed25519_dalek::pkcs8::DecodePublicKey;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{KeyError, LinkError};
use crate::keys::{HostKey, KeyRing, PublicKey};

/// The link protocol's ALPN identifier.
pub(crate) const ALPN: &[u8] = b"consort/1";

/// The TLS server name a client sends. Host names need not be DNS names, and the verifier
/// pins keys rather than names, so one fixed name is used for every host.
pub(crate) const SERVER_NAME: &str = "consort.invalid";

/// The key ring, shared by the verifiers and the endpoint, replaceable at run time.
pub(crate) type SharedRing = Arc<RwLock<KeyRing>>;

/// A host's certificate chain and private key, as rustls wants them.
pub(crate) struct Identity {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key_der: Vec<u8>,
}

impl Identity {
    /// A self-signed certificate for `host_name` over the host key.
    pub(crate) fn new(host_name: &str, key: &HostKey) -> Result<Self, KeyError> {
        let certificate_error = |error: rcgen::Error| KeyError::Certificate(error.to_string());
        let key_der = key.pkcs8_der()?;
        let key_pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(key_der.as_slice()),
            &rcgen::PKCS_ED25519,
        )
        .map_err(certificate_error)?;
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host_name);
        let certificate = params.self_signed(&key_pair).map_err(certificate_error)?;
        Ok(Self {
            chain: vec![certificate.der().clone()],
            key_der,
        })
    }

    fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// The rustls provider: ring, TLS 1.3 only (QUIC requires it).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Client TLS config for dialing `peer_host`, which must present `pinned`.
pub(crate) fn client_config(
    identity: &Identity,
    peer_host: &str,
    pinned: PublicKey,
) -> Result<rustls::ClientConfig, LinkError> {
    let provider = provider();
    let verifier = Arc::new(PinnedServerVerifier {
        peer_host: peer_host.to_owned(),
        pinned,
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup_error)?
        .dangerous() // the custom verifier below pins keys; it is stricter than webpki, not looser
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(identity.chain.clone(), identity.private_key())
        .map_err(setup_error)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// Server TLS config accepting any client whose key is in the host ring or the operator ring.
pub(crate) fn server_config(
    identity: &Identity,
    ring: SharedRing,
    operators: SharedRing,
) -> Result<rustls::ServerConfig, LinkError> {
    let provider = provider();
    let verifier = Arc::new(RingClientVerifier {
        ring,
        operators,
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain.clone(), identity.private_key())
        .map_err(setup_error)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The ed25519 key inside a certificate, if it holds one.
pub(crate) fn certificate_key(certificate: &CertificateDer<'_>) -> Option<PublicKey> {
    let parsed = ParsedCertificate::try_from(certificate).ok()?;
    let spki = parsed.subject_public_key_info();
    let key = VerifyingKey::from_public_key_der(spki.as_ref()).ok()?;
    PublicKey::from_bytes(key.as_bytes())
}

/// Reads the ring, tolerating a poisoned lock (the ring is replaced whole, never half-written).
pub(crate) fn read_ring(ring: &SharedRing) -> std::sync::RwLockReadGuard<'_, KeyRing> {
    ring.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn setup_error(error: rustls::Error) -> LinkError {
    LinkError::Setup(error.to_string())
}

fn refused() -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
}

/// Accepts only the server certificate carrying the key pinned for the host being dialed.
#[derive(Debug)]
struct PinnedServerVerifier {
    peer_host: String,
    pinned: PublicKey,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match certificate_key(end_entity) {
            Some(key) if key == self.pinned => Ok(ServerCertVerified::assertion()),
            presented => {
                tracing::warn!(
                    peer_host = %self.peer_host,
                    pinned = %self.pinned,
                    presented = %presented.map_or_else(|| "no ed25519 key".to_owned(), |k| k.to_string()),
                    certificate_sha256 = %hex::encode(Sha256::digest(end_entity.as_ref())),
                    "refusing peer: its key does not match the key pinned for it"
                );
                Err(refused())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// Accepts a client certificate whose key belongs to a host in the ring, or to an operator in
/// the operator ring.
#[derive(Debug)]
struct RingClientVerifier {
    ring: SharedRing,
    operators: SharedRing,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RingClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let presented = certificate_key(end_entity);
        let known = presented.is_some_and(|key| {
            read_ring(&self.ring).host_for(&key).is_some()
                || read_ring(&self.operators).host_for(&key).is_some()
        });
        if known {
            return Ok(ClientCertVerified::assertion());
        }
        tracing::warn!(
            presented = %presented.map_or_else(|| "no ed25519 key".to_owned(), |k| k.to_string()),
            certificate_sha256 = %hex::encode(Sha256::digest(end_entity.as_ref())),
            "refusing peer: its key is not in the key ring"
        );
        Err(refused())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// The stateless-reset key of an endpoint, derived from the host key.
///
/// A QUIC peer that lost a connection's state (a restarted host) answers stray packets with a
/// stateless reset, which the other side accepts only if it was made with the same key that
/// issued the connection's reset tokens. Deriving the key from the host key (domain-separated,
/// through SHA-256) lets a restarted host end its old connections at once instead of leaving
/// them to an idle timeout. The HMAC is ring's (already in the tree under rustls and quinn;
/// quinn implements its `HmacKey` for it).
pub(crate) fn reset_key(host_key: &HostKey) -> ring::hmac::Key {
    const DOMAIN: &[u8] = b"consort/quic-stateless-reset/v1";
    let derived = Sha256::new()
        .chain_update(DOMAIN)
        .chain_update(host_key.secret_bytes())
        .finalize();
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &derived)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_key_is_the_same_for_a_restarted_host_and_differs_between_hosts() {
        use quinn::crypto::HmacKey;
        let host = HostKey::from_secret_bytes(&[3; 32]);
        let restarted = HostKey::from_secret_bytes(&[3; 32]);
        let other = HostKey::from_secret_bytes(&[4; 32]);
        let key = reset_key(&host);
        assert_eq!(key.signature_len(), 32);
        let mut tag = [0u8; 32];
        key.sign(b"connection id", &mut tag);
        assert!(reset_key(&restarted).verify(b"connection id", &tag).is_ok());
        assert!(reset_key(&other).verify(b"connection id", &tag).is_err());
        assert!(key.verify(b"another id", &tag).is_err());
        // The key the hand-written HMAC used: SHA-256(domain || secret), as an HMAC-SHA256 key.
        let expected = ring::hmac::sign(
            &ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                &Sha256::new()
                    .chain_update(b"consort/quic-stateless-reset/v1")
                    .chain_update([3u8; 32])
                    .finalize(),
            ),
            b"connection id",
        );
        assert_eq!(expected.as_ref(), tag);
    }

    #[test]
    fn certificate_carries_the_host_key() {
        let key = HostKey::generate();
        let identity = Identity::new("host with spaces é", &key).unwrap();
        assert_eq!(certificate_key(&identity.chain[0]), Some(key.public()));
        assert_eq!(
            certificate_key(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
            None
        );
    }
}
