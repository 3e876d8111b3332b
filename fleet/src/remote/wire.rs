//! What the link glue puts into and reads out of frames: a [`Refusal`] as a refused frame and
//! back (`wire_reason`, `refusal_frame`, `refusal_from_wire`), a chain that failed
//! verification and a [`Denial`] of consort-core's remote guards as refused frames, a run's
//! status as `check_run` reports it, and what a reply's sender does with the caller host's
//! answer ([`after_reply_answer`]).
//!
//! It must not make up a refusal, and cannot: only consort-core builds one. A refusal read off
//! the wire is consort-core's wire form ([`Refusal::from_wire`]), and one that cannot be read
//! as such (or whose link reason does not match it) is what consort-core says such an answer
//! is ([`Refusal::callee_host_failed`], [`Refusal::unreadable`]). Nothing here decides anything
//! about a call or a run.

use consort_actors::RunStatus;
use consort_core::Refusal;
use consort_core::guards::remote::Denial;
#[cfg(test)]
use consort_net::RunId;
use consort_net::{ChainError, Frame, RefusalReason, RemoteRunState};

/// What the sender of a reply does after the caller's host answered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyNext {
    /// The caller's run took it (or had it already): done.
    Delivered,
    /// The caller's host could not decide yet (it is starting, or failed for a moment): send
    /// the same reply again after a pause.
    Retry,
    /// The caller's agent looked and no call of its runs waits for this reply: sending it
    /// again cannot change that. A reply that beat its call's ack is held by the caller's
    /// actor, not refused, and a call placed again after a restart asks for its reply itself,
    /// so nothing is lost by stopping.
    Unwanted,
    /// Refused for another reason (verification, placement): sending it again is refused again.
    Refused,
}

/// What to do after `answer`, the caller host's answer to a reply (see [`ReplyNext`]).
pub(crate) fn after_reply_answer(answer: &Frame) -> ReplyNext {
    match answer {
        Frame::Ack => ReplyNext::Delivered,
        Frame::Refused {
            reason: RefusalReason::Internal,
            ..
        } => ReplyNext::Retry,
        Frame::Refused {
            reason: RefusalReason::UnknownRun,
            ..
        } => ReplyNext::Unwanted,
        _ => ReplyNext::Refused,
    }
}

/// The wire reason of a refusal. Never [`RefusalReason::Internal`]: that says the host failed
/// and the request may be retried, and a refusal is an answer (sending the call again is refused
/// again). A refusal without a reason of its own travels as [`RefusalReason::Refused`], final.
pub(crate) fn wire_reason(refusal: &Refusal) -> RefusalReason {
    match refusal {
        Refusal::NotAccepted { .. } | Refusal::NotInCanCall { .. } | Refusal::NoPeers { .. } => {
            RefusalReason::NotAccepted
        }
        Refusal::DepthLimit { .. } => RefusalReason::DepthLimit,
        Refusal::CallCap { .. } => RefusalReason::CallLimit,
        Refusal::Saturated { .. } | Refusal::PrincipalSaturated { .. } => RefusalReason::Saturated,
        Refusal::UnknownAgent { .. } => RefusalReason::UnknownAgent,
        Refusal::BadEnvelope { .. } => RefusalReason::BadChain,
        Refusal::MalformedCall { .. }
        | Refusal::EmptyInput { .. }
        | Refusal::NotAwaitingApproval { .. } => RefusalReason::Malformed,
        _ => RefusalReason::Refused,
    }
}

/// A refusal as a frame: the typed reason, and the [`Refusal`] itself as JSON in `text` (its
/// fields are words a model can act on).
pub(crate) fn refusal_frame(refusal: &Refusal) -> Frame {
    Frame::Refused {
        reason: wire_reason(refusal),
        text: refusal.to_wire(),
    }
}

/// Reads a refusal off the wire: the JSON [`Refusal`] when it is one whose reason matches.
/// Anything else is said as what it is, never dressed up as a refusal with made-up fields (a
/// limit the callee never named): a host that failed (`Internal`, after the caller's retries)
/// did not take the call, and any other text is the callee's host refusing it in words this
/// host cannot read as a refusal.
pub(crate) fn refusal_from_wire(reason: RefusalReason, text: &str, callee: &str) -> Refusal {
    if let Some(refusal) = Refusal::from_wire(text)
        && wire_reason(&refusal) == reason
    {
        return refusal;
    }
    match reason {
        RefusalReason::Internal => Refusal::callee_host_failed(callee, text),
        other => Refusal::unreadable(callee, &format!("{other:?}"), text),
    }
}

