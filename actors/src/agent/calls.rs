//! Calls between agents as the driver executes them: placing a call (the envelope built from
//! the run's stored chain, with its allowance of the tree budget), reading a call's run
//! (`check_run`), a call's outcome and a callee's reply going back to the agent machine, and a
//! settled run's reply going to its caller.
//!
//! Nothing here decides: the machine decided the call, its child run and its allowance, and
//! builds the reply (capped); this module only moves envelopes, on tasks of their own so the
//! mailbox keeps moving while a remote host answers.

use consort_core::TreeBudget;
use consort_core::event::ReplyOutcome;
use consort_core::machine::SettledRun;
use consort_core::step::{self, CallOutcome, Input, ReplyIn};
use consort_net::{CallEnvelope, ENVELOPE_VERSION, Hop, ReplyEnvelope, ReplyStatus, RunId};
use ractor::{ActorRef, RpcReplyPort};
use serde_json::json;
use tracing::{Instrument, info_span};

use super::commits::Asker;
use super::{AgentActor, AgentMsg, AgentState, tell};
use crate::ActorsError;
use crate::routing::SupervisorMsg;
use crate::run::{RunRecord, now_ms};

impl AgentActor {
    /// Places a call from its own task: the envelope goes to the supervisor, whose answer
    /// comes back as `CallDone`.
    pub(super) async fn place_call(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        (tool_use_id, callee, input, allowance): (String, String, String, Option<TreeBudget>),
    ) -> Result<(), ActorsError> {
        let mut envelope = build_envelope(state, record, &callee, &tool_use_id, input).await?;
        // The new hop (not signed yet) hands the child run its share of the tree budget.
        if let Some(hop) = envelope.hops.last_mut() {
            hop.budget = allowance;
        }
        state.machine.task_out(&record.id, &tool_use_id);
        let (supervisor, me, run) = (state.supervisor.clone(), myself.clone(), record.id.clone());
        let depth = state.metrics.host().mailbox().clone();
        let span = info_span!("call", run_id = %run, agent = %state.config.name, callee = %callee, hop_depth = envelope.depth(), origin = %record.origin);
        tokio::spawn(
            async move {
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
                tell(
                    &depth,
                    &me,
                    AgentMsg::CallDone {
                        run,
                        tool_use_id,
                        callee,
                        outcome,
                    },
                );
            }
            .instrument(span),
        );
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
        let (supervisor, me, run) = (state.supervisor.clone(), myself.clone(), record.id.clone());
        let depth = state.metrics.host().mailbox().clone();
        let (caller, cap) = (state.config.name.clone(), state.options.reply_cap);
        tokio::spawn(
            async move {
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
                let (content, is_error) = match asked {
                    Ok(Ok(r)) => (
                        json!({
                            "run_id": r.id, "agent": r.agent, "status": r.status,
                            "output": r.output.as_deref().map(|o| step::cap_output(o, cap)),
                            "error": r.error,
                        })
                        .to_string(),
                        false,
                    ),
                    Ok(Err(e)) => (e.to_string(), true),
                    Err(e) => (format!("{callee} did not answer check_run: {e}"), true),
                };
                tell(
                    &depth,
                    &me,
                    AgentMsg::ToolDone {
                        run,
                        tool_use_id,
                        result_name: step::CHECK_RUN.to_owned(),
                        content,
                        is_error,
                    },
                );
            }
            .in_current_span(),
        );
    }

    /// A placed call's outcome: the machine records it, then a reply that beat it.
    pub(super) async fn call_done(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    ) -> Result<(), ActorsError> {
        let input = Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        };
        self.drive(myself, state, &run, input).await
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
        let reply = reply_in(reply);
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

/// A reply envelope as the machine and the step read it.
fn reply_in(reply: ReplyEnvelope) -> ReplyIn {
    ReplyIn {
        parent_run: reply.parent_run,
        child_run: reply.child_run,
        callee: reply.callee,
        tool_use_id: reply.tool_use_id,
        outcome: match reply.status {
            ReplyStatus::Succeeded => ReplyOutcome::Succeeded,
            ReplyStatus::Failed => ReplyOutcome::Failed,
        },
        output: reply.output,
        tree_cost: reply.tree_cost,
        tree_spent: reply.tree_spent,
    }
}

/// Tells the supervisor a run settled; for a delegated run this carries the reply the machine
/// built ([`AgentMachine::reply_of`](consort_core::machine::AgentMachine::reply_of)).
pub(super) fn report_settled(state: &AgentState, record: &RunRecord) {
    let call = match (
        &record.parent_run,
        &record.parent_agent,
        &record.tool_use_id,
    ) {
        (Some(parent), Some(caller), Some(tool_use_id)) => {
            Some((parent, caller.as_str(), tool_use_id.as_str()))
        }
        _ => None,
    };
    let settled = SettledRun {
        id: &record.id,
        agent: &record.agent,
        status: record.status,
        call,
        output: record.output.as_deref(),
        error: record.error.as_deref(),
        tree_cost: record.tree_usage(),
    };
    let reply = state.machine.reply_of(&settled).map(|out| {
        let reply = out.reply;
        ReplyEnvelope {
            version: ENVELOPE_VERSION,
            caller: out.caller,
            callee: reply.callee,
            parent_run: reply.parent_run,
            child_run: reply.child_run,
            tool_use_id: reply.tool_use_id,
            status: match reply.outcome {
                ReplyOutcome::Succeeded => ReplyStatus::Succeeded,
                ReplyOutcome::Failed => ReplyStatus::Failed,
            },
            output: reply.output,
            tree_cost: reply.tree_cost,
            tree_spent: reply.tree_spent,
            signature: None,
        }
    });
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

async fn build_envelope(
    state: &mut AgentState,
    record: &RunRecord,
    callee: &str,
    tool_use_id: &str,
    input: String,
) -> Result<CallEnvelope, ActorsError> {
    let mut hops: Vec<Hop> = match state.chains.get(&record.id) {
        Some(hops) => hops.clone(),
        None => {
            let hops = state.store.chain(&record.id).await?;
            state.chains.insert(record.id.clone(), hops.clone());
            hops
        }
    };
    let now = now_ms();
    let next = consort_net::chain::NextHop {
        caller: &state.config.name,
        callee,
        parent_run: &record.id,
        tool_use_id,
        input: &input,
        issued_at_ms: now,
        expires_at_ms: now + state.options.call_ttl.as_millis() as u64,
        // The callee's run span becomes a child of this run's span, wherever it runs.
        trace: state
            .run_spans
            .get(&record.id)
            .and_then(crate::run_span::trace_context),
    };
    // A root run's call opens the chain with the run's origin (its own identity); a called
    // run's chain already carries its origin in the first hop.
    let hop = match hops.last() {
        None => consort_net::chain::first_hop(&record.origin(), next),
        Some(last) => consort_net::chain::next_hop(last, next),
    };
    hops.push(hop);
    Ok(CallEnvelope {
        version: ENVELOPE_VERSION,
        hops,
        input,
    })
}
