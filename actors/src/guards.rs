//! The loop guards and consent checks applied to every call, as pure functions.
//!
//! A call is checked twice: by the caller's side before anything is written or sent
//! ([`check_outbound`]) and by the callee's side before a run is created ([`check_inbound`]).
//! Each side uses its *own current* config, so editing one agent.yaml can narrow access at once
//! and can never widen what the other side did not grant. A refusal is a [`Refusal`] whose
//! text is written for the model that placed the call: it says what happened and what to do.
//!
//! This module performs no I/O and holds no state: callers gather the facts, these functions
//! decide. Replays of an accepted call never reach these functions (the guards bound decisions,
//! never recovery).

use serde::{Deserialize, Serialize};

/// The longest call chain allowed: `a -> b -> c -> d -> e` is four hops; a fifth is refused.
pub const HOP_LIMIT: usize = 4;

/// The most calls one run may place.
pub const CALL_CAP: u64 = 25;

/// Why a call was refused. Each variant's text is what the calling model reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Refusal {
    /// The runtime serves a single agent: there is nobody to call.
    #[error(
        "call_agent is unavailable: this runtime serves a single agent ({agent}) and has no peers to call; answer with your own tools"
    )]
    NoPeers { agent: String },
    /// The caller's own config does not list the callee in `can_call`.
    #[error(
        "{caller} may not call {callee}: it is not in your agents.can_call ({allowed}); call one of those or answer yourself"
    )]
    NotInCanCall {
        caller: String,
        callee: String,
        allowed: String,
    },
    /// No agent with that name exists in the fleet.
    #[error("there is no agent named `{callee}` in this fleet; call one of: {allowed}")]
    UnknownAgent { callee: String, allowed: String },
    /// The callee's config does not list the caller in `accept_from`.
    #[error("{callee} does not accept calls from {caller}; answer with what you have")]
    NotAccepted { caller: String, callee: String },
    /// The chain would be deeper than [`HOP_LIMIT`].
    #[error("call chain depth limit ({limit}) reached: answer with what you have")]
    DepthLimit { limit: usize },
    /// The run already placed [`CALL_CAP`] calls.
    #[error("per-run call limit ({limit}) reached: answer with what you have")]
    CallCap { limit: u64 },
    /// The callee is at its admission limit.
    #[error(
        "{callee} is saturated ({active} runs in progress): try again later or answer with what you have"
    )]
    Saturated { callee: String, active: usize },
    /// The callee is down (its restart budget is spent).
    #[error("{callee} is down and cannot take calls right now; answer with what you have")]
    AgentDown { callee: String },
    /// The callee's host could not be reached; the call was not delivered.
    #[error(
        "{callee} is unreachable ({detail}); the call was not delivered; you may retry later or answer with what you have"
    )]
    Unreachable { callee: String, detail: String },
    /// The envelope did not verify (signature, chain, placement or expiry).
    #[error("the call to {callee} was refused by its host: {detail}")]
    BadEnvelope { callee: String, detail: String },
}

impl Refusal {
    /// A stable machine name for the refusal, for event logs and typed outcomes.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NoPeers { .. } => "no_peers",
            Refusal::NotInCanCall { .. } => "not_in_can_call",
            Refusal::UnknownAgent { .. } => "unknown_agent",
            Refusal::NotAccepted { .. } => "not_accepted",
            Refusal::DepthLimit { .. } => "depth_limit",
            Refusal::CallCap { .. } => "call_cap",
            Refusal::Saturated { .. } => "saturated",
            Refusal::AgentDown { .. } => "agent_down",
            Refusal::Unreachable { .. } => "unreachable",
            Refusal::BadEnvelope { .. } => "bad_envelope",
        }
    }
}

/// What the caller's side knows when its model asks to call a peer.
#[derive(Clone, Debug)]
pub struct OutboundFacts<'a> {
    pub caller: &'a str,
    pub callee: &'a str,
    /// The caller's current `can_call`.
    pub can_call: &'a [String],
    /// Every agent of the fleet (local and remote), the caller included.
    pub fleet_agents: &'a [String],
    /// Hop depth of the calling run (0 for a root run).
    pub caller_depth: usize,
    /// Calls this run has already placed.
    pub calls_placed: u64,
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
    if !f.can_call.iter().any(|a| a == f.callee) {
        return Err(Refusal::NotInCanCall {
            caller: f.caller.to_owned(),
            callee: f.callee.to_owned(),
            allowed: list_or_none(f.can_call),
        });
    }
    if f.caller_depth + 1 > HOP_LIMIT {
        return Err(Refusal::DepthLimit { limit: HOP_LIMIT });
    }
    if f.calls_placed >= CALL_CAP {
        return Err(Refusal::CallCap { limit: CALL_CAP });
    }
    Ok(())
}

/// What the callee's side knows when a call arrives (a *new* call: replays skip this).
#[derive(Clone, Debug)]
pub struct InboundFacts<'a> {
    pub caller: &'a str,
    pub callee: &'a str,
    /// The callee's current `accept_from`.
    pub accept_from: &'a [String],
    /// The depth of the arriving chain (its length, counted by the receiver).
    pub chain_depth: usize,
    /// Child runs of the same parent run this side has already accepted.
    pub children_accepted: u64,
    /// Runs of the callee in progress, and its admission limit.
    pub active_runs: usize,
    pub admission_limit: usize,
}

