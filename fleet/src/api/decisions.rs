//! `POST /runs/{id}/approve`: an operator's (or, where the tool allows it, the requester's)
//! decision on a gate a run waits on. Approve or deny the gated tool, or, for a gate *in
//! doubt* (its tool was started before its host stopped and may or may not have run), record
//! what the tool did instead of running it again.
//!
//! The body is checked whole before anything is asked of the host ([`Decision`]): a decision
//! that contradicts itself (`record` with `approve: true`) or names no decision at all is a
//! 400, never a guess. Who may decide is [`crate::access`]'s rule (four eyes unless the tool
//! lets its requester decide), read against the gate the run waits on now. A decision may name
//! its gate, so that a decision sent twice, or sent after the run has moved on to another
//! gate, changes nothing instead of deciding the wrong one.
//!
//! This module only reads the decision and checks who sends it; what the decision does to the
//! run is the agent's run state machine's.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use consort_actors::Host;

use super::openapi::{DecidedDoc, ErrorDoc};
use super::{ApiError, parse_run_id, requester, stored_run};
use crate::access::{self, Action};
use crate::auth::HostAuth;

/// The body of `POST /runs/{id}/approve`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Decision {
    /// `true` runs the gated tool (again, for a gate in doubt), `false` refuses it. Required
    /// unless `record` is given.
    #[serde(default)]
    pub approve: Option<bool>,
    /// The gate decided (its id, as `GET /runs/{id}` and the run's `approval_requested` event
    /// show it). A decision that names a gate decides that gate only: the same decision again
    /// answers `already_decided: true` and changes nothing, and a gate that does not wait
    /// answers 409 `stale_decision`. Without it, the gate the run waits on is decided.
    #[serde(default)]
    pub gate: Option<String>,
    /// For a gate in doubt only (its tool was started before its host stopped and may or may
    /// not have run): do not run it again, and record this as its result.
    #[serde(default)]
    pub record: Option<RecordedOutcome>,
}

/// What an operator records as the result of a gated tool in doubt: exactly one of `result`
/// (it ran, and this is what it returned) and `error` (it failed, or did not run).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordedOutcome {
    /// The tool's result, as the model reads it.
    #[serde(default)]
    pub result: Option<String>,
    /// The tool's failure, as the model reads it.
    #[serde(default)]
    pub error: Option<String>,
}

impl Decision {
    /// The decision the body asks for, or why it is malformed.
    fn decision(self) -> Result<(Option<String>, consort_core::step::Decision), ApiError> {
        use consort_core::step::Decision as Decided;
        let bad = |message: &str| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_decision",
                message.to_owned(),
            )
        };
        let decision = match (self.approve, self.record) {
            (None, None) => return Err(bad("give `approve` (true or false), or `record`")),
            (Some(true), Some(_)) => {
                return Err(bad(
                    "`record` keeps the tool from running again: it cannot go with `approve: true`",
                ));
            }
            (Some(approve), None) => {
                if approve {
                    Decided::Approve
                } else {
                    Decided::Deny
                }
            }
            (_, Some(record)) => match (record.result, record.error) {
                (Some(content), None) => Decided::Record {
                    content,
                    is_error: false,
                },
                (None, Some(content)) => Decided::Record {
                    content,
                    is_error: true,
                },
                _ => return Err(bad("`record` takes exactly one of `result` and `error`")),
            },
        };
        if let Decided::Record { content, .. } = &decision
            && (content.trim().is_empty() || content.len() > MAX_RECORD_BYTES)
        {
            return Err(bad("a recorded result must be 1 to 65,536 bytes"));
        }
        if self
            .gate
            .as_ref()
            .is_some_and(|g| g.is_empty() || g.len() > 512)
        {
            return Err(bad("`gate` must be a gate id of 1 to 512 characters"));
        }
        Ok((self.gate, decision))
    }
}

/// Longest result an operator may record for a gate in doubt.
const MAX_RECORD_BYTES: usize = 65_536;

#[utoipa::path(
    post, path = "/runs/{id}/approve", tag = "runs",
    summary = "Decide a gate of a run: approve or deny its gated tool, or record what a tool in doubt did",
    params(("id" = String, Path, description = "The run id: `run_` and 32 hex digits")),
    request_body = Decision,
    responses(
        (status = 200, description = "the run after the decision, with the gate decided", body = DecidedDoc),
        (status = 400, description = "a malformed query or body", body = ErrorDoc), (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 403, description = "this caller may not decide this gate (four eyes)", body = ErrorDoc),
        (status = 404, description = "no such run that this caller may see", body = ErrorDoc),
        (status = 409, description = "the run is not waiting on an approval (`not_awaiting_approval`), the gate named does not wait (`stale_decision`), or a result was recorded for a gate that is not in doubt (`not_in_doubt`)", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn approve(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<Decision>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = parse_run_id(&id)?;
    let (_, who) = requester(&auth, &headers).await;
    access::identified(&who, auth.anonymous())?;
    let Json(body) = body?;
    let (named, decision) = body.decision()?;
    let run = stored_run(&host, &id).await?;
    // Whether this requester may decide the gate it names (four eyes) is the gate's own rule,
    // applied by the run's agent to the gate it decides: no read here can go stale.
    access::authorize(
        &who,
        auth.anonymous(),
        Action::Decide {
            owner: &run.principal,
        },
    )?;
    let decided = host
        .decide_as(&id, named.as_deref(), decision, who.decider())
        .await?;
    Ok(Json(decided).into_response())
}
