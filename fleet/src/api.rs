//! The HTTP API of one host, on loopback.
//!
//! | route                       | what                                                  |
//! |-----------------------------|-------------------------------------------------------|
//! | `POST /runs`                | `{agent, input}` → the stored run (201); the run acts for the `Authorization: Bearer` token's principal |
//! | `GET /runs/{id}`            | one run; `?wait_ms=N` waits up to N ms for it to settle |
//! | `GET /runs/{id}/events`     | its event log                                         |
//! | `POST /runs/{id}/approve`   | `{approve: bool}`: an operator's decision             |
//! | `GET /jobs?agent=`          | runs, newest first                                    |
//! | `GET /agents`               | the agents served, whether each is up, and why not    |
//! | `POST /reload`              | re-read every agent.yaml now, restart agents that are down: `{changed, revived}` |
//!
//! Every error is JSON, `{"error": {"code", "message"}}`, with a 4xx status for bad requests.
//! Handlers only translate HTTP to calls on [`Host`]; they decide nothing about runs.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRef, Path, Query, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use consort_actors::directory::{DeliveryRequest, WaitRequest};
use consort_actors::{ActorsError, Channel, Host};
use consort_core::directory::{Audience, ExcerptSource, WaitUntil};
use consort_net::RunId;

use crate::auth::HostAuth;

/// Longest wait a `GET /runs/{id}?wait_ms=` may ask for.
const MAX_WAIT_MS: u64 = 600_000;
/// Longest run input accepted over HTTP.
const MAX_INPUT_BYTES: usize = 256 * 1024;

/// The body of `POST /runs`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    pub agent: String,
    pub input: String,
    /// `api` (default) or `cli`.
    #[serde(default)]
    pub channel: Option<String>,
}

/// The body of `POST /runs/{id}/approve`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Decision {
    pub approve: bool,
}

#[derive(Debug, Deserialize)]
struct WaitQuery {
    wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct JobsQuery {
    agent: Option<String>,
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

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
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
}

impl FromRef<ApiState> for Host {
    fn from_ref(state: &ApiState) -> Self {
        state.host.clone()
    }
}

impl FromRef<ApiState> for Arc<HostAuth> {
    fn from_ref(state: &ApiState) -> Self {
        state.auth.clone()
    }
}

/// The router for one host without an auth file: every run it starts has no identity.
pub(crate) fn router(host: Host) -> Router {
    router_with_auth(host, Arc::new(HostAuth::none()))
}

/// The router for one host; `POST /runs` starts runs that act for the bearer token's
/// principal (see [`crate::auth`]).
pub(crate) fn router_with_auth(host: Host, auth: Arc<HostAuth>) -> Router {
    Router::new()
        .route("/runs", post(start_run))
        .route("/runs/{id}", get(get_run))
        .route("/runs/{id}/events", get(get_events))
        .route("/runs/{id}/approve", post(approve))
        .route("/jobs", get(jobs))
        .route("/agents", get(agents))
        .route("/directory", get(directory))
        .route("/directory/observe", get(observe))
        .route("/directory/wait", get(wait_peer))
        .route("/directory/attention", get(attention))
        .route("/directory/deliver", post(deliver))
        .route("/directory/delivery", get(delivery_status))
        .route("/reload", post(reload))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(ApiState { host, auth })
}

#[derive(Deserialize)]
struct DirectoryQuery {
    goal: Option<String>,
}

/// `GET /directory?goal=G`: the peer directory as the caller may see it. The caller's scope
/// comes from its credentials ([`HostAuth::audience`]); a caller without one gets a packet of
/// zero rows that names the scope gap, with status 200 (the packet is the answer).
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

#[derive(Deserialize)]
struct ObserveQuery {
    agent: String,
    run: Option<String>,
    source: Option<String>,
    lines: Option<usize>,
}

/// `GET /directory/observe?agent=A[&run=R][&source=events|output][&lines=N]`: typed state
/// first; an excerpt only of a run the caller may read (an operator's, here).
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

#[derive(Deserialize)]
struct WaitPeerQuery {
    agent: String,
    run: String,
    until: Option<String>,
    after_seq: Option<u64>,
    incarnation: Option<String>,
    timeout_ms: Option<u64>,
}

/// `GET /directory/wait?agent=A&run=R[&until=settled|blocked|changed][&after_seq=N]
/// [&incarnation=I][&timeout_ms=T]`: a wait pinned to the agent's incarnation; the answer
/// names the pin and how it ended (`matched`, `replaced`, `not_running`, `unknown_run`,
/// `unreachable`, `timeout`). A caller that may not wait on the run gets 403 with the gap.
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

#[derive(Deserialize)]
struct DeliverBody {
    agent: String,
    run: Option<String>,
    message: String,
    delivery_id: String,
    timeout_ms: Option<u64>,
    window_ms: Option<u64>,
}

/// `POST /directory/deliver {agent, run?, message, delivery_id, timeout_ms?, window_ms?}`: a
/// message into a run (or a new run) of `agent`, from the caller (an operator here). The answer
/// is the outcome: `active`, `stalled` (enqueued, nothing followed in the window: never
/// success), `rejected` with its code, or `timeout` (no receipt in time; nothing is resent).
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

#[derive(Deserialize)]
struct DeliveryStatusQuery {
    agent: String,
    id: String,
    run: Option<String>,
}

/// `GET /directory/delivery?agent=A&id=ID[&run=R]`: the receipt of the caller's earlier
/// delivery (`enqueued` where it landed, `unknown_delivery` when it is not there): what a sender
/// reads after a `timeout` instead of sending again.
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

async fn start_run(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    body: Result<Json<StartRun>, JsonRejection>,
) -> Result<Response, ApiError> {
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
    let authorization = headers
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("<not text>"));
    let identity = auth.identify(authorization).await;
    let run = host
        .start_run_as(&body.agent, &body.input, channel, identity)
        .await?;
    Ok((StatusCode::CREATED, Json(run)).into_response())
}

