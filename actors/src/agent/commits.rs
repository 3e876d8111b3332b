//! What the agent actor does while its writes commit: tickets, suspended drives, messages held
//! for a suspended run, and answers held until what they report is durable.
//!
//! Every job this actor hands the store writer (an append, a root run's insert, a call's
//! admission) takes the next *ticket*. The writer commits one store's jobs in the order they
//! were sent and, after each commit, casts [`AgentMsg::Committed`] back with the job's ticket,
//! so the actor always knows the highest ticket that is durable; it never waits for one in its
//! handler. What leaves the host because of a write waits for that write's ticket:
//!
//! - a drive that reaches an effect which lets something out of the run (a call, a tool use,
//!   a `check_run`, a settle notice) while the run has writes out is *suspended*: kept with its
//!   remaining effects and inputs, and resumed by the `Committed` that covers them;
//! - a message for a suspended run is held, in order, until the run's drive is done;
//! - an answer to an asker (a reply taken, a decision) waits for the run's last write.
//!
//! Meanwhile the actor steps its other runs and accepts calls, so one agent's runs share the
//! writer's batches (group commit). A failed commit fails the actor: its supervisor restarts it
//! and the restarted actor resumes every run from the store, so nothing kept here has to
//! survive a failure.

use std::collections::{BTreeMap, VecDeque};

use ractor::{ActorRef, RpcReplyPort};
use tracing::{Instrument, info_span, warn};

use consort_core::machine::{CallAdmitted, CallReservation};
use consort_core::{RunEvent, RunView, Transition};
use consort_net::RunId;

use super::drive::Drive;
use super::{AgentActor, AgentMsg, AgentState, tell};
use crate::ActorsError;
use crate::run::RunRecord;
use crate::store::Applied;

/// A job of this actor that the store writer has committed (or failed to).
pub(crate) struct Committed {
    /// The job's ticket: every job with a smaller one is committed too.
    pub(super) ticket: u64,
    /// What the job was and what it found.
    pub(super) done: Done,
}

/// The outcome of one committed job.
pub(super) enum Done {
    /// An append to a run, with the log length its view expected after it.
    Appended {
        run: RunId,
        expected_seq: u64,
        result: Result<Box<Applied>, ActorsError>,
    },
    /// A root run's insert (its starter has been answered already; the run has been
    /// stepping since it was sent).
    Started {
        run: RunId,
        stored: Result<(), NotStored>,
    },
    /// A call's admission (its caller has been answered already).
    Admitted {
        child: RunId,
        /// What admission reserved for it when it was sent.
        reservation: CallReservation,
        outcome: Result<Admission, String>,
    },
}

/// Why a root run's insert failed (its starter was given the error itself).
pub(super) struct NotStored {
    /// What the store said.
    pub(super) detail: String,
    /// Whether the store could not be written: the actor's failure says so too.
    pub(super) not_writable: bool,
}

/// What the store writer's admission job found for an arriving call.
pub(super) enum Admission {
    /// The child run exists: a replayed call.
    Replay,
    /// The inbound guards refused it; the parent's children counted in the store.
    Refused { children: u64 },
    /// Stored: the new run, its first event, and the parent's children before it.
    Stored {
        children_before: u64,
        record: Box<RunRecord>,
        created: RunEvent,
    },
}

/// Something held until a ticket commits.
enum Waiter {
    /// Resume the suspended drive of this run.
    Drive(RunId),
    /// Answer an asker.
    Answer(Answer),
}

/// An answer that reports writes, held until they are committed.
pub(super) enum Answer {
    /// Tell the link whether a reply was taken.
    Taken(RpcReplyPort<bool>, bool),
    /// Answer a cancel with the run as committed.
    Decision(RunId, RpcReplyPort<Result<RunRecord, ActorsError>>),
    /// Answer a decision with the run as committed and the gate it decided (and whether that
    /// gate had this decision before).
    Decided(
        RunId,
        (String, bool),
        RpcReplyPort<Result<crate::Decided, ActorsError>>,
    ),
    /// Give a delivery's sender its receipt.
    Receipt(
        RpcReplyPort<consort_core::directory::Receipt>,
        consort_core::directory::Receipt,
    ),
}

