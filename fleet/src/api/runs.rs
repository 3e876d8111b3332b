//! The routes of one run: start it, read it, read or follow its event log, cancel it.
//!
//! | route                     | what                                                   |
//! |---------------------------|--------------------------------------------------------|
//! | `POST /runs`              | `{agent, input}` → the stored run (201)                |
//! | `GET /runs/{id}`          | one run, with the gate it waits on when blocked; `?wait_ms=N` waits for it to settle |
//! | `GET /runs/{id}/events`   | a page of its event log, or (`?follow=1`) the log live through [`super::follow`] |
//! | `POST /runs/{id}/cancel`  | `{reason?}`: stop an unsettled run                     |
//!
//! Deciding a run's gate is [`super::decisions`]'s, listing runs [`super::jobs`]'.
//!
//! Each handler asks who the caller is before it reads anything, so that a caller who may not
//! see a run learns nothing from the answer, not even that the run exists: a run it may not
//! see answers 404 `unknown_run`, as one that does not. The bounds on what a caller sends (the
//! input's size, the cancel reason's) are checked here, before the host is asked, so a
//! refusal costs the host nothing. Whether a run may start, and what happens to it after, is
//! the host's and the run state machine's: handlers here must not decide it.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use consort_actors::page::page_size;
use consort_actors::{Channel, Host, RunRecord, RunStatus};

use super::follow::{self, StreamSlots};
use super::openapi::{ErrorDoc, EventPageDoc, RunDoc};
use super::{
    ApiError, CallerBounds, MAX_INPUT_BYTES, parse_run_id, requester, stored_run, visible_run,
};
use crate::access::{self, Action};
use crate::auth::HostAuth;

/// The body of `POST /runs`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    /// An agent this host serves.
    pub agent: String,
    /// What the run is asked (not empty, at most 256 KiB).
    pub input: String,
    /// `api` (default) or `cli`.
    #[serde(default)]
    pub channel: Option<String>,
    /// A budget over the run's whole call tree. It narrows the agent's own `limits.tree`
    /// field by field (it can never widen it); every run of the tree is counted against it,
    /// on every host the tree reaches.
    #[serde(default)]
    pub budget: Option<RunBudget>,
}

/// A budget over a run's whole call tree, as a request states it (`POST /runs`). Each field
/// is optional; a field set is between 1 and its bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunBudget {
    /// The most runs of the tree, the root run included (1 to 100000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u64>,
    /// The most tokens all the tree's model turns may use (1 to 1000000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The most seconds the tree may work, from the root run's creation (1 to 604800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_s: Option<u64>,
}

impl From<RunBudget> for consort_core::TreeLimits {
    fn from(b: RunBudget) -> Self {
        Self {
            max_runs: b.max_runs,
            max_tokens: b.max_tokens,
            max_wall_s: b.max_wall_s,
        }
    }
}

/// The body of `POST /runs/{id}/cancel` (optional: no body cancels without a reason).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelRequest {
    /// Why, recorded with the cancel and in the run's error (at most 1,000 bytes).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Longest cancel reason accepted over HTTP.
const MAX_REASON_BYTES: usize = 1_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct WaitQuery {
    /// Wait up to this many milliseconds (at most 600,000) for the run to settle.
    wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Events after this sequence number (0: from the first).
    after: Option<u64>,
    /// Events per page: 100 unless given, at most 1,000.
    limit: Option<usize>,
    /// `1`: stream the log live (`text/event-stream`: `event` per event, then `end` with the
    /// settled run) instead of a page.
    follow: Option<String>,
}

