//! The errors of consort-net, one enum per failure domain, gathered under [`NetError`].
//!
//! Each domain enum ([`CodecError`], [`KeyError`], [`ChainError`], [`LinkError`]) is what the
//! functions of that domain return, so a caller matches exactly the failures it can meet.
//! [`NetError`] wraps them all (`?` converts) for code that only reports. No variant carries a
//! panic, and none is raised for a decision (consent, depth, caps): those are not made here.

use std::path::PathBuf;

/// Any error of consort-net.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// A value the core refused (a malformed run id, say).
    #[error(transparent)]
    Core(#[from] consort_core::CoreError),
    /// Bytes could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A host key could not be made, read, written or parsed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A call chain or reply failed verification.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// A link could not carry a frame.
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// Why a `traceparent` header value is not a W3C trace context (the HTTP API then starts a
/// new trace, as the W3C recommendation asks).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceparentError {
    /// Not four dash-separated fields of lowercase hex of the right lengths.
    #[error("malformed traceparent {value:?}")]
    Malformed {
        /// The value (its first 64 characters).
        value: String,
    },
    /// Version `ff`, which the W3C format forbids.
    #[error("traceparent version ff is invalid")]
    InvalidVersion,
    /// A trace id of all zeros.
    #[error("traceparent trace id is all zeros")]
    ZeroTraceId,
    /// A parent span id of all zeros.
    #[error("traceparent parent id is all zeros")]
    ZeroSpanId,
}

/// Why bytes could not be turned into a frame or envelope (or back).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The bytes end before the value does.
    #[error("truncated: the bytes end before the value does")]
    Truncated,
    /// The value (or a length claimed inside it) exceeds the frame limit.
    #[error("too large: more than {limit} bytes")]
    TooLarge {
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
    /// The bytes are not a value of the expected type (bad tag, bad UTF-8, bad run id, ...).
    #[error("garbage: {0}")]
    Garbage(String),
    /// An envelope or reply carries a format version this build does not speak.
    #[error("wrong envelope version {found}, expected {expected}")]
    WrongVersion {
        /// The version found in the bytes.
        found: u16,
        /// The version this build speaks.
        expected: u16,
    },
    /// Bytes remain after a complete value.
    #[error("{extra} trailing bytes after the value")]
    TrailingBytes {
        /// How many bytes were left over.
        extra: usize,
    },
    /// The value could not be encoded (only possible if it exceeds the frame limit).
    #[error("cannot encode: {0}")]
    Encode(String),
}

/// Why a host key or a public key text could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Reading or writing the key file failed.
    #[error("key file {path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The key file can be read by other users; a host key must be private (mode 0600).
    #[error(
        "key file {path} has mode {mode:o}: it must not be readable by group or others (chmod 600)"
    )]
    InsecurePermissions {
        /// The key file.
        path: PathBuf,
        /// The file's permission bits.
        mode: u32,
    },
    /// The key file is not a PKCS#8 PEM ed25519 private key.
    #[error("key file {path} is not a PKCS#8 PEM ed25519 private key: {reason}")]
    BadKeyFile {
        /// The key file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The key file already exists; keys are never overwritten.
    #[error("key file {0} already exists; refusing to overwrite a host key")]
    AlreadyExists(PathBuf),
    /// A public key text was not `ed25519:` followed by 64 hex digits of a valid point.
    #[error("malformed public key `{0}`: expected `ed25519:` followed by 64 hex digits")]
    MalformedPublicKey(String),
    /// Two hosts in one key ring have the same public key, so a peer could not be named.
    #[error("hosts `{first}` and `{second}` have the same public key")]
    DuplicateKey {
        /// The host already in the ring.
        first: String,
        /// The host that repeated its key.
        second: String,
    },
    /// The TLS certificate could not be made from the host key.
    #[error("cannot make a certificate from the host key: {0}")]
    Certificate(String),
}

