//! The HTTP API of one host.
//!
//! | route                       | what                                                  |
//! |-----------------------------|-------------------------------------------------------|
//! | `POST /runs`                | `{agent, input}` → the stored run (201); the run acts for the `Authorization: Bearer` token's principal |
//! | `GET /runs/{id}`            | one run; `?wait_ms=N` waits up to N ms for it to settle |
//! | `GET /runs/{id}/events`     | a page of its event log: `?after=SEQ&limit=N` → `{events, next_after}`; `?follow=1` streams it live until the run settles (see [`follow`]) |
//! | `POST /runs/{id}/approve`   | `{approve: bool}`: an operator's decision             |
//! | `POST /runs/{id}/cancel`    | `{reason?}`: stop an unsettled run; it settles `failed` (409 `already_settled` once settled) |
//! | `GET /jobs`                 | a page of runs, newest first: `?agent=&cursor=&limit=N` → `{runs, next}`; `?follow=1` streams every run that changes from then on |
//! | `GET /agents`               | the agents served, whether each is up, and why not    |
//! | `POST /reload`              | `{}`: re-read every agent.yaml now, restart agents that are down: `{changed, revived}` |
//! | `GET /metrics`              | the host's metrics, Prometheus text format (operators only; [`crate::metrics_route`]) |
//! | `GET /openapi.json`         | this table and the rest, machine-readable: generated from the routes ([`openapi`]) |
//!
//! Who may call which route is [`crate::access`]'s decision, from the requester that
//! [`HostAuth`] establishes; which requests reach a handler at all (the `Host` and `Origin`
//! checks, JSON-only writes, size and time bounds) is [`crate::listener`]'s. Pages hold 100
//! rows unless `limit` says otherwise, and at most 1,000.
//!
//! Every error is JSON, `{"error": {"code", "message"}}`, with a 4xx status for bad requests.
//! Handlers only translate HTTP to calls on [`Host`]; they decide nothing about runs.

// `#[utoipa::path]` expands `params(Query)` into fully qualified paths.
#![allow(unused_qualifications)]

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRef, Path, Query, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tower_http::limit::RequestBodyLimit;
use tower_http::timeout::RequestBodyTimeoutLayer;
use utoipa::{IntoParams, OpenApi as _, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use consort_actors::directory::{DeliveryRequest, WaitRequest};
use consort_actors::page::{RunCursor, page_size};
use consort_actors::visibility::Identity;
use consort_actors::{ActorsError, Channel, Host, RunRecord, RunStatus};
use consort_core::directory::{Audience, ExcerptSource, WaitUntil};
use consort_net::RunId;

use crate::access::{self, Action, Denial, Requester};
use follow::StreamSlots;
use openapi::{
    AgentStatusDoc, DecidedDoc, ErrorDoc, EventPageDoc, ReloadedDoc, RunDoc, RunPageDoc,
};

mod a2a;
mod follow;
mod mcp;
pub(crate) mod openapi;
use crate::auth::HostAuth;
use crate::listener::{HostCheck, HttpBounds};

/// Longest wait a `GET /runs/{id}?wait_ms=` may ask for.
const MAX_WAIT_MS: u64 = 600_000;
/// Longest run input accepted over HTTP.
const MAX_INPUT_BYTES: usize = 256 * 1024;

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
struct WaitQuery {
    /// Wait up to this many milliseconds (at most 600,000) for the run to settle.
    wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct JobsQuery {
    /// Only this agent's runs.
    agent: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// Runs per page: 100 unless given, at most 1,000.
    limit: Option<usize>,
    /// `1`: stream every run stored or changed from now on (`text/event-stream`, events `run`
    /// and `lagged`) instead of a page.
    follow: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// Events after this sequence number (0: from the first).
    after: Option<u64>,
    /// Events per page: 100 unless given, at most 1,000.
    limit: Option<usize>,
    /// `1`: stream the log live (`text/event-stream`: `event` per event, then `end` with the
    /// settled run) instead of a page.
    follow: Option<String>,
}

/// An API error: a status, a stable code and a message for people.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<ActorsError> for ApiError {
    fn from(e: ActorsError) -> Self {
        match &e {
            ActorsError::UnknownRun(_) => {
                Self::new(StatusCode::NOT_FOUND, "unknown_run", e.to_string())
            }
            ActorsError::UnknownAgent(_) => {
                Self::new(StatusCode::NOT_FOUND, "unknown_agent", e.to_string())
            }
            ActorsError::Refused(refusal @ consort_core::Refusal::PrincipalSaturated { .. }) => {
                Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    refusal.code(),
                    refusal.to_string(),
                )
            }
            ActorsError::Refused(refusal @ consort_core::Refusal::Draining { .. }) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                refusal.code(),
                refusal.to_string(),
            ),
            ActorsError::Refused(refusal) => {
                Self::new(StatusCode::CONFLICT, refusal.code(), e.to_string())
            }
            // The disk filled under the request: nothing was stored; worth retrying later.
            ActorsError::StoreNotWritable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_not_writable",
                e.to_string(),
            ),
            _ => {
                tracing::error!("API request failed: {e}");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

impl From<Denial> for ApiError {
    fn from(denial: Denial) -> Self {
        match denial {
            Denial::Unauthenticated => Self::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this host needs a bearer token: pass --token or set CONSORT_TOKEN (Authorization: Bearer <token>)",
            ),
            Denial::IdentityUnavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "identity_unavailable",
                "the identity hook could not answer about this token; try again",
            ),
            Denial::Forbidden(reason) => Self::new(StatusCode::FORBIDDEN, "forbidden", reason),
            Denial::NotVisible => Self::new(
                StatusCode::NOT_FOUND,
                "unknown_run",
                "no such run that this caller may see",
            ),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than this host accepts",
            );
        }
        if e.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            return Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "json_only",
                "send the body as JSON, with Content-Type: application/json",
            );
        }
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body must be a JSON object: {}", e.body_text()),
        )
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!(
                "the query string is not what this route takes: {}",
                e.body_text()
            ),
        )
    }
}

