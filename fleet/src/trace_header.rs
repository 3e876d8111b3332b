//! The `traceparent` header of an HTTP request that starts a root run: the W3C trace context
//! the run's span adopts as its parent, so a caller's own trace continues into the fleet.
//!
//! An absent or invalid header gives `None` (the run starts a new trace), as the W3C
//! recommendation asks of a receiver: a bad header is never a refused request. This module only
//! reads the header; the span is made by the agent actor.

use axum::http::HeaderMap;
use consort_net::TraceContext;
use tracing::debug;

/// The W3C header name (lowercase, as HTTP/2 and axum spell it).
const TRACEPARENT: &str = "traceparent";

/// The trace context of `headers`' `traceparent`, or `None` when absent or invalid.
pub(crate) fn incoming_trace(headers: &HeaderMap) -> Option<TraceContext> {
    let value = headers.get(TRACEPARENT)?;
    let parsed = value.to_str().ok().map(TraceContext::from_traceparent);
    match parsed {
        Some(Ok(trace)) => Some(trace),
        Some(Err(error)) => {
            debug!(%error, "ignoring the request's traceparent; the run starts a new trace");
            None
        }
        None => {
            debug!("ignoring a traceparent that is not visible ASCII");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(value: &'static [u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, HeaderValue::from_bytes(value).unwrap());
        headers
    }

    #[test]
    fn a_valid_traceparent_is_adopted() {
        let headers = with(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let trace = incoming_trace(&headers).unwrap();
        assert_eq!(
            trace.to_traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
    }

    #[test]
    fn an_absent_or_invalid_traceparent_starts_a_new_trace() {
        assert_eq!(incoming_trace(&HeaderMap::new()), None);
        assert_eq!(incoming_trace(&with(b"not a trace")), None);
        assert_eq!(incoming_trace(&with(b"\xff\xfe")), None);
        assert_eq!(
            incoming_trace(&with(
                b"00-00000000000000000000000000000000-b7ad6b7169203331-01"
            )),
            None
        );
    }
}
