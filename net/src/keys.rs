//! Host keys, public keys in their text form, and the fleet's key ring.
//!
//! A host key is an ed25519 signing key. The same key signs call hops and replies and backs
//! the host's TLS certificate, so pinning one public key per host in `fleet.yaml` pins both.
//! On disk a host key is a PKCS#8 PEM file (`-----BEGIN PRIVATE KEY-----`, readable by
//! openssl) created with mode 0600; reading refuses a file that group or others may read.
//! Public keys are written `ed25519:` followed by 64 lowercase hex digits. An operator's key
//! is the same kind of key (`consort keygen` writes both); it backs the operator's TLS client
//! identity and signs its fleet commands.
//!
//! This module holds keys and maps host names to them; it does not know which agents a host
//! serves (callers pass placements as a plain map) and never decides what a key may do.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::str::FromStr;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use crate::error::KeyError;

/// Prefix of a public key's text form.
const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// A host's ed25519 private key. `Debug` shows only the public half.
#[derive(Clone)]
pub struct HostKey {
    signing: SigningKey,
}

impl HostKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self {
            signing: SigningKey::generate(&mut rand::rngs::OsRng),
        }
    }

    /// The key with these 32 secret bytes (for tests and deterministic fixtures).
    pub fn from_secret_bytes(secret: &[u8; 32]) -> Self {
        Self {
            signing: SigningKey::from_bytes(secret),
        }
    }

    /// Writes the key to a new file at `path` as PKCS#8 PEM with mode 0600. Refuses to
    /// overwrite an existing file: losing a host key silently would orphan a fleet entry.
    pub fn write_new(&self, path: &Path) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let pem =
            self.signing
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|error| KeyError::BadKeyFile {
                    path: path.to_path_buf(),
                    reason: error.to_string(),
                })?;
        // The mode is given at creation so there is no window in which the file is readable.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    KeyError::AlreadyExists(path.to_path_buf())
                } else {
                    io(source)
                }
            })?;
        file.write_all(pem.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(())
    }

    /// Reads a key written by [`HostKey::write_new`] (or any PKCS#8 PEM ed25519 key), refusing
    /// a file that group or others may read.
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let metadata = fs::metadata(path).map_err(io)?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::InsecurePermissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::InvalidData {
                KeyError::BadKeyFile {
                    path: path.to_path_buf(),
                    reason: "not UTF-8 text".into(),
                }
            } else {
                io(source)
            }
        })?;
        let signing = SigningKey::from_pkcs8_pem(&text).map_err(|error| KeyError::BadKeyFile {
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
        Ok(Self { signing })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key())
    }

    /// Signs `message` (already domain-separated by the caller).
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// The 32 secret bytes, for deriving other link secrets (never leaves the crate).
    pub(crate) fn secret_bytes(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The key as PKCS#8 DER, for the TLS certificate and handshake.
    pub(crate) fn pkcs8_der(&self) -> Result<Vec<u8>, KeyError> {
        self.signing
            .to_pkcs8_der()
            .map(|document| document.as_bytes().to_vec())
            .map_err(|error| KeyError::Certificate(error.to_string()))
    }
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKey")
            .field("public", &self.public())
            .finish_non_exhaustive()
    }
}

/// A host's ed25519 public key. Text form: `ed25519:<64 lowercase hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses the text form. Refuses keys that are not valid curve points, and weak
    /// (small-order) keys, which no honest host has and which would make signatures
    /// meaningless.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let malformed = || KeyError::MalformedPublicKey(text.chars().take(100).collect());
        let hex_digits = text.strip_prefix(PUBLIC_KEY_PREFIX).ok_or_else(malformed)?;
        if hex_digits.len() != 64 || hex_digits.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(malformed());
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_digits, &mut bytes).map_err(|_| malformed())?;
        Self::from_bytes(&bytes).ok_or_else(malformed)
    }

    /// The key with these 32 bytes, if they are a valid, non-weak ed25519 public key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Option<Self> {
        let key = VerifyingKey::from_bytes(bytes).ok()?;
        if key.is_weak() {
            return None;
        }
        Some(Self(key))
    }

    /// The 32 key bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// A short name of the key for logs: `sha256:` and the first 16 hex digits of the SHA-256
    /// of its bytes.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(self.0.as_bytes());
        format!("sha256:{}", hex::encode(&digest[..8]))
    }

    pub(crate) fn verifying_key(&self) -> &VerifyingKey {
        &self.0
    }

    /// True when the key lies in the prime-order subgroup (no small-order component), as every
    /// key made from a secret does. Costs a scalar multiplication: the ring computes it once
    /// per pinned key.
    fn is_prime_order(&self) -> bool {
        self.0.to_edwards().is_torsion_free()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_KEY_PREFIX}{}", hex::encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The fleet's host keys: host name -> public key, with no key shared by two hosts (so a
/// key seen at a TLS handshake names exactly one host). The fleet's operator keys are kept in
/// a ring of their own, operator name -> key, under the same rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRing {
    keys: BTreeMap<String, Pinned>,
}

