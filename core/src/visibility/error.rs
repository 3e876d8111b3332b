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
        /// The file, as the caller named it.
        file: PathBuf,
        /// Why the read failed.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid JSON.
    #[error("{file}: not valid JSON: {source}")]
    Syntax {
        /// The file, as the caller named it.
        file: PathBuf,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A key the schema does not define.
    #[error("{file}: {key}: unknown key")]
    UnknownKey {
        /// The file, as the caller named it.
        file: PathBuf,
        /// The key the schema does not define.
        key: String,
    },
    /// A key the schema requires is missing.
    #[error("{file}: {key}: missing required key")]
    MissingKey {
        /// The file, as the caller named it.
        file: PathBuf,
        /// The missing key.
        key: String,
    },
    /// A value outside its schema (`key` is `$` for the whole document).
    #[error("{file}: {key}: expected {expected}, found {found}")]
    InvalidValue {
        /// The file, as the caller named it.
        file: PathBuf,
        /// Where in the file: a key path such as `policies[1]`, or `$` for the whole document.
        key: String,
        /// What the schema expects there.
        expected: String,
        /// What the file holds there.
        found: String,
    },
    /// A role policy with an empty name list (`roles:` or `roles:a,,b`).
    #[error("{file}: {key}: role policy `{policy}` needs at least one non-empty role name")]
    EmptyRoleList {
        /// The file, as the caller named it.
        file: PathBuf,
        /// Where in the file: a key path such as `policies[1]`, or `$` for the whole document.
        key: String,
        /// The policy name as written.
        policy: String,
    },
    /// The same policy is listed twice.
    #[error("{file}: {key}: policy `{policy}` is listed more than once")]
    DuplicatePolicy {
        /// The file, as the caller named it.
        file: PathBuf,
        /// Where in the file: a key path such as `policies[1]`, or `$` for the whole document.
        key: String,
        /// The policy listed twice.
        policy: String,
    },
    /// Policy results given while identity is not present (they are requested only while
    /// identity is present).
    #[error(
        "{file}: {key}: policy results are only requested while identity is present, but identity is {identity}"
    )]
    PolicyResultsWithoutIdentity {
        /// The file, as the caller named it.
        file: PathBuf,
        /// Where in the file: a key path such as `policies[1]`, or `$` for the whole document.
        key: String,
        /// The identity state the file gives (`absent` or `unknown`).
        identity: String,
    },
    /// A policy name (in code or config) that is neither a named policy nor a role policy.
    #[error("invalid policy name `{policy}`: {reason}")]
    InvalidPolicyName {
        /// The name as given.
        policy: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A principal that is not `api:<token-name>`, `agent:<name>` or `anonymous`.
    #[error(
        "unknown principal form `{input}`: expected api:<token-name>, agent:<name> or anonymous"
    )]
    UnknownPrincipalForm {
        /// The principal as given.
        input: String,
    },
    /// `api:` or `agent:` with an empty or malformed name.
    #[error("invalid principal `{input}`: the name after `{prefix}` {reason}")]
    InvalidPrincipalName {
        /// The principal as given.
        input: String,
        /// The prefix it starts with (`api:` or `agent:`).
        prefix: &'static str,
        /// What is wrong with the name after it.
        reason: &'static str,
    },
    /// A policy definition that requires nothing (neither roles nor principals).
    #[error("policy `{policy}` defines neither roles nor principals")]
    EmptyPolicyDefinition {
        /// The policy's name.
        policy: String,
    },
    /// Two catalog entries with the same tool name.
    #[error("the catalog lists tool `{name}` more than once")]
    DuplicateTool {
        /// The tool's name.
        name: String,
    },
    /// A `search_tools` query longer than the cap.
    #[error("query is {length} characters long; the most allowed is {max}")]
    QueryTooLong {
        /// The query's length in characters.
        length: usize,
        /// The most allowed ([`super::MAX_QUERY_CHARS`]).
        max: usize,
    },
    /// A `search_tools` limit of zero or above the cap.
    #[error("limit {limit} is out of range: use 1 to {max}")]
    LimitOutOfRange {
        /// The limit asked for.
        limit: usize,
        /// The most allowed ([`super::MAX_SEARCH_LIMIT`]).
        max: usize,
    },
}