#[utoipa::path(
    post, path = "/runs", tag = "runs",
    summary = "Start a run",
    description = "Starts a run of `agent` on `input`, acting for the bearer token's principal (anonymous without one), and answers at once with the stored run.",
    request_body = StartRun,
    responses(
        (status = 201, description = "the run, as stored", body = RunDoc),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 404, description = "no such agent here", body = ErrorDoc),
        (status = 409, description = "refused: the agent is down or at its admission limit (the refusal's code)", body = ErrorDoc),
        (status = 413, description = "input or body too large", body = ErrorDoc),
        (status = 429, description = "the principal's share of the agent is taken, or it starts runs faster than the host allows one caller (`too_many_runs`, with `Retry-After`)", body = ErrorDoc),
        (status = 503, description = "draining, or the store could not be written", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn start_run(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(callers): State<CallerBounds>,
    headers: HeaderMap,
    body: Result<Json<StartRun>, JsonRejection>,
) -> Result<Response, ApiError> {
    // Who is asking comes first: an unauthenticated caller learns nothing about agents.
    let (_, who) = requester(&auth, &headers).await;
    access::authorize(&who, auth.anonymous(), Action::StartRun)?;
    callers.start_run(&who)?;
    let Json(body) = body?;
    if body.input.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "empty_input",
            "input must not be empty",
        ));
    }
    if body.input.len() > MAX_INPUT_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "input_too_large",
            format!(
                "input is {} bytes; the limit is {MAX_INPUT_BYTES}",
                body.input.len()
            ),
        ));
    }
    if !host.agents().iter().any(|a| a == &body.agent) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_agent",
            format!(
                "no agent named `{}` is served here (agents: {})",
                body.agent,
                host.agents().join(", ")
            ),
        ));
    }
    let channel = match body.channel.as_deref() {
        None | Some("api") => Channel::Api,
        Some("cli") => Channel::Cli,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_channel",
                format!("channel `{other}` is not one of: api, cli"),
            ));
        }
    };
    let budget = body.budget.map(consort_core::TreeLimits::from);
    if let Some(Err(message)) = budget.map(|b| b.check()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_budget",
            format!("budget: {message}"),
        ));
    }
    let (identity, who) = requester(&auth, &headers).await;
    access::authorize(&who, auth.anonymous(), Action::StartRun)?;
    let trace = crate::trace_header::incoming_trace(&headers);
    let run = host
        .start_run_budgeted(&body.agent, &body.input, channel, identity, trace, budget)
        .await?;
    Ok((StatusCode::CREATED, Json(run)).into_response())
}

