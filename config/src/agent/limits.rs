//! The `limits:` section of agent.yaml: how deep a call chain and how many calls per run this
//! agent allows.
//!
//! This module owns [`Limits`], its defaults and bounds, and the conversion of the raw section
//! with its range checks. It only reads numbers: enforcing them on a call is consort-core's
//! job (its guards), so nothing here may know about runs or calls in flight.

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// The loop guards of one agent (`limits: {max_depth, max_calls_per_run}` in agent.yaml).
///
/// The caller's limits bound the calls its runs place; the callee's bound the calls it
/// accepts, so each side enforces its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// The longest call chain, in hops: `a -> b -> c -> d -> e` is four.
    pub max_depth: u32,
    /// The most calls one run may place.
    pub max_calls_per_run: u32,
}

impl Limits {
    /// The depth limit when agent.yaml sets none.
    pub const DEFAULT_MAX_DEPTH: u32 = 4;
    /// The call cap when agent.yaml sets none.
    pub const DEFAULT_MAX_CALLS_PER_RUN: u32 = 25;
    /// The deepest chain any agent may allow.
    pub const MAX_DEPTH_BOUND: u32 = 16;
    /// The largest call cap any agent may allow.
    pub const MAX_CALLS_BOUND: u32 = 1_000;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_calls_per_run: Self::DEFAULT_MAX_CALLS_PER_RUN,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_depth: Option<Spanned<u64>>,
    max_calls_per_run: Option<Spanned<u64>>,
}

/// Reads `limits:` (absent means the defaults); a value outside its bound names its key.
pub(super) fn convert_limits(
    ctx: Ctx<'_>,
    root: &KeyPath,
    raw: Option<RawLimits>,
) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    let Some(raw) = raw else {
        return Ok(limits);
    };
    let bounded = |value: Option<Spanned<u64>>, key: &str, max: u32| match value {
        None => Ok(None),
        Some(v) if v.value >= 1 && v.value <= u64::from(max) => Ok(Some(v.value as u32)),
        Some(v) => Err(ctx.invalid(
            Pos::of(&v),
            &root.key("limits").key(key),
            format!("must be between 1 and {max} (got {})", v.value),
        )),
    };
    if let Some(depth) = bounded(raw.max_depth, "max_depth", Limits::MAX_DEPTH_BOUND)? {
        limits.max_depth = depth;
    }
    if let Some(calls) = bounded(
        raw.max_calls_per_run,
        "max_calls_per_run",
        Limits::MAX_CALLS_BOUND,
    )? {
        limits.max_calls_per_run = calls;
    }
    Ok(limits)
}
