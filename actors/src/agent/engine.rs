//! The execution of a step's effects: the model, calls, `check_run`, timers, settle notices;
//! and the messages that feed a run's drive from outside (a call's outcome, a reply, an
//! operator's decision).
//!
//! Nothing here decides: a call's envelope is built from the run's stored chain, a reply's
//! input is the envelope as the step reads it. A call, a `check_run` or a slow model runs on a
//! spawned task whose outcome comes back as a message, so the mailbox keeps moving while a
//! remote host or a model answers.

use std::time::Instant;

use consort_core::TreeBudget;
use consort_core::event::ReplyOutcome;
use consort_core::machine::SettledRun;
use consort_core::step::{self, CallOutcome, Effect, Input, ModelAnswer, ReplyIn, TurnAsked};
use consort_net::{CallEnvelope, ENVELOPE_VERSION, Hop, ReplyEnvelope, ReplyStatus, RunId};
use ractor::{ActorRef, RpcReplyPort};
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use super::commits::Asker;
use super::{AgentActor, AgentMsg, AgentState, tell};
use crate::fault::{self, Point};
use crate::model::{ModelError, ModelReply, ModelRequest, ToolSpec};
use crate::routing::SupervisorMsg;
use crate::run::{RunRecord, now_ms};
use crate::tools::{ListedTool, ToolError};
use crate::{ActorsError, Decided};

/// What one MCP server listed (or why it could not): its entry, which opening, the answer.
pub(super) type Listed = (String, u64, Result<Vec<ListedTool>, ToolError>);

impl AgentActor {
    /// Asks the model for a turn. An immediate model (the script) answers here and its answer
    /// is the next input; any other model answers on its own task (`ModelDone`), so one slow
    /// turn never holds up this agent's other runs and calls.
    pub(super) async fn ask_model(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        asked: TurnAsked,
    ) -> Option<Input> {
        let id = record.id.clone();
        // The agent's MCP servers are listed before a turn that would not see their tools: the
        // turn waits (the run counts as thinking) and is asked again once the answers are in.
        let due = state.servers.take_due(Instant::now());
        if !due.is_empty() {
            spawn_listing(state, myself, due);
        }
        if state.servers.asking() {
            state.machine.thinking(&id);
            state.awaiting_listing.push((id, asked));
            return None;
        }
        let identity =
            super::tool_use::run_identity(record, &state.catalog, &state.options.host_grants);
        let mut specs: Vec<ToolSpec> = state
            .catalog
            .visible_specs(&identity, &mut state.probe_cache);
        specs.extend(builtin_specs(&state.config));
        specs.extend(super::peers::specs(&state.goals));
        specs.extend(crate::meta_tools::meta_specs());
        let conversation = state.machine.view(&id)?.conversation.clone();
        if !state.model.is_immediate() {
            state.machine.thinking(&id);
            let depth = state.metrics.host().mailbox().clone();
            let (model, me, agent) = (
                state.model.clone(),
                myself.clone(),
                state.config.name.clone(),
            );
            tokio::spawn(
                async move {
                    let request = ModelRequest {
                        agent: &agent,
                        conversation: &conversation,
                        pending_calls: asked.pending,
                        tools: &specs,
                    };
                    let result = model.respond(request).await;
                    tell(
                        &depth,
                        &me,
                        AgentMsg::ModelDone {
                            run: id,
                            asked: Box::new(asked),
                            result,
                        },
                    );
                }
                .in_current_span(),
            );
            return None;
        }
        let request = ModelRequest {
            agent: &state.config.name,
            conversation: &conversation,
            pending_calls: asked.pending,
            tools: &specs,
        };
        let result = state.model.respond(request).await;
        Some(model_input(asked, result))
    }

    /// What the agent's MCP servers listed: the catalog is built again with their tools, and
    /// once no listing is out, the turns that waited are asked again.
    pub(super) fn tools_listed(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        listings: Vec<Listed>,
    ) {
        let now = Instant::now();
        for (server, opened, result) in listings {
            match &result {
                Ok(tools) => {
                    info!(agent = %state.config.name, %server, tools = tools.len(), "MCP server listed its tools");
                }
                Err(e) => {
                    warn!(agent = %state.config.name, %server, error = %e, "MCP server could not be listed; its tools are left out until a later turn asks again");
                }
            }
            for why in state.servers.listed(&server, opened, result, now) {
                warn!(agent = %state.config.name, %server, "an MCP tool is left out: {why}");
            }
        }
        state.rebuild_catalog();
        if state.servers.asking() {
            return;
        }
        let depth = state.metrics.host().mailbox().clone();
        for (run, asked) in std::mem::take(&mut state.awaiting_listing) {
            tell(
                &depth,
                myself,
                AgentMsg::AskAgain {
                    run,
                    asked: Box::new(asked),
                },
            );
        }
        for (run, tool_use_id) in std::mem::take(&mut state.uses_awaiting_listing) {
            state.machine.task_back(&run, &tool_use_id);
            tell(&depth, myself, AgentMsg::UseAgain(run));
        }
    }

