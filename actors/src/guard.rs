//! Tool guards: code that runs before a tool's handler and decides without the tool's
//! arguments (a licence or feature gate, a quota).
//!
//! Embedding apps implement [`Guard`]; agent.yaml declares the kinds in [`declared_guard`]
//! (`feature`, `quota`). Guards are synchronous and must be cheap: they decide from what they
//! hold in memory, never by waiting on I/O.
//!
//! This module defines guards only: it knows nothing of tools and never runs them (a tool lists
//! its guards in `tools`; the authorization pipeline in `tool_guard` runs them), so it imports
//! neither.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use consort_config::GuardConfig;

use crate::visibility::Identity;

/// What a guard is told: never the arguments.
#[derive(Clone, Copy, Debug)]
pub struct GuardContext<'a> {
    /// The agent whose tool is used.
    pub agent: &'a str,
    /// The tool's name.
    pub tool: &'a str,
    /// Who the run acts for.
    pub caller: &'a Identity,
}

/// A guard's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardVerdict {
    /// The use may go on.
    Pass,
    /// The use is refused; the text is what the model reads.
    Refuse(String),
    /// The guard cannot decide (its state is unavailable): a probe reads `unknown`, an
    /// invocation is refused.
    CannotTell(String),
}

/// Code that runs before a tool's handler and decides without its arguments.
pub trait Guard: Send + Sync + 'static {
    /// A short label for logs (`feature`, `quota`, an app's own name).
    fn kind(&self) -> &str;
    /// Decides on one use (or probe) from the context alone; cheap, never waits on I/O.
    fn check(&self, ctx: &GuardContext<'_>) -> GuardVerdict;
    /// Every check passed and the handler is about to run. Never called by a probe.
    fn record_use(&self, _ctx: &GuardContext<'_>) {}
}

/// `{kind: feature, enabled, message}`: a switch.
pub(crate) struct FeatureGuard {
    pub enabled: bool,
    pub message: String,
}

impl Guard for FeatureGuard {
    fn kind(&self) -> &str {
        "feature"
    }
    fn check(&self, _ctx: &GuardContext<'_>) -> GuardVerdict {
        if self.enabled {
            GuardVerdict::Pass
        } else {
            GuardVerdict::Refuse(self.message.clone())
        }
    }
}

/// `{kind: quota, max_uses}`: at most `max_uses` uses while this guard lives (an agent's
/// config reload or a restart builds a fresh one).
pub(crate) struct QuotaGuard {
    pub max_uses: u64,
    used: AtomicU64,
}

impl QuotaGuard {
    pub(crate) fn new(max_uses: u64) -> Self {
        Self {
            max_uses,
            used: AtomicU64::new(0),
        }
    }
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }
}

impl Guard for QuotaGuard {
    fn kind(&self) -> &str {
        "quota"
    }
    fn check(&self, _ctx: &GuardContext<'_>) -> GuardVerdict {
        if self.used() < self.max_uses {
            GuardVerdict::Pass
        } else {
            GuardVerdict::Refuse(format!(
                "the quota of this tool ({} uses) is spent",
                self.max_uses
            ))
        }
    }
    fn record_use(&self, _ctx: &GuardContext<'_>) {
        self.used.fetch_add(1, Ordering::SeqCst);
    }
}

/// The guard an agent.yaml `guard:` declares.
pub(crate) fn declared_guard(config: &GuardConfig) -> Arc<dyn Guard> {
    match config {
        GuardConfig::Feature { enabled, message } => Arc::new(FeatureGuard {
            enabled: *enabled,
            message: message.clone(),
        }),
        GuardConfig::Quota { max_uses } => Arc::new(QuotaGuard::new(*max_uses)),
    }
}
