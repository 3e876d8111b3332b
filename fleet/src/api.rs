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
//! Every error is JSON, `{"error": {"code", "message"}}`, with a 4xx status for bad requests
//! ([`error`]). Handlers only translate HTTP to calls on [`Host`]; they decide nothing about
//! runs.
//!
//! The handlers live in child modules, one per concern: [`runs`] (start, read, follow and
//! cancel one run), [`decisions`] (a gate's decision), [`jobs`] (listing runs), [`agents`]
//! (`/agents`, `/reload`), [`directory`] (the `/directory` routes), and the same host seen as
//! A2A agents ([`a2a`]) and as MCP tools ([`mcp`]). Every request passes [`front_door`]
//! before any of them. This file holds what they all share: the router, which is the one
//! place routes are added, its state, and the reading of who the caller is and of a run the
//! caller may see.

// `#[utoipa::path]` expands `params(Query)` into fully qualified paths.
#![allow(unused_qualifications)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use tower_http::limit::RequestBodyLimit;
use tower_http::timeout::RequestBodyTimeoutLayer;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use consort_actors::visibility::Identity;
use consort_actors::{ActorsError, Host, RunRecord};
use consort_net::RunId;

use crate::access::{self, Action, Requester};
use crate::auth::HostAuth;
use crate::bounds::{Holding, Rate, RateBook, SharedHeld};
use crate::listener::{HostCheck, HttpBounds};
use follow::StreamSlots;

mod a2a;
mod agents;
mod decisions;
mod directory;
mod error;
mod follow;
mod front_door;
mod jobs;
mod mcp;
pub(crate) mod openapi;
mod runs;

pub(crate) use error::{ApiError, without_absolute_paths};
pub use runs::WaitingGate;

/// Longest a delivery's sender may wait for its receipt (`timeout_ms`); waits on runs are cut
/// by the host's own bound instead ([`CallerBounds::wait`], `HttpBounds::max_wait`).
const MAX_WAIT_MS: u64 = 600_000;
/// Longest run input accepted over HTTP.
const MAX_INPUT_BYTES: usize = 256 * 1024;

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
    /// What one caller may hold or start: waits, runs per minute.
    callers: CallerBounds,
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

/// One run (the handle reads it off the async workers); an unknown id is [`ActorsError::UnknownRun`].
async fn stored_run(host: &Host, id: &RunId) -> Result<RunRecord, ApiError> {
    host.run(id)
        .await?
        .ok_or_else(|| ActorsError::UnknownRun(id.to_string()).into())
}

impl FromRef<ApiState> for Host {
    fn from_ref(state: &ApiState) -> Self {
        state.host.clone()
    }
}

/// What one caller (one principal, or every anonymous caller together) may hold or start
/// through the API: at most `max_waits_per_principal` waits at once, none longer than
/// `max_wait`, and runs at `runs_per_minute` after a burst of `run_burst` (see
/// [`crate::bounds`]).
#[derive(Clone)]
pub(crate) struct CallerBounds {
    waits: SharedHeld<String>,
    max_wait: Duration,
    runs: Arc<Mutex<RateBook>>,
}

impl CallerBounds {
    fn new(bounds: &HttpBounds) -> Self {
        Self {
            waits: SharedHeld::new(bounds.max_waits_per_principal.max(1)),
            max_wait: bounds.max_wait,
            runs: Arc::new(Mutex::new(RateBook::new(Rate {
                per_second: f64::from(bounds.runs_per_minute) / 60.0,
                burst: bounds.run_burst,
            }))),
        }
    }

    /// A wait of `who` for `asked` (at most the host's `max_wait`), held until the returned
    /// holding is dropped; 429 when `who` holds as many waits as one caller may.
    pub(crate) fn wait(
        &self,
        who: &Requester,
        asked: Duration,
    ) -> Result<(Duration, Holding<String>), ApiError> {
        let held = self.waits.hold(who.decider().to_owned()).ok_or_else(|| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waits",
                "you hold as many waits as one caller may; let one end, or ask without waiting",
            )
            .retry_after(1)
        })?;
        Ok((asked.min(self.max_wait), held))
    }

    /// One more run started by `who`, or 429 with when to try again.
    pub(crate) fn start_run(&self, who: &Requester) -> Result<(), ApiError> {
        let taken = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(who.decider(), std::time::Instant::now());
        taken.map_err(|wait| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_runs",
                format!(
                    "you start runs faster than this host allows one caller; try again in {} ms",
                    wait.as_millis().max(1)
                ),
            )
            .retry_after(wait.as_secs() + 1)
        })
    }
}

impl FromRef<ApiState> for CallerBounds {
    fn from_ref(state: &ApiState) -> Self {
        state.callers.clone()
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
            streams: StreamSlots::new(bounds),
            callers: CallerBounds::new(bounds),
            description: ApiDescription(description.into()),
        })
        .layer(DefaultBodyLimit::max(bounds.max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(bounds.body_timeout))
        .layer(middleware::from_fn_with_state(
            Arc::new(hosts),
            front_door::front_door,
        ))
}

/// Every route of the API with its description: the only place routes are added, so none can
/// be missing from `/openapi.json` (see [`openapi`]).
fn documented_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(runs::start_run))
        .routes(routes!(runs::get_run))
        .routes(routes!(runs::get_events))
        .routes(routes!(decisions::approve))
        .routes(routes!(runs::cancel))
        .routes(routes!(jobs::jobs))
        .routes(routes!(agents::agents))
        .routes(routes!(agents::reload))
        .routes(routes!(directory::directory))
        .routes(routes!(directory::observe))
        .routes(routes!(directory::wait_peer))
        .routes(routes!(directory::attention))
        .routes(routes!(directory::deliver))
        .routes(routes!(directory::delivery_status))
        .routes(routes!(openapi_json))
        .routes(routes!(crate::dashboard::to_page))
        .routes(routes!(crate::dashboard::ui_to_page))
        .routes(routes!(crate::dashboard::page))
        .routes(routes!(crate::dashboard::file))
        .routes(routes!(crate::dashboard::data::fleet))
        .routes(routes!(crate::dashboard::data::refusals))
        .routes(routes!(crate::dashboard::data::tree))
        .routes(routes!(crate::metrics_route::metrics))
        .routes(routes!(a2a::card::host_card_route))
        .routes(routes!(a2a::card::agent_card_route))
        .routes(routes!(a2a::json_rpc::host_rpc))
        .routes(routes!(a2a::json_rpc::agent_rpc))
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
