//! Tools an agent's model can use, besides `call_agent` and `check_run`.
//!
//! A [`Tool`] is declared in agent.yaml (today: `sql`) or registered by an embedding app. It
//! runs with the agent's own env ([`ToolContext::env`]): the env is visible to the agent's own
//! tools only, never to its model, and never to a caller. A tool declared with
//! `approval: required` is parked by the engine until an operator decides; the tool itself
//! never sees that gate.
//!
//! A tool also carries what visibility and authorization read: its auth markers, its guards
//! and its own resource-dependent check ([`Tool::auth_markers`], [`Tool::guards`],
//! [`Tool::check_resource`]); the engine runs them through the authorization pipeline
//! (`tool_guard`, which imports this module, not the other way round) before the handler.
//!
//! The declared `sql` tool and the bounds of its queries live in `sql`; the tools an MCP
//! server lists (`kind: mcp`), and the seam a host's MCP client plugs into, in `served`.
//!
//! This module never places calls and never writes run state; it runs one tool use and returns
//! its text.

mod agent_tools;
mod listing;
mod served;
mod sql;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use consort_config::{Approval, ToolConfig, ToolKind};
use consort_net::RunId;

use crate::guard::{Guard, declared_guard};
use crate::model::ToolSpec;
use crate::visibility::{AuthMarkers, Identity, PolicyRef};

pub(crate) use agent_tools::{AgentTools, ListingWaiter};
pub(crate) use listing::{Listed, list_due};
pub(crate) use served::{DueListing, ServerSlots};
pub use served::{
    ListFuture, ListedTool, MAX_RELIST_AFTER, RELIST_AFTER, ToolServer, ToolServers, relist_after,
    schema_problem, served_tool_name,
};
pub use sql::{SQL_MAX_OUTPUT_BYTES, SQL_MAX_ROWS, SQL_MAX_VALUE_BYTES, SqlTool};

/// What a tool may know about the run that uses it.
#[derive(Clone, Copy, Debug)]
pub struct ToolContext<'a> {
    /// The agent whose run uses the tool.
    pub agent: &'a str,
    /// The run that uses the tool.
    pub run_id: &'a RunId,
    /// The run's input text.
    pub input: &'a str,
    /// The agent's env from its agent.yaml.
    pub env: &'a BTreeMap<String, String>,
}

/// Why a tool use failed; the text goes back to the model as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    #[error("invalid input: {0}")]
    /// The input does not match the tool's schema.
    InvalidInput(String),
    #[error("forbidden: {0}")]
    /// The use is not allowed.
    Forbidden(String),
    #[error("{0}")]
    /// The tool ran and failed.
    Failed(String),
    #[error(
        "timed out: the query ran longer than its limit of {limit_ms} ms and was stopped; ask \
         for less (a narrower WHERE, a LIMIT, fewer joins)"
    )]
    /// The tool's time limit stopped the use.
    TimedOut {
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    #[error(
        "too large: a value would be longer than {limit_bytes} bytes; select a part of it \
         (substr(), length()) instead"
    )]
    /// A value the use would make is longer than the tool allows.
    TooLarge {
        /// The longest value allowed, in bytes.
        limit_bytes: u64,
    },
    #[error(
        "the tool server `{server}` is unavailable: {detail}; answer without its tools, or try \
         again later"
    )]
    /// The server behind the tool could not be started or reached, or it ended the session.
    ServerUnavailable {
        /// The declared name of the server (its agent.yaml entry).
        server: String,
        /// What went wrong.
        detail: String,
    },
    #[error(
        "timed out: the tool server `{server}` did not answer within {limit_ms} ms and the use \
         was abandoned; try again with a smaller request, or answer without it"
    )]
    /// The server behind the tool did not answer within its time limit.
    ServerTimedOut {
        /// The declared name of the server.
        server: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    #[error(
        "the tool reported an error: {0}; check the arguments against the tool's input schema, \
         or answer without it"
    )]
    /// The tool ran and reported an error of its own (an MCP result with `isError`).
    Reported(String),
}

/// The boxed future a [`Tool`] returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>>;

