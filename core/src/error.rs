//! The one error type of consort-core: values it was handed that it cannot make sense of.
//!
//! Decisions are not errors: a refused call is a [`crate::Refusal`], returned as a value.

/// A value consort-core was given that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A run id did not have the `run_` prefix followed by 32 lowercase hex digits.
    #[error("malformed run id `{0}`: expected `run_` followed by 32 hex digits")]
    MalformedRunId(String),
    /// A stored event has a kind this version does not know (a store written by a newer
    /// consort).
    #[error("unknown event kind `{0}`")]
    UnknownEventKind(String),
    /// A stored event's data does not match its kind.
    #[error("event `{kind}` does not decode: {detail}")]
    MalformedEvent {
        /// The event's kind.
        kind: String,
        /// What serde said.
        detail: String,
    },
}
