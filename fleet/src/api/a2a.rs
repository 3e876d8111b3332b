//! The host's agents as A2A agents (A2A 1.0, JSON-RPC binding).
//!
//! | route                                          | what                                        |
//! |------------------------------------------------|---------------------------------------------|
//! | `GET /.well-known/agent-card.json`             | the host's card: its one agent's card, or a card with one skill per agent whose endpoint is `/a2a` |
//! | `GET /a2a/{agent}/.well-known/agent-card.json` | one agent's card                            |
//! | `POST /a2a/{agent}`                            | JSON-RPC for that agent's tasks             |
//! | `POST /a2a`                                    | JSON-RPC for every agent's tasks; a new message names its agent in `metadata.agent` (needless on a host of one agent) |
//!
//! An A2A task is a consort run ([`task_view`] holds the mapping of states): `SendMessage`
//! starts a root run exactly as `POST /runs` does, acting for the caller's bearer token, so
//! consent, visibility, approval gates and admission apply unchanged. It answers when the run
//! settles or stops to wait for an approval (`TASK_STATE_INPUT_REQUIRED`), at most after
//! [`ANSWER_WAIT`], or at once with `returnImmediately`. A reply of `approve` or `deny` to an
//! `INPUT_REQUIRED` task is the approval decision, taken when the caller may make it (an
//! operator, or the requester where the tool says `approval: requester`).
//! `SendStreamingMessage` and `SubscribeToTask` stream the task's changes as server-sent
//! events (the first event is the task, then status and artifact updates, and the stream ends
//! when the task settles or stops to wait), from the store, woken by the run feed as
//! [`super::follow`]'s streams are. `GetTask` reads one task, `ListTasks` pages through the
//! caller's tasks (an operator's through all) newest first, `CancelTask` cancels the run.
//!
//! Cards are public, as A2A discovery needs: they name the agents, what they say of
//! themselves, and the bearer scheme. Every method needs what the matching HTTP route needs:
//! a request without a usable token on a host that refuses anonymous callers is answered
//! HTTP 401 with `WWW-Authenticate: Bearer`; a task the caller may not see is
//! `TaskNotFoundError`, as one that does not exist. A request must name protocol version 1.0
//! in the `A2A-Version` header (A2A reads a request without it as 0.3, which is not served).
//!
//! This module translates A2A to calls on [`Host`] and decides nothing about runs; who may do
//! what is [`crate::access`]'s decision.
//!
//! The gateway's parts live in child modules, by what each owns: [`card`] the agent cards,
//! [`json_rpc`] the endpoints and taking a JSON-RPC request apart, [`tasks`] what each method
//! does with the task's run, [`streaming`] waiting on a task and its event streams, and
//! [`task_view`] how a run reads as a task (pure). This file holds what they share: the
//! request taken apart ([`Call`]), why a method did not answer ([`Failure`]) and how an
//! answer goes back ([`respond`]).

pub(super) mod card;
pub(super) mod json_rpc;
mod streaming;
pub(crate) mod task_view;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use consort_a2a::{A2aErrorCode, JsonRpcError, JsonRpcId, JsonRpcResponse};
use consort_actors::Host;
use consort_actors::visibility::Identity;

use super::follow::StreamSlots;
use crate::access::{Denial, Requester};
use crate::auth::HostAuth;

/// How long `SendMessage` waits for its run to settle or stop to wait.
pub(crate) const ANSWER_WAIT: Duration = super::mcp::ANSWER_WAIT;
/// Where an agent's endpoint and card live: `/a2a/{agent}`.
const AGENT_BASE: &str = "/a2a";

/// A request the JSON-RPC layer took apart: its id and who sent it.
struct Call {
    id: JsonRpcId,
    host: Host,
    auth: Arc<HostAuth>,
    streams: StreamSlots,
    headers: HeaderMap,
    identity: Identity,
    who: Requester,
    /// The agent the endpoint serves (`/a2a/{agent}`), `None` at `/a2a`.
    agent: Option<String>,
}

/// Why a method did not answer: the JSON-RPC error and the HTTP status it goes with (200 but
/// for authentication).
struct Failure {
    status: StatusCode,
    error: JsonRpcError,
}

impl Failure {
    /// What the host refuses this caller (HTTP 403), in words.
    fn forbidden(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            error: JsonRpcError::new(A2aErrorCode::UnsupportedOperation, message.into()),
        }
    }

    fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::OK,
            error: JsonRpcError::new(code, message),
        }
    }

    fn task_not_found(id: &str) -> Self {
        Self::new(
            A2aErrorCode::TaskNotFound,
            format!("no task `{id}` that this caller may see"),
        )
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::warn!("an A2A request failed inside the host: {e}");
        Self::new(A2aErrorCode::InternalError, e.to_string())
    }
}

impl From<Denial> for Failure {
    fn from(denial: Denial) -> Self {
        let api = super::ApiError::from(denial.clone());
        let (status, code) = match denial {
            Denial::Unauthenticated => (StatusCode::UNAUTHORIZED, A2aErrorCode::InvalidRequest),
            Denial::IdentityUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, A2aErrorCode::InternalError)
            }
            Denial::Forbidden(_) => (StatusCode::FORBIDDEN, A2aErrorCode::UnsupportedOperation),
            Denial::NotVisible => (StatusCode::OK, A2aErrorCode::TaskNotFound),
        };
        Self {
            status,
            error: JsonRpcError::new(code, api.message),
        }
    }
}

impl From<super::ApiError> for Failure {
    fn from(e: super::ApiError) -> Self {
        match e.code {
            "unknown_run" => Self::new(A2aErrorCode::TaskNotFound, e.message),
            _ => Self::internal(e.message),
        }
    }
}

impl From<consort_actors::ActorsError> for Failure {
    fn from(e: consort_actors::ActorsError) -> Self {
        Self::from(super::ApiError::from(e))
    }
}

/// What a method answers: a result, or a stream it has started.
enum Answer {
    Result(Value),
    Stream(Response),
}

fn respond(id: JsonRpcId, outcome: Result<Answer, Failure>) -> Response {
    match outcome {
        Ok(Answer::Result(result)) => Json(JsonRpcResponse::success(id, result)).into_response(),
        Ok(Answer::Stream(response)) => response,
        Err(failure) => {
            let mut response = (
                failure.status,
                Json(JsonRpcResponse::failure(id, failure.error)),
            )
                .into_response();
            if failure.status == StatusCode::UNAUTHORIZED {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}

fn result_of(value: &impl Serialize) -> Result<Answer, Failure> {
    serde_json::to_value(value)
        .map(Answer::Result)
        .map_err(Failure::internal)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn denials_keep_their_http_meaning() {
        let f = Failure::from(Denial::Unauthenticated);
        assert_eq!(f.status, StatusCode::UNAUTHORIZED);
        let f = Failure::from(Denial::NotVisible);
        assert_eq!((f.status, f.error.code), (StatusCode::OK, -32001));
        let f = Failure::from(Denial::Forbidden("not yours"));
        assert_eq!(f.status, StatusCode::FORBIDDEN);
        assert!(f.error.message.contains("not yours"));
        let response = respond(json!(1), Err(Failure::from(Denial::Unauthenticated)));
        assert_eq!(
            response
                .headers()
                .get(WWW_AUTHENTICATE)
                .map(HeaderValue::as_bytes),
            Some(&b"Bearer"[..])
        );
    }
}
