//! The settings a host gives every agent actor it runs ([`AgentOptions`]): reply cap,
//! admission limits, durability, call lifetime, the host's role grants and how long an idle
//! actor stays up. Plain data: the rules that read them live in consort-core, and the agent
//! actor makes a step's `Policy` from them and the agent's config (`agent/drive.rs`).
//!
//! An embedding app starts from `AgentOptions::default()` and changes what it needs with the
//! `with_*` methods; the struct is `#[non_exhaustive]`, so a setting added later is no
//! breaking change.

use std::time::Duration;

use consort_config::AgentConfig;
use consort_core::machine::AdmissionLimits;
use consort_core::step::Policy;

use crate::store::Durability;
use crate::visibility::RoleGrants;

/// Settings of one agent actor. Read them through the fields; set them with the `with_*`
/// methods on [`AgentOptions::default()`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentOptions {
    /// Largest reply output handed back to a caller, in bytes.
    pub reply_cap: usize,
    /// Most unsettled runs the agent holds before refusing new work.
    pub admission_limit: usize,
    /// Most unsettled root runs one principal may hold on the agent (anonymous callers count
    /// as one principal), so that no caller can fill the agent on its own.
    pub per_principal_limit: usize,
    /// How hard each commit is pushed to disk.
    pub durability: Durability,
    /// How long an envelope stays valid after it is issued.
    pub call_ttl: Duration,
    /// The roles this host grants principals (`api:<token-name>` from its auth file): what
    /// the origin of a called run holds here, which bounds the roles the caller lends it.
    pub host_grants: RoleGrants,
    /// How long an agent's actor stays up with nothing to do before it is retired (its
    /// agent sleeps, holding no actor and no file, until a message needs it); `None` keeps
    /// every woken actor up.
    pub idle_after: Option<Duration>,
}

impl AgentOptions {
    /// With `bytes` as the largest reply output handed back to a caller.
    pub fn with_reply_cap(mut self, bytes: usize) -> Self {
        self.reply_cap = bytes;
        self
    }

    /// With at most `runs` unsettled runs per agent before it refuses new work.
    pub fn with_admission_limit(mut self, runs: usize) -> Self {
        self.admission_limit = runs;
        self
    }

    /// With at most `runs` unsettled root runs per principal on one agent.
    pub fn with_per_principal_limit(mut self, runs: usize) -> Self {
        self.per_principal_limit = runs;
        self
    }

    /// With `durability` for every commit.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// With envelopes valid for `ttl` after they are issued.
    pub fn with_call_ttl(mut self, ttl: Duration) -> Self {
        self.call_ttl = ttl;
        self
    }

    /// With the roles this host grants principals (from its auth file).
    pub fn with_host_grants(mut self, grants: RoleGrants) -> Self {
        self.host_grants = grants;
        self
    }

    /// With an idle actor retired after `idle` (`None`: never).
    pub fn with_idle_after(mut self, idle: Option<Duration>) -> Self {
        self.idle_after = idle;
        self
    }

    /// The facts a step needs from the agent's current config and these options: its
    /// `limits:` (the call guards, and its runs' turn limit, token budget and loop guard) come
    /// from agent.yaml, what a call may name is `callable`, and `immediate_model` says its
    /// model answers at once (`Model::is_immediate`).
    pub(crate) fn policy<'a>(
        &self,
        config: &'a AgentConfig,
        callable: &'a [String],
        immediate_model: bool,
    ) -> Policy<'a> {
        let mut policy = Policy {
            agent: &config.name,
            can_call: &config.can_call,
            fleet_agents: callable,
            limits: config.limits,
            reply_cap: self.reply_cap,
            immediate_model,
            now_ms: crate::run::now_ms(),
        };
        if crate::fault::skip_outbound_checks() {
            // Test-only (the `fault-injection` feature): a sending host with its own checks
            // off, to prove the receiving host still enforces every rule.
            tracing::warn!(agent = %config.name, "fault switch: outbound checks skipped (tests only)");
            policy.can_call = callable;
            policy.limits = consort_config::Limits {
                max_depth: consort_config::Limits::MAX_DEPTH_BOUND,
                max_calls_per_run: consort_config::Limits::MAX_CALLS_BOUND,
                ..policy.limits
            };
        }
        policy
    }

    /// The admission limits of these options, as the agent machine takes them.
    pub(crate) fn admission_limits(&self) -> AdmissionLimits {
        AdmissionLimits {
            admission_limit: self.admission_limit,
            per_principal_limit: self.per_principal_limit,
        }
    }
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            reply_cap: 16 * 1024,
            admission_limit: 256,
            per_principal_limit: 32,
            durability: Durability::Normal,
            call_ttl: Duration::from_secs(300),
            host_grants: RoleGrants::new(),
            idle_after: Some(Duration::from_secs(60)),
        }
    }
}
