//! The seam to remote A2A agents: what the host supervisor hands the A2A client for one call
//! ([`A2aRequest`]) and what comes back ([`A2aAnswer`]), and the trait the client implements
//! ([`A2aCalls`], implemented by consort-fleet's HTTP client).
//!
//! A call to an A2A agent passes the caller's checks in consort-core like any call (the
//! `can_call` edge, the depth limit, the call cap); the supervisor then hands it here instead
//! of to an agent actor or a link. What comes back becomes the call's reply, as a consort
//! peer's would. This module holds shapes only: it must not open a connection (the crate never
//! does) nor decide anything about a call.

use consort_config::A2aAgentConfig;
use consort_net::{ReplyStatus, RunId};

use crate::routing::BoxFuture;

/// One call to a remote A2A agent, as the host places it. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct A2aRequest {
    /// The A2A agent as the caller's agent.yaml declares it now.
    pub agent: A2aAgentConfig,
    /// The bearer token: the value of the caller's `env:` key that `token_env` names.
    pub token: Option<String>,
    /// The call's input text, sent as the message's one text part.
    pub input: String,
    /// The id of the call's child run: the message's id, the same for a replay of the call.
    pub child_run: RunId,
    /// The calling agent.
    pub caller: String,
    /// The caller's run that placed the call.
    pub parent_run: RunId,
    /// The call's hop depth (the caller's depth + 1).
    pub hop_depth: usize,
}

impl std::fmt::Debug for A2aRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aRequest")
            .field("agent", &self.agent)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("input", &self.input)
            .field("child_run", &self.child_run)
            .field("caller", &self.caller)
            .field("parent_run", &self.parent_run)
            .field("hop_depth", &self.hop_depth)
            .finish()
    }
}

/// How a call to an A2A agent ended, as its caller's run will read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct A2aAnswer {
    /// `Succeeded` for a completed task (or a direct answer), `Failed` for anything else.
    pub status: ReplyStatus,
    /// The answer's text, or what happened and what the caller can do about it.
    pub text: String,
}

/// How the supervisor reaches remote A2A agents (implemented by the fleet's HTTP client).
pub trait A2aCalls: Send + Sync + 'static {
    /// Sends the call and waits for its outcome, within the declaration's `timeout_ms`. It
    /// never fails: an unreachable agent, an HTTP or JSON-RPC error and a timeout are
    /// answers of status `Failed` that say so.
    fn call(&self, request: A2aRequest) -> BoxFuture<'_, A2aAnswer>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_never_shows_its_token() {
        let parent = RunId::parse(&format!("run_{:032x}", 1)).unwrap();
        let request = A2aRequest {
            agent: A2aAgentConfig {
                name: "forecaster".into(),
                card: "http://127.0.0.1:9/card".into(),
                token_env: Some("T".into()),
                timeout_ms: 1000,
                allow_networks: Default::default(),
                endpoint_origins: Vec::new(),
            },
            token: Some("s3cret".into()),
            input: "paris".into(),
            child_run: RunId::child_of(&parent, "tu_1_0"),
            caller: "planner".into(),
            parent_run: parent,
            hop_depth: 1,
        };
        let shown = format!("{request:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("[redacted]") && shown.contains("paris"),
            "{shown}"
        );
    }
}

/// A call to an A2A agent that a run still waits on, as the caller asks for its reply again
/// (after a restart, or when a reply may have been lost): enough to answer it even when the
/// host no longer knows the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct A2aCallRef {
    /// The calling agent.
    pub caller: String,
    /// The caller's run that placed the call.
    pub parent_run: RunId,
    /// The `call_agent` tool use that placed it.
    pub tool_use_id: String,
    /// The A2A agent called.
    pub callee: String,
    /// The call's child run id.
    pub child_run: RunId,
}
