//! The `limits:` section of agent.yaml: how deep a call chain and how many calls per run this
//! agent allows, how far one run may go on its own (model turns, tokens, the same tool use
//! repeated), and the budget over a whole call tree its root runs start with (`limits.tree`).
//!
//! This module owns [`Limits`] and [`TreeLimits`], their defaults and bounds, and the conversion
//! of the raw section with its range checks (a request's tree budget is checked against the same
//! bounds, [`TreeLimits::check`]). It only reads numbers: enforcing them on a call or a run is
//! consort-core's job (its guards and its run state machine), so nothing here may know about
//! runs or calls in flight.

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// The loop guards of one agent (`limits: {max_depth, max_calls_per_run, max_turns,
/// max_tokens, max_repeats, tree}` in agent.yaml).
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
    /// The budget over the whole call tree of each root run of this agent (`limits.tree`);
    /// every field `None` (the default) is no tree budget.
    #[serde(default)]
    pub tree: TreeLimits,
}

/// A budget over a whole call tree, as agent.yaml's `limits.tree` or a request that starts a
/// run states it: every run of the tree (the root included) counts against `max_runs`, every
/// token any of its model turns used against `max_tokens`, and no run of it asks its model or
/// places a call once `max_wall_s` seconds have passed since the root run was created. `None`
/// is no limit on that count. (No field is skipped when absent: the agent-set snapshot
/// encodes it with bincode, which cannot skip a field.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeLimits {
    /// The most runs the tree may hold, the root run included (1: the root places no call).
    #[serde(default)]
    pub max_runs: Option<u64>,
    /// The most tokens (read and written) all the tree's model turns may use.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// The most seconds the tree may work, from the root run's creation.
    #[serde(default)]
    pub max_wall_s: Option<u64>,
}

impl TreeLimits {
    /// The largest `max_runs` a tree budget may set.
    pub const MAX_RUNS_BOUND: u64 = 100_000;
    /// The largest `max_tokens` a tree budget may set.
    pub const MAX_TOKENS_BOUND: u64 = 1_000_000_000;
    /// The largest `max_wall_s` a tree budget may set (a week).
    pub const MAX_WALL_S_BOUND: u64 = 7 * 24 * 3600;

    /// Whether no field is set (no tree budget).
    pub fn is_unbounded(&self) -> bool {
        *self == Self::default()
    }

