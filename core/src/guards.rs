//! The loop guards and consent checks applied to every call, as pure functions.
//!
//! A call is checked twice: by the caller's side before anything is written or sent
//! ([`check_outbound`]) and by the callee's side before a run is created ([`check_inbound`]).
//! Each side uses its *own current* config (its consent list and its [`Limits`]), so editing
//! one agent.yaml can narrow access at once and can never widen what the other side did not
//! grant. A refusal is a [`Refusal`] whose text is written for the model that placed the call.
//!
//! This module performs no I/O and holds no state: callers gather the facts, these functions
//! decide. Replays of an accepted call never reach these functions (the guards bound decisions,
//! never recovery).
//!
//! Across hosts, [`arrived_call`] decides relay and locality of an arriving call, and
//! [`remote`] who may deliver a reply to, or ask about, a run afterwards.

use std::collections::BTreeMap;

use consort_config::Limits;

use crate::consent::{callee_consents, caller_consents};
use crate::{Refusal, TreeBudget};

pub mod remote;

/// What the caller's side knows when its model asks to call a peer.
#[derive(Clone, Debug)]
pub struct OutboundFacts<'a> {
    /// The calling agent.
    pub caller: &'a str,
    /// The agent its model asked for.
    pub callee: &'a str,
    /// The caller's current `can_call`.
    pub can_call: &'a [String],
    /// Every agent of the fleet (local and remote), the caller included.
    pub fleet_agents: &'a [String],
    /// Hop depth of the calling run (0 for a root run).
    pub caller_depth: usize,
    /// Calls this run has already placed, or is placing.
    pub calls_placed: u64,
    /// The caller's current limits.
    pub limits: Limits,
}

/// The caller's check: consent from its own side, then depth, then the per-run cap.
pub fn check_outbound(f: &OutboundFacts<'_>) -> Result<(), Refusal> {
    if f.fleet_agents.iter().all(|a| a == f.caller) {
        return Err(Refusal::NoPeers {
            agent: f.caller.to_owned(),
        });
    }
    if !f.fleet_agents.iter().any(|a| a == f.callee) {
        return Err(Refusal::UnknownAgent {
            callee: f.callee.to_owned(),
            allowed: list_or_none(f.can_call),
        });
    }
    if !caller_consents(f.can_call, f.callee) {
        return Err(Refusal::NotInCanCall {
            caller: f.caller.to_owned(),
            callee: f.callee.to_owned(),
            allowed: list_or_none(f.can_call),
        });
    }
    let max_depth = f.limits.max_depth as usize;
    if f.caller_depth + 1 > max_depth {
        return Err(chain_too_deep(max_depth));
    }
    let cap = u64::from(f.limits.max_calls_per_run);
    if f.calls_placed >= cap {
        return Err(Refusal::CallCap { limit: cap });
    }
    Ok(())
}

/// What the callee's side knows when a call arrives (a *new* call: replays skip this).
#[derive(Clone, Debug)]
pub struct InboundFacts<'a> {
    /// The calling agent, as the verified chain names it.
    pub caller: &'a str,
    /// This agent.
    pub callee: &'a str,
    /// The callee's current `accept_from`.
    pub accept_from: &'a [String],
    /// The depth of the arriving chain (its length, counted by the receiver).
    pub chain_depth: usize,
    /// Child runs of the same parent run this side has already accepted.
    pub children_accepted: u64,
    /// Runs of the callee in progress.
    pub active_runs: usize,
    /// The most unsettled runs the callee holds.
    pub admission_limit: usize,
    /// The callee's current limits.
    pub limits: Limits,
    /// The tree budget the arriving hop hands the child run (`None`: the tree has none).
    pub budget: Option<TreeBudget>,
    /// The callee's clock, Unix milliseconds (for the budget's deadline).
    pub now_ms: u64,
}

/// The callee's check: consent from its own side, depth, the tree budget the call carries (a
/// deadline passed, or no run or token left in it), the per-parent cap, admission.
pub fn check_inbound(f: &InboundFacts<'_>) -> Result<(), Refusal> {
    if !callee_consents(f.accept_from, f.caller) {
        return Err(Refusal::NotAccepted {
            caller: f.caller.to_owned(),
            callee: f.callee.to_owned(),
        });
    }
    let max_depth = f.limits.max_depth as usize;
    if f.chain_depth > max_depth || f.chain_depth == 0 {
        return Err(chain_too_deep(max_depth));
    }
    if let Some(refusal) = f.budget.and_then(|b| b.refusal(f.now_ms)) {
        return Err(refusal);
    }
    let cap = u64::from(f.limits.max_calls_per_run);
    if f.children_accepted >= cap {
        return Err(Refusal::CallCap { limit: cap });
    }
    if f.active_runs >= f.admission_limit {
        return Err(Refusal::Saturated {
            callee: f.callee.to_owned(),
            active: f.active_runs,
        });
    }
    Ok(())
}

