//! The one error type of the visibility module.
//!
//! Errors about a file name the file and the key (a path such as `policies[1]` or
//! `policies.finance-read`), so an operator can fix the input without reading code. This module
//! only describes failures; it never logs or recovers.

use std::path::PathBuf;

/// Everything that can go wrong in visibility: descriptor and caller-facts files, principals,
/// policy names and definitions, catalogs and meta-tool requests.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VisibilityError {
    /// A file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid JSON.
    #[error("{file}: not valid JSON: {source}")]
    Syntax {
        file: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A key the schema does not define.
    #[error("{file}: {key}: unknown key")]
    UnknownKey { file: PathBuf, key: String },
    /// A key the schema requires is missing.
    #[error("{file}: {key}: missing required key")]
    MissingKey { file: PathBuf, key: String },
    /// A value outside its schema (`key` is `$` for the whole document).
    #[error("{file}: {key}: expected {expected}, found {found}")]
    InvalidValue {
        file: PathBuf,
        key: String,
        expected: String,
        found: String,
    },
    /// A role policy with an empty name list (`roles:` or `roles:a,,b`).
    #[error("{file}: {key}: role policy `{policy}` needs at least one non-empty role name")]
    EmptyRoleList {
        file: PathBuf,
        key: String,
        policy: String,
    },
    /// The same policy is listed twice.
    #[error("{file}: {key}: policy `{policy}` is listed more than once")]
    DuplicatePolicy {
        file: PathBuf,
        key: String,
        policy: String,
    },
    /// Policy results given while identity is not present (they are requested only while
    /// identity is present).
    #[error(
        "{file}: {key}: policy results are only requested while identity is present, but identity is {identity}"
    )]
    PolicyResultsWithoutIdentity {
        file: PathBuf,
        key: String,
        identity: String,
    },
    /// A policy name (in code or config) that is neither a named policy nor a role policy.
    #[error("invalid policy name `{policy}`: {reason}")]
    InvalidPolicyName { policy: String, reason: String },
    /// A principal that is not `api:<token-name>`, `agent:<name>` or `anonymous`.
    #[error(
        "unknown principal form `{input}`: expected api:<token-name>, agent:<name> or anonymous"
    )]
    UnknownPrincipalForm { input: String },
    /// `api:` or `agent:` with an empty or malformed name.
    #[error("invalid principal `{input}`: the name after `{prefix}` {reason}")]
    InvalidPrincipalName {
        input: String,
        prefix: &'static str,
        reason: &'static str,
    },
    /// A policy definition that requires nothing (neither roles nor principals).
    #[error("policy `{policy}` defines neither roles nor principals")]
    EmptyPolicyDefinition { policy: String },
    /// Two catalog entries with the same tool name.
    #[error("the catalog lists tool `{name}` more than once")]
    DuplicateTool { name: String },
    /// A `search_tools` query longer than the cap.
    #[error("query is {length} characters long; the most allowed is {max}")]
    QueryTooLong { length: usize, max: usize },
    /// A `search_tools` limit of zero or above the cap.
    #[error("limit {limit} is out of range: use 1 to {max}")]
    LimitOutOfRange { limit: usize, max: usize },
}
