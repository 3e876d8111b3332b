//! The execution of the agent machine's effects, and the requests that wait on a verdict (an
//! operator's decision, a cancel).
//!
//! Nothing here decides: an effect is what the machine handed out, executed by the module that
//! owns its kind of work (the model in `model_turn`, calls in `calls`, tools in `tool_use`,
//! the directory's tools in `crate::directory::tools`); an outcome known at once goes back to the machine as the
//! run's next input.

use consort_core::step::{Effect, Input};
use consort_net::RunId;
use ractor::ActorRef;
use tracing::info;

use super::calls::{a2a_call, report_settled};
use super::commits::Asker;
use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;

impl AgentActor {
    /// Steps run `run` with a request someone the host checked made of it (an operator's
    /// decision, a cancel); `asker` gets the run as committed after it (with the gate decided,
    /// for a decision), or the step's refusal, or why the run could not be read.
    pub(super) async fn on_request(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: &RunId,
        input: Input,
        asker: Asker,
    ) -> Result<(), ActorsError> {
        match state.record(run).await {
            Ok(Some(_)) => self.drive_asked(myself, state, run, input, asker).await,
            Ok(None) => {
                asker.fail(ActorsError::UnknownRun(run.to_string()));
                Ok(())
            }
            Err(e) => {
                asker.fail(e);
                Ok(())
            }
        }
    }

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