/// One tool. Implementations must not panic on any input.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and input schema, as the model is told.
    fn spec(&self) -> ToolSpec;
    /// Whether a use must wait for an operator's approval.
    fn approval(&self) -> Approval {
        Approval::None
    }
    /// Runs the tool on `input`; the text answered goes back to the model.
    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a>;
    /// The markers visibility's T0 reads: an anonymous marker and the declared policies (the
    /// agent's fallback policy and the guard flag are added by the engine).
    fn auth_markers(&self) -> AuthMarkers {
        AuthMarkers::default()
    }
    /// The guards that run before the handler (see `crate::guard`).
    fn guards(&self) -> Vec<Arc<dyn Guard>> {
        Vec::new()
    }
    /// The tool's own resource-dependent check, with the arguments, after the guards and
    /// before the handler. `Err` is the refusal the model reads.
    fn check_resource(&self, _caller: &Identity, _input: &Value) -> Result<(), String> {
        Ok(())
    }
}

/// Builds the tool an agent.yaml declaration describes, with its `auth:` and `guard:`; `None`
/// for an entry of `kind: mcp`, which stands for the tools its server lists (see `served`).
pub fn declared_tool(config: &ToolConfig) -> Option<Arc<dyn Tool>> {
    let inner: Arc<dyn Tool> = match &config.kind {
        ToolKind::Sql {
            database,
            bind_env,
            timeout_ms,
        } => Arc::new(SqlTool {
            name: config.name.clone(),
            description: config.description.clone(),
            database: database.clone(),
            approval: config.approval,
            bind_env: bind_env.clone(),
            timeout: Duration::from_millis(u64::from(*timeout_ms)),
        }),
        ToolKind::Mcp(_) => return None,
    };
    Some(declare(config, inner))
}

/// `inner` with the markers and guards of the agent.yaml entry `config`.
fn declare(config: &ToolConfig, inner: Arc<dyn Tool>) -> Arc<dyn Tool> {
    declare_guarded(
        config,
        inner,
        config.guard.iter().map(declared_guard).collect(),
    )
}

/// `inner` with the markers of the agent.yaml entry `config` and the `guards` built from it
/// (shared by the tools of one entry that stands for several).
fn declare_guarded(
    config: &ToolConfig,
    inner: Arc<dyn Tool>,
    guards: Vec<Arc<dyn Guard>>,
) -> Arc<dyn Tool> {
    let markers = config
        .auth
        .as_ref()
        .map_or_else(AuthMarkers::default, |auth| AuthMarkers {
            anonymous_marker: auth.anonymous,
            policies: auth
                .policies
                .iter()
                .map(|p| {
                    // consort-config checked the form; a name that still fails fails closed.
                    PolicyRef::parse(p)
                        .unwrap_or_else(|_| PolicyRef::Named("invalid-policy".into()))
                })
                .collect(),
            fallback_policy: None,
            guard: false,
        });
    Arc::new(Declared {
        inner,
        markers,
        guards,
    })
}

/// A declared tool with the markers and guards of its agent.yaml entry.
struct Declared {
    inner: Arc<dyn Tool>,
    markers: AuthMarkers,
    guards: Vec<Arc<dyn Guard>>,
}

impl Tool for Declared {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }
    fn approval(&self) -> Approval {
        self.inner.approval()
    }
    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        self.inner.invoke(ctx, input)
    }
    fn auth_markers(&self) -> AuthMarkers {
        self.markers.clone()
    }
    fn guards(&self) -> Vec<Arc<dyn Guard>> {
        self.guards.clone()
    }
    fn check_resource(&self, caller: &Identity, input: &Value) -> Result<(), String> {
        self.inner.check_resource(caller, input)
    }
}

/// Invokes `tool` on a task of its own, so a tool that panics fails its own use and nothing
/// else: the text the model reads and whether it is an error (`via_meta`: the use came
/// through `invoke_tool`, whose failures read as its typed JSON errors).
pub(crate) async fn invoke_isolated(
    tool: Arc<dyn Tool>,
    (agent, run_id, run_input): (String, RunId, String),
    env: BTreeMap<String, String>,
    input: Value,
    via_meta: bool,
) -> (String, bool) {
    let invocation = tokio::spawn(async move {
        let ctx = ToolContext {
            agent: &agent,
            run_id: &run_id,
            input: &run_input,
            env: &env,
        };
        tool.invoke(ctx, &input).await
    });
    let outcome = invocation.await.unwrap_or_else(|e| {
        tracing::warn!("tool task ended abnormally: {e}");
        Err(ToolError::Failed(
            "the tool failed unexpectedly (it panicked); nothing was returned".into(),
        ))
    });
    match outcome {
        Ok(text) => (text, false),
        Err(e) => (crate::meta_tools::tool_error_text(&e, via_meta), true),
    }
}
