//! Calls between agents as the driver executes them: placing a call (the envelope built from
//! the run's stored chain, with its allowance of the tree budget), reading a call's run
//! (`check_run`), a call's outcome and a callee's reply going back to the agent machine, and a
//! settled run's reply going to its caller.
//!
//! Nothing here decides: the machine decided the call, its child run and its allowance, and
//! builds the reply (capped); this module only moves envelopes, on tasks of their own so the
//! mailbox keeps moving while a remote host answers.

use consort_core::TreeBudget;
use consort_core::step::{self, CallOutcome, Input};
use consort_net::{CallEnvelope, ReplyEnvelope, RunId};
use ractor::{ActorRef, RpcReplyPort};
use tracing::{Instrument, info_span};

use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::asker::Asker;
use crate::routing::SupervisorMsg;
use crate::run::{RunRecord, now_ms};

impl AgentActor {
    /// Places a call from its own task: the envelope goes to the supervisor, whose answer
    /// comes back as `AgentMsg::TaskDone` (`Input::CallEnded`).
    pub(super) async fn place_call(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        (tool_use_id, callee, input, allowance): (String, String, String, Option<TreeBudget>),
    ) -> Result<(), ActorsError> {
        let call = (callee.as_str(), tool_use_id.as_str(), input.as_str());
        let envelope = build_envelope(state, record, call, allowance).await?;
        state.machine.task_out(&record.id, &tool_use_id);
        let (supervisor, run) = (state.supervisor.clone(), record.id.clone());
        let span = info_span!("call", run_id = %run, agent = %state.config.name, callee = %callee, hop_depth = envelope.depth(), origin = %record.origin);
        let placed = async move {
            let asked = ractor::call_t!(
                supervisor,
                |reply| SupervisorMsg::PlaceCall { envelope, reply },
                60_000
            );
            let outcome = asked.unwrap_or_else(|e| {
                CallOutcome::Refused(consort_core::Refusal::unreachable(
                    &callee,
                    format!("the host supervisor did not answer: {e}"),
                ))
            });
            let input = Input::CallEnded {
                tool_use_id,
                callee,
                outcome,
            };
            AgentMsg::TaskDone {
                run,
                input: Box::new(input),
            }
        };
        state.spawn_then_tell(myself, placed.instrument(span));
        Ok(())
    }

    /// Reads a call's run from its own task (the callee may be on another host).
    pub(super) fn check_run(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use_id: String,
        child: RunId,
        callee: String,
    ) {
        state.machine.task_out(&record.id, &tool_use_id);
        let (supervisor, run) = (state.supervisor.clone(), record.id.clone());
        let (caller, cap) = (state.config.name.clone(), state.options.reply_cap);
        state.spawn_then_tell(myself, async move {
            let asked = ractor::call_t!(
                supervisor,
                |reply| SupervisorMsg::RunSummary {
                    caller,
                    parent_run: run.clone(),
                    agent: callee.clone(),
                    run: child,
                    reply,
                },
                30_000
            );
            let answer = match asked {
                Ok(Ok(r)) => (r.check_run_answer(cap), false),
                Ok(Err(e)) => (e.to_string(), true),
                Err(e) => (format!("{callee} did not answer check_run: {e}"), true),
            };
            AgentMsg::tool_done(run, tool_use_id, step::CHECK_RUN.to_owned(), answer)
        });
    }

    /// Takes a peer's reply. `taken` (a reply from another host) is told whether it answers a
    /// call this agent's run placed (a duplicate of a reply already recorded counts as taken),
    /// once what the reply wrote is committed.
    pub(super) async fn receive_reply(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        reply: ReplyEnvelope,
        taken: Option<RpcReplyPort<bool>>,
    ) -> Result<(), ActorsError> {
        let reply = reply.into_machine();
        let parent = reply.parent_run.clone();
        let input = state.machine.reply_arrived(reply);
        match taken {
            Some(port) => {
                self.drive_asked(myself, state, &parent, input, Asker::Taken(port))
                    .await
            }
            None => self.drive(myself, state, &parent, input).await,
        }
    }
}

/// Tells the supervisor a run settled; for a delegated run this carries the reply the machine
/// built ([`AgentMachine::reply_of`](consort_core::machine::AgentMachine::reply_of)).
pub(super) fn report_settled(state: &AgentState, record: &RunRecord) {
    let reply = state
        .machine
        .reply_of(&record.as_settled())
        .map(|out| ReplyEnvelope::from_machine(out.caller, out.reply));
    state.tell_supervisor(SupervisorMsg::Settled {
        record: Box::new(record.clone()),
        reply,
    });
}

/// A call of run `id` to one of this agent's A2A agents, as its reply is asked for again.
pub(super) fn a2a_call(
    state: &AgentState,
    id: &RunId,
    callee: &str,
    child_run: &RunId,
) -> Option<crate::a2a::A2aCallRef> {
    state.config.a2a_agent(callee)?;
    let placed = state.machine.view(id)?.calls.get(child_run)?;
    Some(crate::a2a::A2aCallRef {
        caller: state.config.name.clone(),
        parent_run: id.clone(),
        tool_use_id: placed.tool_use_id.clone(),
        callee: callee.to_owned(),
        child_run: child_run.clone(),
    })
}

/// The envelope of a call run `record` places, from the run's stored chain.
async fn build_envelope(
    state: &mut AgentState,
    record: &RunRecord,
    (callee, tool_use_id, input): (&str, &str, &str),
    allowance: Option<TreeBudget>,
) -> Result<CallEnvelope, ActorsError> {
    let hops = state.chain(&record.id).await?.to_vec();
    let now = now_ms();
    let next = consort_net::chain::NextHop {
        caller: &state.config.name,
        callee,
        parent_run: &record.id,
        tool_use_id,
        input,
        issued_at_ms: now,
        expires_at_ms: now + state.options.call_ttl.as_millis() as u64,
        // The callee's run span becomes a child of this run's span, wherever it runs.
        trace: state
            .run_spans
            .get(&record.id)
            .and_then(crate::run_span::trace_context),
    };
    let mut envelope =
        consort_net::chain::continue_chain(&hops, &record.origin(), next).map_err(|e| {
            ActorsError::CorruptStore {
                path: state.store.path().to_owned(),
                detail: format!(
                    "the stored chain of run {} does not lead to it: {e}",
                    record.id
                ),
            }
        })?;
    // The new hop (not signed yet) hands the child run its share of the tree budget.
    if let Some(hop) = envelope.hops.last_mut() {
        hop.budget = allowance;
    }
    Ok(envelope)
}
