//! Fault injection for crash tests, compiled only with the `fault-injection` cargo feature.
//!
//! The tests build the `consort` binary with the feature and name one point in
//! `CONSORT_FAULT`; the process then dies at that point the first time it is reached, exactly as
//! a crash would (`abort`: no destructor runs, nothing more is written), after printing a marker
//! line a test can wait for. Without the feature every function here is a constant no-op and
//! nothing reads `CONSORT_FAULT`: a release build has no switch that changes behaviour.

use consort_net::RunId;

/// A durable boundary of a call where a test may crash the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// A root run is stored (its first turn may be too: it steps behind the insert); the API
    /// has not answered yet and nothing has left the host.
    RootStored,
    /// A model turn with tool uses is stored; none of them is resolved yet.
    TurnRecorded,
    /// The callee stored the child run; the caller has not recorded the call.
    ChildStored,
    /// The caller recorded the call (call_placed); its run has not moved on.
    CallRecorded,
    /// A delegated run settled; its reply has not been sent.
    ChildSettled,
    /// The caller recorded a reply; its run has not moved on.
    ReplyRecorded,
}

// Without the feature the points are still named at each boundary, but never read.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
impl Point {
    /// The name `CONSORT_FAULT` uses for the point.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::RootStored => "after_root_stored",
            Self::TurnRecorded => "after_turn_recorded",
            Self::ChildStored => "after_child_stored",
            Self::CallRecorded => "after_call_recorded",
            Self::ChildSettled => "after_child_settled",
            Self::ReplyRecorded => "after_reply_recorded",
        }
    }

    /// The point as a barrier token of the agent machine (`AgentMachine::barrier`).
    pub(crate) fn token(self) -> u32 {
        self as u32
    }

    /// The durable boundary `transition` crosses, if it is one of these points.
    pub(crate) fn crossed_by(transition: &consort_core::Transition) -> Option<Self> {
        use consort_core::{ModelStep, RunEvent};
        transition.events().iter().find_map(|event| match event {
            RunEvent::ModelTurn(turn) if matches!(turn.step, ModelStep::ToolUses(_)) => {
                Some(Self::TurnRecorded)
            }
            RunEvent::ReplyReceived(_) => Some(Self::ReplyRecorded),
            RunEvent::CallPlaced(_) => Some(Self::CallRecorded),
            _ => None,
        })
    }

    /// The point a barrier token names (a token this crate did not make names none).
    pub(crate) fn from_token(token: u32) -> Option<Self> {
        [
            Self::RootStored,
            Self::TurnRecorded,
            Self::ChildStored,
            Self::CallRecorded,
            Self::ChildSettled,
            Self::ReplyRecorded,
        ]
        .into_iter()
        .find(|p| p.token() == token)
    }
}

/// The fault a test asked for (`CONSORT_FAULT`), read once per process.
#[cfg(feature = "fault-injection")]
fn armed() -> Option<&'static str> {
    static FAULT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FAULT
        .get_or_init(|| {
            std::env::var("CONSORT_FAULT")
                .ok()
                .filter(|f| !f.is_empty())
        })
        .as_deref()
}

/// Dies here, as a crash would, when `CONSORT_FAULT` names `point`.
#[cfg(feature = "fault-injection")]
pub(crate) fn crash_at(point: Point, run: &RunId) {
    if armed() == Some(point.name()) {
        eprintln!("consort: fault point {} reached (run {run})", point.name());
        std::process::abort();
    }
}

/// Without the `fault-injection` feature: nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn crash_at(_point: Point, _run: &RunId) {}

/// Whether the caller's own checks are off (`CONSORT_FAULT=skip_outbound_checks`): a sending
/// host that misbehaves, to prove the receiving host still enforces every rule.
#[cfg(feature = "fault-injection")]
pub(crate) fn skip_outbound_checks() -> bool {
    armed() == Some("skip_outbound_checks")
}

/// Without the `fault-injection` feature: never.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn skip_outbound_checks() -> bool {
    false
}
