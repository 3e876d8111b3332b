//! The host's own routes about its agents: `GET /agents` (each agent served, whether it is
//! up, awake, how often it restarted and why it is down) and `POST /reload` (an operator's
//! order to re-read every agent.yaml now and start again the agents that are down).
//!
//! A reload that fails names the agent.yaml, line and key, since the operator who sent it is
//! the one to fix the file; the path is cut to the agent's folder
//! ([`super::without_absolute_paths`]) so that the answer does not show where the host keeps
//! its files. The full message goes to the host's log.
//!
//! Handlers here check the caller's right and ask the host; restarting and re-reading are the
//! supervisor's work, not this module's.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use consort_actors::{ActorsError, Host};

use super::openapi::{AgentStatusDoc, ErrorDoc, ReloadedDoc};
use super::{ApiError, allowed, without_absolute_paths};
use crate::access::Action;
use crate::auth::HostAuth;

#[utoipa::path(
    get, path = "/agents", tag = "host",
    summary = "The agents served",
    responses(
        (status = 200, description = "each agent: up, awake, restarts, and why it is down", body = Vec<AgentStatusDoc>),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn agents(
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
pub(super) async fn reload(
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
