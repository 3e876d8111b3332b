//! The span of each run, and the trace context that links it to the span that placed its call.
//!
//! A run has one `run` span for as long as its agent actor keeps it (from its start or
//! acceptance until it settles; a host restart opens a new one for a resumed run): every drive
//! of the run is entered in it, so a trace shows one span per hop of a call tree. The span of a
//! called run is a child of the caller's run span, on this host or another: the caller puts
//! its span's [`TraceContext`] into the hop it signs (`trace_context`), the callee's actor
//! reads it from the hop and makes it the new span's parent (`open`). A root run started
//! through the HTTP API adopts the request's `traceparent`; any other root run starts a trace.
//!
//! This module only creates spans, links them and reads their contexts. Whether spans leave
//! the process is the binary's choice (its OpenTelemetry layer): without that layer a span has
//! no trace context, `trace_context` gives `None` and hops carry none.

use consort_net::TraceContext;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::{Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::run::RunRecord;

/// A new `run` span for `record` (run id, agent, hop depth, origin), with no parent but
/// `parent`: the caller's span from the hop, or the HTTP request's `traceparent`. Without
/// one the span starts a trace (never a child of whatever span the actor happens to be in).
pub(crate) fn open(record: &RunRecord, parent: Option<TraceContext>) -> Span {
    let span = info_span!(parent: None, "run", run_id = %record.id, agent = %record.agent, hop_depth = record.hop_depth, origin = %record.origin);
    if let Some(parent) = parent {
        continue_trace(&span, &parent);
    }
    span
}

/// The span of work on a run that has settled (a late reply, a repeated question): named
/// `settled_run` so a trace keeps one `run` span per run, and linked to no trace.
pub(crate) fn open_settled(record: &RunRecord) -> Span {
    info_span!(parent: None, "settled_run", run_id = %record.id, agent = %record.agent, hop_depth = record.hop_depth, origin = %record.origin)
}

/// Makes the span `trace` names (on another host, say) the parent of `span`, which must be
/// new: neither entered nor asked for its context yet. A host's link span for an incoming call
/// uses it too, so what the host does for the call shows in the caller's trace.
pub fn continue_trace(span: &Span, trace: &TraceContext) {
    let context = opentelemetry::Context::new().with_remote_span_context(span_context(trace));
    // Refused only when no OpenTelemetry layer records this span: nothing to link then.
    let _ = span.set_parent(context);
}

/// The trace context a hop placed from within `span` carries: `None` unless `span` belongs to
/// a trace. An unsampled one is carried too (flags 00), so the callee's host keeps the
/// starter's decision not to record the tree instead of starting a trace of its own.
pub(crate) fn trace_context(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    trace_context_of(context.span().span_context())
}

/// The OpenTelemetry form of a hop's trace context (remote: it was placed by another span,
/// maybe on another host).
fn span_context(trace: &TraceContext) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(trace.trace_id),
        SpanId::from_bytes(trace.parent_span_id),
        TraceFlags::new(trace.flags),
        true,
        TraceState::NONE,
    )
}

/// The hop form of a span's context: `None` for the invalid context of a span no trace
/// records.
fn trace_context_of(context: &SpanContext) -> Option<TraceContext> {
    if !context.is_valid() {
        return None;
    }
    TraceContext::new(
        context.trace_id().to_bytes(),
        context.span_id().to_bytes(),
        context.trace_flags().to_u8(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled() -> TraceContext {
        TraceContext::from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .unwrap()
    }

    #[test]
    fn a_hop_context_round_trips_through_opentelemetry() {
        let context = span_context(&sampled());
        assert!(context.is_remote());
        assert_eq!(trace_context_of(&context), Some(sampled()));
    }

    #[test]
    fn an_unsampled_context_is_carried_with_its_flags_and_an_invalid_one_is_not() {
        let unsampled = TraceContext {
            flags: 0,
            ..sampled()
        };
        let carried = trace_context_of(&span_context(&unsampled));
        assert_eq!(carried, Some(unsampled));
        assert!(!unsampled.sampled());
        assert_eq!(trace_context_of(&SpanContext::empty_context()), None);
    }

    #[test]
    fn without_an_opentelemetry_layer_a_span_has_no_trace_context() {
        // No subscriber at all (the span is disabled), then a subscriber without the layer.
        assert_eq!(trace_context(&info_span!("run")), None);
        let subscriber = tracing::subscriber::NoSubscriber::new();
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(trace_context(&info_span!("run")), None);
        });
    }
}
