//! The execution of the agent machine's effects.
//!
//! Nothing here decides: an effect is what the machine handed out, executed by the module that
//! owns its kind of work (the model in `model_turn`, calls in `calls`, tools in `tool_use`,
//! the directory's tools in `crate::directory::tools`); an outcome known at once goes back to the machine as the
//! run's next input.

use consort_core::step::Effect;
use ractor::ActorRef;
use tracing::info;

use super::calls::{a2a_call, report_settled};
use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;

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
