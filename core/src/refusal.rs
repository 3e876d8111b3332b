//! Every refusal consort can give, once: its stable code, the sentence the model reads, and
//! its wire form.
//!
//! A refusal is a value, not an error: a refused call becomes the tool result the calling
//! model reads (so the sentence says what happened and what to do next), an event in the
//! caller's log (under its [`Refusal::code`]), and, between hosts, the JSON of
//! [`Refusal::to_wire`] inside a refused frame, so the caller's host shows exactly what the
//! callee's host decided. Nothing outside this crate makes up a refusal text.
//!
//! Nothing outside this crate builds a refusal either: every variant is `#[non_exhaustive]`,
//! so another crate can only match one (with `{ .. }`) or receive one from a function here
//! that names the fact it refuses: a guard's check ([`crate::guards`]), a delivery's rule
//! ([`crate::directory::delivery`]), the run state machine, or, for what only the runtime sees
//! (an agent that is down, a host that drains, a link that failed, a refusal read off the
//! wire), the constructors of [`Refusal`] itself. A rule written in another crate does not
//! compile.

use serde::{Deserialize, Serialize};

use crate::budget::TreeResource;

/// Why a call or a request was refused. Each variant's `Display` is what the model reads, and
/// each has its own [`code`](Refusal::code), which is also its wire tag. Every variant is
/// `#[non_exhaustive]`: only this crate builds one (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// The runtime serves a single agent: there is nobody to call.
    #[error(
        "call_agent is unavailable: this runtime serves a single agent ({agent}) and has no peers to call; answer with your own tools"
    )]
    #[non_exhaustive]
    NoPeers {
        /// The only agent.
        agent: String,
    },
    /// The caller's own config does not list the callee in `can_call`.
    #[error(
        "{caller} may not call {callee}: it is not in your agents.can_call ({allowed}); call one of those or answer yourself"
    )]
    #[non_exhaustive]
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
    #[non_exhaustive]
    UnknownAgent {
        /// The name asked for.
        callee: String,
        /// The agents the caller may call, as text.
        allowed: String,
    },
    /// The callee's config does not list the caller in `accept_from`.
    #[error("{callee} does not accept calls from {caller}; answer with what you have")]
    #[non_exhaustive]
    NotAccepted {
        /// The calling agent.
        caller: String,
        /// The agent that refused.
        callee: String,
    },
    /// The chain would be deeper than the depth limit of the side that checked.
    #[error("call chain depth limit ({limit}) reached: answer with what you have")]
    #[non_exhaustive]
    DepthLimit {
        /// The limit that was reached.
        limit: usize,
    },
    /// The run already placed as many calls as the limit allows.
    #[error("per-run call limit ({limit}) reached: answer with what you have")]
    #[non_exhaustive]
    CallCap {
        /// The limit that was reached.
        limit: u64,
    },
    /// The callee is at its admission limit.
    #[error(
        "{callee} is saturated ({active} runs in progress): try again later or answer with what you have"
    )]
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    AgentDown {
        /// The agent that is down.
        callee: String,
    },
    /// The callee's host could not be reached; the call was not delivered.
    #[error(
        "{callee} is unreachable ({detail}); the call was not delivered; you may retry later or answer with what you have"
    )]
    #[non_exhaustive]
    Unreachable {
        /// The agent asked for.
        callee: String,
        /// What happened on the link.
        detail: String,
    },
    /// The envelope did not verify (signature, chain, placement or expiry).
    #[error("the call to {callee} was refused by its host: {detail}")]
    #[non_exhaustive]
    BadEnvelope {
        /// The agent asked for.
        callee: String,
        /// What did not verify.
        detail: String,
    },
    /// `call_agent` was used without an agent name or with an empty input.
    #[error("call_agent expects {{\"agent\": \"<name>\", \"input\": \"<non-empty text>\"}}")]
    #[non_exhaustive]
    MalformedCall,
    /// A run was asked for with an empty input.
    #[error("input must not be empty")]
    #[non_exhaustive]
    EmptyInput,
    /// An operator decision was sent for a run that is not waiting for one.
    #[error("run {run} is not waiting for an approval (status {status})")]
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    NotInDoubt {
        /// The gate named.
        gate: String,
    },
    /// A decision by the run's own requester on a gate that does not let the requester decide
    /// (four eyes): someone else must decide it. Nothing was decided.
    #[error(
        "gate {gate} needs someone else's decision: the run's own requester may not decide it (four eyes); ask an operator"
    )]
    #[non_exhaustive]
    FourEyes {
        /// The gate.
        gate: String,
    },
    /// A cancel named a run that has already settled: its log is final.
    #[error(
        "run {run} has already settled ({status}): there is nothing left to cancel and nothing was written"
    )]
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    DeliveryTargetBlocked {
        /// The run named.
        run: String,
    },
    /// A delivery id was used before for a different message.
    #[error(
        "delivery id `{delivery_id}` was already used for a different message: nothing was written; use a new delivery id for a new message"
    )]
    #[non_exhaustive]
    DeliveryConflict {
        /// The delivery id.
        delivery_id: String,
    },
    /// A delivery without text, or with a malformed delivery id.
    #[error(
        "deliver expects a non-empty text and a delivery id of 1 to 128 characters from [A-Za-z0-9_.:-]: nothing was written"
    )]
    #[non_exhaustive]
    MalformedDelivery,
    /// The callee does not take deliveries from the sender: its `accept_from` does not list
    /// the sender (decided by the callee's side).
    #[error(
        "{callee} does not accept deliveries from {sender}: nothing was written; answer with what you have"
    )]
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    DeliveryNotYourRun {
        /// The run named.
        run: String,
    },
    /// The host is draining: an operator stopped it from starting new runs while the runs it
    /// accepted finish.
    #[error(
        "host {host} is draining: it finishes the runs it accepted and starts no new ones; try again after an operator resumes it, or on another host"
    )]
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
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

    /// Reads a refusal's wire form; `None` when the text is not one (an older host's free text,
    /// an unknown code, or a known code without its fields: a missing limit is never filled
    /// in with a default).
    pub fn from_wire(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    /// The callee's agent is down (its restart budget is spent, or its actor could not take
    /// the request, or its store failed to admit the call): the request was not taken.
    pub fn agent_down(callee: &str) -> Self {
        Self::AgentDown {
            callee: callee.to_owned(),
        }
    }

    /// The callee could not be reached: no route to its host, the call could not be signed or
    /// sent, the link failed, or this host has no client for it. The call was not delivered;
    /// `detail` says what happened on the way.
    pub fn unreachable(callee: &str, detail: impl Into<String>) -> Self {
        Self::Unreachable {
            callee: callee.to_owned(),
            detail: detail.into(),
        }
    }

    /// The call did not verify, on either side of the link: its chain (empty, misaddressed,
    /// badly signed, expired, relayed, or placed on the wrong host), or an answer from the
    /// callee's host that is no answer to a call. `detail` says what did not verify.
    pub fn bad_envelope(callee: &str, detail: impl Into<String>) -> Self {
        Self::BadEnvelope {
            callee: callee.to_owned(),
            detail: detail.into(),
        }
    }

    /// This host is draining (an operator stopped it from starting new runs): a root run or a
    /// delivery that would start one is refused.
    pub fn draining(host: &str) -> Self {
        Self::Draining {
            host: host.to_owned(),
        }
    }

    /// The callee's host answered that it failed to take the call (and kept failing through
    /// the caller's retries): the call was not delivered, so the model may try again later.
    /// `said` is that host's text, cut to 500 characters.
    pub fn callee_host_failed(callee: &str, said: &str) -> Self {
        Self::unreachable(
            callee,
            format!("its host failed to take the call: {}", cut(said)),
        )
    }

    /// The callee's host refused the call in words this host cannot read as a refusal (an
    /// older host's text, or a wire form whose link reason `reason` does not match it). It is
    /// said as what it is, never dressed up as a refusal with fields the callee never named
    /// (a limit). `said` is cut to 500 characters.
    pub fn unreadable(callee: &str, reason: &str, said: &str) -> Self {
        Self::bad_envelope(callee, format!("refused ({reason}): {}", cut(said)))
    }

    /// One refusal of every variant, for tests of code outside this crate that must handle
    /// each (a wire mapping, a metric's label): other crates cannot build one.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn examples() -> Vec<Self> {
        let s = |t: &str| t.to_owned();
        vec![
            Self::NoPeers { agent: s("solo") },
            Self::NotInCanCall {
                caller: s("a"),
                callee: s("b"),
                allowed: s("c"),
            },
            Self::UnknownAgent {
                callee: s("x"),
                allowed: s("c"),
            },
            Self::NotAccepted {
                caller: s("a"),
                callee: s("b"),
            },
            Self::DepthLimit { limit: 4 },
            Self::CallCap { limit: 25 },
            Self::Saturated {
                callee: s("b"),
                active: 3,
            },
            Self::PrincipalSaturated {
                callee: s("b"),
                principal: s("api:alice"),
                active: 32,
            },
            Self::AgentDown { callee: s("b") },
            Self::Unreachable {
                callee: s("b"),
                detail: s("connection lost"),
            },
            Self::BadEnvelope {
                callee: s("b"),
                detail: s("expired"),
            },
            Self::MalformedCall,
            Self::EmptyInput,
            Self::NotAwaitingApproval {
                run: s("run_1"),
                status: s("running"),
            },
            Self::StaleDecision {
                gate: s("run_1:tu_0_0"),
                waiting: s("run_1:tu_1_0"),
            },
            Self::NotInDoubt {
                gate: s("run_1:tu_0_0"),
            },
            Self::FourEyes {
                gate: s("run_1:tu"),
            },
            Self::AlreadySettled {
                run: s("run_1"),
                status: s("failed"),
            },
            Self::DeliveryTargetSettled {
                run: s("run_1"),
                status: s("succeeded"),
            },
            Self::DeliveryTargetBlocked { run: s("run_1") },
            Self::DeliveryConflict {
                delivery_id: s("d-1"),
            },
            Self::MalformedDelivery,
            Self::DeliveryNotConsented {
                sender: s("cmo"),
                callee: s("cfo"),
            },
            Self::DeliveryNotInCanCall {
                sender: s("a1"),
                callee: s("b3"),
                allowed: s("c"),
            },
            Self::DeliveryNotYourRun { run: s("run_1") },
            Self::Draining { host: s("beta") },
            Self::RepeatedToolUse {
                tool: s("lookup"),
                times: 3,
            },
            Self::TreeBudgetExhausted {
                what: TreeResource::Wall,
                limit: 1_700_000_000_000,
                spent: 1_700_000_004_000,
            },
        ]
    }
}

