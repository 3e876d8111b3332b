//! Every refusal consort can give, once: its stable code, the sentence the model reads, and
//! its wire form.
//!
//! A refusal is a value, not an error: a refused call becomes the tool result the calling
//! model reads (so the sentence says what happened and what to do next), an event in the
//! caller's log (under its [`Refusal::code`]), and, between hosts, the JSON of
//! [`Refusal::to_wire`] inside a refused frame, so the caller's host shows exactly what the
//! callee's host decided. Nothing outside this crate makes up a refusal text.

use serde::{Deserialize, Serialize};

use crate::budget::TreeResource;

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
    /// The caller already holds its share of the agent's runs.
    #[error(
        "{principal} already has {active} runs in progress on {callee}, its share: wait for some to settle, then try again"
    )]
    PrincipalSaturated {
        /// The agent.
        callee: String,
        /// Who the runs act for.
        principal: String,
        /// That principal's runs in progress on the agent.
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
    /// A decision named a gate that is not the one waiting (a retry that arrived after its gate
    /// was decided otherwise, or a gate of another time): nothing was decided.
    #[error(
        "gate {gate} is not waiting for a decision (the run waits on: {waiting}); nothing was decided: read the run again and decide the gate it waits on"
    )]
    StaleDecision {
        /// The gate named.
        gate: String,
        /// The gate the run waits on, or `none`.
        waiting: String,
    },
    /// A decision recorded a result for a gate that is not in doubt: its tool has not run, so
    /// there is nothing to record.
    #[error(
        "gate {gate} is not in doubt: its tool has not run; approve or deny it instead of recording a result"
    )]
    NotInDoubt {
        /// The gate named.
        gate: String,
    },
    /// A decision by the run's own requester on a gate that does not let the requester decide
    /// (four eyes): someone else must decide it. Nothing was decided.
    #[error(
        "gate {gate} needs someone else's decision: the run's own requester may not decide it (four eyes); ask an operator"
    )]
    FourEyes {
        /// The gate.
        gate: String,
    },
    /// A cancel named a run that has already settled: its log is final.
    #[error(
        "run {run} has already settled ({status}): there is nothing left to cancel and nothing was written"
    )]
    AlreadySettled {
        /// The run named.
        run: String,
        /// Its final status.
        status: String,
    },
    /// A delivery named a run that has settled: nothing reads it any more.
    #[error(
        "{run} has already {status}; a delivery to it would never be read: nothing was written; deliver without a run to start a new one"
    )]
    DeliveryTargetSettled {
        /// The run named.
        run: String,
        /// Its final status.
        status: String,
    },
    /// A delivery named a run parked on an operator's approval, which only an operator ends.
    #[error(
        "{run} is waiting for an operator's approval; a delivery cannot resolve it: nothing was written; try again after the gate is decided"
    )]
    DeliveryTargetBlocked {
        /// The run named.
        run: String,
    },
    /// A delivery id was used before for a different message.
    #[error(
        "delivery id `{delivery_id}` was already used for a different message: nothing was written; use a new delivery id for a new message"
    )]
    DeliveryConflict {
        /// The delivery id.
        delivery_id: String,
    },
    /// A delivery without text, or with a malformed delivery id.
    #[error(
        "deliver expects a non-empty text and a delivery id of 1 to 128 characters from [A-Za-z0-9_.:-]: nothing was written"
    )]
    MalformedDelivery,
    /// The callee does not take deliveries from the sender: its `accept_from` does not list
    /// the sender (decided by the callee's side).
    #[error(
        "{callee} does not accept deliveries from {sender}: nothing was written; answer with what you have"
    )]
    DeliveryNotConsented {
        /// The delivering agent.
        sender: String,
        /// The agent that refused.
        callee: String,
    },
    /// The sender's own config does not list the callee in `can_call`: refused on the
    /// sender's side, before the callee was asked (it may well accept the sender).
    #[error(
        "{sender} may not deliver to {callee}: {callee} is not in your own agents.can_call ({allowed}); nothing was sent and {callee} was not asked; deliver to one of those or answer with what you have"
    )]
    DeliveryNotInCanCall {
        /// The delivering agent.
        sender: String,
        /// The agent it asked to deliver to.
        callee: String,
        /// The agents it may call, as text.
        allowed: String,
    },
    /// A delivery named a run the sender did not place.
    #[error(
        "{run} is not a run you placed; a delivery may only go into your own calls: nothing was written; deliver without a run to start a new one"
    )]
    DeliveryNotYourRun {
        /// The run named.
        run: String,
    },
    /// The host is draining: an operator stopped it from starting new runs while the runs it
    /// accepted finish.
    #[error(
        "host {host} is draining: it finishes the runs it accepted and starts no new ones; try again after an operator resumes it, or on another host"
    )]
    Draining {
        /// The draining host.
        host: String,
    },
    /// The loop guard: the model used the same tool with the same input in as many turns in a
    /// row as its agent's `limits.max_repeats`, so that use was not run (and one more such
    /// turn fails the run).
    #[error(
        "you called `{tool}` with the same input {times} times in a row and its result will not change: stop repeating it; answer with what you have or try something different"
    )]
    RepeatedToolUse {
        /// The tool the model used.
        tool: String,
        /// How many turns in a row used it with that input, this one included.
        times: u32,
    },
    /// The call tree's budget (`limits.tree`, or the budget of the request that started the
    /// tree) has nothing left for this call: no run or no token to hand it, or the tree's
    /// deadline passed.
    #[error("{}", tree_budget_text(*.what, *.limit, *.spent))]
    #[serde(rename = "budget_exhausted")]
    TreeBudgetExhausted {
        /// Which count ran out.
        what: TreeResource,
        /// The limit: runs or tokens of the budget the caller holds (its root's, or the share
        /// it was given); for `wall`, the deadline in Unix milliseconds.
        limit: u64,
        /// What is spent or handed out of it; for `wall`, the time of the check in Unix
        /// milliseconds.
        spent: u64,
    },
}

