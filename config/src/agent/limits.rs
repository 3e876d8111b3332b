//! The `limits:` section of agent.yaml: how deep a call chain and how many calls per run this
//! agent allows, and how far one run may go on its own (model turns, tokens, the same tool use
//! repeated).
//!
//! This module owns [`Limits`], its defaults and bounds, and the conversion of the raw section
//! with its range checks. It only reads numbers: enforcing them on a call or a run is
//! consort-core's job (its guards and its run state machine), so nothing here may know about
//! runs or calls in flight.

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// The loop guards of one agent (`limits: {max_depth, max_calls_per_run, max_turns,
/// max_tokens, max_repeats}` in agent.yaml).
///
/// The caller's limits bound the calls its runs place; the callee's bound the calls it
/// accepts, so each side enforces its own. The run limits (`max_turns`, `max_tokens`,
/// `max_repeats`) bound the agent's own runs. Fields added after the first two read their
/// defaults when absent, so an older serialized form still reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// The longest call chain, in hops: `a -> b -> c -> d -> e` is four.
    pub max_depth: u32,
    /// The most calls one run may place.
    pub max_calls_per_run: u32,
    /// The most model turns one run may take.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// The most tokens (read and written) one run's model turns may use; `None` is no limit.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// The loop guard: the `max_repeats`-th turn in a row that uses the same tool with the same
    /// input is refused that use, and one more such turn fails the run.
    #[serde(default = "default_max_repeats")]
    pub max_repeats: u32,
}

impl Limits {
    /// The depth limit when agent.yaml sets none.
    pub const DEFAULT_MAX_DEPTH: u32 = 4;
    /// The call cap when agent.yaml sets none.
    pub const DEFAULT_MAX_CALLS_PER_RUN: u32 = 25;
    /// The turn limit when agent.yaml sets none.
    pub const DEFAULT_MAX_TURNS: u32 = 64;
    /// The loop guard when agent.yaml sets none.
    pub const DEFAULT_MAX_REPEATS: u32 = 3;
    /// The deepest chain any agent may allow.
    pub const MAX_DEPTH_BOUND: u32 = 16;
    /// The largest call cap any agent may allow.
    pub const MAX_CALLS_BOUND: u32 = 1_000;
    /// The largest turn limit any agent may allow.
    pub const MAX_TURNS_BOUND: u32 = 1_000;
    /// The largest token budget any agent may set.
    pub const MAX_TOKENS_BOUND: u64 = 100_000_000;
    /// The fewest turns in a row the loop guard may allow (one use is never a loop).
    pub const MIN_REPEATS_BOUND: u32 = 2;
    /// The most turns in a row the loop guard may allow.
    pub const MAX_REPEATS_BOUND: u32 = 100;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_calls_per_run: Self::DEFAULT_MAX_CALLS_PER_RUN,
            max_turns: Self::DEFAULT_MAX_TURNS,
            max_tokens: None,
            max_repeats: Self::DEFAULT_MAX_REPEATS,
        }
    }
}

fn default_max_turns() -> u32 {
    Limits::DEFAULT_MAX_TURNS
}

fn default_max_repeats() -> u32 {
    Limits::DEFAULT_MAX_REPEATS
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_depth: Option<Spanned<u64>>,
    max_calls_per_run: Option<Spanned<u64>>,
    max_turns: Option<Spanned<u64>>,
    max_tokens: Option<Spanned<u64>>,
    max_repeats: Option<Spanned<u64>>,
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
    let bounded = |value: Option<Spanned<u64>>, key: &str, min: u64, max: u64| match value {
        None => Ok(None),
        Some(v) if (min..=max).contains(&v.value) => Ok(Some(v.value)),
        Some(v) => Err(ctx.invalid(
            Pos::of(&v),
            &root.key("limits").key(key),
            format!("must be between {min} and {max} (got {})", v.value),
        )),
    };
    // Every bound below fits a u32 where the field is one, so the casts keep the value.
    if let Some(depth) = bounded(
        raw.max_depth,
        "max_depth",
        1,
        Limits::MAX_DEPTH_BOUND.into(),
    )? {
        limits.max_depth = depth as u32;
    }
    if let Some(calls) = bounded(
        raw.max_calls_per_run,
        "max_calls_per_run",
        1,
        Limits::MAX_CALLS_BOUND.into(),
    )? {
        limits.max_calls_per_run = calls as u32;
    }
    if let Some(turns) = bounded(
        raw.max_turns,
        "max_turns",
        1,
        Limits::MAX_TURNS_BOUND.into(),
    )? {
        limits.max_turns = turns as u32;
    }
    limits.max_tokens = bounded(raw.max_tokens, "max_tokens", 1, Limits::MAX_TOKENS_BOUND)?;
    if let Some(repeats) = bounded(
        raw.max_repeats,
        "max_repeats",
        Limits::MIN_REPEATS_BOUND.into(),
        Limits::MAX_REPEATS_BOUND.into(),
    )? {
        limits.max_repeats = repeats as u32;
    }
    Ok(limits)
}
