//! The drive: the loop that moves one run with [`consort_core::step()`].
//!
//! [`AgentActor::drive`] is what every run-moving message goes through: build the [`Policy`]
//! from the agent's current config, call `step` with the run's kept view and the input, hand
//! the transition to the store writer (the view folds it at once), execute the effects, and
//! step again while an effect says the run can move on its own.
//!
//! A drive can stop half-way: an effect that lets something out of the run waits for the
//! commit of the run's writes before it ([`waits_for_commit`]). The drive is then suspended
//! with what it has left to do ([`Drive`]) and resumed when the commit arrives (see
//! [`commits`](super::commits)); the actor goes on with other messages in between.
//!
//! [`Policy`]: consort_core::step::Policy

use std::collections::VecDeque;

use consort_core::step::{self, Effect, Input, Verdict};
use consort_core::{ModelStep, RunEvent};
use consort_net::RunId;
use ractor::ActorRef;
use tracing::{Instrument, Span, warn};

use super::{AgentActor, AgentMsg, AgentState, policy};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::run::RunRecord;

/// One run's drive: what it still has to execute and to step.
pub(crate) struct Drive {
    record: RunRecord,
    inputs: VecDeque<Input>,
    todo: VecDeque<Todo>,
    /// An effect asked to step again once the inputs are done.
    again: bool,
    /// Steps left: each pass writes progress or ends the drive.
    budget: u64,
    /// The run's span (`run_span`), entered whenever the drive runs.
    span: Span,
}

/// What a drive has left to execute from its last step.
enum Todo {
    Effect(Effect),
    /// Test builds: die here once the write before is durable (the crash tests' boundaries).
    Crash(Point),
}

impl Drive {
    pub(super) fn id(&self) -> &RunId {
        &self.record.id
    }

    pub(super) fn add_inputs(&mut self, inputs: VecDeque<Input>) {
        self.budget += inputs.len() as u64;
        self.inputs.extend(inputs);
    }

    /// The span a run's drive runs in, on every host (run id, agent, hop depth): the run's
    /// one span, the same for every drive of the run.
    pub(super) fn span(&self) -> Span {
        self.span.clone()
    }

    /// The record as committed, before an effect that reads it.
    fn refresh(&mut self, state: &mut AgentState) {
        if let Some(kept) = state.records.get(self.id()) {
            self.record.clone_from(kept);
        } else if let Some(settled) = state.just_settled.remove(self.id()) {
            self.record = settled;
        }
    }
}

impl AgentActor {
    /// Steps run `id` with `input`, executes the effects, and keeps stepping while the run
    /// can move on its own. Returns the first step's verdict (for a reply or a decision).
    pub(super) async fn drive(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
        input: Input,
    ) -> Result<Verdict, ActorsError> {
        self.drive_all(myself, state, id, VecDeque::from([input]))
            .await
    }

    /// As [`AgentActor::drive`] with several inputs in order; the run moves on by itself
    /// only once all of them are stepped (a held reply is taken before the run waits).
    pub(super) async fn drive_all(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
        inputs: VecDeque<Input>,
    ) -> Result<Verdict, ActorsError> {
        // Messages for a suspended run are held before they get here; an input from inside
        // the actor joins the suspended drive.
        let Some(inputs) = state.commits.add_inputs(id, inputs) else {
            return Ok(Verdict::None);
        };
        if !state.load(id).await? {
            return Ok(Verdict::Dropped("no such run"));
        }
        let Some(record) = state.records.get(id).cloned() else {
            return Ok(Verdict::Dropped("no such run"));
        };
        let span = state.run_span(&record).await;
        let drive = Drive {
            // Each model turn takes a few steps: the agent's own turn limit bounds them.
            budget: u64::from(state.config.limits.max_turns) * 4 + 16 + inputs.len() as u64,
            span,
            record,
            inputs,
            todo: VecDeque::new(),
            again: false,
        };
        let span = drive.span();
        let verdict = self
            .run_drive(myself, state, drive)
            .instrument(span)
            .await?;
        Ok(verdict.unwrap_or(Verdict::None))
    }

