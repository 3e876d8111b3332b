//! The `/directory` routes: the peer directory of the host's goals over HTTP, what the
//! agents' own directory tools see, for a person or a program outside the fleet.
//!
//! | route                        | what                                                  |
//! |------------------------------|-------------------------------------------------------|
//! | `GET /directory`             | `?goal=G`: the directory packet of a goal             |
//! | `GET /directory/observe`     | `?agent=A[&run=R]`: typed state first, then an excerpt |
//! | `GET /directory/wait`        | `?agent=A&run=R[&until=]`: a wait pinned to the agent's incarnation |
//! | `POST /directory/deliver`    | `{agent, message, delivery_id, ...}`: a message into a peer's run |
//! | `GET /directory/delivery`    | `?agent=A&id=ID`: the receipt of an earlier delivery  |
//! | `GET /directory/attention`   | `[?goal=G]`: what in a goal needs a decision          |
//!
//! These routes do not go through [`crate::access`]'s route rules as the run routes do: the
//! directory has its own notion of who may see what (a caller's *audience*, from its
//! credentials, [`HostAuth::audience`]), and consort-core's `directory` rules apply it to every
//! row and excerpt. A caller whose scope cannot be established is not refused a packet: it
//! gets one of zero rows that names the scope gap, so a program can tell "nothing there" from
//! "not shown to you".
//!
//! Handlers here only read the query or body and call [`Host`]; they must not filter rows or
//! decide visibility themselves, or the HTTP view and the agents' view would part.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use consort_actors::Host;
use consort_actors::directory::{DeliveryRequest, WaitRequest};
use consort_core::directory::{Audience, ExcerptSource, WaitUntil};

use super::openapi::ErrorDoc;
use super::{ApiError, CallerBounds, MAX_WAIT_MS, parse_run_id};
use crate::auth::HostAuth;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DirectoryQuery {
    /// The goal; the caller's only one when absent.
    goal: Option<String>,
}

