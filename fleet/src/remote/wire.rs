//! What the link glue puts into and reads out of frames: a [`Refusal`] as a refused frame and
//! back (`wire_reason`, `refusal_frame`, `refusal_from_wire`), a chain that failed
//! verification and a [`Denial`] of consort-core's remote guards as refused frames, a run's
//! status as `check_run` reports it, and what a reply's sender does with the caller host's
//! answer ([`after_reply_answer`]).
//!
//! It must not make up a refusal: every refusal a model reads comes from consort-core (a
//! refusal read off the wire whose reason does not match its JSON is rebuilt from the reason
//! with consort-core's own variants), and nothing here decides anything about a call or a run.

use consort_actors::RunStatus;
use consort_core::guards::remote::Denial;
use consort_core::{Limits, Refusal};
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

/// The wire reason of a refusal.
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
        Refusal::MalformedCall | Refusal::EmptyInput | Refusal::NotAwaitingApproval { .. } => {
            RefusalReason::Malformed
        }
        _ => RefusalReason::Internal,
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

/// Reads a refusal off the wire: the JSON [`Refusal`] when it is one whose reason matches,
/// else a refusal built from the reason alone.
pub(crate) fn refusal_from_wire(reason: RefusalReason, text: &str, callee: &str) -> Refusal {
    if let Ok(refusal) = serde_json::from_str::<Refusal>(text)
        && wire_reason(&refusal) == reason
    {
        return refusal;
    }
    let detail: String = text.chars().take(500).collect();
    match reason {
        RefusalReason::DepthLimit => Refusal::DepthLimit {
            limit: Limits::DEFAULT_MAX_DEPTH as usize,
        },
        RefusalReason::CallLimit => Refusal::CallCap {
            limit: u64::from(Limits::DEFAULT_MAX_CALLS_PER_RUN),
        },
        RefusalReason::Internal => Refusal::AgentDown {
            callee: callee.to_owned(),
        },
        _ => Refusal::BadEnvelope {
            callee: callee.to_owned(),
            detail,
        },
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
    let refusal = Refusal::BadEnvelope {
        callee: callee.to_owned(),
        detail: error.to_string(),
    };
    let reason = match error {
        ChainError::Expired { .. }
        | ChainError::NotYetValid { .. }
        | ChainError::LifetimeTooLong { .. }
        | ChainError::IssuedTooLongAgo { .. } => RefusalReason::Expired,
        _ => RefusalReason::BadChain,
    };
    Frame::Refused {
        reason,
        text: serde_json::to_string(&refusal).unwrap_or_else(|_| refusal.to_string()),
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
        let Frame::Refused { reason, text } = refusal_frame(&Refusal::DepthLimit {
            limit: InboundLimits::default().max_chain_depth,
        }) else {
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
        ] {
            assert_eq!(after_reply_answer(&refused(reason)), ReplyNext::Refused);
        }
        assert_eq!(after_reply_answer(&Frame::Ack), ReplyNext::Delivered);
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
