//! The read-only JSON routes the dashboard needs beyond the run API: the fleet view
//! (`GET /fleet`), the call refusals by code (`GET /refusals`) and a run's call tree
//! (`GET /runs/{id}/tree`).
//!
//! Each handler establishes the requester as the run API does, asks [`crate::access`] (its
//! `ViewFleet`, `ListRefusals` and `ReadTree` actions), and reads through [`Host`] only, store
//! reads on a blocking thread. What the runs' logs mean is [`super::calls`]'s; this module
//! writes nothing and decides nothing about runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use consort_actors::{ActorsError, Host, RunCounts, RunRecord};
use consort_net::{LinkView, PeerLinkState, RunId};

use super::calls::{self, CallTree, MAX_TREE_NODES, RefusalTally};
use crate::access::{self, Action, Requester};
use crate::api::ApiError;
use crate::auth::HostAuth;

/// How many of the newest runs `GET /refusals` reads the logs of.
pub(crate) const REFUSAL_WINDOW: usize = 200;
/// How many single refusals `GET /refusals` lists.
const RECENT_REFUSALS: usize = 20;
/// How many agents `GET /fleet` lists per host (with their run counts): a host may serve a
/// hundred thousand, and the page reads the view every few seconds.
pub(crate) const FLEET_AGENT_ROWS: usize = 500;

/// What a host of a multi-host fleet knows of the fleet: its own name, where each agent lives,
/// and its links. Handed to the router as an extension by `consort serve`; a `consort dev`
/// host has none and is a fleet of one.
#[derive(Clone)]
pub(crate) struct FleetSight {
    here: String,
    placements: Arc<BTreeMap<String, String>>,
    links: LinkView,
}

impl FleetSight {
    /// The fleet as host `here` sees it: `placements` maps each agent to its host.
    pub(crate) fn new(here: &str, placements: BTreeMap<String, String>, links: LinkView) -> Self {
        Self {
            here: here.to_owned(),
            placements: Arc::new(placements),
            links,
        }
    }
}

/// The name a host without a fleet (`consort dev`) goes by in the fleet view and trees.
const LOCAL_HOST: &str = "local";

/// An error answer in the API's shape, `{"error": {"code", "message"}}`.
fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, Json(body)).into_response()
}

fn api_error(e: impl Into<ApiError>) -> Response {
    e.into().into_response()
}

/// Who the request is, as the run API establishes it.
async fn requester(auth: &HostAuth, headers: &HeaderMap) -> Requester {
    crate::api::requester(auth, headers).await.1
}

/// A store read on a blocking thread (SQLite calls block), its failure as the API answers it.
async fn blocking<T: Send + 'static>(
    host: &Host,
    read: impl FnOnce(&Host) -> Result<T, ActorsError> + Send + 'static,
) -> Result<T, Response> {
    crate::api::blocking(host, read)
        .await
        .map_err(IntoResponse::into_response)
}

/// One host of the fleet view.
#[derive(Debug, Serialize)]
struct HostView {
    name: String,
    /// Whether this is the host answering.
    here: bool,
    /// The link to it from this host: `connected`, `dialing`, `not_connected` (absent for
    /// this host itself).
    link: Option<&'static str>,
    /// Why the last dial failed or the last connection ended, if known.
    link_error: Option<String>,
    /// Its agents, by name (the first [`FLEET_AGENT_ROWS`]).
    agents: Vec<String>,
    /// How many agents it serves.
    agents_total: usize,
}