#[utoipa::path(
    get, path = "/runs/{id}", tag = "runs",
    summary = "Read a run",
    params(("id" = String, Path, description = "The run id: `run_` and 32 hex digits"), WaitQuery),
    responses(
        (status = 200, description = "the run", body = RunDoc),
        (status = 400, description = "a malformed query or body", body = ErrorDoc), (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc), (status = 404, description = "no such run that this caller may see", body = ErrorDoc),
        (status = 429, description = "the caller holds as many waits as one caller may (`too_many_waits`, with `Retry-After`)", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn get_run(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(callers): State<CallerBounds>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let id = parse_run_id(&id)?;
    let run = visible_run(&host, &auth, &headers, &id).await?;
    let run = match q.wait_ms {
        Some(ms) if ms > 0 && !run.status.is_settled() => {
            let (_, who) = requester(&auth, &headers).await;
            let (bound, _held) = callers.wait(&who, Duration::from_millis(ms))?;
            host.wait(&id, bound).await?
        }
        _ => run,
    };
    let gate = if run.status == RunStatus::Blocked {
        host.pending_gate(&run).await?.map(WaitingGate::from)
    } else {
        None
    };
    let budget = host.tree_budget(&run).await?;
    Ok(Json(RunRead { run, gate, budget }).into_response())
}

/// A run as `GET /runs/{id}` answers it: with the gate it waits on, when it is blocked, and
/// its call tree's budget with what the tree spent of it, when it has one.
#[derive(Serialize)]
struct RunRead {
    #[serde(flatten)]
    run: RunRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<WaitingGate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<consort_core::budget::BudgetReport>,
}

/// The gate a blocked run waits on, as `GET /runs/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WaitingGate {
    /// The gate's id: what a decision names.
    pub id: String,
    /// The gated tool.
    pub tool: String,
    /// The tool use it gates.
    pub tool_use_id: String,
    /// The input the model gave the tool.
    pub input: serde_json::Value,
    /// The tool was started before its host stopped and may or may not have run.
    pub in_doubt: bool,
    /// The run's own requester may decide it, besides an operator.
    pub requester_may_decide: bool,
}

impl From<consort_core::event::ApprovalRequested> for WaitingGate {
    fn from(asked: consort_core::event::ApprovalRequested) -> Self {
        Self {
            id: asked.gate,
            tool: asked.tool,
            tool_use_id: asked.tool_use_id,
            input: asked.input,
            in_doubt: asked.in_doubt,
            requester_may_decide: asked.requester_may_decide,
        }
    }
}

#[utoipa::path(
    get, path = "/runs/{id}/events", tag = "runs",
    summary = "Read or follow a run's event log",
    params(("id" = String, Path, description = "The run id: `run_` and 32 hex digits"), EventsQuery),
    responses(
        (status = 200, description = "a page of events, oldest first; with `follow=1` a stream of server-sent events", content(
            (EventPageDoc = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "a malformed query or body", body = ErrorDoc), (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc), (status = 404, description = "no such run that this caller may see", body = ErrorDoc),
        (status = 429, description = "the caller holds as many live streams as one caller may", body = ErrorDoc),
        (status = 503, description = "too many live streams open", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn get_events(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(streams): State<StreamSlots>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let id = parse_run_id(&id)?;
    visible_run(&host, &auth, &headers, &id).await?;
    if follow::wants_follow(q.follow.as_deref())? {
        if q.limit.is_some() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                "a live stream sends every event; drop `limit` or `follow`",
            ));
        }
        // A client that reconnects says where it was; `after` wins when both are given.
        let resumed = headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let after = q.after.or(resumed).unwrap_or(0);
        let (_, who) = requester(&auth, &headers).await;
        let slot = streams.take(&who)?;
        return Ok(follow::run_events(host, id, after, slot));
    }
    let limit = page_size(q.limit);
    let after = q.after.unwrap_or(0);
    let page = host.events_page(&id, after, limit).await?.bounded();
    Ok(Json(page).into_response())
}

#[utoipa::path(
    post, path = "/runs/{id}/cancel", tag = "runs",
    summary = "Cancel a run that has not settled",
    description = "The run settles `failed` with error `canceled by <who>[: <reason>]` and a `canceled` event. Its model turn or tool still out finishes unread; calls it placed run on and their replies change nothing; a delegated run's caller gets a failed reply. The run's own requester or an operator may cancel it.",
    params(("id" = String, Path, description = "The run id: `run_` and 32 hex digits")),
    request_body = Option<CancelRequest>,
    responses(
        (status = 200, description = "the run after the cancel", body = RunDoc),
        (status = 400, description = "a malformed query or body", body = ErrorDoc), (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 403, description = "this caller may not cancel runs (anonymous callers)", body = ErrorDoc),
        (status = 404, description = "no such run that this caller may see", body = ErrorDoc),
        (status = 409, description = "the run has already settled (`already_settled`)", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn cancel(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let id = parse_run_id(&id)?;
    let (_, who) = requester(&auth, &headers).await;
    access::identified(&who, auth.anonymous())?;
    let request = cancel_request(&body)?;
    let run = stored_run(&host, &id).await?;
    access::authorize(
        &who,
        auth.anonymous(),
        Action::Cancel {
            owner: &run.principal,
        },
    )?;
    let run = host.cancel_as(&id, who.decider(), request.reason).await?;
    Ok(Json(run).into_response())
}

/// A cancel's body: none, or a JSON object with an optional reason of bounded size.
fn cancel_request(body: &[u8]) -> Result<CancelRequest, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CancelRequest::default());
    }
    let request: CancelRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body must be a JSON object like {{\"reason\": \"...\"}}: {e}"),
        )
    })?;
    if request
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_REASON_BYTES)
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_reason",
            format!("a cancel reason may be at most {MAX_REASON_BYTES} bytes"),
        ));
    }
    Ok(request)
}