    /// Places a call from its own task: the envelope goes to the supervisor, whose answer
    /// comes back as `CallDone`.
    async fn place_call(
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
                    CallOutcome::Refused(consort_core::Refusal::Unreachable {
                        callee: callee.clone(),
                        detail: format!("the host supervisor did not answer: {e}"),
                    })
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
    fn check_run(
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

    /// A decision (an [`Input::Decide`]) on a gate of run `run`; `reply` gets the run as
    /// committed after it, with the gate decided, or the step's refusal.
    pub(super) async fn decide(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: &RunId,
        input: Input,
        reply: RpcReplyPort<Result<Decided, ActorsError>>,
    ) -> Result<(), ActorsError> {
        match state.record(run).await {
            Ok(Some(_)) => {
                self.drive_asked(myself, state, run, input, Asker::Decide(reply))
                    .await
            }
            Ok(None) => {
                send_or_log(reply, Err(ActorsError::UnknownRun(run.to_string())));
                Ok(())
            }
            Err(e) => {
                send_or_log(reply, Err(e));
                Ok(())
            }
        }
    }

    /// Steps run `run` with a request someone the host checked made of it (a cancel); `reply`
    /// gets the run as committed after it, or the step's refusal.
    pub(super) async fn on_request(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: &RunId,
        input: Input,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    ) -> Result<(), ActorsError> {
        match state.record(run).await {
            Ok(Some(_)) => {
                self.drive_asked(myself, state, run, input, Asker::Request(reply))
                    .await
            }
            Ok(None) => {
                send_or_log(reply, Err(ActorsError::UnknownRun(run.to_string())));
                Ok(())
            }
            Err(e) => {
                send_or_log(reply, Err(e));
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
                let (me, run) = (myself.clone(), id.clone());
                let depth = state.metrics.host().mailbox().clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_secs(u64::from(wait_s))).await;
                    tell(&depth, &me, AgentMsg::WaitElapsed { run, tool_use_id });
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

/// Answers a requester, or logs that it stopped waiting.
fn send_or_log<T>(port: RpcReplyPort<T>, answer: T) {
    if port.send(answer).is_err() {
        warn!("a requester stopped waiting for its answer");
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

/// The input a model's answer makes.
pub(super) fn model_input(asked: TurnAsked, result: Result<ModelReply, ModelError>) -> Input {
    Input::ModelAnswered {
        asked,
        answer: result
            .map(|reply| ModelAnswer {
                step: reply.step,
                input_tokens: reply.input_tokens,
                output_tokens: reply.output_tokens,
            })
            .map_err(|e| e.to_string()),
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
fn a2a_call(
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

/// `call_agent` and `check_run`, as the model is told about them.
fn builtin_specs(config: &consort_config::AgentConfig) -> Vec<ToolSpec> {
    if config.can_call.is_empty() {
        return Vec::new();
    }
    vec![
        ToolSpec {
            name: step::CALL_AGENT.into(),
            description: format!(
                "Start a run on a peer agent ({}) and return its run id at once; the answer arrives later as a [reply from <agent>] message. With `wait_s` (1 to {}), wait up to that many seconds and get the answer as this tool's result instead. The peer sees only `input`.",
                config.can_call.join(", "),
                consort_config::MAX_WAIT_S
            ),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "input": {"type": "string"}, "wait_s": {"type": "integer", "minimum": 1, "maximum": consort_config::MAX_WAIT_S}}, "required": ["agent", "input"]}),
        },
        ToolSpec {
            name: step::CHECK_RUN.into(),
            description: "Status and output of a run this run placed.".into(),
            input_schema: json!({"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}),
        },
    ]
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

/// Lists the `due` MCP servers on a task of their own, each within its bound, and tells the
/// actor what they answered.
pub(super) fn spawn_listing(
    state: &AgentState,
    myself: &ActorRef<AgentMsg>,
    due: Vec<crate::tools::DueListing>,
) {
    let depth = state.metrics.host().mailbox().clone();
    let me = myself.clone();
    tokio::spawn(
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for d in due {
                tasks.spawn(async move {
                    let result = match tokio::time::timeout(d.bound, d.server.list()).await {
                        Ok(result) => result,
                        Err(_) => Err(ToolError::ServerTimedOut {
                            server: d.name.clone(),
                            limit_ms: d.bound.as_millis() as u64,
                        }),
                    };
                    (d.name, d.opened, result)
                });
            }
            let mut listings = Vec::new();
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(listing) => listings.push(listing),
                    Err(e) => warn!("an MCP listing task ended abnormally: {e}"),
                }
            }
            tell(&depth, &me, AgentMsg::ToolsListed(listings));
        }
        .in_current_span(),
    );
}
