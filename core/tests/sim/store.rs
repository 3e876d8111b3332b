//! A simulated agent's durable store: its runs (row and event log), and the counters the real
//! store keeps beside them. This is what survives a crash.

use std::collections::BTreeMap;

use consort_core::event::StatusChanged;
use consort_core::{Limits, RunEvent, RunId, RunStatus, Transition};

/// Who placed a child run, and what each side's config said when it decided.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub run: RunId,
    pub agent: String,
    pub tool_use_id: String,
    pub placed: Placed,
    pub accepted: Accepted,
}

/// The caller's config when its step decided to place the call that created a child run.
/// Not part of the real store: the simulation keeps it so a reload cannot blur what the
/// consent and depth invariants are checked against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    /// Its `can_call` named the callee.
    pub listed: bool,
    pub limits: Limits,
    pub version: u32,
}

/// The callee's config when it accepted the call (likewise the simulation's own record).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Accepted {
    /// Its `accept_from` named the caller.
    pub listed: bool,
    pub limits: Limits,
    pub version: u32,
    /// Children of the same parent it held before this one.
    pub children_before: u64,
}

/// One run as the store keeps it: the row and its event log.
#[derive(Clone, Debug)]
pub(crate) struct StoredRun {
    pub parent: Option<Parent>,
    pub hop_depth: u32,
    pub events: Vec<RunEvent>,
    pub status: RunStatus,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The cost counter `calls_placed`, added to by transitions.
    pub calls_placed: u64,
    /// The version of its agent's config when it was stored (the simulation's own record,
    /// to count the steps a reload reached).
    pub config_version: u32,
}

/// One agent's durable store, with the in-memory counters the real store keeps beside it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    pub runs: BTreeMap<RunId, StoredRun>,
    /// Unsettled runs (what admission counts).
    pub unsettled: usize,
    /// Child runs accepted, per parent run.
    pub children: BTreeMap<RunId, u64>,
}

impl Store {
    pub(crate) fn insert(&mut self, id: RunId, run: StoredRun) {
        if let Some(parent) = &run.parent {
            *self.children.entry(parent.run.clone()).or_default() += 1;
        }
        self.unsettled += 1;
        self.runs.insert(id, run);
    }

    /// Appends a transition in one transaction, deriving `status` events as the real store
    /// does; returns every event written.
    pub(crate) fn append(&mut self, id: &RunId, t: Transition) -> Vec<RunEvent> {
        let Some(run) = self.runs.get_mut(id) else {
            panic!("append to unknown run {id}");
        };
        let mut status = run.status;
        let mut events = Vec::new();
        let starting = t.start && status == RunStatus::Queued;
        if starting {
            events.push(RunEvent::Status(StatusChanged {
                from: RunStatus::Queued,
                to: RunStatus::Running,
                error: None,
            }));
            status = RunStatus::Running;
        }
        events.extend(t.events);
        if let Some(next) = t.status
            && status != next
        {
            events.push(RunEvent::Status(StatusChanged {
                from: status,
                to: next,
                error: t.error.clone(),
            }));
        }
        run.events.extend(events.iter().cloned());
        run.calls_placed += t.cost.calls_placed;
        let was_settled = run.status.is_settled();
        if let Some(next) = t.status.or(starting.then_some(RunStatus::Running)) {
            run.status = next;
            run.output = t.output.or(run.output.take());
            run.error = t.error.or(run.error.take());
        }
        if !was_settled && run.status.is_settled() {
            self.unsettled -= 1;
        }
        events
    }
}
