//! The A2A (Agent2Agent) protocol, version 1.0, JSON-RPC binding: the shapes on the wire and
//! nothing else.
//!
//! A2A defines its messages in protobuf and its JSON binding by protobuf's canonical JSON
//! mapping: lowerCamelCase field names, enum values as their full names
//! (`TASK_STATE_COMPLETED`), a `oneof` as the one field that is set (`{"task": {…}}`), defaults
//! left out. These types follow that mapping field for field, so that a consort host and any
//! A2A 1.0 peer read each other's JSON; the interop tests run them against the official Python
//! SDK, in both directions.
//!
//! Why local types: the A2A project publishes no official Rust SDK, and the community crates
//! that exist track earlier drafts (0.3's `message/send` and `kind` discriminators) or pull in
//! their own HTTP stacks. The protocol surface consort needs is small, so it is pinned here,
//! to the 1.0 specification, and checked against the reference implementation.
//!
//! - [`card`]: the agent card served at [`AGENT_CARD_PATH`] and the security schemes in it.
//! - [`task`]: tasks, their states, messages, parts and artifacts, and the stream events.
//! - [`rpc`]: the JSON-RPC 2.0 envelope, the method names, the request and response params,
//!   and A2A's error codes.
//!
//! This crate does no I/O and knows nothing of consort: mapping runs to tasks is the
//! gateway's job (`consort-fleet`), placing calls to remote A2A agents is the caller's.

pub mod card;
pub mod rpc;
pub mod task;

pub use card::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill,
    HttpAuthSecurityScheme, SecurityRequirement, SecurityScheme, StringList,
};
pub use rpc::{
    A2aErrorCode, CancelTaskRequest, GetTaskRequest, JsonRpcError, JsonRpcId, JsonRpcRequest,
    JsonRpcResponse, ListTasksRequest, ListTasksResponse, Method, SendMessageConfiguration,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest,
};
pub use task::{
    Artifact, Message, Part, PartContent, Role, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};

/// Where a host serves its agent card (RFC 8615 well-known URI).
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The protocol version these types speak, as cards and the `A2A-Version` header name it.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The request header a client names its protocol version in.
pub const VERSION_HEADER: &str = "A2A-Version";

/// The protocol binding name of JSON-RPC in an [`AgentInterface`].
pub const JSONRPC_BINDING: &str = "JSONRPC";

/// Why a JSON value is not a well-formed A2A object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum A2aError {
    /// A part sets none, or more than one, of `text`, `raw`, `url` and `data`.
    #[error("a part must set exactly one of text, raw, url and data (it sets {set})")]
    PartContent {
        /// How many of the four it sets.
        set: usize,
    },
    /// A message or request lacks a field the protocol requires.
    #[error("missing required field `{0}`")]
    Missing(&'static str),
}
