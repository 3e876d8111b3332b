//! The driver's loop: feed the agent machine, execute its commands and effects.
//!
//! Every run-moving message becomes an input to the agent's
//! [`AgentMachine`](consort_core::machine::AgentMachine) ([`AgentActor::drive`], or
//! [`AgentActor::drive_asked`] when someone waits for the verdict); [`AgentActor::run_machine`]
//! then executes the machine's commands until it has none: read a run's log it does not keep,
//! hand an append to the store writer, execute an effect (the model, a call, a tool, a settle
//! notice), answer an asker, forget a settled run. The machine decides the order (an effect
//! that lets something out of a run waits for the commit of the run's writes before it); this
//! loop decides nothing. An effect is executed by the module that owns its kind of work (the
//! model in `model_turn`, calls in `calls`, tools in `tool_use`, the directory's tools in
//! `crate::directory::tools`); an outcome known at once goes back to the machine as the run's
//! next input.

use consort_core::RunView;
use consort_core::machine::Command;
use consort_core::step::{Effect, Input};
use consort_net::RunId;
use ractor::ActorRef;
use tracing::{Instrument, info, warn};

use super::calls::{a2a_call, report_settled};
use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::asker::Asker;
use crate::fault::{self, Point};
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;

impl AgentActor {
    /// Steps run `id` with `input` (and whatever the run does on its own after it).
    pub(super) async fn drive(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
        input: Input,
    ) -> Result<(), ActorsError> {
        state.machine.input(id, input, None);
        self.run_machine(myself, state).await
    }

    /// Moves run `id` as far as it goes on its own.
    pub(super) async fn advance(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
    ) -> Result<(), ActorsError> {
        state.machine.again(id);
        self.run_machine(myself, state).await
    }

    /// Steps run `id` with `input` for `asker`, who gets the verdict once what it reports is
    /// durable.
    pub(super) async fn drive_asked(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
        input: Input,
        asker: Asker,
    ) -> Result<(), ActorsError> {
        let asker = state.askers.add(asker);
        state.machine.input(id, input, Some(asker));
        self.run_machine(myself, state).await
    }

    /// Executes the machine's commands until it has none (every drive done, suspended on a
    /// commit, or waiting for a task).
    pub(super) async fn run_machine(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorsError> {
        loop {
            let command = {
                let policy = state.options.policy(
                    &state.config,
                    &state.callable,
                    state.model.is_immediate(),
                );
                state.machine.poll(&policy)
            };
            let Some(command) = command else {
                return Ok(());
            };
            self.command(myself, state, command).await?;
        }
    }

    async fn command(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        command: Command,
    ) -> Result<(), ActorsError> {
        match command {
            Command::Load(run) => {
                let view = state.load(&run).await?;
                state.machine.loaded(&run, view);
            }
            Command::Append {
                run,
                ticket,
                transition,
                expected_seq,
            } => {
                if cfg!(feature = "fault-injection")
                    && let Some(point) = Point::crossed_by(&transition)
                {
                    state.machine.barrier(&run, point.token());
                }
                state.submit(myself, &run, ticket, transition, expected_seq)?;
            }
            Command::Execute { run, effect } => {
                let Some(record) = state.current_record(&run) else {
                    warn!(run_id = %run, "an effect of a run that is not kept; dropped");
                    return Ok(());
                };
                let span = state.run_span(&record).await;
                self.execute(myself, state, &record, effect)
                    .instrument(span)
                    .await?;
            }
            Command::Answer(answer) => self.answer(state, answer).await,
            Command::Done { run, settled } => state.drive_over(&run, settled),
            Command::Stalled(run) => {
                warn!(run_id = %run, "run did not settle within its step bound; leaving it for the next wake-up");
            }
            Command::Barrier { run, token } => {
                if let Some(point) = Point::from_token(token) {
                    fault::crash_at(point, &run);
                }
            }
            other => warn!("an agent machine command this driver does not know: {other:?}"),
        }
        Ok(())
    }
}

impl AgentState {
    /// Reads run `id`'s record and log from the store (keeping the record) and returns the
    /// log's fold, or `None` when the store has no such run.
    pub(super) async fn load(&mut self, id: &RunId) -> Result<Option<RunView>, ActorsError> {
        let Some((record, view)) = self.store.load(id).await? else {
            return Ok(None);
        };
        self.records.insert(id.clone(), record);
        Ok(Some(view))
    }
}

impl AgentActor {
    /// Executes one effect of a run (the machine decided it may run now). An outcome known at
    /// once goes back to the machine as the run's next input.
    pub(super) async fn execute(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        effect: Effect,
    ) -> Result<(), ActorsError> {
        let id = &record.id;
        match effect {
            Effect::Advance => state.machine.again(id),
            Effect::AskModel(asked) => {
                if let Some(input) = self.ask_model(myself, state, record, asked).await {
                    state.machine.input_first(id, input);
                }
            }
            Effect::PlaceCall {
                tool_use_id,
                callee,
                input,
                allowance,
            } => {
                let call = (tool_use_id, callee, input, allowance);
                self.place_call(myself, state, record, call).await?;
            }
            Effect::CheckRun {
                tool_use_id,
                child,
                callee,
            } => self.check_run(myself, state, record, tool_use_id, child, callee),
            Effect::UseTool(tool_use) => self.use_tool(myself, state, record, &tool_use),
            Effect::RunTool {
                tool_use_id,
                tool,
                result_name,
                input,
            } => self.run_tool(
                myself,
                state,
                record,
                &tool_use_id,
                (&tool, &result_name),
                input,
            ),
            Effect::AwaitReply {
                tool_use_id,
                wait_s,
            } => {
                state.machine.wait_started(id, &tool_use_id);
                let run = id.clone();
                state.spawn_then_tell(myself, async move {
                    tokio::time::sleep(std::time::Duration::from_secs(u64::from(wait_s))).await;
                    AgentMsg::WaitElapsed { run, tool_use_id }
                });
            }
            Effect::AskReplies(calls) => {
                for (callee, child_run) in calls {
                    let message = match a2a_call(state, id, &callee, &child_run) {
                        Some(call) => SupervisorMsg::ResendA2aReply(call),
                        None => SupervisorMsg::ResendReply { callee, child_run },
                    };
                    state.tell_supervisor(message);
                }
            }
            Effect::Settled => {
                info!(status = %record.status, "run settled");
                if record.parent_run.is_some() {
                    fault::crash_at(Point::ChildSettled, id);
                }
                report_settled(state, record);
            }
        }
        Ok(())
    }
}
