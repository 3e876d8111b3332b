//! Test-only ways in for other crates' tests, behind the `testing` feature (off by default,
//! enabled only in `[dev-dependencies]`, so no normal build can reach it).
//!
//! Outside this crate a [`Transition`] is only received (from [`step`](crate::step()) or the
//! agent machine) and handed to a store; a store's own tests still need transitions of their
//! choosing to write, and build them here. For refusals, see `Refusal::examples`.

use crate::step::CostDelta;
use crate::{RunEvent, RunStatus, Transition};

/// Every part of a [`Transition`], for a test to fill in (see [`transition`]).
#[derive(Clone, Debug, Default)]
pub struct TransitionParts {
    /// Events to append, in order.
    pub events: Vec<RunEvent>,
    /// The run's new status.
    pub status: Option<RunStatus>,
    /// The run's answer.
    pub output: Option<String>,
    /// Why the run failed.
    pub error: Option<String>,
    /// Additions to the run's cost.
    pub cost: CostDelta,
    /// Additions to the cost of the run's descendants.
    pub descendants: CostDelta,
    /// Move a `queued` run to `running` first.
    pub start: bool,
}

/// A transition of exactly these parts.
pub fn transition(parts: TransitionParts) -> Transition {
    let TransitionParts {
        events,
        status,
        output,
        error,
        cost,
        descendants,
        start,
    } = parts;
    Transition {
        events,
        status,
        output,
        error,
        cost,
        descendants,
        start,
    }
}

/// A transition that appends `events` and then settles the run with `outcome`, as the run
/// state machine settles one (an `answer` or `failed` event, the status, the output or error).
pub fn settled(events: Vec<RunEvent>, outcome: Result<String, String>) -> Transition {
    events
        .into_iter()
        .fold(Transition::empty(), Transition::event)
        .settle(outcome)
}
