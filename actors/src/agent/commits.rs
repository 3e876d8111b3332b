//! The agent actor's store jobs and their commits, and the askers that wait for them.
//!
//! Every job this actor hands the store writer (an append, a root run's insert, a call's
//! admission) carries a ticket from the agent machine. The writer commits one store's jobs in
//! the order they were sent and, after each commit, casts [`AgentMsg::Committed`] back with
//! the job's ticket; the actor keeps what the job left (a run's record, a new run) and tells the
//! machine ([`AgentMachine::committed`](consort_core::machine::AgentMachine::committed)), which
//! releases what waited for it: a suspended drive, an answer to an asker. The actor never waits
//! for a commit in its handler, so one agent's runs share the writer's batches (group commit).
//! A failed commit fails the actor: its supervisor restarts it and the restarted actor resumes
//! every run from the store, so nothing kept here has to survive a failure.
//!
//! An asker (a link waiting to hear whether a reply was taken, a canceler, a decider, a
//! delivery's sender) is kept here under an id the machine hands back with the verdict
//! ([`Command::Answer`](consort_core::machine::Command::Answer)); turning that verdict into the
//! asker's answer is all this module does with it.

use std::collections::HashMap;

use ractor::{ActorRef, RpcReplyPort};
use tracing::{Instrument, info, info_span, warn};

use consort_core::directory::{Receipt, delivery_receipt};
use consort_core::machine::{Answer as MachineAnswer, AskerId, CallAdmitted, CallReservation};
use consort_core::step::Verdict;
use consort_core::{RunEvent, Transition};
use consort_net::RunId;

use super::{AgentActor, AgentMsg, AgentState, refused, tell};
use crate::ActorsError;
use crate::run::RunRecord;
use crate::store::{Admission, Applied};

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

/// Someone waiting for a verdict of the agent machine, with what to answer them through.
pub(crate) enum Asker {
    /// A link waiting to hear whether a reply was taken.
    Taken(RpcReplyPort<bool>),
    /// A canceler, answered with the run as committed.
    Request(RpcReplyPort<Result<RunRecord, ActorsError>>),
    /// A decider, answered with the run as committed and the gate decided.
    Decide(RpcReplyPort<Result<crate::Decided, ActorsError>>),
    /// A delivery's sender, answered with its receipt.
    Receipt {
        port: RpcReplyPort<Receipt>,
        delivery_id: String,
        from: String,
    },
}

impl Asker {
    /// Answers an asker whose input never reached the machine: `error` says why.
    pub(super) fn fail(self, error: ActorsError) {
        let answered = match self {
            Self::Taken(port) => port.send(false).is_ok(),
            Self::Request(port) => port.send(Err(error)).is_ok(),
            Self::Decide(port) => port.send(Err(error)).is_ok(),
            Self::Receipt {
                port, delivery_id, ..
            } => {
                let reason = format!("the message was not stored: {error}");
                let receipt = Receipt::Rejected {
                    delivery_id,
                    code: "not_stored".into(),
                    reason,
                };
                port.send(receipt).is_ok()
            }
        };
        if !answered {
            warn!("a requester stopped waiting for its answer");
        }
    }
}

/// The askers waiting for the machine, by the id it hands back.
#[derive(Default)]
pub(super) struct Askers {
    next: AskerId,
    waiting: HashMap<AskerId, Asker>,
}

impl Askers {
    /// Keeps `asker`; returns its id.
    pub(super) fn add(&mut self, asker: Asker) -> AskerId {
        self.next += 1;
        self.waiting.insert(self.next, asker);
        self.next
    }

