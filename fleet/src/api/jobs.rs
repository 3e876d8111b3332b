//! `GET /jobs`: the runs a caller may see, newest first, a page at a time, or (`?follow=1`)
//! every run that changes from then on, as a live stream ([`super::follow`]).
//!
//! What a caller may list is its listing scope ([`crate::access::listing_scope`]): an
//! operator every run, anyone else its own runs. The scope goes to the host's page query
//! rather than filtering a page here, so a page is full and its cursor is exact. A page's
//! `next` is an opaque cursor ([`RunCursor`]): a caller passes it back as it got it, and text
//! that does not read as one is refused (400 `bad_cursor`) rather than guessed at.
//!
//! This module reads runs; it never changes one.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use consort_actors::page::{RunCursor, page_size};
use consort_actors::{ActorsError, Host};

use super::follow::{self, StreamSlots};
use super::openapi::{ErrorDoc, RunPageDoc};
use super::{ApiError, allowed};
use crate::access::{self, Action};
use crate::auth::HostAuth;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct JobsQuery {
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
        (status = 429, description = "the caller holds as many live streams as one caller may", body = ErrorDoc),
        (status = 503, description = "too many live streams open", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn jobs(
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
        let slot = streams.take(&who)?;
        return Ok(follow::jobs(&host, q.agent, scope, slot));
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
    let page = host
        .jobs_page(q.agent.as_deref(), cursor.as_ref(), scope.owner(), limit)
        .await?
        .bounded();
    Ok(Json(page).into_response())
}
