//! The W3C trace context a call hop carries: which distributed trace the call belongs to and
//! which span placed it, so the callee's run span can be that span's child on any host.
//!
//! [`TraceContext`] is plain data (16-byte trace id, 8-byte parent span id, 1 flags byte) with
//! the `traceparent` header's text form (`00-<32 hex>-<16 hex>-<2 hex>`,
//! <https://www.w3.org/TR/trace-context/#traceparent-header>), parsed and formatted here.
//! A hop carries it inside its signed bytes (`chain::hop_canonical_bytes`), so no host on the
//! way can splice a call into another trace without breaking the signature.
//!
//! This module only encodes and decodes: it starts no span and knows no tracing library (the
//! actors crate turns a context into a span's parent; the binary decides whether spans are
//! exported at all).

use serde::{Deserialize, Serialize};

use crate::error::TraceparentError;

/// The only `traceparent` version this build writes; a later version is read by its first
/// four fields, as the W3C recommendation asks.
const TRACEPARENT_VERSION: u8 = 0;
/// Bit 0 of the flags: the caller recorded its span.
const SAMPLED: u8 = 0x01;

/// A W3C trace context: the trace a call belongs to and the span that placed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceContext {
    /// The trace id, never all zeros.
    #[serde(with = "serde_bytes")]
    pub trace_id: [u8; 16],
    /// The id of the caller's span (the callee's span's parent), never all zeros.
    #[serde(with = "serde_bytes")]
    pub parent_span_id: [u8; 8],
    /// The W3C trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// A context, or `None` when either id is all zeros (the W3C spec's invalid ids).
    pub fn new(trace_id: [u8; 16], parent_span_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && parent_span_id != [0; 8]).then_some(Self {
            trace_id,
            parent_span_id,
            flags,
        })
    }

    /// Whether the caller recorded its span (flags bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// Parses a `traceparent` header value. Version `00` must have exactly four fields; a
    /// later version is read by its first four (and may have more after a `-`); `ff` is
    /// invalid. Ids must be lowercase hex and not all zeros.
    pub fn from_traceparent(value: &str) -> Result<Self, TraceparentError> {
        let value = value.trim();
        let malformed = || TraceparentError::Malformed {
            value: value.chars().take(64).collect(),
        };
        let mut fields = value.splitn(5, '-');
        let (Some(version), Some(trace_id), Some(span_id), Some(flags)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed());
        };
        let rest = fields.next();
        let version = lower_hex::<1>(version).ok_or_else(malformed)?[0];
        if version == 0xff {
            return Err(TraceparentError::InvalidVersion);
        }
        // Version 00 has exactly four fields; a later one may append fields after a dash.
        if version == TRACEPARENT_VERSION && rest.is_some() {
            return Err(malformed());
        }
        let trace_id = lower_hex::<16>(trace_id).ok_or_else(malformed)?;
        let parent_span_id = lower_hex::<8>(span_id).ok_or_else(malformed)?;
        let flags = lower_hex::<1>(flags).ok_or_else(malformed)?[0];
        if trace_id == [0; 16] {
            return Err(TraceparentError::ZeroTraceId);
        }
        if parent_span_id == [0; 8] {
            return Err(TraceparentError::ZeroSpanId);
        }
        Ok(Self {
            trace_id,
            parent_span_id,
            flags,
        })
    }

    /// The `traceparent` header value (version `00`).
    pub fn to_traceparent(&self) -> String {
        format!(
            "{TRACEPARENT_VERSION:02x}-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.parent_span_id),
            self.flags
        )
    }

    /// The bytes a hop's signature covers for this context: trace id, span id, flags.
    pub(crate) fn canonical_bytes(&self) -> [u8; 25] {
        let mut out = [0u8; 25];
        out[..16].copy_from_slice(&self.trace_id);
        out[16..24].copy_from_slice(&self.parent_span_id);
        out[24] = self.flags;
        out
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits (the W3C format allows no uppercase).
fn lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_w3c_example_round_trips() {
        let context = TraceContext::from_traceparent(EXAMPLE).unwrap();
        assert_eq!(
            hex::encode(context.trace_id),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(hex::encode(context.parent_span_id), "b7ad6b7169203331");
        assert!(context.sampled());
        assert_eq!(context.to_traceparent(), EXAMPLE);
        let unsampled = TraceContext {
            flags: 0,
            ..context
        };
        assert!(!unsampled.sampled());
        assert_eq!(
            TraceContext::from_traceparent(&unsampled.to_traceparent()),
            Ok(unsampled)
        );
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        assert!(TraceContext::from_traceparent(&format!(" {EXAMPLE}\t")).is_ok());
    }

    #[test]
    fn malformed_values_are_refused() {
        for value in [
            "",
            "00",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            // Uppercase hex.
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            // Wrong lengths.
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            // Not hex.
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
            // Version 00 has exactly four fields.
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            // A multi-byte character where a hex digit belongs.
            "00-0af7651916cd43dd8448eb211c8031é-b7ad6b7169203331-01",
        ] {
            assert!(
                matches!(
                    TraceContext::from_traceparent(value),
                    Err(TraceparentError::Malformed { .. })
                ),
                "{value:?}"
            );
        }
    }

    #[test]
    fn invalid_ids_and_version_are_refused_by_name() {
        assert_eq!(
            TraceContext::from_traceparent(
                "00-00000000000000000000000000000000-b7ad6b7169203331-01"
            ),
            Err(TraceparentError::ZeroTraceId)
        );
        assert_eq!(
            TraceContext::from_traceparent(
                "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"
            ),
            Err(TraceparentError::ZeroSpanId)
        );
        assert_eq!(
            TraceContext::from_traceparent(
                "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            ),
            Err(TraceparentError::InvalidVersion)
        );
        assert_eq!(TraceContext::new([0; 16], [1; 8], 1), None);
        assert_eq!(TraceContext::new([1; 16], [0; 8], 1), None);
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let context = TraceContext::from_traceparent(
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes-next",
        )
        .unwrap();
        assert_eq!(context.to_traceparent(), EXAMPLE);
    }

    #[test]
    fn canonical_bytes_are_the_three_fields_in_order() {
        let context = TraceContext::new([7; 16], [9; 8], 1).unwrap();
        let bytes = context.canonical_bytes();
        assert_eq!(&bytes[..16], &[7; 16]);
        assert_eq!(&bytes[16..24], &[9; 8]);
        assert_eq!(bytes[24], 1);
    }
}
