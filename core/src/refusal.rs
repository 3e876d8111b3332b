//! Every refusal consort can give, once: its stable code, the sentence the model reads, and
//! its wire form.
//!
//! A refusal is a value, not an error: a refused call becomes the tool result the calling
//! model reads (so the sentence says what happened and what to do next), an event in the
//! caller's log (under its [`Refusal::code`]), and, between hosts, the JSON of
//! [`Refusal::to_wire`] inside a refused frame, so the caller's host shows exactly what the
//! callee's host decided. Nothing outside this crate makes up a refusal text.

use serde::{Deserialize, Serialize};

/// Why a call or a request was refused. Each variant's `Display` is what the model reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// The runtime serves a single agent: there is nobody to call.
    #[error(
        "call_agent is unavailable: this runtime serves a single agent ({agent}) and has no peers to call; answer with your own tools"
    )]
    NoPeers {
        /// The only agent.
        agent: String,
    },
    /// The caller's own config does not list the callee in `can_call`.
    #[error(
        "{caller} may not call {callee}: it is not in your agents.can_call ({allowed}); call one of those or answer yourself"
    )]
    NotInCanCall {
        /// The calling agent.
        caller: String,
        /// The agent it asked for.
        callee: String,
        /// The agents it may call, as text.
        allowed: String,
    },
    /// No agent with that name exists in the fleet.
    #[error("there is no agent named `{callee}` in this fleet; call one of: {allowed}")]
    UnknownAgent {
        /// The name asked for.
        callee: String,
        /// The agents the caller may call, as text.
        allowed: String,
    },
    /// The callee's config does not list the caller in `accept_from`.
    #[error("{callee} does not accept calls from {caller}; answer with what you have")]
    NotAccepted {
        /// The calling agent.
        caller: String,
        /// The agent that refused.
        callee: String,
    },
    /// The chain would be deeper than the depth limit of the side that checked.
    #[error("call chain depth limit ({limit}) reached: answer with what you have")]
    DepthLimit {
        /// The limit that was reached.
        limit: usize,
    },
    /// The run already placed as many calls as the limit allows.
    #[error("per-run call limit ({limit}) reached: answer with what you have")]
    CallCap {
        /// The limit that was reached.
        limit: u64,
    },
    /// The callee is at its admission limit.
    #[error(
        "{callee} is saturated ({active} runs in progress): try again later or answer with what you have"
    )]
    Saturated {
        /// The saturated agent.
        callee: String,
        /// Its runs in progress.
        active: usize,
    },
    /// The callee is down (its restart budget is spent).
    #[error("{callee} is down and cannot take calls right now; answer with what you have")]
    AgentDown {
        /// The agent that is down.
        callee: String,
    },
    /// The callee's host could not be reached; the call was not delivered.
    #[error(
        "{callee} is unreachable ({detail}); the call was not delivered; you may retry later or answer with what you have"
    )]
    Unreachable {
        /// The agent asked for.
        callee: String,
        /// What happened on the link.
        detail: String,
    },
    /// The envelope did not verify (signature, chain, placement or expiry).
    #[error("the call to {callee} was refused by its host: {detail}")]
    BadEnvelope {
        /// The agent asked for.
        callee: String,
        /// What did not verify.
        detail: String,
    },
    /// `call_agent` was used without an agent name or with an empty input.
    #[error("call_agent expects {{\"agent\": \"<name>\", \"input\": \"<non-empty text>\"}}")]
    MalformedCall,
    /// A run was asked for with an empty input.
    #[error("input must not be empty")]
    EmptyInput,
    /// An operator decision was sent for a run that is not waiting for one.
    #[error("run {run} is not waiting for an approval (status {status})")]
    NotAwaitingApproval {
        /// The run named.
        run: String,
        /// Its status.
        status: String,
    },
}

impl Refusal {
    /// A stable machine name for the refusal, for event logs, typed outcomes and the wire.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoPeers { .. } => "no_peers",
            Self::NotInCanCall { .. } => "not_in_can_call",
            Self::UnknownAgent { .. } => "unknown_agent",
            Self::NotAccepted { .. } => "not_accepted",
            Self::DepthLimit { .. } => "depth_limit",
            Self::CallCap { .. } => "call_cap",
            Self::Saturated { .. } => "saturated",
            Self::AgentDown { .. } => "agent_down",
            Self::Unreachable { .. } => "unreachable",
            Self::BadEnvelope { .. } => "bad_envelope",
            Self::MalformedCall => "malformed_call",
            Self::EmptyInput => "empty_input",
            Self::NotAwaitingApproval { .. } => "not_awaiting_approval",
        }
    }

    /// The refusal's wire form: JSON with its code under `reason` and its fields beside it.
    pub fn to_wire(&self) -> String {
        // Serializing plain strings and integers into JSON cannot fail.
        serde_json::to_string(self)
            .unwrap_or_else(|_| format!("{{\"reason\":\"{}\"}}", self.code()))
    }

    /// Reads a refusal's wire form; `None` when the text is not one (an older host's free text).
    pub fn from_wire(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_variant() -> Vec<Refusal> {
        let s = |t: &str| t.to_owned();
        vec![
            Refusal::NoPeers { agent: s("solo") },
            Refusal::NotInCanCall {
                caller: s("a"),
                callee: s("b"),
                allowed: s("c"),
            },
            Refusal::UnknownAgent {
                callee: s("x"),
                allowed: s("c"),
            },
            Refusal::NotAccepted {
                caller: s("a"),
                callee: s("b"),
            },
            Refusal::DepthLimit { limit: 4 },
            Refusal::CallCap { limit: 25 },
            Refusal::Saturated {
                callee: s("b"),
                active: 3,
            },
            Refusal::AgentDown { callee: s("b") },
            Refusal::Unreachable {
                callee: s("b"),
                detail: s("connection lost"),
            },
            Refusal::BadEnvelope {
                callee: s("b"),
                detail: s("expired"),
            },
            Refusal::MalformedCall,
            Refusal::EmptyInput,
            Refusal::NotAwaitingApproval {
                run: s("run_1"),
                status: s("running"),
            },
        ]
    }

    #[test]
    fn every_refusal_has_a_code_a_sentence_and_a_wire_form_that_round_trips() {
        let mut codes = std::collections::BTreeSet::new();
        for refusal in every_variant() {
            assert!(!refusal.code().is_empty());
            assert!(
                codes.insert(refusal.code()),
                "duplicate code {}",
                refusal.code()
            );
            assert!(refusal.to_string().len() > 10, "{refusal:?}");
            let wire = refusal.to_wire();
            assert!(
                wire.contains(&format!("\"reason\":\"{}\"", refusal.code())),
                "{wire}"
            );
            assert_eq!(Refusal::from_wire(&wire), Some(refusal));
        }
    }

    #[test]
    fn texts_tell_the_model_what_to_do() {
        assert_eq!(
            Refusal::DepthLimit { limit: 4 }.to_string(),
            "call chain depth limit (4) reached: answer with what you have"
        );
        assert_eq!(
            Refusal::MalformedCall.to_string(),
            "call_agent expects {\"agent\": \"<name>\", \"input\": \"<non-empty text>\"}"
        );
        assert_eq!(Refusal::from_wire("the host said no"), None);
    }
}
