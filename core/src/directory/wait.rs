//! Waits pinned to an identity: the one rule that decides when a bounded wait on a peer's run
//! is over, and how.
//!
//! A wait resolves its target once (agent, run, and the agent's incarnation at that moment)
//! and pins it. It is then satisfied only by that incarnation, only by a state the caller asked
//! for, and only once the run's state-change sequence (its log sequence, which only moves
//! forward, across restarts too) has moved past `after_seq`: a re-read of the state the caller
//! already saw proves nothing. A new occupant of the seat (the host restarted, the agent was
//! reloaded or restarted) ends the wait as [`WaitOutcome::Replaced`]; an agent that left the
//! host as [`WaitOutcome::NotRunning`]. The driver ends a wait whose time ran out as
//! [`WaitOutcome::Timeout`] and one whose host stayed out of reach as
//! [`WaitOutcome::Unreachable`]; neither is ever success.

use serde::{Deserialize, Serialize};

use crate::{RunId, RunStatus};

/// What a wait waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitUntil {
    /// The run settled (succeeded or failed).
    Settled,
    /// The run is blocked on an approval, or settled.
    BlockedOrSettled,
    /// Any change of the run's state.
    Changed,
}

impl WaitUntil {
    /// Reads the text form (`settled`, `blocked_or_settled`, `changed`).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "settled" => Self::Settled,
            "blocked_or_settled" | "blocked" => Self::BlockedOrSettled,
            "changed" => Self::Changed,
            _ => return None,
        })
    }

    /// The text form [`WaitUntil::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::BlockedOrSettled => "blocked",
            Self::Changed => "changed",
        }
    }

    fn accepts(self, status: RunStatus) -> bool {
        match self {
            Self::Settled => status.is_settled(),
            Self::BlockedOrSettled => status.is_settled() || status == RunStatus::Blocked,
            Self::Changed => true,
        }
    }
}

/// What a wait is pinned to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitPin {
    /// The agent.
    pub agent: String,
    /// Its run.
    pub run: RunId,
    /// The agent's incarnation when the wait was resolved.
    pub incarnation: String,
    /// The state-change sequence the caller has already seen.
    pub after_seq: u64,
    /// What ends the wait.
    pub until: WaitUntil,
}

/// What the owning host sees now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The host no longer serves the agent.
    AgentGone,
    /// The agent is served by this incarnation; the run is in this state, if it exists.
    Agent {
        /// The agent's incarnation now.
        incarnation: String,
        /// The run's status and state-change sequence, if the run exists.
        run: Option<(RunStatus, u64)>,
    },
}

/// How a wait ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum WaitOutcome {
    /// The pinned run reached a state asked for, after `after_seq`.
    Matched {
        /// Its status.
        status: RunStatus,
        /// Its state-change sequence (pass it as `after_seq` to wait for the next change).
        seq: u64,
    },
    /// Another incarnation holds the agent's seat: this wait cannot be satisfied; resolve the
    /// target again with a new request.
    Replaced {
        /// The incarnation the wait was pinned to.
        pinned: String,
        /// The one there now.
        current: String,
    },
    /// The agent is not served any more (removed on reload).
    NotRunning,
    /// The agent has no such run.
    UnknownRun,
    /// The agent's host could not be reached before the wait's time ran out.
    Unreachable,
    /// Time ran out with no state asked for; the run was last seen at `last_seq`.
    Timeout {
        /// The run's status when last seen, if it was seen.
        status: Option<RunStatus>,
        /// Its state-change sequence when last seen.
        last_seq: u64,
    },
}

impl WaitOutcome {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Matched { .. } => "matched",
            Self::Replaced { .. } => "replaced",
            Self::NotRunning => "not_running",
            Self::UnknownRun => "unknown_run",
            Self::Unreachable => "unreachable",
            Self::Timeout { .. } => "timeout",
        }
    }
}

/// Whether a wait is over, given what its host sees now.
pub fn wait_decision(pin: &WaitPin, observed: &Observed) -> Option<WaitOutcome> {
    match observed {
        Observed::AgentGone => Some(WaitOutcome::NotRunning),
        Observed::Agent { incarnation, .. } if incarnation != &pin.incarnation => {
            Some(WaitOutcome::Replaced {
                pinned: pin.incarnation.clone(),
                current: incarnation.clone(),
            })
        }
        Observed::Agent { run: None, .. } => Some(WaitOutcome::UnknownRun),
        Observed::Agent {
            run: Some((status, seq)),
            ..
        } => (*seq > pin.after_seq && pin.until.accepts(*status)).then_some(WaitOutcome::Matched {
            status: *status,
            seq: *seq,
        }),
    }
}

#[cfg(test)]
mod tests;