fn parse_run_id(text: &str) -> Result<RunId, ApiError> {
    RunId::parse(text)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_run_id", e.to_string()))
}

/// What the handlers share: the host, and the check of bearer tokens.
#[derive(Clone)]
pub struct ApiState {
    pub host: Host,
    pub auth: Arc<HostAuth>,
    /// The budget of live streams.
    streams: StreamSlots,
    /// This API's description, as served.
    description: ApiDescription,
}

/// The OpenAPI document of the routes, serialized once when the router is built.
#[derive(Clone)]
struct ApiDescription(Arc<str>);

impl FromRef<ApiState> for ApiDescription {
    fn from_ref(state: &ApiState) -> Self {
        state.description.clone()
    }
}

/// Who a request is: its identity (what a run it starts acts for) and the requester the
/// route rules read.
pub(crate) async fn requester(auth: &HostAuth, headers: &HeaderMap) -> (Identity, Requester) {
    let authorization = headers
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("<not text>"));
    let identity = auth.identify(authorization).await;
    let requester = auth.requester(&identity);
    (identity, requester)
}

/// Checks `action` for the request's requester.
async fn allowed(
    auth: &HostAuth,
    headers: &HeaderMap,
    action: Action<'_>,
) -> Result<Requester, ApiError> {
    let (_, who) = requester(auth, headers).await;
    access::authorize(&who, auth.anonymous(), action)?;
    Ok(who)
}

/// Reads a run and checks that the request may see it; a run it may not see answers like one
/// that does not exist.
async fn visible_run(
    host: &Host,
    auth: &HostAuth,
    headers: &HeaderMap,
    id: &RunId,
) -> Result<RunRecord, ApiError> {
    let (_, who) = requester(auth, headers).await;
    // Refuse an unauthenticated caller before touching the stores.
    access::identified(&who, auth.anonymous())?;
    let run = stored_run(host, id).await?;
    access::authorize(
        &who,
        auth.anonymous(),
        Action::ReadRun {
            owner: &run.principal,
        },
    )?;
    Ok(run)
}

/// One run, read off the async workers; an unknown id is [`ActorsError::UnknownRun`].
async fn stored_run(host: &Host, id: &RunId) -> Result<RunRecord, ApiError> {
    let target = id.clone();
    blocking(host, move |h| {
        h.run(&target)?
            .ok_or_else(|| ActorsError::UnknownRun(target.to_string()))
    })
    .await
}

