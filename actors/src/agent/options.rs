//! An agent actor's settings ([`AgentOptions`], from its host) and the [`Policy`] a step of
//! one of its runs reads, made from them and the agent's current config. Plain data: the
//! rules that read them live in consort-core.

use std::time::Duration;

use tracing::warn;

use consort_config::AgentConfig;
use consort_core::machine::AdmissionLimits;
use consort_core::step::Policy;

use crate::store::Durability;
use crate::visibility::RoleGrants;

/// Settings of one agent actor.
#[derive(Clone, Debug)]
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

/// The facts a step needs from the agent's current config and options: its `limits:` (the
/// call guards, and its runs' turn limit, token budget and loop guard) come from agent.yaml;
/// `immediate_model` says its model answers at once (`Model::is_immediate`).
pub(super) fn policy<'a>(
    config: &'a AgentConfig,
    fleet_agents: &'a [String],
    options: &AgentOptions,
    immediate_model: bool,
) -> Policy<'a> {
    let mut policy = Policy {
        agent: &config.name,
        can_call: &config.can_call,
        fleet_agents,
        limits: config.limits,
        reply_cap: options.reply_cap,
        immediate_model,
        now_ms: crate::run::now_ms(),
    };
    if crate::fault::skip_outbound_checks() {
        // Test-only (the `fault-injection` feature): a sending host with its own checks off,
        // to prove the receiving host still enforces every rule.
        warn!(agent = %config.name, "fault switch: outbound checks skipped (tests only)");
        policy.can_call = fleet_agents;
        policy.limits = consort_config::Limits {
            max_depth: consort_config::Limits::MAX_DEPTH_BOUND,
            max_calls_per_run: consort_config::Limits::MAX_CALLS_BOUND,
            ..policy.limits
        };
    }
    policy
}