/// The callee's check: consent from its own side, depth, the per-parent cap, admission.
pub fn check_inbound(f: &InboundFacts<'_>) -> Result<(), Refusal> {
    if !f.accept_from.iter().any(|a| a == f.caller) {
        return Err(Refusal::NotAccepted {
            caller: f.caller.to_owned(),
            callee: f.callee.to_owned(),
        });
    }
    if f.chain_depth > HOP_LIMIT || f.chain_depth == 0 {
        return Err(Refusal::DepthLimit { limit: HOP_LIMIT });
    }
    if f.children_accepted >= CALL_CAP {
        return Err(Refusal::CallCap { limit: CALL_CAP });
    }
    if f.active_runs >= f.admission_limit {
        return Err(Refusal::Saturated {
            callee: f.callee.to_owned(),
            active: f.active_runs,
        });
    }
    Ok(())
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none: agents.can_call is empty".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn outbound<'a>(
        can_call: &'a [String],
        fleet: &'a [String],
        depth: usize,
        placed: u64,
    ) -> OutboundFacts<'a> {
        OutboundFacts {
            caller: "cmo",
            callee: "cfo",
            can_call,
            fleet_agents: fleet,
            caller_depth: depth,
            calls_placed: placed,
        }
    }

    #[test]
    fn outbound_allows_a_declared_peer_within_limits() {
        let (can, fleet) = (names(&["cfo"]), names(&["cmo", "cfo"]));
        assert_eq!(check_outbound(&outbound(&can, &fleet, 0, 0)), Ok(()));
        assert_eq!(check_outbound(&outbound(&can, &fleet, 3, 24)), Ok(()));
    }

    #[test]
    fn outbound_refusals_in_order() {
        let (can, fleet) = (names(&["cfo"]), names(&["cmo", "cfo"]));
        let solo = names(&["cmo"]);
        let none: Vec<String> = vec![];
        assert!(matches!(
            check_outbound(&outbound(&can, &solo, 0, 0)),
            Err(Refusal::NoPeers { .. })
        ));
        assert!(matches!(
            check_outbound(&outbound(&none, &fleet, 0, 0)),
            Err(Refusal::NotInCanCall { .. })
        ));
        let other = names(&["cmo", "analyst"]);
        assert!(matches!(
            check_outbound(&outbound(&can, &other, 0, 0)),
            Err(Refusal::UnknownAgent { .. })
        ));
        let depth = check_outbound(&outbound(&can, &fleet, 4, 0)).unwrap_err();
        assert_eq!(
            depth.to_string(),
            "call chain depth limit (4) reached: answer with what you have"
        );
        let cap = check_outbound(&outbound(&can, &fleet, 0, 25)).unwrap_err();
        assert_eq!(
            cap.to_string(),
            "per-run call limit (25) reached: answer with what you have"
        );
        // Depth is checked before the cap: a deep chain is told about depth.
        assert!(matches!(
            check_outbound(&outbound(&can, &fleet, 4, 25)),
            Err(Refusal::DepthLimit { .. })
        ));
    }

    fn inbound(
        accept: &[String],
        depth: usize,
        children: u64,
        active: usize,
    ) -> Result<(), Refusal> {
        check_inbound(&InboundFacts {
            caller: "cmo",
            callee: "cfo",
            accept_from: accept,
            chain_depth: depth,
            children_accepted: children,
            active_runs: active,
            admission_limit: 8,
        })
    }

    #[test]
    fn inbound_table() {
        let yes = names(&["cmo"]);
        let no = names(&["analyst"]);
        assert_eq!(inbound(&yes, 1, 0, 0), Ok(()));
        assert_eq!(inbound(&yes, 4, 24, 7), Ok(()));
        assert!(matches!(
            inbound(&no, 1, 0, 0),
            Err(Refusal::NotAccepted { .. })
        ));
        assert!(matches!(
            inbound(&[], 1, 0, 0),
            Err(Refusal::NotAccepted { .. })
        ));
        assert!(matches!(
            inbound(&yes, 5, 0, 0),
            Err(Refusal::DepthLimit { .. })
        ));
        assert!(matches!(
            inbound(&yes, 0, 0, 0),
            Err(Refusal::DepthLimit { .. })
        ));
        assert!(matches!(
            inbound(&yes, 1, 25, 0),
            Err(Refusal::CallCap { .. })
        ));
        assert!(matches!(
            inbound(&yes, 1, 0, 8),
            Err(Refusal::Saturated { .. })
        ));
        // Consent is decided first: an unconsented caller learns nothing about limits.
        assert!(matches!(
            inbound(&no, 9, 99, 99),
            Err(Refusal::NotAccepted { .. })
        ));
    }

    #[test]
    fn refusal_codes_are_distinct() {
        let all = [
            Refusal::NoPeers { agent: "a".into() },
            Refusal::NotInCanCall {
                caller: "a".into(),
                callee: "b".into(),
                allowed: "".into(),
            },
            Refusal::UnknownAgent {
                callee: "b".into(),
                allowed: "".into(),
            },
            Refusal::NotAccepted {
                caller: "a".into(),
                callee: "b".into(),
            },
            Refusal::DepthLimit { limit: 4 },
            Refusal::CallCap { limit: 25 },
            Refusal::Saturated {
                callee: "b".into(),
                active: 1,
            },
            Refusal::AgentDown { callee: "b".into() },
            Refusal::Unreachable {
                callee: "b".into(),
                detail: "x".into(),
            },
            Refusal::BadEnvelope {
                callee: "b".into(),
                detail: "x".into(),
            },
        ];
        let codes: std::collections::BTreeSet<_> = all.iter().map(Refusal::code).collect();
        assert_eq!(codes.len(), all.len());
    }
}
