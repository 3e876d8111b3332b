//! How a failure answers over HTTP: [`ApiError`] (a status, a stable code and a message for
//! people) and the mapping to it from what a handler meets: the host's [`ActorsError`], an
//! access [`Denial`], a body or query that axum could not read.
//!
//! Every route's failures leave through here as `{"error": {"code", "message"}}`, so a client
//! matches one shape and one list of codes whatever it called. The codes are part of the API:
//! a new kind of failure gets a new code, and a code keeps its meaning once given out. The
//! status follows from the failure, not from the route that met it, so one kind of failure
//! reads the same wherever it happens. Messages are for people, and they must not tell a
//! caller where the host keeps its files ([`without_absolute_paths`]).
//!
//! This module decides nothing about requests: it only translates a failure that already
//! happened.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use consort_actors::ActorsError;

use crate::access::Denial;

/// An API error: a status, a stable code and a message for people.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    /// Seconds to send as `Retry-After` (a 429 or a 503 the caller may try again after).
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the caller to try again after `seconds`.
    pub(super) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after
            && let Ok(value) = axum::http::HeaderValue::from_str(&seconds.to_string())
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
        response
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
            // The run's own requester deciding a gate that needs someone else: forbidden, as
            // any other thing this caller may not do.
            ActorsError::Refused(refusal @ consort_core::Refusal::FourEyes { .. }) => {
                Self::new(StatusCode::FORBIDDEN, "forbidden", refusal.to_string())
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
