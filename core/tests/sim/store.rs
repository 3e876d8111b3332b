//! A simulated agent's durable store (its runs: row and event log, and the counters the real
//! store keeps beside them), which is what survives a crash; and the store writer's jobs,
//! which do not: a job is durable only once a commit has taken it.

use std::collections::BTreeMap;

use consort_core::machine::{CallAdmitted, CallReservation, InboundGate};
use consort_core::{Limits, RunEvent, RunId, RunStatus, RunView, Transition};

use super::world::CallMsg;

/// Who placed a child run, and what each side's config said when it decided.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub run: RunId,
    pub agent: String,
    pub tool_use_id: String,
    pub placed: Placed,
    pub accepted: Accepted,
}

/// The caller's config when its step decided the call that created a child run (when the
/// model turn naming it was recorded). Not part of the real store: the simulation keeps it
/// so a reload cannot blur what the consent and depth invariants are checked against.
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
    pub principal: String,
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

/// One agent's durable store, with the counters the real store keeps beside it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    pub runs: BTreeMap<RunId, StoredRun>,
    /// Unsettled runs.
    pub unsettled: usize,
    /// Child runs accepted, per parent run.
    pub children: BTreeMap<RunId, u64>,
}

/// A job the agent handed its store writer, as the actor's: it is durable only once a
/// commit took it.
#[derive(Clone, Debug)]
pub(crate) enum Job {
    /// A step's transition, with the log length the machine's kept view expects after it.
    Append {
        run: RunId,
        ticket: u64,
        transition: Transition,
        expected_seq: u64,
    },
    /// A root run's insert.
    Insert {
        run: RunId,
        ticket: u64,
        stored: Box<StoredRun>,
    },
    /// An arriving call's admission: replay check, guards, insert, in the order the
    /// machine's gate decides; the caller is answered once it is committed.
    Admit {
        ticket: u64,
        call: Box<CallMsg>,
        gate: Box<InboundGate>,
        reservation: CallReservation,
        /// The callee's `accept_from` named the caller, its limits and config version, when
        /// the call arrived.
        accepted: (bool, Limits, u32),
    },
}

impl Job {
    pub(crate) fn ticket(&self) -> u64 {
        match self {
            Self::Append { ticket, .. }
            | Self::Insert { ticket, .. }
            | Self::Admit { ticket, .. } => *ticket,
        }
    }
}

/// What a committed job left, as its notice brings it back to the agent.
#[derive(Clone, Debug)]
pub(crate) enum Done {
    Appended {
        run: RunId,
        expected_seq: u64,
        last_seq: u64,
    },
    Started,
    Admitted {
        child: RunId,
        reservation: CallReservation,
        found: CallAdmitted,
        /// The new run's first events, when it was stored.
        created: Option<Vec<RunEvent>>,
    },
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
    /// does (`Transition::appended_events`); returns every event written.
    pub(crate) fn append(&mut self, id: &RunId, t: Transition) -> Vec<RunEvent> {
        let Some(run) = self.runs.get_mut(id) else {
            panic!("append to unknown run {id}");
        };
        let events = t.appended_events(run.status);
        let next = t.next_status(run.status);
        run.events.extend(events.iter().cloned());
        run.calls_placed += t.cost().calls_placed;
        let was_settled = run.status.is_settled();
        if next != run.status || t.status().is_some() {
            run.status = next;
            if let Some(output) = t.output() {
                run.output = Some(output.to_owned());
            }
            if let Some(error) = t.error() {
                run.error = Some(error.to_owned());
            }
        }
        if !was_settled && run.status.is_settled() {
            self.unsettled -= 1;
        }
        events
    }

    /// Run `id`'s log as a read through the writer sees it: what is committed, then what the
    /// jobs sent before the read write to it (the writer runs a read after them).
    pub(crate) fn read_through<'a>(
        &self,
        id: &RunId,
        jobs: impl Iterator<Item = &'a Job>,
    ) -> Option<Vec<RunEvent>> {
        let mut events: Option<Vec<RunEvent>> = self.runs.get(id).map(|r| r.events.clone());
        for job in jobs {
            match job {
                Job::Insert { run, stored, .. } if run == id => {
                    events = Some(stored.events.clone());
                }
                Job::Append {
                    run, transition, ..
                } if run == id => {
                    if let Some(log) = events.as_mut() {
                        let status = RunView::from_events(log.iter())
                            .status
                            .unwrap_or(RunStatus::Queued);
                        log.extend(transition.appended_events(status));
                    }
                }
                _ => {}
            }
        }
        events
    }
}