/// What the model reads of [`Refusal::TreeBudgetExhausted`].
fn tree_budget_text(what: TreeResource, limit: u64, spent: u64) -> String {
    let why = match what {
        TreeResource::Runs => format!(
            "the call tree's run budget is spent ({spent} of {limit} runs started or handed out to calls)"
        ),
        TreeResource::Tokens => format!(
            "the call tree's token budget is spent ({spent} of {limit} tokens used or handed out to calls)"
        ),
        TreeResource::Wall => format!(
            "the call tree's time budget is spent (its deadline passed {} s ago)",
            spent.saturating_sub(limit) / 1000
        ),
    };
    format!("{why}: no more calls can be placed; answer with what you have")
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
            Self::PrincipalSaturated { .. } => "principal_saturated",
            Self::AgentDown { .. } => "agent_down",
            Self::Unreachable { .. } => "unreachable",
            Self::BadEnvelope { .. } => "bad_envelope",
            Self::MalformedCall => "malformed_call",
            Self::EmptyInput => "empty_input",
            Self::NotAwaitingApproval { .. } => "not_awaiting_approval",
            Self::StaleDecision { .. } => "stale_decision",
            Self::NotInDoubt { .. } => "not_in_doubt",
            Self::FourEyes { .. } => "four_eyes",
            Self::AlreadySettled { .. } => "already_settled",
            Self::DeliveryTargetSettled { .. } => "delivery_target_settled",
            Self::DeliveryTargetBlocked { .. } => "delivery_target_blocked",
            Self::DeliveryConflict { .. } => "delivery_conflict",
            Self::MalformedDelivery => "malformed_delivery",
            Self::DeliveryNotConsented { .. } => "delivery_not_consented",
            Self::DeliveryNotInCanCall { .. } => "delivery_not_in_can_call",
            Self::DeliveryNotYourRun { .. } => "delivery_not_your_run",
            Self::Draining { .. } => "draining",
            Self::RepeatedToolUse { .. } => "repeated_tool_use",
            Self::TreeBudgetExhausted { .. } => "budget_exhausted",
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
            Refusal::PrincipalSaturated {
                callee: s("b"),
                principal: s("api:alice"),
                active: 32,
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
            Refusal::StaleDecision {
                gate: s("run_1:tu_0_0"),
                waiting: s("run_1:tu_1_0"),
            },
            Refusal::NotInDoubt {
                gate: s("run_1:tu_0_0"),
            },
            Refusal::AlreadySettled {
                run: s("run_1"),
                status: s("failed"),
            },
            Refusal::DeliveryTargetSettled {
                run: s("run_1"),
                status: s("succeeded"),
            },
            Refusal::DeliveryTargetBlocked { run: s("run_1") },
            Refusal::DeliveryConflict {
                delivery_id: s("d-1"),
            },
            Refusal::MalformedDelivery,
            Refusal::DeliveryNotConsented {
                sender: s("cmo"),
                callee: s("cfo"),
            },
            Refusal::DeliveryNotInCanCall {
                sender: s("a1"),
                callee: s("b3"),
                allowed: s("c"),
            },
            Refusal::DeliveryNotYourRun { run: s("run_1") },
            Refusal::Draining { host: s("beta") },
            Refusal::RepeatedToolUse {
                tool: s("lookup"),
                times: 3,
            },
            Refusal::FourEyes {
                gate: s("run_1:tu"),
            },
            Refusal::TreeBudgetExhausted {
                what: TreeResource::Runs,
                limit: 10,
                spent: 10,
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
        assert_eq!(
            Refusal::DeliveryTargetBlocked {
                run: "run_1".into()
            }
            .to_string(),
            "run_1 is waiting for an operator's approval; a delivery cannot resolve it: nothing was written; try again after the gate is decided"
        );
    }

    #[test]
    fn delivery_refusals_have_their_wire_form() {
        let refusal = Refusal::DeliveryConflict {
            delivery_id: "d-1".into(),
        };
        assert_eq!(
            refusal.to_wire(),
            r#"{"reason":"delivery_conflict","delivery_id":"d-1"}"#
        );
        assert_eq!(
            Refusal::MalformedDelivery.to_wire(),
            r#"{"reason":"malformed_delivery"}"#
        );
    }

    #[test]
    fn a_sender_side_delivery_refusal_names_the_senders_can_call_not_the_peer() {
        let refusal = Refusal::DeliveryNotInCanCall {
            sender: "a1".into(),
            callee: "b3".into(),
            allowed: "c7".into(),
        };
        let text = refusal.to_string();
        assert!(text.contains("your own agents.can_call (c7)"), "{text}");
        assert!(!text.contains("does not accept"), "{text}");
        assert_ne!(
            refusal.code(),
            Refusal::DeliveryNotConsented {
                sender: "a1".into(),
                callee: "b3".into(),
            }
            .code()
        );
        assert_eq!(
            refusal.to_wire(),
            r#"{"reason":"delivery_not_in_can_call","sender":"a1","callee":"b3","allowed":"c7"}"#
        );
    }

    #[test]
    fn the_loop_guard_says_what_was_repeated_and_has_its_wire_form() {
        let refusal = Refusal::RepeatedToolUse {
            tool: "lookup".into(),
            times: 3,
        };
        assert_eq!(refusal.code(), "repeated_tool_use");
        assert_eq!(
            refusal.to_string(),
            "you called `lookup` with the same input 3 times in a row and its result will not change: stop repeating it; answer with what you have or try something different"
        );
        let wire = refusal.to_wire();
        assert_eq!(
            wire,
            r#"{"reason":"repeated_tool_use","tool":"lookup","times":3}"#
        );
        assert_eq!(Refusal::from_wire(&wire), Some(refusal));
    }
}

#[cfg(test)]
mod tree_budget_tests {
    use super::*;

    #[test]
    fn a_spent_tree_budget_says_which_count_ran_out_and_what_to_do() {
        let runs = Refusal::TreeBudgetExhausted {
            what: TreeResource::Runs,
            limit: 3,
            spent: 3,
        };
        assert_eq!(runs.code(), "budget_exhausted");
        assert_eq!(
            runs.to_string(),
            "the call tree's run budget is spent (3 of 3 runs started or handed out to calls): no more calls can be placed; answer with what you have"
        );
        assert_eq!(
            runs.to_wire(),
            r#"{"reason":"budget_exhausted","what":"runs","limit":3,"spent":3}"#
        );
        let tokens = Refusal::TreeBudgetExhausted {
            what: TreeResource::Tokens,
            limit: 500,
            spent: 512,
        };
        assert!(tokens.to_string().contains("512 of 500 tokens"), "{tokens}");
        let wall = Refusal::TreeBudgetExhausted {
            what: TreeResource::Wall,
            limit: 10_000,
            spent: 13_500,
        };
        assert!(
            wall.to_string().contains("deadline passed 3 s ago"),
            "{wall}"
        );
        for refusal in [runs, tokens, wall] {
            assert_eq!(Refusal::from_wire(&refusal.to_wire()), Some(refusal));
        }
    }
}