    /// The tighter of two budgets, field by field: a request's budget can only narrow the
    /// agent's, never widen it.
    #[must_use]
    pub fn tightened(self, other: Self) -> Self {
        fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            max_runs: min(self.max_runs, other.max_runs),
            max_tokens: min(self.max_tokens, other.max_tokens),
            max_wall_s: min(self.max_wall_s, other.max_wall_s),
        }
    }

    /// Checks every field set against its bound (at least 1, at most the bound); the error
    /// names the field and says the range, as agent.yaml's errors do.
    pub fn check(&self) -> Result<(), String> {
        for (key, value, max) in self.fields() {
            if let Some(v) = value
                && !(1..=max).contains(&v)
            {
                return Err(format!("{key} must be between 1 and {max} (got {v})"));
            }
        }
        Ok(())
    }

    fn fields(&self) -> [(&'static str, Option<u64>, u64); 3] {
        [
            ("max_runs", self.max_runs, Self::MAX_RUNS_BOUND),
            ("max_tokens", self.max_tokens, Self::MAX_TOKENS_BOUND),
            ("max_wall_s", self.max_wall_s, Self::MAX_WALL_S_BOUND),
        ]
    }
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

    /// The range each bounded field must be in, by its key under `limits:`: the one table
    /// agent.yaml's reader and [`AgentConfig::builder`](crate::AgentConfig::builder) check.
    const RANGES: [(&'static str, u64, u64); 5] = [
        ("max_depth", 1, Self::MAX_DEPTH_BOUND as u64),
        ("max_calls_per_run", 1, Self::MAX_CALLS_BOUND as u64),
        ("max_turns", 1, Self::MAX_TURNS_BOUND as u64),
        ("max_tokens", 1, Self::MAX_TOKENS_BOUND),
        (
            "max_repeats",
            Self::MIN_REPEATS_BOUND as u64,
            Self::MAX_REPEATS_BOUND as u64,
        ),
    ];

    /// The range of the field `key` (one of [`Self::RANGES`]' keys).
    fn range(key: &str) -> (u64, u64) {
        Self::RANGES
            .iter()
            .find(|(k, ..)| *k == key)
            .map_or((1, u64::MAX), |&(_, min, max)| (min, max))
    }

    /// The first field outside its bound, as agent.yaml's reader would refuse it: the key path
    /// under `limits` and what is wrong.
    pub(crate) fn problem(&self) -> Option<(String, String)> {
        let values = [
            Some(u64::from(self.max_depth)),
            Some(u64::from(self.max_calls_per_run)),
            Some(u64::from(self.max_turns)),
            self.max_tokens,
            Some(u64::from(self.max_repeats)),
        ];
        for ((key, min, max), value) in Self::RANGES.iter().zip(values) {
            if let Some(v) = value
                && !(*min..=*max).contains(&v)
            {
                return Some((
                    format!("limits.{key}"),
                    format!("must be between {min} and {max} (got {v})"),
                ));
            }
        }
        self.tree
            .check()
            .err()
            .map(|message| ("limits.tree".to_owned(), message))
    }

    /// These limits with `max_depth` set (checked when an agent is built with them).
    #[must_use]
    pub const fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// These limits with `max_calls_per_run` set.
    #[must_use]
    pub const fn with_max_calls_per_run(mut self, max_calls_per_run: u32) -> Self {
        self.max_calls_per_run = max_calls_per_run;
        self
    }

    /// These limits with `max_turns` set.
    #[must_use]
    pub const fn with_max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
        self
    }

    /// These limits with `max_tokens` set (`None`: no limit).
    #[must_use]
    pub const fn with_max_tokens(mut self, max_tokens: Option<u64>) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// These limits with `max_repeats` set.
    #[must_use]
    pub const fn with_max_repeats(mut self, max_repeats: u32) -> Self {
        self.max_repeats = max_repeats;
        self
    }

    /// These limits with the budget over each root run's call tree set.
    #[must_use]
    pub const fn with_tree(mut self, tree: TreeLimits) -> Self {
        self.tree = tree;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_calls_per_run: Self::DEFAULT_MAX_CALLS_PER_RUN,
            max_turns: Self::DEFAULT_MAX_TURNS,
            max_tokens: None,
            max_repeats: Self::DEFAULT_MAX_REPEATS,
            tree: TreeLimits::default(),
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
    tree: Option<RawTreeLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTreeLimits {
    max_runs: Option<Spanned<u64>>,
    max_tokens: Option<Spanned<u64>>,
    max_wall_s: Option<Spanned<u64>>,
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
    let bounded = |value: Option<Spanned<u64>>, key: &str| {
        let (min, max) = Limits::range(key);
        match value {
            None => Ok(None),
            Some(v) if (min..=max).contains(&v.value) => Ok(Some(v.value)),
            Some(v) => Err(ctx.invalid(
                Pos::of(&v),
                &root.key("limits").key(key),
                format!("must be between {min} and {max} (got {})", v.value),
            )),
        }
    };
    // Every bound below fits a u32 where the field is one, so the casts keep the value.
    if let Some(depth) = bounded(raw.max_depth, "max_depth")? {
        limits.max_depth = depth as u32;
    }
    if let Some(calls) = bounded(raw.max_calls_per_run, "max_calls_per_run")? {
        limits.max_calls_per_run = calls as u32;
    }
    if let Some(turns) = bounded(raw.max_turns, "max_turns")? {
        limits.max_turns = turns as u32;
    }
    limits.max_tokens = bounded(raw.max_tokens, "max_tokens")?;
    if let Some(repeats) = bounded(raw.max_repeats, "max_repeats")? {
        limits.max_repeats = repeats as u32;
    }
    if let Some(tree) = raw.tree {
        let at = root.key("limits").key("tree");
        let bounded = |value: Option<Spanned<u64>>, key: &str, max: u64| match value {
            None => Ok(None),
            Some(v) if (1..=max).contains(&v.value) => Ok(Some(v.value)),
            Some(v) => Err(ctx.invalid(
                Pos::of(&v),
                &at.key(key),
                format!("must be between 1 and {max} (got {})", v.value),
            )),
        };
        limits.tree = TreeLimits {
            max_runs: bounded(tree.max_runs, "max_runs", TreeLimits::MAX_RUNS_BOUND)?,
            max_tokens: bounded(tree.max_tokens, "max_tokens", TreeLimits::MAX_TOKENS_BOUND)?,
            max_wall_s: bounded(tree.max_wall_s, "max_wall_s", TreeLimits::MAX_WALL_S_BOUND)?,
        };
    }
    Ok(limits)
}