/// A refused frame with this reason and text.
pub(crate) fn refused(reason: RefusalReason, text: impl Into<String>) -> Frame {
    Frame::Refused {
        reason,
        text: text.into(),
    }
}

/// The refusal of an envelope that failed verification.
pub(crate) fn chain_refusal(callee: &str, error: &ChainError) -> Frame {
    let refusal = Refusal::bad_envelope(callee, error.to_string());
    let reason = match error {
        ChainError::Expired { .. }
        | ChainError::NotYetValid { .. }
        | ChainError::LifetimeTooLong { .. }
        | ChainError::IssuedTooLongAgo { .. } => RefusalReason::Expired,
        _ => RefusalReason::BadChain,
    };
    Frame::Refused {
        reason,
        text: refusal.to_wire(),
    }
}

/// A denial of consort-core's remote guards as a refused frame: the reason tells the asking
/// host what kind of answer it got, the text says what was denied.
pub(crate) fn denial_frame(denial: &Denial) -> Frame {
    let reason = match denial {
        Denial::NotServedBySender { .. } => RefusalReason::BadChain,
        Denial::NotServedHere { .. } => RefusalReason::UnknownAgent,
        Denial::NoSuchChild { .. } | Denial::NotPlacedBy { .. } => RefusalReason::UnknownRun,
    };
    refused(reason, denial.to_string())
}

/// A run's status as `check_run` reports it.
pub(crate) fn run_state(status: RunStatus) -> RemoteRunState {
    match status {
        RunStatus::Queued => RemoteRunState::Queued,
        RunStatus::Running => RemoteRunState::Running,
        RunStatus::Waiting => RemoteRunState::Waiting,
        RunStatus::Blocked => RemoteRunState::Blocked,
        RunStatus::Succeeded => RemoteRunState::Succeeded,
        RunStatus::Failed => RemoteRunState::Failed,
    }
}

/// A reported run state as a run status; `None` for a state a newer host added.
pub(crate) fn run_status(state: RemoteRunState) -> Option<RunStatus> {
    match state {
        RemoteRunState::Queued => Some(RunStatus::Queued),
        RemoteRunState::Running => Some(RunStatus::Running),
        RemoteRunState::Waiting => Some(RunStatus::Waiting),
        RemoteRunState::Blocked => Some(RunStatus::Blocked),
        RemoteRunState::Succeeded => Some(RunStatus::Succeeded),
        RemoteRunState::Failed => Some(RunStatus::Failed),
        _ => None,
    }
}