/// The actor's side of its jobs out at the store writer.
#[derive(Default)]
pub(super) struct Commits {
    /// The last ticket handed out.
    issued: u64,
    /// The highest ticket known committed.
    committed: u64,
    /// Each run's last write not yet known committed.
    last_write: std::collections::HashMap<RunId, u64>,
    /// What waits for which ticket.
    waiters: BTreeMap<u64, Vec<Waiter>>,
    /// Suspended drives, by run.
    suspended: std::collections::HashMap<RunId, Drive>,
    /// Messages for suspended runs, in arrival order.
    held: std::collections::HashMap<RunId, VecDeque<AgentMsg>>,
}

impl Commits {
    /// The last ticket handed out.
    pub(super) fn issued(&self) -> u64 {
        self.issued
    }

    /// Whether no job is out and nothing waits for one.
    pub(super) fn is_quiet(&self) -> bool {
        self.committed >= self.issued
            && self.waiters.is_empty()
            && self.suspended.is_empty()
            && self.held.is_empty()
    }

    /// The next ticket.
    pub(super) fn issue(&mut self) -> u64 {
        self.issued += 1;
        self.issued
    }

    /// The ticket of run `id`'s last write, if it is not committed yet.
    pub(super) fn uncommitted(&self, id: &RunId) -> Option<u64> {
        self.last_write
            .get(id)
            .copied()
            .filter(|t| *t > self.committed)
    }

    /// Records `ticket` as run `id`'s last write.
    pub(super) fn written(&mut self, id: &RunId, ticket: u64) {
        self.last_write.insert(id.clone(), ticket);
    }

    /// Whether run `id` has a drive waiting for a commit.
    pub(super) fn is_suspended(&self, id: &RunId) -> bool {
        self.suspended.contains_key(id)
    }

    /// Parks `drive` until `ticket` commits.
    pub(super) fn suspend(&mut self, ticket: u64, drive: Drive) {
        let id = drive.id().clone();
        self.waiters
            .entry(ticket)
            .or_default()
            .push(Waiter::Drive(id.clone()));
        self.suspended.insert(id, drive);
    }

    /// Adds inputs to a suspended drive of run `id`; gives them back if there is none.
    pub(super) fn add_inputs(
        &mut self,
        id: &RunId,
        inputs: VecDeque<consort_core::step::Input>,
    ) -> Option<VecDeque<consort_core::step::Input>> {
        match self.suspended.get_mut(id) {
            Some(drive) => {
                drive.add_inputs(inputs);
                None
            }
            None => Some(inputs),
        }
    }

    /// Holds a message for a suspended run.
    pub(super) fn hold(&mut self, id: RunId, message: AgentMsg) {
        self.held.entry(id).or_default().push_back(message);
    }

    /// Holds `answer` until run `id`'s writes so far are committed; gives it back when they
    /// are already.
    pub(super) fn after_writes_of(&mut self, id: &RunId, answer: Answer) -> Option<Answer> {
        match self.uncommitted(id) {
            Some(ticket) => {
                self.waiters
                    .entry(ticket)
                    .or_default()
                    .push(Waiter::Answer(answer));
                None
            }
            None => Some(answer),
        }
    }
}

