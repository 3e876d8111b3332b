//! What one step writes: a [`Transition`] (events, status, output, error, cost), applied by
//! the store in one transaction. Plain data; nothing here decides.

use crate::event::{Answer, Failed, StatusChanged};
use crate::{RunEvent, RunStatus};

/// Counts of a run's work: additions to its cost roll-up, or a total (a delegation tree's
/// cost, carried back with a reply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CostDelta {
    /// Model turns taken (waits included).
    pub model_turns: u64,
    /// Tool uses that ran (declared tools, `check_run`).
    pub tool_calls: u64,
    /// Calls accepted by a callee.
    pub calls_placed: u64,
    /// Tokens the model read, when it reports them.
    pub input_tokens: u64,
    /// Tokens the model wrote, when it reports them.
    pub output_tokens: u64,
}

impl CostDelta {
    /// The sum of two counts.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            model_turns: self.model_turns + other.model_turns,
            tool_calls: self.tool_calls + other.tool_calls,
            calls_placed: self.calls_placed + other.calls_placed,
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
        }
    }

    /// Whether every count is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// One atomic change to a run: events to append, and the run's new status, output, error and
/// cost. The store writes it in one transaction, adding a `status` event for a status change.
///
/// Only this crate makes one (its fields and builders are crate-private, and it has no
/// `Default`): the runtime receives a transition from [`step`](super::step()) or the agent
/// machine and hands it to the store, which reads it through the accessors below. Tests of a
/// store build theirs with `consort_core::testing` (the `testing` feature).
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// Events to append, in order.
    pub(crate) events: Vec<RunEvent>,
    /// The run's new status.
    pub(crate) status: Option<RunStatus>,
    /// The run's answer, on success.
    pub(crate) output: Option<String>,
    /// Why the run failed.
    pub(crate) error: Option<String>,
    /// Additions to the run's cost.
    pub(crate) cost: CostDelta,
    /// Additions to the cost of the run's descendants (a reply's tree cost): the run's tree
    /// cost is its own plus these.
    pub(crate) descendants: CostDelta,
    /// Move a `queued` run to `running` first, in the same transaction (the ask of a fresh
    /// run's first model turn), so its log shows the move before what the transition records.
    pub(crate) start: bool,
}

impl Transition {
    /// The events to append, in order (the store adds the status changes of
    /// [`Transition::appended_events`] around them).
    pub fn events(&self) -> &[RunEvent] {
        &self.events
    }

    /// The run's new status, if the transition sets one.
    pub fn status(&self) -> Option<RunStatus> {
        self.status
    }

    /// The run's answer, when the transition settles it with one.
    pub fn output(&self) -> Option<&str> {
        self.output.as_deref()
    }

    /// Why the run failed, when the transition fails it.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Additions to the run's own cost.
    pub fn cost(&self) -> CostDelta {
        self.cost
    }

    /// Additions to the cost of the run's descendants (a reply's tree cost).
    pub fn descendants(&self) -> CostDelta {
        self.descendants
    }

    /// Whether a `queued` run moves to `running` first, in the same transaction.
    pub fn start(&self) -> bool {
        self.start
    }

    /// A transition that changes nothing yet.
    pub(crate) fn empty() -> Self {
        Self {
            events: Vec::new(),
            status: None,
            output: None,
            error: None,
            cost: CostDelta::default(),
            descendants: CostDelta::default(),
            start: false,
        }
    }

    /// Appends an event.
    #[must_use]
    pub(crate) fn event(mut self, event: RunEvent) -> Self {
        self.events.push(event);
        self
    }

    /// Sets the run's new status.
    #[must_use]
    pub(crate) fn with_status(mut self, status: RunStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets what the transition adds to the run's cost.
    #[must_use]
    pub(crate) fn with_cost(mut self, cost: CostDelta) -> Self {
        self.cost = cost;
        self
    }

    /// A tool result, as the engine records one.
    pub(crate) fn tool_result(
        tool_use_id: &str,
        name: &str,
        content: &str,
        is_error: bool,
    ) -> Self {
        Self::empty().event(RunEvent::tool_result(tool_use_id, name, content, is_error))
    }

    /// Settles the run (after whatever this transition already holds).
    #[must_use]
    pub(crate) fn settle(mut self, outcome: Result<String, String>) -> Self {
        match outcome {
            Ok(text) => {
                self.events
                    .push(RunEvent::Answer(Answer { text: text.clone() }));
                self.status = Some(RunStatus::Succeeded);
                self.output = Some(text);
            }
            Err(error) => {
                self.events.push(RunEvent::Failed(Failed {
                    error: error.clone(),
                }));
                self.status = Some(RunStatus::Failed);
                self.error = Some(error);
            }
        }
        self
    }

    /// Every event the store appends for this transition to a run now in `current`: a
    /// `queued → running` change first when [`Transition::start`] applies, then the
    /// transition's events, then a change to its new status when that differs. The store and
    /// the simulation both append exactly this.
    pub fn appended_events(&self, current: RunStatus) -> Vec<RunEvent> {
        let mut status = current;
        let mut events = Vec::with_capacity(self.events.len() + 2);
        if self.start && status == RunStatus::Queued {
            events.push(RunEvent::Status(StatusChanged {
                from: RunStatus::Queued,
                to: RunStatus::Running,
                error: None,
            }));
            status = RunStatus::Running;
        }
        events.extend(self.events.iter().cloned());
        if let Some(next) = self.status
            && next != status
        {
            events.push(RunEvent::Status(StatusChanged {
                from: status,
                to: next,
                error: self.error.clone(),
            }));
        }
        events
    }

    /// The run's status once this transition is applied to a run now in `current`.
    pub fn next_status(&self, current: RunStatus) -> RunStatus {
        match (self.status, self.start && current == RunStatus::Queued) {
            (Some(next), _) => next,
            (None, true) => RunStatus::Running,
            (None, false) => current,
        }
    }

    /// Whether this transition settles the run.
    pub fn settles(&self) -> bool {
        self.status.is_some_and(RunStatus::is_settled)
    }

    pub(super) fn merge(&mut self, other: Self) {
        self.events.extend(other.events);
        if other.status.is_some() {
            self.status = other.status;
        }
        self.output = other.output.or(self.output.take());
        self.error = other.error.or(self.error.take());
        self.cost.model_turns += other.cost.model_turns;
        self.cost.tool_calls += other.cost.tool_calls;
        self.cost.calls_placed += other.cost.calls_placed;
        self.cost.input_tokens += other.cost.input_tokens;
        self.cost.output_tokens += other.cost.output_tokens;
        self.descendants = self.descendants.plus(other.descendants);
        self.start |= other.start;
    }
}