/// `GET /directory?goal=G`: the peer directory as the caller may see it. The caller's scope
/// comes from its credentials ([`HostAuth::audience`]); a caller without one gets a packet of
/// zero rows that names the scope gap, with status 200 (the packet is the answer).
#[utoipa::path(
    get, path = "/directory", tag = "directory",
    summary = "The peer directory of a goal",
    params(DirectoryQuery),
    responses(
        (status = 200, description = "the directory packet: a row per registered agent, or a `scope_gap` when the caller's scope cannot be established", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn directory(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    query: Result<Query<DirectoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let audience = audience(&auth, &headers).await;
    let goal = q.goal.filter(|g| !g.trim().is_empty());
    let packet = host.directory(audience, goal).await?;
    Ok(Json(packet).into_response())
}

/// Who an HTTP caller is to the directory (see [`HostAuth::audience`]).
async fn audience(auth: &HostAuth, headers: &HeaderMap) -> Audience {
    let authorization = headers
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("<not text>"));
    let identity = auth.identify(authorization).await;
    auth.audience(&identity)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ObserveQuery {
    /// The agent observed.
    agent: String,
    /// One of its runs.
    run: Option<String>,
    /// `events` (default) or `output`: where an excerpt comes from.
    source: Option<String>,
    /// Lines of excerpt, 1 to 100 (20 unless given).
    lines: Option<usize>,
}

/// `GET /directory/observe?agent=A[&run=R][&source=events|output][&lines=N]`: typed state
/// first; an excerpt only of a run the caller may read (an operator's, here).
#[utoipa::path(
    get, path = "/directory/observe", tag = "directory",
    summary = "Observe an agent and one of its runs",
    params(ObserveQuery),
    responses(
        (status = 200, description = "typed state first; an excerpt only of a run the caller may read", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn observe(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    query: Result<Query<ObserveQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let audience = audience(&auth, &headers).await;
    let run = q.run.as_deref().map(parse_run_id).transpose()?;
    let source = match q.source.as_deref() {
        None | Some("events") => ExcerptSource::Events,
        Some("output") => ExcerptSource::Output,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_source",
                format!("source `{other}` is not one of: events, output"),
            ));
        }
    };
    let observation = host
        .observe(audience, &q.agent, run, source, q.lines.unwrap_or(20))
        .await?;
    Ok(Json(observation).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct WaitPeerQuery {
    /// The agent whose run is waited on.
    agent: String,
    /// The run.
    run: String,
    /// `settled` (default), `blocked` or `changed`.
    until: Option<String>,
    /// With `changed`: a change after this event.
    after_seq: Option<u64>,
    /// The incarnation the wait is pinned to (the agent's current one when absent).
    incarnation: Option<String>,
    /// How long to wait (30,000 unless given, at most 600,000).
    timeout_ms: Option<u64>,
}

/// `GET /directory/wait?agent=A&run=R[&until=settled|blocked|changed][&after_seq=N]
/// [&incarnation=I][&timeout_ms=T]`: a wait pinned to the agent's incarnation; the answer
/// names the pin and how it ended (`matched`, `replaced`, `not_running`, `unknown_run`,
/// `unreachable`, `timeout`). A caller that may not wait on the run gets 403 with the gap.
#[utoipa::path(
    get, path = "/directory/wait", tag = "directory",
    summary = "Wait on a run, pinned to its agent's incarnation",
    params(WaitPeerQuery),
    responses(
        (status = 200, description = "how the wait ended: `matched`, `replaced`, `not_running`, `unknown_run`, `unreachable` or `timeout`", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
        (status = 403, description = "the caller may not wait on this run (the scope gap)", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn wait_peer(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(callers): State<CallerBounds>,
    headers: HeaderMap,
    query: Result<Query<WaitPeerQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let audience = audience(&auth, &headers).await;
    let run = parse_run_id(&q.run)?;
    let until = match q.until.as_deref() {
        None => WaitUntil::Settled,
        Some(text) => WaitUntil::parse(text).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_until",
                format!("until `{text}` is not one of: settled, blocked, changed"),
            )
        })?,
    };
    let request = WaitRequest {
        agent: q.agent,
        run,
        until,
        after_seq: q.after_seq.unwrap_or(0),
        incarnation: q.incarnation.filter(|i| !i.is_empty()),
    };
    let asked = Duration::from_millis(q.timeout_ms.unwrap_or(30_000));
    let (_, who) = super::requester(&auth, &headers).await;
    let (timeout, _held) = callers.wait(&who, asked)?;
    match host.wait_run(audience, request, timeout).await? {
        Ok(answer) => Ok(Json(answer).into_response()),
        Err(gap) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            gap.code(),
            gap.to_string(),
        )),
    }
}

#[derive(Deserialize, ToSchema)]
pub(super) struct DeliverBody {
    /// The peer agent.
    agent: String,
    /// A run of the peer's to deliver into; a new run when absent.
    run: Option<String>,
    /// The message.
    message: String,
    /// The sender's id for this delivery: the same id never delivers twice.
    delivery_id: String,
    /// How long to wait for the receipt (10,000 unless given).
    timeout_ms: Option<u64>,
    /// How long to watch for activity after the receipt (at most 60,000).
    window_ms: Option<u64>,
}

/// `POST /directory/deliver {agent, run?, message, delivery_id, timeout_ms?, window_ms?}`: a
/// message into a run (or a new run) of `agent`, from the caller (an operator here). The answer
/// is the outcome: `active`, `stalled` (enqueued, nothing followed in the window: never
/// success), `rejected` with its code, `timeout` (no receipt in time; nothing is resent) or
/// `queued`.
#[utoipa::path(
    post, path = "/directory/deliver", tag = "directory",
    summary = "Deliver a message to a peer agent",
    request_body = DeliverBody,
    responses(
        (status = 200, description = "the outcome: `active`, `stalled`, `rejected` (with its code) or `timeout`", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn deliver(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    body: Result<Json<DeliverBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let audience = audience(&auth, &headers).await;
    let run = body.run.as_deref().map(parse_run_id).transpose()?;
    let request = DeliveryRequest {
        agent: body.agent,
        run,
        delivery_id: body.delivery_id,
        text: body.message,
        timeout: Duration::from_millis(body.timeout_ms.unwrap_or(10_000).min(MAX_WAIT_MS)),
        window: body
            .window_ms
            .map(|ms| Duration::from_millis(ms.min(60_000))),
    };
    Ok(Json(host.deliver(audience, request).await?).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeliveryStatusQuery {
    /// The peer agent.
    agent: String,
    /// The delivery id.
    id: String,
    /// The run it was delivered into.
    run: Option<String>,
}

/// `GET /directory/delivery?agent=A&id=ID[&run=R]`: the receipt of the caller's earlier
/// delivery (`enqueued` where it landed, `queued` in this host's outbox, `unknown_delivery` when
/// it is not there, `unreachable` when the host that holds it could not be asked): what a
/// sender reads after a `timeout` instead of sending again.
#[utoipa::path(
    get, path = "/directory/delivery", tag = "directory",
    summary = "The receipt of an earlier delivery",
    params(DeliveryStatusQuery),
    responses(
        (status = 200, description = "`enqueued` where it landed, `queued`, `unknown_delivery`, or `unreachable` (with `host` and `detail`)", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn delivery_status(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    query: Result<Query<DeliveryStatusQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let audience = audience(&auth, &headers).await;
    let run = q.run.as_deref().map(parse_run_id).transpose()?;
    Ok(Json(host.delivery_status(audience, &q.agent, run, &q.id).await?).into_response())
}

/// `GET /directory/attention[?goal=G]`: what in the goal needs a decision, from typed facts.
#[utoipa::path(
    get, path = "/directory/attention", tag = "directory",
    summary = "What in a goal needs a decision",
    params(DirectoryQuery),
    responses(
        (status = 200, description = "the attention rollup", body = serde_json::Value),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn attention(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    query: Result<Query<DirectoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let audience = audience(&auth, &headers).await;
    let goal = q.goal.filter(|g| !g.trim().is_empty());
    Ok(Json(host.attention(audience, goal).await?).into_response())
}
