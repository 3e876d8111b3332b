//! The front door: what every request passes before any handler sees it, as a middleware
//! layer around the whole router (the `/mcp` service and the dashboard's files included).
//!
//! It refuses what must never reach a handler, whoever sends it: a request from this process's
//! own outbound clients (the host never calls itself: on a host without an auth file only a
//! request from outside the process is the local operator; see [`crate::outbound`]), a `Host`
//! header that does not name this API (DNS rebinding), an `Origin` of another site, and a
//! `POST` that does not say `Content-Type: application/json` (a browser cannot send that across sites without a
//! CORS preflight, which this API never grants). Doing this once, outside the routes, means
//! a route added later cannot forget it. Which names and origins are this API's is
//! [`HostCheck`]'s answer ([`crate::listener`]); this module only applies it.
//!
//! It knows nothing of callers, tokens or runs: who may call which route is decided after
//! it, by the handlers through [`crate::access`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::listener::HostCheck;

/// Refuses what must not reach a handler: a `Host` that does not name this API (DNS
/// rebinding), an `Origin` of another site, and a `POST` that is not JSON.
pub(super) async fn front_door(
    State(check): State<Arc<HostCheck>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if crate::outbound::is_own_request(headers) {
        tracing::warn!(path = %request.uri().path(), "a request from this host's own outbound client was refused");
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "own_request",
            "this host's outbound clients never call the host itself",
        )
        .into_response();
    }
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
