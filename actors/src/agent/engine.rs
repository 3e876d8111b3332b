//! The engine: runs [`consort_core::step()`] for one run and executes what it returns.
//!
//! [`AgentActor::drive`] is the loop every run-moving message goes through: build the
//! [`Policy`] from the agent's current config, call `step` with the run's kept view and the
//! input, write the transition, execute the effects, and step again while an effect says the
//! run can move on its own. Everything else here is the execution of one effect (a spawned
//! task for a call, a `check_run` or a slow model) or a request that is not a run's step
//! (starting a run, accepting a call: admission and the inbound guards, decided in
//! consort-core).

use std::collections::VecDeque;

use consort_core::event::ReplyOutcome;
use consort_core::guards::{self, InboundFacts};
use consort_core::step::{
    self, CallOutcome, Effect, Input, ModelAnswer, ReplyIn, TurnAsked, Verdict,
};
use consort_core::{ModelStep, RunEvent};
use consort_net::{CallEnvelope, ENVELOPE_VERSION, Hop, ReplyEnvelope, ReplyStatus, RunId};
use ractor::ActorRef;
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use super::{AgentActor, AgentMsg, AgentState, policy, refused, tell};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::model::{ModelError, ModelReply, ModelRequest, ToolSpec};
use crate::routing::SupervisorMsg;
use crate::run::{Channel, RunRecord, RunStatus, now_ms};
use crate::store::{Inserted, NewRun};
use crate::visibility::Identity;

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
        if !state.load(id).await? {
            return Ok(Verdict::Dropped("no such run"));
        }
        let Some(record) = state.records.get(id).cloned() else {
            return Ok(Verdict::Dropped("no such run"));
        };
        let span =
            info_span!("run", run_id = %id, agent = %record.agent, hop_depth = record.hop_depth);
        self.drive_in_span(myself, state, record, inputs)
            .instrument(span)
            .await
    }

    async fn drive_in_span(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        mut record: RunRecord,
        mut inputs: VecDeque<Input>,
    ) -> Result<Verdict, ActorsError> {
        let id = record.id.clone();
        let mut verdict = None;
        // Bounded: each pass writes progress or ends the loop.
        for _ in 0..(state.options.max_model_turns * 4 + 16 + inputs.len() as u64) {
            let Some(next) = inputs.pop_front() else {
                break;
            };
            if !state.load(&id).await? {
                break;
            }
            let Some(view) = state.views.get(&id) else {
                break;
            };
            let step = step::step(
                view,
                next,
                &policy(&state.config, &state.fleet_agents, &state.options),
            );
            verdict.get_or_insert(step.verdict);
            if let Some(transition) = step.write {
                let boundary = if cfg!(feature = "fault-injection") {
                    crash_boundary(&transition)
                } else {
                    None
                };
                state.submit(&id, transition)?;
                if let Some(point) = boundary {
                    state.flush().await?;
                    fault::crash_at(point, &id);
                }
            }
            let mut again = false;
            for effect in step.effects {
                if waits_for_commit(&effect) {
                    // What the host does or says because of the appends so far waits for
                    // their commit: a crash never lets out a call, a tool's side effect or a
                    // reply that the log would not remember.
                    state.flush().await?;
                    if let Some(kept) = state.records.get(&id) {
                        record.clone_from(kept);
                    } else if let Some(settled) = state.just_settled.remove(&id) {
                        record = settled;
                    }
                }
                match effect {
                    Effect::Advance => again = true,
                    Effect::AskModel(asked) => {
                        if let Some(answered) = self.ask_model(myself, state, &record, asked).await
                        {
                            inputs.push_front(answered);
                        }
                    }
                    Effect::PlaceCall {
                        tool_use_id,
                        callee,
                        input: text,
                    } => {
                        self.place_call(myself, state, &record, tool_use_id, callee, text)
                            .await?;
                    }
                    Effect::CheckRun {
                        tool_use_id,
                        child,
                        callee,
                    } => self.check_run(myself, state, &record, tool_use_id, child, callee),
                    Effect::UseTool(tool_use) => {
                        if self.use_tool(myself, state, &record, &tool_use)? {
                            again = true;
                        }
                    }
                    Effect::AwaitReply {
                        tool_use_id,
                        wait_s,
                    } => {
                        state.awaiting.insert(&id, &tool_use_id);
                        let (me, run) = (myself.clone(), id.clone());
                        tokio::spawn(async move {
                            tokio::time::sleep(std::time::Duration::from_secs(u64::from(wait_s)))
                                .await;
                            tell(&me, AgentMsg::WaitElapsed { run, tool_use_id });
                        });
                    }
                    Effect::AskReplies(calls) => {
                        for (callee, child_run) in calls {
                            state.tell_supervisor(SupervisorMsg::ResendReply { callee, child_run });
                        }
                    }
                    Effect::Settled => {
                        info!(status = %record.status, "run settled");
                        if record.parent_run.is_some() {
                            fault::crash_at(Point::ChildSettled, &id);
                        }
                        report_settled(state, &record);
                    }
                }
            }
            if inputs.is_empty() && again {
                inputs.push_back(state.advance_input(&id));
            }
        }
        if !inputs.is_empty() {
            warn!("run did not settle within its step bound; leaving it for the next wake-up");
        }
        // A request answered after this drive (a reply taken, a decision) is answered on
        // what is committed.
        state.flush().await?;
        state.forget_if_settled(&id);
        Ok(verdict.unwrap_or(Verdict::None))
    }

    /// Asks the model for a turn. An immediate model (the script) answers here and its answer
    /// is the next input; any other model answers on its own task (`ModelDone`), so one slow
    /// turn never holds up this agent's other runs and calls.
    async fn ask_model(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        asked: TurnAsked,
    ) -> Option<Input> {
        let id = record.id.clone();
        let identity = super::tool_use::run_identity(record, &state.catalog);
        let mut specs: Vec<ToolSpec> = state
            .catalog
            .visible_specs(&identity, &mut state.probe_cache);
        specs.extend(builtin_specs(&state.config));
        specs.extend(crate::meta_tools::meta_specs());
        let conversation = state.views.get(&id)?.conversation.clone();
        if !state.model.is_immediate() {
            state.thinking.insert(id.clone());
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

    /// Places a call from its own task: the envelope goes to the supervisor, whose answer
    /// comes back as `CallDone`.
    async fn place_call(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use_id: String,
        callee: String,
        input: String,
    ) -> Result<(), ActorsError> {
        let envelope = build_envelope(state, record, &callee, &tool_use_id, input).await?;
        state.in_flight.insert(&record.id, &tool_use_id);
        let (supervisor, me, run) = (state.supervisor.clone(), myself.clone(), record.id.clone());
        let span = info_span!("call", run_id = %run, agent = %state.config.name, callee = %callee, hop_depth = envelope.depth());
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
        state.in_flight.insert(&record.id, &tool_use_id);
        let (supervisor, me, run) = (state.supervisor.clone(), myself.clone(), record.id.clone());
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

    /// A placed call's outcome: record it, then hand over a reply that beat it.
    pub(super) async fn call_done(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    ) -> Result<(), ActorsError> {
        state.in_flight.remove(&run, &tool_use_id);
        let accepted = match &outcome {
            CallOutcome::Accepted { child_run, .. } => Some(child_run.clone()),
            CallOutcome::Refused(_) => None,
        };
        let child = RunId::child_of(&run, &tool_use_id);
        let early = state.early_replies.remove(&child);
        let mut inputs = VecDeque::from([Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        }]);
        // A reply that beat the call's acceptance is taken right after it is recorded, before
        // the run would move to waiting. One held for a call that ended refused answers
        // nothing this run waits on, and goes.
        if let (Some(_), Some(reply)) = (&accepted, early) {
            inputs.push_back(reply_input(reply, false));
        }
        self.drive_all(myself, state, &run, inputs).await?;
        Ok(())
    }

    /// Takes a peer's reply; returns whether it answers a call this agent's run placed (a
    /// duplicate of a reply already recorded counts as taken).
    pub(super) async fn receive_reply(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        reply: ReplyEnvelope,
    ) -> Result<bool, ActorsError> {
        let parent = reply.parent_run.clone();
        let placing = state.in_flight.contains(&parent, &reply.tool_use_id);
        state.awaiting.remove(&parent, &reply.tool_use_id);
        let input = reply_input(reply.clone(), placing);
        match self.drive(myself, state, &parent, input).await? {
            Verdict::Taken => Ok(true),
            Verdict::Hold => {
                // The child answered before its acceptance reached us: hold the reply until
                // the call is recorded, so the log reads "placed, then replied".
                state.early_replies.insert(reply.child_run.clone(), reply);
                Ok(true)
            }
            Verdict::Dropped(why) => {
                warn!(run_id = %parent, child = %reply.child_run, from = %reply.callee, "reply dropped: {why}");
                Ok(false)
            }
            Verdict::None | Verdict::Refused(_) => Ok(false),
        }
    }

    /// An operator's decision on the gated tool use a run waits on.
    pub(super) async fn decide(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        run: &RunId,
        approve: bool,
    ) -> Result<RunRecord, ActorsError> {
        if state.record(run).await?.is_none() {
            return Err(ActorsError::UnknownRun(run.to_string()));
        }
        let input = Input::Decide {
            run: run.clone(),
            approve,
        };
        if let Verdict::Refused(refusal) = self.drive(myself, state, run, input).await? {
            return Err(refused(refusal));
        }
        state
            .record(run)
            .await?
            .ok_or_else(|| ActorsError::UnknownRun(run.to_string()))
    }

    /// Starts a root run: admission first, then the store.
    pub(super) async fn start(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        input: String,
        channel: Channel,
        identity: Identity,
    ) -> Result<RunRecord, ActorsError> {
        guards::admit(
            &state.config.name,
            &input,
            state.unsettled,
            state.options.admission_limit,
        )
        .map_err(refused)?;
        let inserted = state
            .store
            .insert_run(NewRun {
                id: RunId::random(),
                agent: state.config.name.clone(),
                channel,
                parent_run: None,
                parent_agent: None,
                tool_use_id: None,
                chain: Vec::new(),
                input,
                identity,
            })
            .await?;
        let record = inserted.record().clone();
        if matches!(inserted, Inserted::Created(_)) {
            state.unsettled += 1;
            state.chains.insert(record.id.clone(), Vec::new());
        }
        fault::crash_at(Point::RootStored, &record.id);
        info!(run_id = %record.id, agent = %record.agent, hop_depth = 0, "run started");
        myself
            .cast(AgentMsg::Advance(record.id.clone()))
            .map_err(|e| ActorsError::Actor(format!("run stored but not started: {e}")))?;
        Ok(record)
    }

    /// The callee's side of a call: replay check, then the inbound guards, then the store,
    /// in one job of the store writer (one commit, one wait), answered once committed.
    pub(super) async fn accept(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        envelope: CallEnvelope,
    ) -> CallOutcome {
        let me = state.config.name.clone();
        let last = envelope.last_hop().cloned();
        let hop = match (
            last,
            guards::addressed_to(envelope.last_hop().map(|h| h.callee.as_str()), &me),
        ) {
            (Some(hop), Ok(())) => hop,
            (_, Err(refusal)) => return CallOutcome::Refused(refusal),
            (None, Ok(())) => return CallOutcome::Refused(guards::empty_chain(&me)),
        };
        let span = info_span!("accept", run_id = %hop.child_run, agent = %me, caller = %hop.caller, hop_depth = envelope.depth());
        let result = self
            .admit_call(myself, state, &hop, envelope)
            .instrument(span.clone())
            .await;
        let _in_span = span.enter();
        result.unwrap_or_else(|e| {
            warn!(error = %e, "call could not be stored");
            CallOutcome::Refused(consort_core::Refusal::AgentDown { callee: me })
        })
    }

    async fn admit_call(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        hop: &Hop,
        envelope: CallEnvelope,
    ) -> Result<CallOutcome, ActorsError> {
        let known_children = state.children.get(&hop.parent_run).copied();
        let gate = InboundGate {
            caller: hop.caller.clone(),
            callee: state.config.name.clone(),
            accept_from: state.config.accept_from.clone(),
            chain_depth: envelope.depth(),
            active_runs: state.unsettled,
            admission_limit: state.options.admission_limit,
            limits: state.config.limits,
        };
        let chain = envelope.hops.clone();
        let new = NewRun {
            id: hop.child_run.clone(),
            agent: state.config.name.clone(),
            channel: Channel::Agent(hop.caller.clone()),
            parent_run: Some(hop.parent_run.clone()),
            parent_agent: Some(hop.caller.clone()),
            tool_use_id: Some(hop.tool_use_id.clone()),
            chain: envelope.hops,
            input: envelope.input,
            // The principal is the caller the verified chain names, never a field of the
            // input; its roles are what this agent grants it.
            identity: state.catalog.peer_identity(&hop.caller),
        };
        let parent = hop.parent_run.clone();
        let admitted = state
            .store
            .write(move |store| {
                if store.run(&new.id)?.is_some() {
                    return Ok(Admitted::Replay);
                }
                let children = match known_children {
                    Some(n) => n,
                    None => store.count_children(&parent)?,
                };
                if let Err(refusal) = gate.check(children) {
                    return Ok(Admitted::Refused(refusal, children));
                }
                Ok(Admitted::Stored(Box::new(store.insert_run(new)?), children))
            })
            .wait()
            .await?;
        let children = match &admitted {
            Admitted::Replay => None,
            Admitted::Refused(_, n) | Admitted::Stored(_, n) => Some(*n),
        };
        if let Some(n) = children {
            state.remember_children(&hop.parent_run, n);
        }
        let existing = match admitted {
            Admitted::Replay => {
                // A replay of a call already accepted: answer with the run, count nothing.
                info!("replayed call finds the existing run");
                return Ok(CallOutcome::Accepted {
                    child_run: hop.child_run.clone(),
                    existing: true,
                });
            }
            Admitted::Refused(refusal, _) => {
                warn!(reason = refusal.code(), "call refused: {refusal}");
                return Ok(CallOutcome::Refused(refusal));
            }
            Admitted::Stored(inserted, _) => matches!(*inserted, Inserted::Existing(_)),
        };
        if !existing {
            state.unsettled += 1;
            *state.children.entry(hop.parent_run.clone()).or_insert(0) += 1;
            state.chains.insert(hop.child_run.clone(), chain);
            fault::crash_at(Point::ChildStored, &hop.child_run);
        }
        info!("call accepted");
        myself
            .cast(AgentMsg::Advance(hop.child_run.clone()))
            .map_err(|e| ActorsError::Actor(format!("call stored but not started: {e}")))?;
        Ok(CallOutcome::Accepted {
            child_run: hop.child_run.clone(),
            existing,
        })
    }
}

/// What the store writer found for an arriving call.
enum Admitted {
    /// The child run exists: a replayed call.
    Replay,
    /// The inbound guards refused it (with the parent's children counted).
    Refused(consort_core::Refusal, u64),
    /// Stored (with the parent's children counted before it).
    Stored(Box<Inserted>, u64),
}

/// The facts of the inbound guards, owned, for the store writer's job: the children of the
/// parent run are counted there when this actor does not know them yet.
struct InboundGate {
    caller: String,
    callee: String,
    accept_from: Vec<String>,
    chain_depth: usize,
    active_runs: usize,
    admission_limit: usize,
    limits: consort_config::Limits,
}

impl InboundGate {
    fn check(&self, children_accepted: u64) -> Result<(), consort_core::Refusal> {
        guards::check_inbound(&InboundFacts {
            caller: &self.caller,
            callee: &self.callee,
            accept_from: &self.accept_from,
            chain_depth: self.chain_depth,
            children_accepted,
            active_runs: self.active_runs,
            admission_limit: self.admission_limit,
            limits: self.limits,
        })
    }
}

/// Whether an effect lets something out of the run that must follow the commit of the appends
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

/// The input a reply makes.
fn reply_input(reply: ReplyEnvelope, placing: bool) -> Input {
    Input::Reply {
        reply: ReplyIn {
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
        },
        placing,
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

/// Tells the supervisor a run settled; for a delegated run this carries the reply.
pub(super) fn report_settled(state: &AgentState, record: &RunRecord) {
    let reply = match (
        &record.parent_run,
        &record.parent_agent,
        &record.tool_use_id,
    ) {
        (Some(parent), Some(caller), Some(tool_use_id)) => {
            let (status, text) = match record.status {
                RunStatus::Succeeded => (
                    ReplyStatus::Succeeded,
                    record.output.clone().unwrap_or_default(),
                ),
                _ => (
                    ReplyStatus::Failed,
                    record.error.clone().unwrap_or_default(),
                ),
            };
            Some(ReplyEnvelope {
                version: ENVELOPE_VERSION,
                caller: caller.clone(),
                callee: record.agent.clone(),
                parent_run: parent.clone(),
                child_run: record.id.clone(),
                tool_use_id: tool_use_id.clone(),
                status,
                output: step::cap_output(&text, state.options.reply_cap),
                tree_cost: record.tree_usage(),
                signature: None,
            })
        }
        _ => None,
    };
    state.tell_supervisor(SupervisorMsg::Settled {
        record: Box::new(record.clone()),
        reply,
    });
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
    let hop = consort_net::chain::new_hop(
        hops.last(),
        consort_net::chain::NextHop {
            caller: &state.config.name,
            callee,
            parent_run: &record.id,
            tool_use_id,
            input: &input,
            issued_at_ms: now,
            expires_at_ms: now + state.options.call_ttl.as_millis() as u64,
        },
    );
    hops.push(hop);
    Ok(CallEnvelope {
        version: ENVELOPE_VERSION,
        hops,
        input,
    })
}