/// Refuses what must not reach a handler: a `Host` that does not name this API (DNS
/// rebinding), an `Origin` of another site, and a `POST` that is not JSON.
async fn front_door(State(check): State<Arc<HostCheck>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(HOST).and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| check.allows(h)) {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "wrong_host",
            "the Host header does not name this API; start the host with --allow-host NAME to serve it under that name",
        )
        .into_response();
    }
    if let Some(origin) = headers.get(ORIGIN)
        && !origin.to_str().is_ok_and(|o| check.allows_origin(o))
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "requests from another site's pages are refused",
        )
        .into_response();
    }
    if request.method() == Method::POST {
        let json = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "json_only",
                "send the body as JSON, with Content-Type: application/json",
            )
            .into_response();
        }
    }
    next.run(request).await
}

impl FromRef<ApiState> for Host {
    fn from_ref(state: &ApiState) -> Self {
        state.host.clone()
    }
}

impl FromRef<ApiState> for StreamSlots {
    fn from_ref(state: &ApiState) -> Self {
        state.streams.clone()
    }
}

impl FromRef<ApiState> for Arc<HostAuth> {
    fn from_ref(state: &ApiState) -> Self {
        state.auth.clone()
    }
}

/// The router for one host: routes checked by [`crate::access`] for the requester `auth`
/// establishes, behind the front door of [`crate::listener`] for requests to `hosts`.
pub(crate) fn router(
    host: Host,
    auth: Arc<HostAuth>,
    hosts: HostCheck,
    bounds: &HttpBounds,
) -> Router {
    let (routes, mut description) = documented_routes().split_for_parts();
    openapi::add_mcp_route(&mut description);
    let routes = routes.route_service(
        "/mcp",
        RequestBodyLimit::new(
            mcp::service(host.clone(), auth.clone()),
            bounds.max_body_bytes,
        ),
    );
    // The document is built from static parts; failing to serialize it would be a bug in them.
    let description = description.to_pretty_json().unwrap_or_else(|e| {
        format!(r#"{{"error": "the API description did not serialize: {e}"}}"#)
    });
    routes
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(ApiState {
            host,
            auth,
            streams: StreamSlots::new(bounds.max_streams),
            description: ApiDescription(description.into()),
        })
        .layer(DefaultBodyLimit::max(bounds.max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(bounds.body_timeout))
        .layer(middleware::from_fn_with_state(Arc::new(hosts), front_door))
}

/// Every route of the API with its description: the only place routes are added, so none can
/// be missing from `/openapi.json` (see [`openapi`]).
fn documented_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(start_run))
        .routes(routes!(get_run))
        .routes(routes!(get_events))
        .routes(routes!(approve))
        .routes(routes!(cancel))
        .routes(routes!(jobs))
        .routes(routes!(agents))
        .routes(routes!(reload))
        .routes(routes!(directory))
        .routes(routes!(observe))
        .routes(routes!(wait_peer))
        .routes(routes!(attention))
        .routes(routes!(deliver))
        .routes(routes!(delivery_status))
        .routes(routes!(openapi_json))
        .routes(routes!(crate::dashboard::to_page))
        .routes(routes!(crate::dashboard::ui_to_page))
        .routes(routes!(crate::dashboard::page))
        .routes(routes!(crate::dashboard::file))
        .routes(routes!(crate::dashboard::data::fleet))
        .routes(routes!(crate::dashboard::data::refusals))
        .routes(routes!(crate::dashboard::data::tree))
        .routes(routes!(crate::metrics_route::metrics))
        .routes(routes!(a2a::host_card_route))
        .routes(routes!(a2a::agent_card_route))
        .routes(routes!(a2a::host_rpc))
        .routes(routes!(a2a::agent_rpc))
}

