//! `GET /metrics`: the host's metrics in the Prometheus text format, for operators.
//!
//! The libraries record through the `metrics` facade (names and labels in
//! [`consort_actors::metrics::names`]); the binary installs the Prometheus recorder (built with
//! [`prometheus_builder`]) and hands its [`PrometheusHandle`] to the host it starts
//! (`DevOptions::metrics`, `ServeOptions::metrics`), which puts it on the API's requests as a
//! [`MetricsExport`]. This route only checks who asks ([`crate::access`]'s
//! [`Action::ReadMetrics`]: operators) and renders the handle. A host started without a
//! handle (an embedding app that installed no recorder, or its own) answers 404
//! `metrics_off`: it has nothing to show, and says so rather than an empty page a scraper would
//! take for a host with no activity.
//!
//! It must not record anything, install a recorder or read a store.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

use consort_actors::metrics::names;

use crate::access::{self, Action};
use crate::api::ApiError;
use crate::auth::HostAuth;

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE_PROMETHEUS: &str = "text/plain; version=0.0.4";

/// The bucket bounds (seconds) of `consort_store_commit_seconds`: from a SQLite commit with
/// `synchronous=NORMAL` (tens of microseconds) to a slow disk's or a remote server's (a second).
const COMMIT_BUCKETS: [f64; 14] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];

/// How often a recorder's upkeep should run (see [`run_upkeep`]).
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The Prometheus recorder consort's series are meant for: the store commit histogram as a
/// Prometheus histogram with buckets from 25 µs to 1 s. No listener, no push gateway: the
/// host's API serves the handle. The caller installs it (`install_recorder`) and keeps its
/// upkeep running ([`run_upkeep`]).
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new().set_buckets_for_metric(
        Matcher::Full(names::STORE_COMMIT.to_owned()),
        &COMMIT_BUCKETS,
    )
}

/// Drains histogram samples into their buckets every [`UPKEEP_EVERY`], so memory stays bounded
/// between scrapes; runs until the process ends.
pub async fn run_upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(UPKEEP_EVERY);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// What the API renders at `/metrics`: the installed recorder's handle, if the host was given
/// one. Carried on every request of the API as an extension.
#[derive(Clone, Debug, Default)]
pub struct MetricsExport(pub Option<PrometheusHandle>);

/// `GET /metrics`.
#[utoipa::path(
    get, path = "/metrics", tag = "host",
    summary = "The host's metrics, Prometheus text format (operators only)",
    responses(
        (status = 200, description = "`text/plain; version=0.0.4`: runs started and settled, calls placed and refused, link round-trip time, store commit time, mailbox depth", content_type = "text/plain", body = String),
        (status = 401, description = "no known bearer token", body = crate::api::openapi::ErrorDoc),
        (status = 403, description = "not an operator", body = crate::api::openapi::ErrorDoc),
        (status = 404, description = "this host records no metrics (`metrics_off`)", body = crate::api::openapi::ErrorDoc),
    ),
    security((), ("bearer" = [])),
)]
pub(crate) async fn metrics(
    State(auth): State<Arc<HostAuth>>,
    headers: HeaderMap,
    export: Option<Extension<MetricsExport>>,
) -> Result<Response, ApiError> {
    let (_, requester) = crate::api::requester(&auth, &headers).await;
    access::authorize(&requester, auth.anonymous(), Action::ReadMetrics)?;
    let Some(Extension(MetricsExport(Some(handle)))) = export else {
        let body = json!({"error": {
            "code": "metrics_off",
            "message": "this host records no metrics: it was started without a metrics recorder",
        }});
        return Ok((StatusCode::NOT_FOUND, Json(body)).into_response());
    };
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE_PROMETHEUS),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_histogram_renders_as_buckets() {
        let recorder = prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let host = consort_actors::metrics::HostMetrics::new("alpha");
            host.store_commit().record(0.000_3);
        });
        let text = handle.render();
        assert!(
            text.contains(r#"consort_store_commit_seconds_bucket{host="alpha",le="0.0005"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"consort_store_commit_seconds_count{host="alpha"} 1"#),
            "{text}"
        );
    }
}
