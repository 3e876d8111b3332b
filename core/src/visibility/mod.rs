//! Visibility: which tools a caller is shown, as a three-valued decision (allow / deny /
//! unknown) behind the meta-tools `search_tools` and `load_tool`.
//!
//! The module owns, as pure functions over plain data:
//! - the auth descriptor every tool carries ([`Auth`], [`descriptor`]), whose fields are defined
//!   by the JSON Schema `schemas/auth-descriptor.schema.json` (`$defs/Auth`), the one source of
//!   truth; the Rust validation mirrors it and a test keeps the two in step;
//! - what the platform found out about a caller ([`facts`]): a principal, a three-valued
//!   identity and per-policy results;
//! - the origin of a call tree and the rule of which granted roles a peer run acts with on
//!   its behalf ([`origin`]);
//! - the decision itself ([`decide`]): seven rules, first match wins;
//! - the evaluation ladder ([`ladder`]): T0 markers, T1 declarative policies, T2 probes behind
//!   the [`Probe`] trait with a budget and a per-generation cache ([`probe_cache`]), T3 unknown;
//! - the meta-tool answers ([`catalog`]): ranking for `search_tools`, cards, and `load_tool`,
//!   which answers for a denied tool exactly as for a tool that does not exist.
//!
//! It must not perform I/O (the operator command's file formats are parsed and validated here
//! ([`files`]), but reading the files is consort-actors' `visibility_files`), must not read a
//! clock, must not run a tool handler (a T2 probe is whatever the [`Probe`] implementation
//! does; this module only decides when to ask), and must never invent a value: whatever is not
//! known stays `unknown`.

pub mod catalog;
pub mod decision;
pub mod descriptor;
pub mod error;
pub mod facts;
pub mod files;
pub mod ladder;
pub mod origin;
pub mod probe_cache;

pub use catalog::{
    Catalog, CatalogEntry, DEFAULT_SEARCH_LIMIT, InputSummary, LoadToolAnswer, MAX_QUERY_CHARS,
    MAX_SEARCH_LIMIT, SearchAnswer, SearchRequest, ToolCard, ToolDefinition, load_tool,
    search_tools, summarize_input_schema,
};
pub use decision::{Decision, Rule, decide};
pub use descriptor::{
    AUTH_DESCRIPTOR_SCHEMA, Anonymity, Auth, AuthMarkers, POLICY_NAME_PATTERN, PolicyRef,
    validate_auth_value,
};
pub use error::VisibilityError;
pub use facts::{
    BearerCheck, Caller, CallerFacts, Identity, IdentityState, PolicyResult, Principal, RoleGrants,
};
pub use files::{DecisionReport, parse_json, validate_caller_value};
pub use ladder::{
    DEFAULT_PROBE_BUDGET, DecidedBy, PolicyDefinition, PolicyRegistry, Probe, ProbeOutcome,
    Verdict, Visibility, evaluate_candidates, evaluate_policies,
};
pub use origin::{ActingRoles, OnBehalfOf, Origin, acting_roles};
pub use probe_cache::{ProbeCache, ProbeSubject};