async fn get_run(
    State(host): State<Host>,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> Result<Response, ApiError> {
    let id = parse_run_id(&id)?;
    let run = match q.wait_ms {
        Some(ms) if ms > 0 => {
            host.wait(&id, Duration::from_millis(ms.min(MAX_WAIT_MS)))
                .await?
        }
        _ => {
            blocking(&host, move |h| {
                h.run(&id)?
                    .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))
            })
            .await?
        }
    };
    Ok(Json(run).into_response())
}

async fn get_events(
    State(host): State<Host>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_run_id(&id)?;
    let events = blocking(&host, move |h| h.events(&id)).await?;
    Ok(Json(events).into_response())
}

async fn approve(
    State(host): State<Host>,
    Path(id): Path<String>,
    body: Result<Json<Decision>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = parse_run_id(&id)?;
    let Json(decision) = body?;
    let run = host.decide(&id, decision.approve).await?;
    Ok(Json(run).into_response())
}

async fn jobs(State(host): State<Host>, Query(q): Query<JobsQuery>) -> Result<Response, ApiError> {
    let runs = blocking(&host, move |h| h.jobs(q.agent.as_deref())).await?;
    Ok(Json(runs).into_response())
}

async fn agents(State(host): State<Host>) -> Result<Response, ApiError> {
    Ok(Json(host.agent_status().await?).into_response())
}

async fn reload(State(host): State<Host>) -> Result<Response, ApiError> {
    let reloaded = host.reload().await.map_err(|e| match e {
        ActorsError::InvalidConfig(message) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_config", message)
        }
        other => other.into(),
    })?;
    Ok(Json(reloaded).into_response())
}

/// Runs a store read off the async workers (SQLite calls block).
async fn blocking<T: Send + 'static>(
    host: &Host,
    f: impl FnOnce(&Host) -> Result<T, ActorsError> + Send + 'static,
) -> Result<T, ApiError> {
    let host = host.clone();
    tokio::task::spawn_blocking(move || f(&host))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(ApiError::from)
}