/// A pinned key and what chain verification needs to know about it, computed once at pinning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pinned {
    key: PublicKey,
    /// Batch verification of this key's signatures accepts exactly what `verify_strict` does
    /// only for a key without a small-order component (see `chain.rs`).
    prime_order: bool,
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// A ring of these hosts and keys.
    pub fn from_hosts<I, S>(hosts: I) -> Result<Self, KeyError>
    where
        I: IntoIterator<Item = (S, PublicKey)>,
        S: Into<String>,
    {
        let mut ring = Self::new();
        for (host, key) in hosts {
            ring.insert(host, key)?;
        }
        Ok(ring)
    }

    /// Adds (or replaces) a host's key; refuses a key another host already has.
    pub fn insert(&mut self, host: impl Into<String>, key: PublicKey) -> Result<(), KeyError> {
        let host = host.into();
        if let Some(first) = self.host_for(&key)
            && first != host
        {
            return Err(KeyError::DuplicateKey {
                first: first.to_owned(),
                second: host,
            });
        }
        let prime_order = key.is_prime_order();
        self.keys.insert(host, Pinned { key, prime_order });
        Ok(())
    }

    /// The key pinned for `host`.
    pub fn key(&self, host: &str) -> Option<&PublicKey> {
        self.keys.get(host).map(|pinned| &pinned.key)
    }

    /// The key pinned for `host`, and whether it lies in the prime-order subgroup.
    pub(crate) fn pinned(&self, host: &str) -> Option<(&PublicKey, bool)> {
        self.keys
            .get(host)
            .map(|pinned| (&pinned.key, pinned.prime_order))
    }

    /// The host whose key this is.
    pub fn host_for(&self, key: &PublicKey) -> Option<&str> {
        self.keys
            .iter()
            .find(|(_, candidate)| candidate.key == *key)
            .map(|(host, _)| host.as_str())
    }

    /// Every host and its key, by host name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PublicKey)> {
        self.keys
            .iter()
            .map(|(host, pinned)| (host.as_str(), &pinned.key))
    }

    /// The number of hosts.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the ring has no hosts.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_key_text_round_trips() {
        let key = HostKey::generate().public();
        let text = key.to_string();
        assert!(text.starts_with("ed25519:") && text.len() == 8 + 64);
        assert_eq!(PublicKey::parse(&text).unwrap(), key);
        assert_eq!(text.parse::<PublicKey>().unwrap(), key);
    }

    #[test]
    fn public_key_parse_refuses_malformed_text() {
        let good = HostKey::generate().public().to_string();
        let weak_identity = format!("ed25519:01{}", "00".repeat(31));
        for bad in [
            String::new(),
            "ed25519:".into(),
            good.replace("ed25519:", "ed448:"),
            good[..good.len() - 2].to_string(),
            format!("{good}00"),
            good.to_uppercase().replace("ED25519:", "ed25519:"),
            format!("ed25519:{}", "zz".repeat(32)),
            weak_identity,
        ] {
            assert!(
                matches!(PublicKey::parse(&bad), Err(KeyError::MalformedPublicKey(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn key_file_round_trips_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let key = HostKey::generate();
        key.write_new(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"));
        let read = HostKey::read(&path).unwrap();
        assert_eq!(read.public(), key.public());
        assert!(!format!("{read:?}").contains(&hex::encode(key.signing.to_bytes())));
    }

    #[test]
    fn key_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        HostKey::generate().write_new(&path).unwrap();
        assert!(matches!(
            HostKey::generate().write_new(&path),
            Err(KeyError::AlreadyExists(_))
        ));
    }

    #[test]
    fn reading_refuses_open_permissions_and_bad_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        HostKey::generate().write_new(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            HostKey::read(&path),
            Err(KeyError::InsecurePermissions { mode: 0o644, .. })
        ));

        let garbage = dir.path().join("garbage.key");
        fs::write(&garbage, "not a key").unwrap();
        fs::set_permissions(&garbage, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            HostKey::read(&garbage),
            Err(KeyError::BadKeyFile { .. })
        ));

        let binary = dir.path().join("binary.key");
        fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        fs::set_permissions(&binary, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            HostKey::read(&binary),
            Err(KeyError::BadKeyFile { .. })
        ));

        assert!(matches!(
            HostKey::read(&dir.path().join("missing.key")),
            Err(KeyError::Io { .. })
        ));
    }

    #[test]
    fn key_ring_refuses_a_shared_key() {
        let key = HostKey::generate().public();
        let mut ring = KeyRing::from_hosts([("alpha", key)]).unwrap();
        assert!(matches!(
            ring.insert("beta", key),
            Err(KeyError::DuplicateKey { .. })
        ));
        // Re-inserting the same host is fine (a reload).
        ring.insert("alpha", key).unwrap();
        assert_eq!(ring.host_for(&key), Some("alpha"));
        assert_eq!(ring.key("alpha"), Some(&key));
        assert_eq!(ring.len(), 1);
    }
}