/// The most characters of another host's text a refusal read off the wire repeats: enough to
/// say what happened, never a whole page of it.
const WIRE_DETAIL_CHARS: usize = 500;

/// `text` cut to [`WIRE_DETAIL_CHARS`] characters.
fn cut(text: &str) -> String {
    text.chars().take(WIRE_DETAIL_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every wire tag the enum has, as serde's derive knows them: an unknown tag's error
    /// lists them all, so this list follows the enum without being written out again.
    fn wire_tags() -> std::collections::BTreeSet<String> {
        let error = serde_json::from_str::<Refusal>(r#"{"reason":"no_such_refusal"}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let (_, expected) = error
            .split_once("expected one of ")
            .unwrap_or_else(|| panic!("serde's error names no variants: {error}"));
        expected
            .split(", ")
            .map(|tag| tag.trim_matches(|c: char| c == '`' || c.is_whitespace()))
            .map(|tag| tag.split('`').next().unwrap_or(tag).to_owned())
            .collect()
    }

    #[test]
    fn the_examples_cover_every_code_exactly_once() {
        let examples = Refusal::examples();
        let codes: std::collections::BTreeSet<String> =
            examples.iter().map(|r| r.code().to_owned()).collect();
        assert_eq!(codes.len(), examples.len(), "a code appears twice");
        let tags = wire_tags();
        assert_eq!(
            codes, tags,
            "examples() misses a variant, or a code is not its tag"
        );
    }

    #[test]
    fn a_wire_form_without_its_fields_is_no_refusal() {
        // Never a default limit: a `call_cap` that does not say its limit is not read as one.
        assert_eq!(Refusal::from_wire(r#"{"reason":"call_cap"}"#), None);
        assert_eq!(Refusal::from_wire(r#"{"reason":"depth_limit"}"#), None);
        assert_eq!(Refusal::from_wire(r#"{"reason":"no_such_refusal"}"#), None);
    }

    #[test]
    fn what_another_host_said_is_cut_and_kept_apart_from_a_refusal() {
        let long = "x".repeat(2_000);
        let failed = Refusal::callee_host_failed("cfo", &long);
        assert_eq!(failed.code(), "unreachable");
        assert!(failed.to_string().len() < 800, "{failed}");
        let unread = Refusal::unreadable("cfo", "DepthLimit", "not json");
        assert_eq!(unread.code(), "bad_envelope");
        assert_eq!(
            unread.to_string(),
            "the call to cfo was refused by its host: refused (DepthLimit): not json"
        );
    }

    #[test]
    fn every_refusal_has_a_code_a_sentence_and_a_wire_form_that_round_trips() {
        let mut codes = std::collections::BTreeSet::new();
        for refusal in Refusal::examples() {
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
