//! Trace export over OTLP: the OpenTelemetry layer of `consort dev` and `consort serve`, when
//! an endpoint is configured (`--otlp-endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT`).
//!
//! Spans go to `<endpoint>/v1/traces` as OTLP over HTTP/protobuf from a batch processor on its
//! own thread (scheduled every [`BATCH_DELAY`], so a collector sees a finished run within a
//! second or two). The resource names the host: service `consort:<host>` and attribute
//! `consort.host`. Without an endpoint nothing here runs: no exporter, no layer, and spans
//! carry no trace context (so hops carry none).
//!
//! This module owns the exporter's life (built before the runtime, flushed by [`Telemetry::
//! shutdown`] after it on a clean exit). It makes no span and decides no parentage: the actors
//! do (`consort_actors`' run spans).

use std::time::Duration;

use anyhow::{Context, Result};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The standard variable naming the collector's base URL (`http://127.0.0.1:4318`).
pub(crate) const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// How long finished spans wait before they are sent.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The exporter of a process that exports traces; flush it with [`Telemetry::shutdown`].
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
}

/// The collector's base URL: the flag's, else the standard variable's (empty means unset).
pub(crate) fn endpoint(flag: Option<&str>) -> Option<String> {
    let from_env = std::env::var(ENDPOINT_VAR).ok();
    flag.map(str::to_owned)
        .or(from_env)
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// Where OTLP/HTTP posts traces for the base URL `base` (the OTLP spec's `/v1/traces`).
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The service name of host `host` in a trace.
fn service_name(host: &str) -> String {
    format!("consort:{host}")
}

/// What is traced: consort's own spans at INFO and above (the run, call, accept and link
/// spans), never a dependency's (the exporter's own HTTP client would trace itself).
pub(crate) fn traced() -> Targets {
    Targets::new().with_target("consort", Level::INFO)
}

/// The OpenTelemetry layer exporting to `base`, and the handle that flushes it. Call before
/// the async runtime starts (the HTTP client is a blocking one, used from the batch thread).
pub(crate) fn otlp_layer<S>(base: &str, host: &str) -> Result<(impl Layer<S>, Telemetry)>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let url = traces_url(base);
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .with_context(|| format!("cannot export traces to {url}"))?;
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(BATCH_DELAY)
                .build(),
        )
        .build();
    let resource = Resource::builder()
        .with_service_name(service_name(host))
        .with_attribute(KeyValue::new("consort.host", host.to_owned()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("consort");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    Ok((layer, Telemetry { provider }))
}

impl Telemetry {
    /// Sends the spans still waiting and stops the exporter. Call outside the async runtime
    /// (it blocks until the batch thread is done).
    pub(crate) fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("consort: flushing traces: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_go_to_the_otlp_path_under_the_base_url() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
    }

    #[test]
    fn only_consorts_own_spans_are_traced() {
        let traced = traced();
        assert!(traced.would_enable("consort_actors::agent::run_span", &Level::INFO));
        assert!(traced.would_enable("consort_fleet::remote::inbound", &Level::WARN));
        assert!(!traced.would_enable("consort_actors::agent", &Level::DEBUG));
        assert!(!traced.would_enable("reqwest::blocking", &Level::INFO));
        assert!(!traced.would_enable("hyper_util::client", &Level::INFO));
    }

    #[test]
    fn the_service_is_named_after_the_host() {
        assert_eq!(service_name("alpha"), "consort:alpha");
    }
}