impl AgentState {
    /// Hands a transition of run `id` to the store writer and folds the events it appends into
    /// the run's kept view at once, so the run steps on; the writer's `Committed` brings the
    /// stored record back.
    pub(super) fn submit(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        id: &RunId,
        transition: Transition,
    ) -> Result<(), ActorsError> {
        let view = self
            .views
            .get_mut(id)
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        let status = view.status.unwrap_or(consort_core::RunStatus::Queued);
        for event in transition.appended_events(status) {
            // A delivered message waits until a model turn reads it: the rollup's stalled
            // deliveries come from this (the write it rides on is in the writer's queue).
            match &event {
                RunEvent::MessageReceived(_) => {
                    self.board
                        .message_delivered(&self.config.name, id, crate::run::now_ms());
                }
                RunEvent::ModelTurn(_) => self.board.messages_read(&self.config.name, id),
                // Counted as the run records them: a replayed call that found its run is not
                // placed again, and a refusal is counted once, by the calling run's host.
                RunEvent::CallPlaced(placed) if !placed.existing => {
                    self.metrics.call_placed(&placed.agent);
                }
                RunEvent::CallRefused(refused) => {
                    self.metrics.call_refused(refused.refusal.as_ref());
                }
                _ => {}
            }
            view.apply(&event);
        }
        if transition.settles() {
            self.machine.run_settled(id);
            if let Some(status) = view.status {
                self.metrics.settled(status);
            }
        }
        let expected_seq = view.last_seq;
        let ticket = self.commits.issue();
        self.commits.written(id, ticket);
        let (me, run, key) = (myself.clone(), id.clone(), id.clone());
        let depth = self.metrics.host().mailbox().clone();
        self.store.write_then(
            move |store| store.append(&key, transition),
            move |result| {
                let done = Done::Appended {
                    run,
                    expected_seq,
                    result: result.map(Box::new),
                };
                tell(
                    &depth,
                    &me,
                    AgentMsg::Committed(Box::new(Committed { ticket, done })),
                );
            },
        )
    }

    /// Keeps what a committed append left: the run's record, or forgets a settled run.
    fn appended(&mut self, run: RunId, expected_seq: u64, applied: Applied) {
        let record = &applied.record;
        // The commit is when the status became durable: a status the run already had keeps
        // its since on the board.
        let at_ms = record.settled_at_ms.unwrap_or_else(crate::run::now_ms);
        self.board
            .saw(&self.config.name, &run, record.status, at_ms);
        self.feed.publish(record, applied.last_seq);
        if applied.record.status.is_settled() {
            self.views.remove(&run);
            self.records.remove(&run);
            self.chains.remove(&run);
            // The drive still holds the span: it closes when the drive is done.
            self.run_spans.remove(&run);
            self.just_settled.insert(run, applied.record);
            return;
        }
        if applied.last_seq != expected_seq {
            // Something else wrote to the log: fold it again from the store next time.
            warn!(run_id = %run, view_seq = expected_seq, log_seq = applied.last_seq, "run view out of step with its log; rebuilding it");
            self.views.remove(&run);
            self.records.remove(&run);
            return;
        }
        self.records.insert(run, applied.record);
    }

    /// Keeps a run just stored with its log, so its first step reads nothing back.
    pub(super) fn keep_new(&mut self, record: RunRecord, events: &[RunEvent]) {
        let id = record.id.clone();
        self.board
            .saw(&self.config.name, &id, record.status, record.created_at_ms);
        self.feed.publish(&record, events.len() as u64);
        self.views.insert(id.clone(), RunView::from_events(events));
        self.records.insert(id, record);
    }
}

impl AgentActor {
    /// A job's commit: keep what it left, then release what waited for it.
    pub(super) async fn on_committed(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        committed: Committed,
    ) -> Result<(), ActorsError> {
        let Committed { ticket, done } = committed;
        state.commits.committed = state.commits.committed.max(ticket);
        match done {
            Done::Appended {
                run,
                expected_seq,
                result,
            } => {
                if state.commits.last_write.get(&run) == Some(&ticket) {
                    state.commits.last_write.remove(&run);
                }
                // A failed commit fails the actor: see the module doc.
                state.appended(run, expected_seq, *result?);
            }
            Done::Started { run, stored } => Self::started(state, ticket, &run, stored)?,
            Done::Admitted {
                child,
                reservation,
                outcome,
            } => {
                self.admitted(myself, state, child, reservation, outcome)
                    .await?;
            }
        }
        let later = state
            .commits
            .waiters
            .split_off(&(state.commits.committed + 1));
        let ready = std::mem::replace(&mut state.commits.waiters, later);
        for waiter in ready.into_values().flatten() {
            self.release(myself, state, waiter).await?;
        }
        // A settled record is kept only for the suspended drive that reports it.
        let commits = &state.commits;
        state.just_settled.retain(|id, _| commits.is_suspended(id));
        Ok(())
    }

    /// Releases one waiter whose ticket is committed.
    async fn release(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        waiter: Waiter,
    ) -> Result<(), ActorsError> {
        match waiter {
            Waiter::Drive(run) => self.resume(myself, state, run).await,
            Waiter::Answer(answer) => {
                self.answer(state, answer).await;
                Ok(())
            }
        }
    }