/// The frame's variant, for logs (never its contents).
pub(crate) fn frame_name(frame: &Frame) -> &'static str {
    frame.kind()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::{InboundLimits, MAX_ENVELOPE_LIFETIME_MS};

    #[test]
    fn the_link_depth_bound_is_the_hosts_hop_limit_and_refuses_as_the_agent_would() {
        assert_eq!(InboundLimits::default().max_chain_depth, 4);
        let Frame::Refused { reason, text } = refusal_frame(&consort_core::guards::chain_too_deep(
            InboundLimits::default().max_chain_depth,
        )) else {
            panic!("not a refusal");
        };
        assert_eq!(reason, RefusalReason::DepthLimit);
        let read = refusal_from_wire(reason, &text, "f");
        assert_eq!(read.code(), "depth_limit");
        assert!(read.to_string().contains("depth limit (4)"), "{read}");
    }

    #[test]
    fn stale_or_overlong_envelopes_are_refused_as_expired() {
        for error in [
            ChainError::LifetimeTooLong {
                hop: 0,
                lifetime_ms: u64::MAX,
                limit_ms: MAX_ENVELOPE_LIFETIME_MS,
            },
            ChainError::IssuedTooLongAgo {
                hop: 0,
                issued_at_ms: 0,
                now_ms: 1,
            },
        ] {
            let Frame::Refused { reason, .. } = chain_refusal("cfo", &error) else {
                panic!("not a refusal");
            };
            assert_eq!(reason, RefusalReason::Expired);
        }
    }

    #[test]
    fn denials_keep_their_link_reasons() {
        let child_run = RunId::random();
        for (denial, reason) in [
            (
                Denial::NotServedBySender {
                    agent: "cfo".into(),
                    sender: "gamma".into(),
                },
                RefusalReason::BadChain,
            ),
            (
                Denial::NotServedHere {
                    agent: "cmo".into(),
                },
                RefusalReason::UnknownAgent,
            ),
            (
                Denial::NoSuchChild {
                    callee: "cfo".into(),
                    child_run: child_run.clone(),
                    sender: "gamma".into(),
                },
                RefusalReason::UnknownRun,
            ),
            (
                Denial::NotPlacedBy {
                    child_run,
                    caller: "cmo".into(),
                    parent_run: RunId::random(),
                },
                RefusalReason::UnknownRun,
            ),
        ] {
            assert_eq!(
                denial_frame(&denial),
                Frame::Refused {
                    reason,
                    text: denial.to_string(),
                }
            );
        }
    }

    #[test]
    fn a_reply_is_sent_again_only_while_the_callers_host_cannot_decide() {
        let refused = |reason| Frame::Refused {
            reason,
            text: String::new(),
        };
        assert_eq!(after_reply_answer(&Frame::Ack), ReplyNext::Delivered);
        assert_eq!(
            after_reply_answer(&refused(RefusalReason::Internal)),
            ReplyNext::Retry
        );
        // Final at the first answer: retrying an unknown call was three round trips per
        // stray reply, and a queue of them took the link's streams from real traffic.
        assert_eq!(
            after_reply_answer(&refused(RefusalReason::UnknownRun)),
            ReplyNext::Unwanted
        );
        for reason in [
            RefusalReason::NotAccepted,
            RefusalReason::DepthLimit,
            RefusalReason::CallLimit,
            RefusalReason::Saturated,
            RefusalReason::BadChain,
            RefusalReason::Expired,
            RefusalReason::UnknownAgent,
            RefusalReason::Malformed,
            RefusalReason::Refused,
        ] {
            assert_eq!(after_reply_answer(&refused(reason)), ReplyNext::Refused);
        }
        assert_eq!(after_reply_answer(&Frame::Ack), ReplyNext::Delivered);
    }

    #[test]
    fn no_refusal_travels_as_a_host_failure_and_each_reads_back_as_itself() {
        for refusal in Refusal::examples() {
            let Frame::Refused { reason, text } = refusal_frame(&refusal) else {
                panic!("not a refusal");
            };
            assert_ne!(
                reason,
                RefusalReason::Internal,
                "{} would be retried as a host failure",
                refusal.code()
            );
            // A refusal is final: a reply refused so is not sent again either.
            assert_eq!(
                after_reply_answer(&Frame::Refused {
                    reason,
                    text: text.clone()
                }),
                if reason == RefusalReason::UnknownRun {
                    ReplyNext::Unwanted
                } else {
                    ReplyNext::Refused
                }
            );
            assert_eq!(refusal_from_wire(reason, &text, "b"), refusal);
        }
    }

    #[test]
    fn a_refusal_that_cannot_be_read_makes_up_no_limit() {
        let read = refusal_from_wire(RefusalReason::DepthLimit, "not json", "cfo");
        assert_eq!(read.code(), "bad_envelope");
        assert!(read.to_string().contains("not json"), "{read}");
        assert!(!read.to_string().contains("(4)"), "{read}");
        let read = refusal_from_wire(RefusalReason::CallLimit, "{\"reason\":\"call_cap\"}", "cfo");
        assert_eq!(
            read.code(),
            "bad_envelope",
            "a call_cap without its limit is not made one"
        );
        // A host that failed did not take the call: the model may try again later.
        let failed = refusal_from_wire(RefusalReason::Internal, "store busy", "cfo");
        assert_eq!(failed.code(), "unreachable");
        assert!(failed.to_string().contains("store busy"), "{failed}");
    }

    #[test]
    fn run_states_round_trip() {
        for status in [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Blocked,
            RunStatus::Succeeded,
            RunStatus::Failed,
        ] {
            assert_eq!(run_status(run_state(status)), Some(status));
        }
    }
}