#[utoipa::path(
    get, path = "/fleet", tag = "host",
    summary = "The fleet as this host sees it (operators only)",
    responses(
        (status = 200, description = "this host's agents and run counts, whether it drains, every host of the fleet with the link to it", body = serde_json::Value),
        (status = 401, description = "no known bearer token", body = crate::api::openapi::ErrorDoc),
        (status = 403, description = "not an operator", body = crate::api::openapi::ErrorDoc),
    ),
    security((), ("bearer" = [])),
)]
/// `GET /fleet`: this host's agents (up, awake, restarts, why down) and their runs by status,
/// whether it drains, and every host of the fleet with the link to it. At most
/// [`FLEET_AGENT_ROWS`] agents of a host are listed, in name order; `agents_total` says how
/// many it serves.
pub(crate) async fn fleet(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    sight: Option<Extension<FleetSight>>,
    headers: HeaderMap,
) -> Response {
    let who = requester(&auth, &headers).await;
    if let Err(denial) = access::authorize(&who, auth.anonymous(), Action::ViewFleet) {
        return api_error(denial);
    }
    let mut agents = match host.agent_status().await {
        Ok(agents) => agents,
        Err(e) => return api_error(e),
    };
    agents.sort_by(|a, b| a.name.cmp(&b.name));
    agents.truncate(FLEET_AGENT_ROWS);
    let draining = match host.draining().await {
        Ok(draining) => draining,
        Err(e) => return api_error(e),
    };
    let listed: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
    let counted = listed.clone();
    let counts = blocking(&host, move |h| {
        counted
            .into_iter()
            .map(|agent| Ok((agent.clone(), h.data().status_counts(&agent)?)))
            .collect::<Result<BTreeMap<String, RunCounts>, ActorsError>>()
    })
    .await;
    let runs = match counts {
        Ok(runs) => runs,
        Err(response) => return response,
    };
    let here = sight.as_ref().map_or(LOCAL_HOST, |s| s.here.as_str());
    let mut hosts = vec![HostView {
        name: here.to_owned(),
        here: true,
        link: None,
        link_error: None,
        agents: listed,
        agents_total: host.agents().len(),
    }];
    if let Some(Extension(sight)) = &sight {
        for peer in sight.links.peer_links() {
            if peer.host == sight.here {
                continue;
            }
            let (link, link_error) = match peer.state {
                PeerLinkState::Connected => ("connected", None),
                PeerLinkState::Dialing => ("dialing", None),
                PeerLinkState::NotConnected { last_error } => ("not_connected", last_error),
            };
            let placed: Vec<&String> = sight
                .placements
                .iter()
                .filter(|(_, h)| **h == peer.host)
                .map(|(agent, _)| agent)
                .collect();
            hosts.push(HostView {
                agents_total: placed.len(),
                agents: placed.into_iter().take(FLEET_AGENT_ROWS).cloned().collect(),
                name: peer.host,
                here: false,
                link: Some(link),
                link_error: link_error.map(|e| crate::api::without_absolute_paths(&e)),
            });
        }
    }
    Json(json!({
        "host": here,
        "draining": draining,
        "agents": agents,
        "runs": runs,
        "hosts": hosts,
    }))
    .into_response()
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefusalsQuery {
    /// Only this agent's runs.
    agent: Option<String>,
}

#[utoipa::path(
    get, path = "/refusals", tag = "runs",
    summary = "Call refusals by code",
    params(RefusalsQuery),
    responses(
        (status = 200, description = "`{by_code: [{code, count}], recent, scanned_runs, window}` over the newest runs the caller may list", body = serde_json::Value),
        (status = 400, description = "a malformed query", body = crate::api::openapi::ErrorDoc),
        (status = 401, description = "no known bearer token", body = crate::api::openapi::ErrorDoc),
    ),
    security((), ("bearer" = [])),
)]
/// `GET /refusals[?agent=A]`: the call refusals in the newest [`REFUSAL_WINDOW`] runs the
/// requester may list, counted by code, with the newest few.
pub(crate) async fn refusals(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    query: Result<Query<RefusalsQuery>, QueryRejection>,
) -> Response {
    let who = requester(&auth, &headers).await;
    if let Err(denial) = access::authorize(&who, auth.anonymous(), Action::ListRefusals) {
        return api_error(denial);
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => return api_error(e),
    };
    let scope = access::listing_scope(&who);
    let page = match host
        .jobs_page(q.agent.as_deref(), None, scope.owner(), REFUSAL_WINDOW)
        .await
    {
        Ok(page) => page,
        Err(e) => return api_error(e),
    };
    let read = blocking(&host, move |h| {
        let mut logs: Vec<(RunRecord, Vec<consort_actors::EventRecord>)> = Vec::new();
        for run in page.runs {
            // A run settled and pruned between the listing and this read has no log to count.
            match h.data().events_of(&run.agent, &run.id) {
                Ok(events) => logs.push((run, events)),
                Err(ActorsError::UnknownRun(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(logs)
    })
    .await;
    let logs = match read {
        Ok(logs) => logs,
        Err(response) => return response,
    };
    let tally: RefusalTally = calls::tally_refusals(
        logs.iter().map(|(run, events)| (run, events.as_slice())),
        RECENT_REFUSALS,
    );
    Json(json!({
        "window": REFUSAL_WINDOW,
        "scanned_runs": tally.scanned_runs,
        "by_code": tally.by_code,
        "recent": tally.recent,
    }))
    .into_response()
}

#[utoipa::path(
    get, path = "/runs/{id}/tree", tag = "runs",
    summary = "The call tree under a run",
    params(("id" = String, Path, description = "The run id: `run_` and 32 hex digits")),
    responses(
        (status = 200, description = "each run of the tree with its status and cost; a child on another host is a node naming its host", body = serde_json::Value),
        (status = 400, description = "a malformed run id", body = crate::api::openapi::ErrorDoc),
        (status = 401, description = "no known bearer token", body = crate::api::openapi::ErrorDoc),
        (status = 404, description = "no such run that this caller may see", body = crate::api::openapi::ErrorDoc),
    ),
    security((), ("bearer" = [])),
)]
/// `GET /runs/<built-in function id>/tree`: the call tree under a run, as far as this host holds it. A child on
/// another host is a node naming its agent and host, with the tree cost its reply carried back.
pub(crate) async fn tree(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    sight: Option<Extension<FleetSight>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let id = match RunId::parse(&id) {
        Ok(id) => id,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, "bad_run_id", e.to_string()),
    };
    let who = requester(&auth, &headers).await;
    // Refuse an unauthenticated caller before touching the stores.
    if let Err(denial) = access::identified(&who, auth.anonymous()) {
        return api_error(denial);
    }
    let root = match host.run(&id).await {
        Ok(Some(run)) => match host.events(&id).await {
            Ok(events) => (run, events),
            Err(e) => return api_error(e),
        },
        Ok(None) => return api_error(ActorsError::UnknownRun(id.to_string())),
        Err(e) => return api_error(e),
    };
    let owner = root.0.principal.clone();
    if let Err(denial) =
        access::authorize(&who, auth.anonymous(), Action::ReadTree { owner: &owner })
    {
        return api_error(denial);
    }
    let (here, placements) = match &sight {
        Some(Extension(sight)) => (sight.here.clone(), Some(sight.placements.clone())),
        None => (LOCAL_HOST.to_owned(), None),
    };
    let built = blocking(&host, move |h| {
        let host_of = |agent: &str| match &placements {
            Some(placements) => placements.get(agent).cloned(),
            None => h.agents().iter().any(|a| a == agent).then(|| here.clone()),
        };
        calls::call_tree(
            root,
            &here,
            host_of,
            // Only the callee's own store is read; an agent this host does not serve is on
            // another host.
            |edge| {
                if !h.agents().contains(&edge.agent) {
                    return Ok(None);
                }
                match h.data().run_of(&edge.agent, &edge.child_run)? {
                    Some((run, _)) => {
                        let events = h.data().events_of(&edge.agent, &edge.child_run)?;
                        Ok(Some((run, events)))
                    }
                    None => Ok(None),
                }
            },
            MAX_TREE_NODES,
        )
    })
    .await;
    match built {
        Ok(tree) => Json::<CallTree>(tree).into_response(),
        Err(response) => response,
    }
}
