//! The one error type of consort-net. Every variant is something a caller can match on and
//! act on; none carries a panic.

/// Errors raised while deriving ids, encoding, decoding, signing, verifying or moving envelopes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// A run id did not have the `run_` prefix followed by 32 lowercase hex digits.
    #[error("malformed run id `{0}`: expected `run_` followed by 32 hex digits")]
    MalformedRunId(String),
}