/// Admission of a root run: a non-empty input, and room under the agent's admission limit.
pub fn admit(
    agent: &str,
    input: &str,
    active_runs: usize,
    admission_limit: usize,
) -> Result<(), Refusal> {
    if input.trim().is_empty() {
        return Err(Refusal::EmptyInput);
    }
    if active_runs >= admission_limit {
        return Err(Refusal::Saturated {
            callee: agent.to_owned(),
            active: active_runs,
        });
    }
    Ok(())
}

/// Admission of a root run for one principal: room under the share of the agent any one
/// principal may hold, so that no caller (anonymous callers count as one) can fill an agent
/// with its own runs, waiting or parked on approval gates, and lock everyone else out.
pub fn admit_for(
    agent: &str,
    principal: &str,
    active_for_principal: usize,
    per_principal_limit: usize,
) -> Result<(), Refusal> {
    if active_for_principal >= per_principal_limit {
        return Err(Refusal::PrincipalSaturated {
            callee: agent.to_owned(),
            principal: principal.to_owned(),
            active: active_for_principal,
        });
    }
    Ok(())
}

/// Whether an arriving call is for this agent: `last_callee` is the callee of the chain's
/// last hop (`None` for an empty chain).
pub fn addressed_to(last_callee: Option<&str>, me: &str) -> Result<(), Refusal> {
    match last_callee {
        None => Err(empty_chain(me)),
        Some(callee) if callee == me => Ok(()),
        Some(callee) => Err(Refusal::BadEnvelope {
            callee: me.to_owned(),
            detail: format!("envelope is addressed to {callee}"),
        }),
    }
}

/// The refusal of a chain deeper than `limit`, the depth limit of the side that checked: the
/// caller's or the callee's `limits.max_depth`, or a host's bound on the chains its link takes
/// (which refuses a chain that deep before checking its signatures, in the same words the
/// agent would).
pub fn chain_too_deep(limit: usize) -> Refusal {
    Refusal::DepthLimit { limit }
}

/// The refusal of a call or a delivery routed to an agent the fleet does not have: this host
/// does not serve it, no other host does, and no caller declares it as a remote A2A agent.
/// `fleet_agents` are the agents there are, named so the model can pick one.
pub fn not_in_fleet(callee: &str, fleet_agents: &[String]) -> Refusal {
    Refusal::UnknownAgent {
        callee: callee.to_owned(),
        allowed: fleet_agents.join(", "),
    }
}

/// The refusal of a call whose chain has no hop.
pub fn empty_chain(me: &str) -> Refusal {
    Refusal::BadEnvelope {
        callee: me.to_owned(),
        detail: "empty chain".into(),
    }
}

/// Relay and locality of a call that arrived from another host: the host that sent it must be
/// the one that serves its caller (a host signs only its own agents' hops, so a call relayed by
/// a third host is refused even when every signature holds), and this host must serve its
/// callee. `placements` maps each agent of the fleet to its host.
pub fn arrived_call(
    placements: &BTreeMap<String, String>,
    here: &str,
    sender: &str,
    caller: &str,
    callee: &str,
) -> Result<(), Refusal> {
    if placements.get(caller).map(String::as_str) != Some(sender) {
        return Err(Refusal::BadEnvelope {
            callee: callee.to_owned(),
            detail: format!("{caller} is not served by host {sender}, which sent the call"),
        });
    }
    if placements.get(callee).map(String::as_str) != Some(here) {
        let local: Vec<&str> = placements
            .iter()
            .filter(|(_, host)| host.as_str() == here)
            .map(|(agent, _)| agent.as_str())
            .collect();
        return Err(Refusal::UnknownAgent {
            callee: callee.to_owned(),
            allowed: local.join(", "),
        });
    }
    Ok(())
}

/// `can_call` as a refusal's text says it: the names, or that there are none.
pub(crate) fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none: agents.can_call is empty".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests;