    /// Sends an answer whose writes are committed.
    pub(super) async fn answer(&self, state: &mut AgentState, answer: Answer) {
        match answer {
            Answer::Taken(port, taken) => {
                if port.send(taken).is_err() {
                    warn!(agent = %state.config.name, "the link stopped waiting for a reply's answer");
                }
            }
            Answer::Receipt(port, receipt) => {
                if port.send(receipt).is_err() {
                    warn!("a delivery's sender stopped waiting for its receipt");
                }
            }
            Answer::Decision(run, port) => {
                let record = state
                    .record(&run)
                    .await
                    .and_then(|r| r.ok_or_else(|| ActorsError::UnknownRun(run.to_string())));
                if port.send(record).is_err() {
                    warn!(run_id = %run, "a requester stopped waiting for its answer");
                }
            }
            Answer::Decided(run, (gate, already_decided), port) => {
                let decided = state
                    .record(&run)
                    .await
                    .and_then(|r| r.ok_or_else(|| ActorsError::UnknownRun(run.to_string())))
                    .map(|run| crate::Decided {
                        run,
                        gate,
                        already_decided,
                    });
                if port.send(decided).is_err() {
                    warn!(run_id = %run, "a decider stopped waiting for its answer");
                }
            }
        }
    }

    /// Resumes the suspended drive of `run`, then the messages held for it.
    async fn resume(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: RunId,
    ) -> Result<(), ActorsError> {
        if let Some(drive) = state.commits.suspended.remove(&run) {
            let span = drive.span();
            self.run_drive(myself, state, drive)
                .instrument(span)
                .await?;
        }
        // The run's held messages, in order, until one suspends it again.
        while !state.commits.is_suspended(&run) {
            let Some(message) = state
                .commits
                .held
                .get_mut(&run)
                .and_then(VecDeque::pop_front)
            else {
                state.commits.held.remove(&run);
                break;
            };
            self.dispatch(myself, state, message).await?;
        }
        Ok(())
    }

    /// A root run's insert is committed (its starter has its record). One that failed fails
    /// the actor, as a failed append does: the run has been stepping on it.
    fn started(
        state: &mut AgentState,
        ticket: u64,
        run: &RunId,
        stored: Result<(), NotStored>,
    ) -> Result<(), ActorsError> {
        if state.commits.last_write.get(run) == Some(&ticket) {
            state.commits.last_write.remove(run);
        }
        stored.map_err(|failure| {
            let (path, detail) = (
                state.store.path().to_owned(),
                format!("run {run} was not stored: {}", failure.detail),
            );
            if failure.not_writable {
                ActorsError::StoreNotWritable { path, detail }
            } else {
                ActorsError::Commit { path, detail }
            }
        })
    }

    /// A call's admission is committed (its caller has its answer): settle its reservation and
    /// step the new run.
    async fn admitted(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        child: RunId,
        reservation: CallReservation,
        outcome: Result<Admission, String>,
    ) -> Result<(), ActorsError> {
        let span = info_span!("accept", run_id = %child, agent = %state.config.name);
        let found = match &outcome {
            Ok(Admission::Stored {
                children_before, ..
            }) => CallAdmitted::Stored {
                children_before: *children_before,
            },
            Ok(Admission::Refused { children }) => CallAdmitted::Refused {
                children: *children,
            },
            Ok(Admission::Replay) => CallAdmitted::Replay,
            Err(_) => CallAdmitted::Failed,
        };
        state.machine.call_admitted(&reservation, &found);
        match outcome {
            Ok(Admission::Stored {
                record, created, ..
            }) => {
                state.metrics.started(&record.channel).increment(1);
                state.keep_new(*record, std::slice::from_ref(&created));
                let input = state.advance_input(&child);
                self.drive(myself, state, &child, input)
                    .instrument(span)
                    .await?;
            }
            Ok(Admission::Refused { .. } | Admission::Replay) => {
                state.chains.remove(&child);
            }
            Err(error) => {
                let _in_span = span.enter();
                warn!(%error, "call could not be stored");
                state.chains.remove(&child);
            }
        }
        Ok(())
    }
}