    /// Runs a drive until it is done or suspended; returns its first step's verdict.
    pub(super) async fn run_drive(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        mut drive: Drive,
    ) -> Result<Option<Verdict>, ActorsError> {
        let mut verdict = None;
        loop {
            while let Some(todo) = drive.todo.pop_front() {
                let waits = match &todo {
                    Todo::Effect(effect) => waits_for_commit(effect),
                    Todo::Crash(_) => true,
                };
                if waits {
                    if let Some(ticket) = state.commits.uncommitted(drive.id()) {
                        drive.todo.push_front(todo);
                        state.commits.suspend(ticket, drive);
                        return Ok(verdict);
                    }
                    drive.refresh(state);
                }
                match todo {
                    Todo::Crash(point) => fault::crash_at(point, drive.id()),
                    Todo::Effect(effect) => {
                        let moved = self.execute(myself, state, &drive.record, effect).await?;
                        drive.again |= moved.again;
                        if let Some(input) = moved.next {
                            drive.inputs.push_front(input);
                        }
                    }
                }
            }
            if drive.inputs.is_empty() && drive.again {
                drive.inputs.push_back(state.advance_input(drive.id()));
            }
            drive.again = false;
            let Some(next) = drive.inputs.pop_front() else {
                break;
            };
            if drive.budget == 0 {
                drive.inputs.push_front(next);
                warn!("run did not settle within its step bound; leaving it for the next wake-up");
                break;
            }
            drive.budget -= 1;
            let id = drive.id().clone();
            if !state.load(&id).await? {
                break;
            }
            let Some(view) = state.views.get(&id) else {
                break;
            };
            let step = step::step(
                view,
                next,
                &policy(
                    &state.config,
                    &state.callable,
                    &state.options,
                    state.model.is_immediate(),
                ),
            );
            verdict.get_or_insert(step.verdict);
            if let Some(transition) = step.write {
                let boundary = if cfg!(feature = "fault-injection") {
                    crash_boundary(&transition)
                } else {
                    None
                };
                let settles = transition.settles();
                state.submit(myself, &id, transition)?;
                // A settled run's view is dropped at its commit: its tree's spend, for its
                // reply, is read now.
                if settles
                    && let Some(spent) = state
                        .views
                        .get(&id)
                        .and_then(consort_core::budget::tree_spent)
                {
                    state.tree_spent.insert(id.clone(), spent);
                }
                if let Some(point) = boundary {
                    drive.todo.push_back(Todo::Crash(point));
                }
            }
            drive
                .todo
                .extend(step.effects.into_iter().map(Todo::Effect));
        }
        state.forget_if_settled(drive.id());
        Ok(verdict)
    }
}

/// Whether an effect lets something out of the run that must follow the commit of the writes
/// before it: a call (its child run id comes from a tool use the log must remember), a tool's
/// side effect, a `check_run`, a settle notice (a reply). Asking the script model, timers and
/// asking callees again go on without waiting.
fn waits_for_commit(effect: &Effect) -> bool {
    match effect {
        Effect::PlaceCall { .. }
        | Effect::CheckRun { .. }
        | Effect::UseTool(_)
        | Effect::Settled => true,
        Effect::Advance
        | Effect::AskModel(_)
        | Effect::AwaitReply { .. }
        | Effect::AskReplies(_) => false,
    }
}

/// The durable boundary a transition crosses, for the crash tests' fault points.
fn crash_boundary(transition: &consort_core::Transition) -> Option<Point> {
    transition.events.iter().find_map(|event| match event {
        RunEvent::ModelTurn(turn) if matches!(turn.step, ModelStep::ToolUses(_)) => {
            Some(Point::TurnRecorded)
        }
        RunEvent::ReplyReceived(_) => Some(Point::ReplyRecorded),
        RunEvent::CallPlaced(_) => Some(Point::CallRecorded),
        _ => None,
    })
}