    fn take(&mut self, id: AskerId) -> Option<Asker> {
        self.waiting.remove(&id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

impl AgentState {
    /// Hands a transition of run `id`, which the machine folded into its view already, to the
    /// store writer as job `ticket`; the writer's `Committed` brings the stored record back.
    pub(super) fn submit(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        id: &RunId,
        ticket: u64,
        transition: Transition,
        expected_seq: u64,
    ) -> Result<(), ActorsError> {
        for event in transition.events() {
            // A delivered message waits until a model turn reads it: the rollup's stalled
            // deliveries come from this (the write it rides on is in the writer's queue).
            match event {
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
        }
        if transition.settles()
            && let Some(status) = transition.status()
        {
            self.metrics.settled(status);
        }
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
            self.records.remove(&run);
            self.chains.remove(&run);
            // The drive that reports it still needs the span: it goes when the drive is done.
            self.just_settled.insert(run, applied.record);
            return;
        }
        if applied.last_seq != expected_seq {
            // Something else wrote to the log: fold it again from the store next time.
            warn!(run_id = %run, view_seq = expected_seq, log_seq = applied.last_seq, "run view out of step with its log; rebuilding it");
            self.machine.forget_view(&run);
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
        self.machine.created(&id, events);
        self.records.insert(id, record);
    }
}

impl AgentActor {
    /// A job's commit: keep what it left, then let the machine release what waited for it.
    pub(super) async fn on_committed(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        committed: Committed,
    ) -> Result<(), ActorsError> {
        let Committed { ticket, done } = committed;
        match done {
            Done::Appended {
                run,
                expected_seq,
                result,
            } => {
                // A failed commit fails the actor: see the module doc.
                state.appended(run, expected_seq, *result?);
            }
            Done::Started { run, stored } => Self::started(state, &run, stored)?,
            Done::Admitted {
                child,
                reservation,
                outcome,
            } => {
                self.admitted(myself, state, child, reservation, outcome)
                    .await?;
            }
        }
        state.machine.committed(ticket);
        self.run_machine(myself, state).await?;
        // A settled record is kept only for the drive that reports it.
        let machine = &state.machine;
        state.just_settled.retain(|id, _| machine.has_drive(id));
        Ok(())
    }

    /// Answers an asker with its input's verdict, now durable.
    pub(super) async fn answer(&self, state: &mut AgentState, answer: MachineAnswer) {
        let MachineAnswer {
            asker,
            run,
            verdict,
        } = answer;
        let Some(asker) = asker.and_then(|id| state.askers.take(id)) else {
            if let Verdict::Dropped(why) = verdict {
                warn!(run_id = %run, "reply dropped: {why}");
            }
            return;
        };
        match asker {
            Asker::Taken(port) => {
                if let Verdict::Dropped(why) = verdict {
                    warn!(run_id = %run, "reply dropped: {why}");
                }
                if port.send(verdict == Verdict::Taken).is_err() {
                    warn!(agent = %state.config.name, "the link stopped waiting for a reply's answer");
                }
            }
            Asker::Request(port) => {
                let answer = committed_record(state, &run, verdict).await.map(|(r, _)| r);
                if port.send(answer).is_err() {
                    warn!(run_id = %run, "a requester stopped waiting for its answer");
                }
            }
            Asker::Decide(port) => {
                let answer = committed_record(state, &run, verdict)
                    .await
                    .and_then(|found| match found {
                        (record, Verdict::Decided { gate, already }) => Ok(crate::Decided {
                            run: record,
                            gate,
                            already_decided: already,
                        }),
                        (_, other) => Err(ActorsError::Actor(format!(
                            "a decision was answered {other:?}"
                        ))),
                    });
                if port.send(answer).is_err() {
                    warn!(run_id = %run, "a decider stopped waiting for its answer");
                }
            }
            Asker::Receipt {
                port,
                delivery_id,
                from,
            } => {
                // What the sender reads is core's to say; this only logs what happened.
                match &verdict {
                    Verdict::Delivered { seq, existing } => {
                        info!(run_id = %run, agent = %state.config.name, sender = %from, seq, existing, "message delivered into a run");
                    }
                    Verdict::Refused(refusal) => {
                        info!(run_id = %run, agent = %state.config.name, sender = %from, reason = refusal.code(), "delivery refused");
                    }
                    Verdict::Dropped(_) => {}
                    other => {
                        warn!(run_id = %run, "a delivery got an unexpected verdict: {other:?}");
                    }
                }
                let receipt = delivery_receipt(&delivery_id, &run, &verdict);
                if port.send(receipt).is_err() {
                    warn!("a delivery's sender stopped waiting for its receipt");
                }
            }
        }
    }

    /// A root run's insert is committed (its starter has its record). One that failed fails
    /// the actor, as a failed append does: the run has been stepping on it.
    fn started(
        state: &mut AgentState,
        run: &RunId,
        stored: Result<(), NotStored>,
    ) -> Result<(), ActorsError> {
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
            Ok(Admission::Refused { children, .. }) => CallAdmitted::Refused {
                children: *children,
            },
            Ok(Admission::Replay) => CallAdmitted::Replay,
            Err(_) => CallAdmitted::Failed,
        };
        state.machine.call_admitted(&child, &reservation, &found);
        match outcome {
            Ok(Admission::Stored {
                record, created, ..
            }) => {
                state.metrics.started(&record.channel).increment(1);
                state.keep_new(*record, std::slice::from_ref(&created));
                self.advance(myself, state, &child).instrument(span).await?;
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

/// What a request's asker gets for `verdict` on run `run`: the run as committed after it
/// (with the verdict, which a decision reads its gate from), or the refusal, or that the run
/// is not there (an input dropped with its drive).
async fn committed_record(
    state: &mut AgentState,
    run: &RunId,
    verdict: Verdict,
) -> Result<(RunRecord, Verdict), ActorsError> {
    let unknown = || ActorsError::UnknownRun(run.to_string());
    match verdict {
        Verdict::Refused(refusal) => Err(refused(refusal)),
        Verdict::Dropped(_) => Err(unknown()),
        verdict => {
            let record = state.record(run).await?.ok_or_else(unknown)?;
            Ok((record, verdict))
        }
    }
}
