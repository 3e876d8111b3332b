//! The agent actor's store jobs and their commits.
//!
//! Every job this actor hands the store writer (an append, a root run's insert, a call's
//! admission: `store::jobs`) carries a ticket from the agent machine, and its commit comes
//! back as [`AgentMsg::Committed`]. The actor keeps what the job left (a run's record, a new
//! run) and tells the machine
//! ([`AgentMachine::committed`](consort_core::machine::AgentMachine::committed)), which
//! releases what waited for it: a suspended drive, an answer to an asker. The actor never waits
//! for a commit in its handler, so one agent's runs share the writer's batches (group commit).
//! A failed commit fails the actor: its supervisor restarts it and the restarted actor resumes
//! every run from the store, so nothing kept here has to survive a failure.

use ractor::ActorRef;
use tracing::{Instrument, info_span, warn};

use consort_core::machine::Answer as MachineAnswer;
use consort_core::{RunEvent, Transition};
use consort_net::RunId;

use super::{AgentActor, AgentMsg, AgentState, tell};
use crate::ActorsError;
use crate::run::RunRecord;
use crate::store::{Applied, Committed, Done};

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
        // Counted as the run records them (see `AgentMetrics::recorded`); a delivered message
        // waits on the board until a model turn reads it (the write it rides on is queued).
        self.metrics.recorded(&transition);
        self.board.recorded(&self.config.name, id, &transition);
        let notice = self.commit_notice(myself);
        self.store
            .append_job((id, ticket, expected_seq), transition, notice)
    }

    /// What tells this actor of a commit of its store writer's.
    pub(super) fn commit_notice(
        &self,
        myself: &ActorRef<AgentMsg>,
    ) -> impl FnOnce(Committed) + Send + 'static {
        let (me, depth) = (myself.clone(), self.metrics.host().mailbox().clone());
        move |committed| tell(&depth, &me, AgentMsg::Committed(Box::new(committed)))
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
            Done::Started { run, stored } => {
                stored.map_err(|failure| Done::not_started(&state.store, &run, failure))?;
            }
            Done::Admitted {
                child,
                reservation,
                found,
                stored,
            } => {
                state.machine.call_admitted(&child, &reservation, &found);
                match stored {
                    Some((record, created)) => {
                        let span =
                            info_span!("accept", run_id = %child, agent = %state.config.name);
                        state.metrics.started(&record.channel).increment(1);
                        state.keep_new(*record, std::slice::from_ref(&created));
                        self.advance(myself, state, &child).instrument(span).await?;
                    }
                    None => {
                        state.chains.remove(&child);
                    }
                }
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
            if let consort_core::step::Verdict::Dropped(why) = verdict {
                warn!(run_id = %run, "reply dropped: {why}");
            }
            return;
        };
        let record = match asker.wants_record(&verdict) {
            true => Some(state.record(&run).await),
            false => None,
        };
        asker.answer(&run, verdict, record);
    }
}