/// `GET /openapi.json`: this API's description, to anyone who reaches the API (it names
/// routes, not data).
#[utoipa::path(
    get, path = "/openapi.json", tag = "host",
    summary = "This API's description (OpenAPI 3.1)",
    responses((status = 200, description = "the OpenAPI document", body = serde_json::Value)),
)]
async fn openapi_json(State(description): State<ApiDescription>) -> Response {
    (
        [(CONTENT_TYPE, "application/json")],
        description.0.to_string(),
    )
        .into_response()
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DirectoryQuery {
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
async fn directory(
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
struct ObserveQuery {
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
async fn observe(
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
struct WaitPeerQuery {
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
async fn wait_peer(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
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
    let timeout = Duration::from_millis(q.timeout_ms.unwrap_or(30_000).min(MAX_WAIT_MS));
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
struct DeliverBody {
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
async fn deliver(
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
struct DeliveryStatusQuery {
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
async fn delivery_status(
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
async fn attention(
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

#[utoipa::path(
    post, path = "/runs", tag = "runs",
    summary = "Start a run",
    description = "Starts a run of `agent` on `input`, acting for the bearer token's principal (anonymous without one), and answers at once with the stored run. A `budget` bounds the run's whole call tree (runs, tokens, seconds), narrowing the agent's own `limits.tree`; a field out of its bounds is refused `bad_budget`.",
    request_body = StartRun,
    responses(
        (status = 201, description = "the run, as stored", body = RunDoc),
        (status = 400, description = "a malformed query or body", body = ErrorDoc),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 404, description = "no such agent here", body = ErrorDoc),
        (status = 409, description = "refused: the agent is down or at its admission limit (the refusal's code)", body = ErrorDoc),
        (status = 413, description = "input or body too large", body = ErrorDoc),
        (status = 429, description = "the principal's share of the agent is taken", body = ErrorDoc),
        (status = 503, description = "draining, or the store could not be written", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn start_run(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    body: Result<Json<StartRun>, JsonRejection>,
) -> Result<Response, ApiError> {
    // Who is asking comes first: an unauthenticated caller learns nothing about agents.
    let (_, who) = requester(&auth, &headers).await;
    access::authorize(&who, auth.anonymous(), Action::StartRun)?;
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
    ),
    security((), ("bearer" = []))
)]
async fn get_run(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let id = parse_run_id(&id)?;
    let run = visible_run(&host, &auth, &headers, &id).await?;
    let run = match q.wait_ms {
        Some(ms) if ms > 0 => {
            host.wait(&id, Duration::from_millis(ms.min(MAX_WAIT_MS)))
                .await?
        }
        _ => run,
    };
    let gate = if run.status == RunStatus::Blocked {
        let asked = run.clone();
        blocking(&host, move |h| h.pending_gate(&asked))
            .await?
            .map(WaitingGate::from)
    } else {
        None
    };
    let asked = run.clone();
    let budget = blocking(&host, move |h| h.tree_budget(&asked)).await?;
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
        (status = 503, description = "too many live streams open", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn get_events(
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
        return Ok(follow::run_events(host, id, after, streams.take()?));
    }
    let limit = page_size(q.limit);
    let after = q.after.unwrap_or(0);
    let page = blocking(&host, move |h| h.events_page(&id, after, limit)).await?;
    Ok(Json(page).into_response())
}

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
async fn approve(
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
    let asked = run.clone();
    let gate = blocking(&host, move |h| h.pending_gate(&asked)).await?;
    access::authorize(
        &who,
        auth.anonymous(),
        Action::Decide {
            owner: &run.principal,
            self_approval: gate.is_some_and(|g| g.requester_may_decide),
        },
    )?;
    let decided = host
        .decide_as(&id, named.as_deref(), decision, who.decider())
        .await?;
    Ok(Json(decided).into_response())
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
async fn cancel(
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

#[utoipa::path(
    get, path = "/jobs", tag = "runs",
    summary = "List or follow runs",
    description = "Runs newest first: every run for an operator, the caller's own for anyone else.",
    params(JobsQuery),
    responses(
        (status = 200, description = "a page of runs; with `follow=1` a stream of server-sent events", content(
            (RunPageDoc = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "a malformed query or body", body = ErrorDoc), (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 404, description = "no such agent here", body = ErrorDoc),
        (status = 503, description = "too many live streams open", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn jobs(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(streams): State<StreamSlots>,
    headers: HeaderMap,
    query: Result<Query<JobsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let who = allowed(&auth, &headers, Action::ListRuns).await?;
    let Query(q) = query?;
    if follow::wants_follow(q.follow.as_deref())? {
        if q.cursor.is_some() || q.limit.is_some() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                "a live stream sends every run that changes; read pages without `follow`, then follow",
            ));
        }
        if let Some(agent) = &q.agent
            && !host.agents().iter().any(|a| a == agent)
        {
            return Err(ActorsError::UnknownAgent(agent.clone()).into());
        }
        let scope = access::listing_scope(&who);
        return Ok(follow::jobs(&host, q.agent, scope, streams.take()?));
    }
    let cursor = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(text) => Some(RunCursor::parse(text).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_cursor",
                "cursor is not one this API gave out; pass the `next` of the previous page",
            )
        })?),
    };
    let scope = access::listing_scope(&who);
    let limit = page_size(q.limit);
    let page = blocking(&host, move |h| {
        h.jobs_page(q.agent.as_deref(), cursor.as_ref(), scope.owner(), limit)
    })
    .await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(
    get, path = "/agents", tag = "host",
    summary = "The agents served",
    responses(
        (status = 200, description = "each agent: up, awake, restarts, and why it is down", body = Vec<AgentStatusDoc>),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn agents(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    allowed(&auth, &headers, Action::ListAgents).await?;
    Ok(Json(host.agent_status().await?).into_response())
}

#[utoipa::path(
    post, path = "/reload", tag = "host",
    summary = "Re-read every agent.yaml",
    description = "Operators only: re-reads every agent.yaml now and starts again the agents that are down. Send `{}`.",
    responses(
        (status = 200, description = "what changed and what was revived", body = ReloadedDoc),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
        (status = 403, description = "not an operator", body = ErrorDoc),
        (status = 422, description = "an agent.yaml does not read (file, line and key named)", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn reload(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    allowed(&auth, &headers, Action::Reload).await?;
    let reloaded = host.reload().await.map_err(|e| match e {
        ActorsError::InvalidConfig(message) => {
            tracing::warn!("reload refused: {message}");
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_config",
                without_absolute_paths(&message),
            )
        }
        other => other.into(),
    })?;
    Ok(Json(reloaded).into_response())
}

/// A message for an HTTP caller: each absolute path is cut to its last two parts (the agent
/// folder and the file, as in `cfo/agent.yaml:3:5`), so an answer never tells a caller
/// where the host keeps its files. The log keeps the whole message.
pub(crate) fn without_absolute_paths(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find('/') {
        let at_word_start = start == 0
            || rest[..start]
                .chars()
                .last()
                .is_some_and(|c| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | '(' | '['));
        if !at_word_start {
            out.push_str(&rest[..=start]);
            rest = &rest[start + 1..];
            continue;
        }
        out.push_str(&rest[..start]);
        let path = &rest[start..];
        let end = path
            .find(|c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | ')' | ']' | ','))
            .unwrap_or(path.len());
        let (file, tail) = path[..end].split_once(':').unwrap_or((&path[..end], ""));
        let parts: Vec<&str> = file.split('/').filter(|p| !p.is_empty()).collect();
        if parts.is_empty() {
            out.push_str(file);
        } else {
            out.push_str(&parts[parts.len().saturating_sub(2)..].join("/"));
        }
        if !tail.is_empty() {
            out.push(':');
            out.push_str(tail);
        }
        rest = &path[end..];
    }
    out.push_str(rest);
    out
}

/// Runs a store read off the async workers (SQLite calls block).
pub(crate) async fn blocking<T: Send + 'static>(
    host: &Host,
    f: impl FnOnce(&Host) -> Result<T, ActorsError> + Send + 'static,
) -> Result<T, ApiError> {
    let host = host.clone();
    tokio::task::spawn_blocking(move || f(&host))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(ApiError::from)
}

#[cfg(test)]
mod tests {
    use super::without_absolute_paths;

    #[test]
    fn absolute_paths_are_cut_to_folder_and_file() {
        assert_eq!(
            without_absolute_paths(
                "/home/ops/fleet/agents/cfo/agent.yaml:3:5: model.script[0]: unknown key"
            ),
            "cfo/agent.yaml:3:5: model.script[0]: unknown key"
        );
        assert_eq!(
            without_absolute_paths("database file `/srv/x/cfo/ledger.db` does not exist"),
            "database file `cfo/ledger.db` does not exist"
        );
        assert_eq!(without_absolute_paths("a/b and c / d"), "a/b and c / d");
        assert_eq!(without_absolute_paths("no paths"), "no paths");
    }
}