/// Why a call chain or a reply failed verification. `hop` indexes count from 0, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The envelope has no hops.
    #[error("the call chain is empty")]
    Empty,
    /// The envelope or reply has a format version this build does not speak.
    #[error("wrong envelope version {found}, expected {expected}")]
    WrongVersion {
        /// The version found.
        found: u16,
        /// The version this build speaks.
        expected: u16,
    },
    /// A hop (or the reply) carries no signature.
    #[error("hop {hop} is not signed")]
    Unsigned {
        /// The unsigned hop.
        hop: usize,
    },
    /// The agent on whose behalf a hop was signed is not placed on any host.
    #[error("hop {hop}: agent `{agent}` is not placed on any host")]
    UnknownAgent {
        /// The hop.
        hop: usize,
        /// The agent without a placement.
        agent: String,
    },
    /// The host that should have signed has no key in the key ring.
    #[error("hop {hop}: host `{host}` has no known key")]
    UnknownHost {
        /// The hop.
        hop: usize,
        /// The host without a key.
        host: String,
    },
    /// The hop is signed by a host other than the one serving its caller.
    #[error("hop {hop} signed by `{actual}`, but its caller is served by `{expected}`")]
    WrongSigner {
        /// The hop.
        hop: usize,
        /// The host serving the hop's caller.
        expected: String,
        /// The host named in the signature.
        actual: String,
    },
    /// The batch signature does not verify (strictly) against the signer's key over the root
    /// the hop's proof names.
    #[error("hop {hop}: bad signature")]
    BadSignature {
        /// The hop.
        hop: usize,
    },
    /// The hop's batch proof is not one any batch could have: no leaves or more than a
    /// receiver accepts, a position outside the batch, or a path of the wrong length for that
    /// position and size (a truncated or padded proof). Also what a signature stored by a build
    /// before batch signatures reads as.
    #[error(
        "hop {hop}: malformed batch proof (leaf {leaf_index} of {leaf_count}, path of {path_len})"
    )]
    MalformedProof {
        /// The hop.
        hop: usize,
        /// The position the proof claims.
        leaf_index: u32,
        /// The batch size the proof claims.
        leaf_count: u32,
        /// How many hashes its path holds.
        path_len: usize,
    },
    /// The hop's batch proof does not lead from this hop to the root it names: a forged path,
    /// the proof of another envelope or of another position, or a root swapped for another.
    #[error("hop {hop}: the batch proof does not lead from this hop to the signed root")]
    ProofMismatch {
        /// The hop.
        hop: usize,
    },
    /// The hop does not follow from the one before it (digest, agents or run ids differ).
    #[error("hop {hop} does not link to the hop before it")]
    BrokenLink {
        /// The hop.
        hop: usize,
    },
    /// The first hop carries no origin: the receiver could not tell who the call acts for.
    #[error("the first hop does not name the origin of the call")]
    MissingOrigin,
    /// A hop after the first carries an origin; only the first hop's counts, and a chain that
    /// names another is refused rather than read either way.
    #[error("hop {hop} names an origin; only the first hop may")]
    MisplacedOrigin {
        /// The hop.
        hop: usize,
    },
    /// A hop hands its child more of the tree budget than the hop before it was handed (or
    /// none where the hop before had one).
    #[error("hop {hop} hands on more of the tree budget than the hop before it carries")]
    BudgetWidened {
        /// The hop.
        hop: usize,
    },
    /// A hop's child run id is not derived from its parent run id and tool-use id.
    #[error("hop {hop}: child run id is not derived from its parent run and tool use")]
    BadRunId {
        /// The hop.
        hop: usize,
    },
    /// The envelope's input (or the reply's output) does not match its digest or signature.
    #[error("the input does not match the digest in the last hop")]
    InputTampered,
    /// A hop expired, even allowing for clock skew.
    #[error("hop {hop} expired at {expires_at_ms} ms (now {now_ms} ms)")]
    Expired {
        /// The hop.
        hop: usize,
        /// When it expired, Unix milliseconds.
        expires_at_ms: u64,
        /// The verifier's clock, Unix milliseconds.
        now_ms: u64,
    },
    /// The chain is longer than the deepest chain the receiver could accept; refused before
    /// any signature was checked.
    #[error("chain of {depth} hops is deeper than the limit ({limit})")]
    TooDeep {
        /// The number of hops in the chain.
        depth: usize,
        /// The receiver's largest hop limit.
        limit: usize,
    },
    /// The hop to run claims a lifetime (expiry minus issue time) beyond what the receiver
    /// accepts.
    #[error("hop {hop} is valid for {lifetime_ms} ms, longer than the allowed {limit_ms} ms")]
    LifetimeTooLong {
        /// The hop.
        hop: usize,
        /// Its claimed lifetime, milliseconds.
        lifetime_ms: u64,
        /// The receiver's maximum, milliseconds.
        limit_ms: u64,
    },
    /// The hop to run was issued longer ago than the maximum lifetime (plus skew) allows.
    #[error("hop {hop} issued at {issued_at_ms} ms, too long ago (now {now_ms} ms)")]
    IssuedTooLongAgo {
        /// The hop.
        hop: usize,
        /// When it claims to be issued, Unix milliseconds.
        issued_at_ms: u64,
        /// The verifier's clock, Unix milliseconds.
        now_ms: u64,
    },
    /// A hop was issued in the future, beyond the allowed clock skew.
    #[error("hop {hop} issued at {issued_at_ms} ms, in the future (now {now_ms} ms)")]
    NotYetValid {
        /// The hop.
        hop: usize,
        /// When it claims to be issued, Unix milliseconds.
        issued_at_ms: u64,
        /// The verifier's clock, Unix milliseconds.
        now_ms: u64,
    },
}

/// Why a link could not carry a request and bring back its response.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The UDP socket could not be bound, or the TLS configuration could not be built.
    #[error("cannot set up the link endpoint: {0}")]
    Setup(String),
    /// The peer host has no key in the key ring, so it cannot be dialed or accepted.
    #[error("host `{0}` has no known key")]
    UnknownHost(String),
    /// The peer could not be reached within the dial timeout (down, refused us, or its key
    /// does not match the one pinned for it).
    #[error("host `{host}` unreachable: {reason}")]
    Unreachable {
        /// The peer host.
        host: String,
        /// The last failure seen while dialing.
        reason: String,
    },
    /// The connection closed, or the stream was reset, before the response arrived. The
    /// request may or may not have been handled; calls are safe to retry (run ids dedupe).
    #[error("link to `{host}` lost before the response: {reason}")]
    ConnectionLost {
        /// The peer host.
        host: String,
        /// What happened.
        reason: String,
    },
    /// The response did not arrive within the request timeout.
    #[error("no response from `{0}` within the request timeout")]
    Timeout(String),
    /// The peer's response could not be decoded.
    #[error("bad response from `{host}`: {source}")]
    BadResponse {
        /// The peer host.
        host: String,
        /// The decoding failure.
        source: CodecError,
    },
    /// The request could not be encoded.
    #[error("cannot encode the request: {0}")]
    Encode(CodecError),
    /// The endpoint was closed.
    #[error("the link endpoint is closed")]
    Closed,
}
