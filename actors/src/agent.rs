//! The agent actor: one per agent, owning that agent's run store, model and tools.
//!
//! Every run of the agent moves forward in this actor's handler, one message at a time, so a
//! run's log is written by one writer. The engine ([`AgentActor::advance`]) reads the run's
//! log, asks [`RunView`] what is missing, and does the next thing: resolve the last turn's tool
//! uses (a declared tool, `check_run`, or `call_agent`), park on an approval gate, wait for
//! replies, or ask the model for another turn. Each decision is written before it is acted on.
//!
//! The actor never awaits another actor inside its handler: a call or a `check_run` goes to
//! the supervisor from a spawned task, whose outcome comes back as a message. That keeps two
//! agents calling each other at the same moment from deadlocking, and keeps the mailbox moving
//! while a remote host answers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};
use tracing::{Instrument, info, info_span, warn};

use consort_config::{AgentConfig, Approval};
use consort_net::{CallEnvelope, ENVELOPE_VERSION, Hop, ReplyEnvelope, ReplyStatus, RunId};

use crate::ActorsError;
use crate::fault::{self, Point};
use crate::meta_tools::{
    self, AgentCatalog, INVOKE_TOOL, LOAD_TOOL, MetaAnswer, SEARCH_TOOLS, meta_specs,
};
use crate::model::{Model, ModelRequest, ModelStep, ToolSpec};
use crate::run::{Channel, RunRecord, RunStatus, now_ms};
use crate::script::ScriptModel;
use crate::store::{CostDelta, Durability, Inserted, NewRun, RunStore, RunUpdate};
use crate::supervisor::SupervisorMsg;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::visibility::{Identity, ProbeCache};
use consort_core::event::{
    Answer, ApprovalDecided, ApprovalRequested, CallPlaced, CallRefused, Failed, ModelTurn,
    ReplyOutcome, ReplyReceived,
};
use consort_core::guards::{self, InboundFacts, OutboundFacts};
use consort_core::{Refusal, RunEvent, RunView};

/// Tuning of one agent actor.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Largest reply output handed back to a caller, in bytes.
    pub reply_cap: usize,
    /// Most unsettled runs the agent holds before refusing new work.
    pub admission_limit: usize,
    /// Most model turns one run may take.
    pub max_model_turns: u64,
    pub durability: Durability,
    /// How long an envelope stays valid after it is issued.
    pub call_ttl: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            reply_cap: 16 * 1024,
            admission_limit: 256,
            max_model_turns: 64,
            durability: Durability::Normal,
            call_ttl: Duration::from_secs(300),
        }
    }
}

/// How a placed call ended on the callee's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The callee stored the child run (`existing` when it already had it: a replay).
    Accepted {
        child_run: RunId,
        existing: bool,
    },
    Refused(Refusal),
}

/// Messages an agent actor handles.
pub enum AgentMsg {
    /// Start a root run (API, CLI, embedding app).
    Start {
        input: String,
        channel: Channel,
        /// Who the run acts for (the HTTP layer's bearer check, or absent).
        identity: Identity,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// A call from a peer, already routed by the supervisor.
    Accept {
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
    },
    /// Move a run forward.
    Advance(RunId),
    /// The outcome of a call this agent placed.
    CallDone {
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    },
    /// The outcome of a `check_run`.
    CheckDone {
        run: RunId,
        tool_use_id: String,
        result: Result<String, String>,
    },
    /// The outcome of a tool use run on a separate task.
    ToolDone {
        run: RunId,
        tool_use_id: String,
        /// The name its result is recorded under (`invoke_tool` for a use through it).
        result_name: String,
        via_meta: bool,
        outcome: Result<String, ToolError>,
    },
    /// A model's answer for a turn asked for on a separate task.
    ModelDone {
        run: RunId,
        turn: Box<PendingTurn>,
        result: Result<crate::model::ModelReply, crate::model::ModelError>,
    },
    /// A peer's reply to a call one of this agent's runs placed.
    Reply(ReplyEnvelope),
    /// A reply from another host; `taken` says whether it answers a call a run placed.
    OfferReply {
        reply: ReplyEnvelope,
        taken: RpcReplyPort<bool>,
    },
    /// Send the reply of a settled child run again (a caller recovering after a restart).
    ResendReply(RunId),
    /// An operator's decision on a blocked run.
    Decide {
        run: RunId,
        approve: bool,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// The agent's config changed (re-read agent.yaml).
    Config(Box<AgentConfig>),
    /// The names of every agent of the fleet changed.
    FleetAgents(Vec<String>),
    /// Fold the WAL into the database (timer).
    Checkpoint,
}

/// Everything needed to (re)start an agent actor.
#[derive(Clone)]
pub struct AgentArgs {
    pub config: AgentConfig,
    pub store_path: std::path::PathBuf,
    /// A model set by an embedding app; `None` builds the one agent.yaml declares.
    pub model: Option<Arc<dyn Model>>,
    /// Tools registered by an embedding app, beside the declared ones.
    pub extra_tools: Vec<Arc<dyn Tool>>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub fleet_agents: Vec<String>,
    pub options: AgentOptions,
}

pub struct AgentState {
    config: AgentConfig,
    store: RunStore,
    model: Arc<dyn Model>,
    /// The model was set by an embedding app in code: a reload of agent.yaml keeps it.
    model_from_app: bool,
    /// The agent's tools with their auth, policies, grants and catalog generation.
    catalog: AgentCatalog,
    /// T2 probe outcomes per principal, for the catalog's generation.
    probe_cache: ProbeCache,
    extra_tools: Vec<Arc<dyn Tool>>,
    supervisor: ActorRef<SupervisorMsg>,
    fleet_agents: Vec<String>,
    options: AgentOptions,
    /// Tool uses whose outcome is being fetched by a spawned task.
    in_flight: HashSet<(RunId, String)>,
    /// Runs whose model turn is being answered on a separate task.
    thinking: HashSet<RunId>,
    /// Replies that arrived before the acceptance of their call was recorded, by child run.
    early_replies: std::collections::HashMap<RunId, ReplyEnvelope>,
    /// Views of the unsettled runs touched since start, each updated with the events this
    /// actor appends: a step reads its run's view, never the whole log again.
    views: std::collections::HashMap<RunId, RunView>,
}

impl AgentState {
    /// The view of run `id`: kept, or folded once from the store.
    fn view(&mut self, id: &RunId) -> Result<&RunView, ActorsError> {
        if !self.views.contains_key(id) {
            let events = self.store.events(id)?;
            let view = RunView::from_events(events.iter().map(|e| &e.event));
            self.views.insert(id.clone(), view);
        }
        self.views
            .get(id)
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))
    }

    /// Appends `update` to run `id` in one transaction, and folds what was written into the
    /// run's kept view. A settled run's view is dropped: nothing steps it again.
    fn write(&mut self, id: &RunId, update: RunUpdate) -> Result<RunRecord, ActorsError> {
        let applied = self.store.append(id, update)?;
        if applied.record.status.is_settled() {
            self.views.remove(id);
        } else if let Some(view) = self.views.get_mut(id) {
            for event in &applied.events {
                view.apply(event);
            }
            if view.last_seq != applied.last_seq {
                // Something wrote to the log past this view: fold it again from the store.
                warn!(run_id = %id, view_seq = view.last_seq, log_seq = applied.last_seq, "run view out of step with its log; rebuilding it");
                self.views.remove(id);
            }
        }
        Ok(applied.record)
    }
}

/// The agent actor.
pub struct AgentActor;

fn model_for(config: &AgentConfig) -> Arc<dyn Model> {
    match &config.model {
        consort_config::ModelConfig::Script { steps } => Arc::new(ScriptModel::new(steps.clone())),
    }
}

/// The identity a run acts for now: a peer run's roles come from this agent's current grants
/// to the caller named by the verified chain; any other run's from what was stored.
fn run_identity(record: &RunRecord, catalog: &AgentCatalog) -> Identity {
    match (&record.channel, record.principal.strip_prefix("agent:")) {
        (Channel::Agent(caller), Some(principal)) if caller == principal => {
            catalog.peer_identity(caller)
        }
        _ => record.identity(),
    }
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        args: AgentArgs,
    ) -> Result<AgentState, ActorProcessingErr> {
        let store = RunStore::open(&args.store_path, args.options.durability)?;
        let model_from_app = args.model.is_some();
        let model = args.model.unwrap_or_else(|| model_for(&args.config));
        let catalog = AgentCatalog::build(&args.config, &args.extra_tools, 1);
        Ok(AgentState {
            probe_cache: ProbeCache::new(catalog.generation()),
            catalog,
            config: args.config,
            store,
            model,
            model_from_app,
            extra_tools: args.extra_tools,
            supervisor: args.supervisor,
            fleet_agents: args.fleet_agents,
            options: args.options,
            in_flight: HashSet::new(),
            thinking: HashSet::new(),
            early_replies: std::collections::HashMap::new(),
            views: std::collections::HashMap::new(),
        })
    }

    /// Resumes every unsettled run: nothing a restart needs is kept only in memory.
    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        let unsettled = state.store.unsettled()?;
        if !unsettled.is_empty() {
            info!(agent = %state.config.name, runs = unsettled.len(), "resuming unsettled runs");
        }
        for run in unsettled {
            // A reply may have been lost in a crash (in a mailbox, or held until its call was
            // recorded): ask each callee to send it again. Every unsettled run asks, whatever
            // its status: a run still `running` at the crash (some calls recorded, others in
            // flight) waits on the replies of its recorded calls just as a `waiting` one does,
            // and nothing else would ever send them.
            let view = state.view(&run.id)?.clone();
            for (child, call) in view.calls.iter().filter(|(_, c)| !c.replied) {
                let _ = state.supervisor.cast(SupervisorMsg::ResendReply {
                    callee: call.agent.clone(),
                    child_run: child.clone(),
                });
            }
            let _ = myself.cast(AgentMsg::Advance(run.id));
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::Start {
                input,
                channel,
                identity,
                reply,
            } => {
                let result = self.start(&myself, state, input, channel, identity);
                let _ = reply.send(result);
            }
            AgentMsg::Accept { envelope, reply } => {
                let outcome = self.accept(&myself, state, envelope);
                let _ = reply.send(outcome);
            }
            AgentMsg::Advance(run) => self.advance(&myself, state, &run).await?,
            AgentMsg::CallDone {
                run,
                tool_use_id,
                callee,
                outcome,
            } => {
                state.in_flight.remove(&(run.clone(), tool_use_id.clone()));
                let accepted = match &outcome {
                    CallOutcome::Accepted {
                        child_run,
                        existing,
                    } => Some((child_run.clone(), *existing)),
                    CallOutcome::Refused(_) => {
                        // A reply held for a call that ends refused (the placement timed out,
                        // say) answers nothing this run waits on; do not keep it forever.
                        state
                            .early_replies
                            .remove(&RunId::child_of(&run, &tool_use_id));
                        None
                    }
                };
                self.record_call_outcome(state, &run, &tool_use_id, &callee, outcome)?;
                if let Some((child, existing)) = accepted {
                    fault::crash_at(Point::CallRecorded, &run);
                    if let Some(early) = state.early_replies.remove(&child) {
                        self.receive_reply(&myself, state, early).await?;
                        return Ok(());
                    }
                    if existing {
                        // A replayed call: its reply may have been sent (and dropped) before.
                        let _ = state.supervisor.cast(SupervisorMsg::ResendReply {
                            callee: callee.clone(),
                            child_run: child,
                        });
                    }
                }
                self.advance(&myself, state, &run).await?;
            }
            AgentMsg::CheckDone {
                run,
                tool_use_id,
                result,
            } => {
                state.in_flight.remove(&(run.clone(), tool_use_id.clone()));
                let (content, is_error) = match result {
                    Ok(text) => (text, false),
                    Err(text) => (text, true),
                };
                let update = tool_result(&tool_use_id, "check_run", &content, is_error);
                state.write(&run, update.with_cost(tool_call()))?;
                self.advance(&myself, state, &run).await?;
            }
            AgentMsg::ToolDone {
                run,
                tool_use_id,
                result_name,
                via_meta,
                outcome,
            } => {
                state.in_flight.remove(&(run.clone(), tool_use_id.clone()));
                let (content, is_error) = match outcome {
                    Ok(text) => (text, false),
                    Err(e) if via_meta => (MetaAnswer::from_tool_error(&e).content, true),
                    Err(e) => (e.to_string(), true),
                };
                let view = state.view(&run)?.clone();
                if !view.resolved.contains(&tool_use_id) {
                    state.write(
                        &run,
                        tool_result(&tool_use_id, &result_name, &content, is_error)
                            .with_cost(tool_call()),
                    )?;
                }
                self.advance(&myself, state, &run).await?;
            }
            AgentMsg::ModelDone { run, turn, result } => {
                state.thinking.remove(&run);
                let settled = state.store.run(&run)?.is_none_or(|r| r.status.is_settled());
                if !settled {
                    self.record_turn(state, &run, *turn, result)?;
                    // Resolves the turn's tool uses, or asks again if a reply came meanwhile.
                    self.advance(&myself, state, &run).await?;
                }
            }
            AgentMsg::Reply(reply) => {
                self.receive_reply(&myself, state, reply).await?;
            }
            AgentMsg::OfferReply { reply, taken } => {
                let outcome = self.receive_reply(&myself, state, reply).await;
                let _ = taken.send(*outcome.as_ref().unwrap_or(&false));
                outcome?;
            }
            AgentMsg::ResendReply(child) => {
                if let Some(record) = state.store.run(&child)?
                    && record.status.is_settled()
                {
                    self.report_settled(state, &record);
                }
            }
            AgentMsg::Decide {
                run,
                approve,
                reply,
            } => {
                let result = self.decide(state, &run, approve);
                let ok = result.is_ok();
                let _ = reply.send(result);
                if ok {
                    self.advance(&myself, state, &run).await?;
                }
            }
            AgentMsg::Config(config) => {
                let generation = state.catalog.generation() + 1;
                info!(agent = %config.name, generation, "config reloaded; tool catalog generation changed");
                state.catalog = AgentCatalog::build(&config, &state.extra_tools, generation);
                if !state.model_from_app && config.model != state.config.model {
                    // The declared model is part of the config: new turns play the new one.
                    info!(agent = %config.name, "declared model changed; new turns use it");
                    state.model = model_for(&config);
                }
                state.config = *config;
            }
            AgentMsg::FleetAgents(names) => state.fleet_agents = names,
            AgentMsg::Checkpoint => {
                if let Err(e) = state.store.checkpoint() {
                    warn!(agent = %state.config.name, error = %e, "checkpoint failed");
                }
            }
        }
        Ok(())
    }
}

impl AgentActor {
    fn active_runs(state: &AgentState) -> Result<usize, ActorsError> {
        state.store.count_unsettled()
    }

    fn start(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        input: String,
        channel: Channel,
        identity: Identity,
    ) -> Result<RunRecord, ActorsError> {
        if input.trim().is_empty() {
            return Err(ActorsError::Refused("input must not be empty".into()));
        }
        let active = Self::active_runs(state)?;
        if active >= state.options.admission_limit {
            return Err(ActorsError::Refused(
                Refusal::Saturated {
                    callee: state.config.name.clone(),
                    active,
                }
                .to_string(),
            ));
        }
        let inserted = state.store.insert_run(NewRun {
            id: RunId::random(),
            agent: state.config.name.clone(),
            channel,
            parent_run: None,
            parent_agent: None,
            tool_use_id: None,
            chain: Vec::new(),
            input,
            identity,
        })?;
        let record = inserted.record().clone();
        fault::crash_at(Point::RootStored, &record.id);
        info!(run_id = %record.id, agent = %record.agent, hop_depth = 0, "run started");
        let _ = myself.cast(AgentMsg::Advance(record.id.clone()));
        Ok(record)
    }

    /// The callee's side of a call: replay check, then the inbound guards, then the store.
    fn accept(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        envelope: CallEnvelope,
    ) -> CallOutcome {
        let me = state.config.name.clone();
        let Some(hop) = envelope.last_hop().cloned() else {
            return CallOutcome::Refused(Refusal::BadEnvelope {
                callee: me,
                detail: "empty chain".into(),
            });
        };
        let span = info_span!("accept", run_id = %hop.child_run, agent = %me, caller = %hop.caller, hop_depth = envelope.depth());
        let _guard = span.enter();
        if hop.callee != me {
            return CallOutcome::Refused(Refusal::BadEnvelope {
                callee: me,
                detail: format!("envelope is addressed to {}", hop.callee),
            });
        }
        let result = (|| -> Result<CallOutcome, ActorsError> {
            if let Some(existing) = state.store.run(&hop.child_run)? {
                // A replay of a call already accepted: answer with the run, count nothing.
                info!("replayed call finds the existing run");
                return Ok(CallOutcome::Accepted {
                    child_run: existing.id,
                    existing: true,
                });
            }
            let facts = InboundFacts {
                caller: &hop.caller,
                callee: &me,
                accept_from: &state.config.accept_from,
                chain_depth: envelope.depth(),
                children_accepted: state.store.count_children(&hop.parent_run)?,
                active_runs: Self::active_runs(state)?,
                admission_limit: state.options.admission_limit,
                limits: state.config.limits,
            };
            if let Err(refusal) = guards::check_inbound(&facts) {
                warn!(reason = refusal.code(), "call refused: {refusal}");
                return Ok(CallOutcome::Refused(refusal));
            }
            let inserted = state.store.insert_run(NewRun {
                id: hop.child_run.clone(),
                agent: me.clone(),
                channel: Channel::Agent(hop.caller.clone()),
                parent_run: Some(hop.parent_run.clone()),
                parent_agent: Some(hop.caller.clone()),
                tool_use_id: Some(hop.tool_use_id.clone()),
                chain: envelope.hops.clone(),
                input: envelope.input.clone(),
                // The principal is the caller the verified chain names, never a field of the
                // input; its roles are what this agent grants it.
                identity: state.catalog.peer_identity(&hop.caller),
            })?;
            let existing = matches!(inserted, Inserted::Existing(_));
            if !existing {
                fault::crash_at(Point::ChildStored, &hop.child_run);
            }
            info!("call accepted");
            let _ = myself.cast(AgentMsg::Advance(hop.child_run.clone()));
            Ok(CallOutcome::Accepted {
                child_run: hop.child_run.clone(),
                existing,
            })
        })();
        result.unwrap_or_else(|e| {
            warn!(error = %e, "call could not be stored");
            CallOutcome::Refused(Refusal::AgentDown { callee: me })
        })
    }

    fn decide(
        &self,
        state: &mut AgentState,
        run: &RunId,
        approve: bool,
    ) -> Result<RunRecord, ActorsError> {
        let record = state
            .store
            .run(run)?
            .ok_or_else(|| ActorsError::UnknownRun(run.to_string()))?;
        let view = state.view(run)?.clone();
        let asked = view
            .approvals
            .iter()
            .find(|(_, decision)| decision.is_none())
            .map(|(id, _)| id.clone());
        let (RunStatus::Blocked, Some(tool_use_id)) = (record.status, asked) else {
            return Err(ActorsError::Refused(format!(
                "run {run} is not waiting for an approval (status {})",
                record.status
            )));
        };
        let update = RunUpdate::default()
            .event(RunEvent::ApprovalDecided(ApprovalDecided {
                tool_use_id,
                approved: approve,
                by: "operator".into(),
            }))
            .status(RunStatus::Running);
        state.write(run, update)
    }

    /// Moves one run as far as it can go without waiting on anything outside this actor.
    async fn advance(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: &RunId,
    ) -> Result<(), ActorsError> {
        let Some(record) = state.store.run(id)? else {
            return Ok(());
        };
        let span =
            info_span!("run", run_id = %id, agent = %record.agent, hop_depth = record.hop_depth);
        self.advance_in_span(myself, state, record)
            .instrument(span)
            .await
    }

    async fn advance_in_span(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        mut record: RunRecord,
    ) -> Result<(), ActorsError> {
        let id = record.id.clone();
        // Bounded: each pass either writes progress or returns.
        for _ in 0..(state.options.max_model_turns * 4 + 16) {
            if record.status.is_settled() || record.status == RunStatus::Blocked {
                return Ok(());
            }
            let view = state.view(&id)?.clone();
            // A fresh run goes straight to its first model turn; its move to `running` is
            // written in that turn's transaction rather than in one of its own.
            let mut starting = record.status == RunStatus::Queued;
            if starting && (!view.unresolved_tool_uses().is_empty() || !view.needs_model()) {
                record = state.write(&id, RunUpdate::default().status(RunStatus::Running))?;
                starting = false;
            }

            let unresolved = view.unresolved_tool_uses();
            if !unresolved.is_empty() {
                let mut waiting_on_tasks = false;
                for tool_use in unresolved {
                    let key = (id.clone(), tool_use.id.clone());
                    if state.in_flight.contains(&key) {
                        waiting_on_tasks = true;
                        continue;
                    }
                    match self
                        .resolve_tool_use(myself, state, &record, &view, &tool_use)
                        .await?
                    {
                        Resolution::Done => {}
                        Resolution::InFlight => {
                            state.in_flight.insert(key);
                            waiting_on_tasks = true;
                        }
                        Resolution::Blocked => return Ok(()),
                    }
                }
                if waiting_on_tasks {
                    return Ok(());
                }
                record = state
                    .store
                    .run(&id)?
                    .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
                continue;
            }

            let pending = view.pending_calls();
            if !view.needs_model() {
                if pending > 0 {
                    if record.status != RunStatus::Waiting {
                        state.write(&id, RunUpdate::default().status(RunStatus::Waiting))?;
                    }
                } else {
                    self.settle(
                        state,
                        &id,
                        Err("the model is waiting but no calls are outstanding".into()),
                    )?;
                }
                return Ok(());
            }
            if view.model_turns >= state.options.max_model_turns {
                let limit = state.options.max_model_turns;
                self.settle(
                    state,
                    &id,
                    Err(format!("model turn limit ({limit}) reached")),
                )?;
                return Ok(());
            }

            if state.thinking.contains(&id) {
                // A turn is already being asked for; its answer will advance the run.
                return Ok(());
            }
            let identity = run_identity(&record, &state.catalog);
            let mut specs: Vec<ToolSpec> = state
                .catalog
                .visible_specs(&identity, &mut state.probe_cache);
            specs.extend(builtin_specs(&state.config));
            specs.extend(meta_specs());
            let turn = PendingTurn {
                starting,
                pending,
                seen_seq: view.last_seq,
                seen_tool_uses: view.seen_tool_uses.clone(),
            };
            if !state.model.is_immediate() {
                // A model that takes its time (a real model behind a network) answers on its own
                // task, so one slow turn never holds up this agent's other runs and calls.
                state.thinking.insert(id.clone());
                let (model, me, run) = (state.model.clone(), myself.clone(), id.clone());
                let agent = state.config.name.clone();
                let conversation = view.conversation.clone();
                let span = tracing::Span::current();
                tokio::spawn(
                    async move {
                        let request = ModelRequest {
                            agent: &agent,
                            conversation: &conversation,
                            pending_calls: turn.pending,
                            tools: &specs,
                        };
                        let result = model.respond(request).await;
                        let _ = me.cast(AgentMsg::ModelDone {
                            run,
                            turn: Box::new(turn),
                            result,
                        });
                    }
                    .instrument(span),
                );
                return Ok(());
            }
            let request = ModelRequest {
                agent: &state.config.name,
                conversation: &view.conversation,
                pending_calls: pending,
                tools: &specs,
            };
            let result = state.model.respond(request).await;
            match self.record_turn(state, &id, turn, result)? {
                Some(next) => record = next,
                None => return Ok(()),
            }
        }
        warn!("run did not settle within its step bound; leaving it for the next wake-up");
        Ok(())
    }

    /// Writes what the model decided for one turn. Returns the run when the engine should go on
    /// (tool uses to resolve), `None` when the run settled or now waits.
    fn record_turn(
        &self,
        state: &mut AgentState,
        id: &RunId,
        turn: PendingTurn,
        result: Result<crate::model::ModelReply, crate::model::ModelError>,
    ) -> Result<Option<RunRecord>, ActorsError> {
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                self.settle(state, id, Err(e.to_string()))?;
                return Ok(None);
            }
        };
        if let ModelStep::ToolUses(uses) = &reply.step {
            let mut fresh = HashSet::new();
            let reused = uses
                .iter()
                .any(|u| turn.seen_tool_uses.contains(&u.id) || !fresh.insert(u.id.clone()));
            if uses.is_empty() || reused {
                self.settle(
                    state,
                    id,
                    Err("the model emitted no tool uses or reused a tool-use id".into()),
                )?;
                return Ok(None);
            }
        }
        let cost = CostDelta {
            model_turns: 1,
            input_tokens: reply.input_tokens,
            output_tokens: reply.output_tokens,
            ..Default::default()
        };
        let pending = turn.pending;
        let update = RunUpdate {
            cost,
            start: turn.starting,
            ..Default::default()
        }
        .event(RunEvent::ModelTurn(ModelTurn {
            step: reply.step.clone(),
            pending_calls: pending,
            seen_seq: Some(turn.seen_seq),
        }));
        match reply.step {
            ModelStep::Answer(text) => {
                // The turn and the settlement are one transaction.
                self.settle_after(state, id, update, Ok(text))?;
                Ok(None)
            }
            ModelStep::ToolUses(_) => {
                let record = state.write(id, update)?;
                fault::crash_at(Point::TurnRecorded, id);
                Ok(Some(record))
            }
            ModelStep::Wait => {
                let update = if pending > 0 {
                    update.status(RunStatus::Waiting)
                } else {
                    update
                };
                state.write(id, update)?;
                if pending == 0 {
                    self.settle(
                        state,
                        id,
                        Err("the model waited with no calls outstanding".into()),
                    )?;
                }
                Ok(None)
            }
        }
    }

    async fn resolve_tool_use(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        view: &RunView,
        tool_use: &crate::model::ToolUse,
    ) -> Result<Resolution, ActorsError> {
        let id = &record.id;
        match tool_use.name.as_str() {
            "call_agent" => self.place_call(myself, state, record, view, tool_use),
            "check_run" => {
                let asked = tool_use
                    .input
                    .get("run_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let known = RunId::parse(asked)
                    .ok()
                    .and_then(|child| view.calls.get(&child).map(|c| (child, c.agent.clone())));
                let Some((child, callee)) = known else {
                    let text = format!(
                        "unknown run `{}`: check_run only knows runs this run placed",
                        asked.chars().take(80).collect::<String>()
                    );
                    state.write(id, tool_result(&tool_use.id, "check_run", &text, true))?;
                    return Ok(Resolution::Done);
                };
                let supervisor = state.supervisor.clone();
                let me = myself.clone();
                let (run, tool_use_id, cap) =
                    (id.clone(), tool_use.id.clone(), state.options.reply_cap);
                let caller = state.config.name.clone();
                tokio::spawn(async move {
                    let asked = ractor::call_t!(
                        supervisor,
                        |reply| SupervisorMsg::RunSummary {
                            caller: caller.clone(),
                            parent_run: run.clone(),
                            agent: callee.clone(),
                            run: child.clone(),
                            reply,
                        },
                        30_000
                    );
                    let result = match asked {
                        Ok(Ok(r)) => Ok(json!({
                            "run_id": r.id, "agent": r.agent, "status": r.status,
                            "output": r.output.as_deref().map(|o| cap_output(o, cap)),
                            "error": r.error,
                        })
                        .to_string()),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(e) => Err(format!("{callee} did not answer check_run: {e}")),
                    };
                    let _ = me.cast(AgentMsg::CheckDone {
                        run,
                        tool_use_id,
                        result,
                    });
                });
                Ok(Resolution::InFlight)
            }
            SEARCH_TOOLS | LOAD_TOOL => {
                let identity = run_identity(record, &state.catalog);
                let answer = if tool_use.name == SEARCH_TOOLS {
                    state
                        .catalog
                        .search(&identity, &mut state.probe_cache, &tool_use.input)
                } else {
                    state
                        .catalog
                        .load(&identity, &mut state.probe_cache, &tool_use.input)
                };
                info!(
                    run_id = %id, agent = %state.config.name, hop_depth = record.hop_depth,
                    meta_tool = %tool_use.name, principal = %record.principal,
                    generation = state.catalog.generation(), is_error = answer.is_error,
                    "meta-tool call"
                );
                state.write(
                    id,
                    tool_result(
                        &tool_use.id,
                        &tool_use.name,
                        &answer.content,
                        answer.is_error,
                    ),
                )?;
                Ok(Resolution::Done)
            }
            INVOKE_TOOL => {
                let parsed = meta_tools::parse_invoke(&tool_use.input).and_then(|(name, args)| {
                    let Some(tool) = state.catalog.tool(&name) else {
                        return Err(MetaAnswer::error(
                            "no_such_tool",
                            format!("no tool named `{name}`; use search_tools to find the tools you can use"),
                        ));
                    };
                    meta_tools::validate_arguments(&tool.spec().input_schema, &args)
                        .map_err(|m| MetaAnswer::error("invalid_arguments", m))?;
                    Ok((name, args))
                });
                info!(
                    run_id = %id, agent = %state.config.name, hop_depth = record.hop_depth,
                    meta_tool = INVOKE_TOOL, principal = %record.principal,
                    tool = parsed.as_ref().map(|(n, _)| n.as_str()).unwrap_or(""),
                    "meta-tool call"
                );
                match parsed {
                    Ok((name, args)) => {
                        self.use_tool(
                            myself,
                            state,
                            record,
                            view,
                            tool_use,
                            INVOKE_TOOL,
                            &name,
                            &args,
                        )
                        .await
                    }
                    Err(answer) => {
                        state.write(
                            id,
                            tool_result(&tool_use.id, INVOKE_TOOL, &answer.content, true),
                        )?;
                        Ok(Resolution::Done)
                    }
                }
            }
            name => {
                if state.catalog.tool(name).is_none() {
                    let text = format!(
                        "no tool named `{name}`; use search_tools to find the tools you can use"
                    );
                    state.write(id, tool_result(&tool_use.id, name, &text, true))?;
                    return Ok(Resolution::Done);
                }
                self.use_tool(
                    myself,
                    state,
                    record,
                    view,
                    tool_use,
                    name,
                    name,
                    &tool_use.input,
                )
                .await
            }
        }
    }

    /// One use of a tool, by name or through `invoke_tool` (`result_name` is what the result
    /// is recorded under): the real authorization (shared by both paths), the approval gate,
    /// then the handler.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    async fn use_tool(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        view: &RunView,
        tool_use: &crate::model::ToolUse,
        result_name: &str,
        name: &str,
        input: &Value,
    ) -> Result<Resolution, ActorsError> {
        let id = &record.id;
        let via_meta = result_name != name;
        let Some(tool) = state.catalog.tool(name).cloned() else {
            return Ok(Resolution::Done);
        };
        let identity = run_identity(record, &state.catalog);
        if let Err(refusal) = state.catalog.authorize(name, &identity, input) {
            info!(tool = name, principal = %record.principal, "tool use refused: {refusal}");
            let content = if via_meta {
                MetaAnswer::from_tool_error(&refusal).content
            } else {
                refusal.to_string()
            };
            state.write(id, tool_result(&tool_use.id, result_name, &content, true))?;
            return Ok(Resolution::Done);
        }
        if tool.approval() == Approval::Required {
            match view.approvals.get(&tool_use.id) {
                None | Some(None) => {
                    let mut update = RunUpdate::default().status(RunStatus::Blocked);
                    if !view.approvals.contains_key(&tool_use.id) {
                        update = update.event(RunEvent::ApprovalRequested(ApprovalRequested {
                            tool_use_id: tool_use.id.clone(),
                            tool: name.to_owned(),
                            input: input.clone(),
                        }));
                    }
                    state.write(id, update)?;
                    info!(tool = name, "run blocked until an operator approves");
                    return Ok(Resolution::Blocked);
                }
                Some(Some(false)) => {
                    let text = format!("the operator denied the use of `{name}`");
                    state.write(id, tool_result(&tool_use.id, result_name, &text, true))?;
                    return Ok(Resolution::Done);
                }
                Some(Some(true)) => {}
            }
        }
        state.catalog.record_use(name, &identity);
        // The tool runs on its own task: a slow query or a remote API never blocks the agent's
        // mailbox, and a tool that panics fails its own use, not the agent.
        let (me, run, tool_use_id) = (myself.clone(), id.clone(), tool_use.id.clone());
        let mut me_run = Some(id.clone());
        let (agent, run_input) = (state.config.name.clone(), record.input.clone());
        let (env, input, result_name) = (
            state.config.env.clone(),
            input.clone(),
            result_name.to_owned(),
        );
        let span = tracing::Span::current();
        tokio::spawn(
            async move {
                let invocation = tokio::spawn(async move {
                    let ctx = ToolContext {
                        agent: &agent,
                        run_id: &run,
                        input: &run_input,
                        env: &env,
                    };
                    let outcome = tool.invoke(ctx, &input).await;
                    (run, outcome)
                });
                let (run, outcome) = match invocation.await {
                    Ok(done) => done,
                    Err(e) => {
                        warn!("tool task ended abnormally: {e}");
                        let Some(run) = me_run.take() else { return };
                        (
                            run,
                            Err(ToolError::Failed(
                                "the tool failed unexpectedly (it panicked); nothing was returned"
                                    .into(),
                            )),
                        )
                    }
                };
                let _ = me.cast(AgentMsg::ToolDone {
                    run,
                    tool_use_id,
                    result_name,
                    via_meta,
                    outcome,
                });
            }
            .instrument(span),
        );
        Ok(Resolution::InFlight)
    }

    /// The caller's side of a call: outbound guards, then the envelope, then the supervisor.
    fn place_call(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        view: &RunView,
        tool_use: &crate::model::ToolUse,
    ) -> Result<Resolution, ActorsError> {
        let id = &record.id;
        let callee = tool_use
            .input
            .get("agent")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let input = tool_use
            .input
            .get("input")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if callee.is_empty() || input.trim().is_empty() {
            let text =
                "call_agent expects {\"agent\": \"<name>\", \"input\": \"<non-empty text>\"}";
            state.write(id, tool_result(&tool_use.id, "call_agent", text, true))?;
            return Ok(Resolution::Done);
        }
        if let Some((child, _)) = view.call_by_tool_use(&tool_use.id) {
            // Placed and recorded already; only the tool result is missing.
            let content = accepted_text(child, &callee);
            state.write(id, tool_result(&tool_use.id, "call_agent", &content, false))?;
            return Ok(Resolution::Done);
        }
        let facts = OutboundFacts {
            caller: &state.config.name,
            callee: &callee,
            can_call: &state.config.can_call,
            fleet_agents: &state.fleet_agents,
            caller_depth: record.hop_depth as usize,
            // Calls still being placed count too: a turn may place many at once.
            calls_placed: view.calls_placed()
                + state
                    .in_flight
                    .iter()
                    .filter(|(run, tu)| {
                        run == id
                            && view.call_by_tool_use(tu).is_none()
                            && view.call_uses.contains_key(tu)
                    })
                    .count() as u64,
            limits: state.config.limits,
        };
        // Test-only fault switch (CONSORT_FAULT=skip_outbound_checks, compiled only with the
        // `fault-injection` feature): a sending host with its own checks off, to prove the
        // receiving host still enforces every rule.
        let skip_checks = fault::skip_outbound_checks();
        if skip_checks {
            warn!(callee = %callee, "fault switch: outbound checks skipped (tests only)");
        }
        if let Err(refusal) =
            guards::check_outbound(&facts).or_else(|r| if skip_checks { Ok(()) } else { Err(r) })
        {
            info!(callee = %callee, reason = refusal.code(), "call refused by the caller's side");
            self.record_call_outcome(
                state,
                id,
                &tool_use.id,
                &callee,
                CallOutcome::Refused(refusal),
            )?;
            return Ok(Resolution::Done);
        }
        let envelope = build_envelope(state, record, &callee, &tool_use.id, input)?;
        let supervisor = state.supervisor.clone();
        let me = myself.clone();
        let (run, tool_use_id) = (id.clone(), tool_use.id.clone());
        let span = info_span!("call", run_id = %id, agent = %state.config.name, callee = %callee, hop_depth = envelope.depth());
        tokio::spawn(
            async move {
                let asked = ractor::call_t!(
                    supervisor,
                    |reply| SupervisorMsg::PlaceCall {
                        envelope: envelope.clone(),
                        reply,
                    },
                    60_000
                );
                let outcome = asked.unwrap_or_else(|e| {
                    CallOutcome::Refused(Refusal::Unreachable {
                        callee: callee.clone(),
                        detail: e.to_string(),
                    })
                });
                let _ = me.cast(AgentMsg::CallDone {
                    run,
                    tool_use_id,
                    callee,
                    outcome,
                });
            }
            .instrument(span),
        );
        Ok(Resolution::InFlight)
    }

    fn record_call_outcome(
        &self,
        state: &mut AgentState,
        run: &RunId,
        tool_use_id: &str,
        callee: &str,
        outcome: CallOutcome,
    ) -> Result<(), ActorsError> {
        let view = state.view(run)?.clone();
        if view.resolved.contains(tool_use_id) {
            return Ok(());
        }
        let update = match outcome {
            CallOutcome::Accepted {
                child_run,
                existing,
            } => {
                let content = accepted_text(&child_run, callee);
                let mut update =
                    tool_result(tool_use_id, "call_agent", &content, false).with_cost(CostDelta {
                        calls_placed: 1,
                        ..Default::default()
                    });
                update.events.insert(
                    0,
                    RunEvent::CallPlaced(CallPlaced {
                        tool_use_id: tool_use_id.to_owned(),
                        agent: callee.to_owned(),
                        child_run,
                        existing,
                    }),
                );
                update
            }
            CallOutcome::Refused(refusal) => {
                let text = refusal.to_string();
                let mut update = tool_result(tool_use_id, "call_agent", &text, true);
                update.events.insert(
                    0,
                    RunEvent::CallRefused(CallRefused {
                        tool_use_id: tool_use_id.to_owned(),
                        agent: callee.to_owned(),
                        code: refusal.code().to_owned(),
                        reason: text,
                        refusal: Some(refusal),
                    }),
                );
                update
            }
        };
        state.write(run, update)?;
        Ok(())
    }

    /// Takes a peer's reply; returns whether it answers a call this agent's run placed (a
    /// duplicate of a reply already recorded counts as taken).
    async fn receive_reply(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        reply: ReplyEnvelope,
    ) -> Result<bool, ActorsError> {
        let Some(parent) = state.store.run(&reply.parent_run)? else {
            warn!(run_id = %reply.parent_run, from = %reply.callee, "reply for a run this agent does not have; dropped");
            return Ok(false);
        };
        let view = state.view(&parent.id)?.clone();
        let Some(call) = view.calls.get(&reply.child_run) else {
            let in_flight = view.call_uses.get(&reply.tool_use_id) == Some(&reply.callee)
                && RunId::child_of(&parent.id, &reply.tool_use_id) == reply.child_run
                && state
                    .in_flight
                    .contains(&(parent.id.clone(), reply.tool_use_id.clone()));
            if in_flight {
                // The child answered before its acceptance reached us: hold the reply until the
                // call is recorded, so the log reads "placed, then replied".
                state.early_replies.insert(reply.child_run.clone(), reply);
                return Ok(true);
            }
            warn!(run_id = %parent.id, child = %reply.child_run, from = %reply.callee, "reply for a call this run never placed; dropped");
            return Ok(false);
        };
        if call.agent != reply.callee {
            warn!(run_id = %parent.id, child = %reply.child_run, from = %reply.callee, "reply from an agent the call was not placed to; dropped");
            return Ok(false);
        }
        if call.replied || parent.status.is_settled() {
            return Ok(true);
        }
        let status = match reply.status {
            ReplyStatus::Succeeded => ReplyOutcome::Succeeded,
            ReplyStatus::Failed => ReplyOutcome::Failed,
        };
        let update = RunUpdate::default().event(RunEvent::ReplyReceived(ReplyReceived {
            child_run: reply.child_run.clone(),
            agent: reply.callee.clone(),
            status,
            output: cap_output(&reply.output, state.options.reply_cap),
        }));
        let update = if parent.status == RunStatus::Waiting {
            update.status(RunStatus::Running)
        } else {
            update
        };
        state.write(&parent.id, update)?;
        fault::crash_at(Point::ReplyRecorded, &parent.id);
        self.advance(myself, state, &parent.id).await?;
        Ok(true)
    }

    fn settle(
        &self,
        state: &mut AgentState,
        id: &RunId,
        outcome: Result<String, String>,
    ) -> Result<(), ActorsError> {
        self.settle_after(state, id, RunUpdate::default(), outcome)
    }

    /// Settles a run, writing `prefix` (a model turn, say) in the same transaction.
    fn settle_after(
        &self,
        state: &mut AgentState,
        id: &RunId,
        prefix: RunUpdate,
        outcome: Result<String, String>,
    ) -> Result<(), ActorsError> {
        let settlement = match &outcome {
            Ok(text) => RunUpdate {
                output: Some(text.clone()),
                ..Default::default()
            }
            .event(RunEvent::Answer(Answer { text: text.clone() }))
            .status(RunStatus::Succeeded),
            Err(error) => RunUpdate {
                error: Some(error.clone()),
                ..Default::default()
            }
            .event(RunEvent::Failed(Failed {
                error: error.clone(),
            }))
            .status(RunStatus::Failed),
        };
        let mut update = prefix;
        update.events.extend(settlement.events);
        update.status = settlement.status;
        update.output = settlement.output;
        update.error = settlement.error;
        let record = state.write(id, update)?;
        info!(status = %record.status, "run settled");
        if record.parent_run.is_some() {
            fault::crash_at(Point::ChildSettled, id);
        }
        self.report_settled(state, &record);
        Ok(())
    }

    /// Tells the supervisor a run settled; for a delegated run this carries the reply.
    fn report_settled(&self, state: &AgentState, record: &RunRecord) {
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
                    output: cap_output(&text, state.options.reply_cap),
                    signature: None,
                })
            }
            _ => None,
        };
        let _ = state.supervisor.cast(SupervisorMsg::Settled {
            record: Box::new(record.clone()),
            reply,
        });
    }
}

/// What the engine knew when it asked the model for a turn; recorded with the answer.
pub struct PendingTurn {
    /// The run is still `queued`: its move to `running` goes into the turn's transaction.
    starting: bool,
    /// Calls out when the model was asked.
    pending: usize,
    /// The last event the model's conversation included: anything newer (a reply that arrived
    /// while it thought) is news for the next turn.
    seen_seq: u64,
    seen_tool_uses: std::collections::BTreeSet<String>,
}

enum Resolution {
    Done,
    InFlight,
    Blocked,
}

fn tool_call() -> CostDelta {
    CostDelta {
        tool_calls: 1,
        ..Default::default()
    }
}

trait WithCost {
    fn with_cost(self, cost: CostDelta) -> Self;
}

impl WithCost for RunUpdate {
    fn with_cost(mut self, cost: CostDelta) -> Self {
        self.cost = cost;
        self
    }
}

fn tool_result(tool_use_id: &str, name: &str, content: &str, is_error: bool) -> RunUpdate {
    RunUpdate::default().event(RunEvent::tool_result(tool_use_id, name, content, is_error))
}

fn accepted_text(child: &RunId, callee: &str) -> String {
    json!({
        "run_id": child, "agent": callee, "status": "accepted",
        "note": format!("the answer will arrive as a [reply from {callee}] message; check_run polls it meanwhile"),
    })
    .to_string()
}

/// Room left for the truncation marker, so a text the callee's host already capped passes the
/// caller's host unchanged instead of being cut (and marked) twice.
const MARKER_ROOM: usize = 128;

/// Caps a reply's text at `cap` bytes (on a char boundary) with a visible marker.
pub fn cap_output(text: &str, cap: usize) -> String {
    if text.len() <= cap + MARKER_ROOM {
        return text.to_owned();
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[… output truncated: {} of {} bytes shown]",
        &text[..end],
        end,
        text.len()
    )
}

/// `call_agent` and `check_run`, as the model is told about them.
fn builtin_specs(config: &AgentConfig) -> Vec<ToolSpec> {
    if config.can_call.is_empty() {
        return Vec::new();
    }
    vec![
        ToolSpec {
            name: "call_agent".into(),
            description: format!(
                "Start a run on a peer agent ({}) and return its run id at once; the answer arrives later as a [reply from <agent>] message. The peer sees only `input`.",
                config.can_call.join(", ")
            ),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "input": {"type": "string"}}, "required": ["agent", "input"]}),
        },
        ToolSpec {
            name: "check_run".into(),
            description: "Status and output of a run this run placed.".into(),
            input_schema: json!({"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}),
        },
    ]
}

fn build_envelope(
    state: &AgentState,
    record: &RunRecord,
    callee: &str,
    tool_use_id: &str,
    input: String,
) -> Result<CallEnvelope, ActorsError> {
    let mut hops: Vec<Hop> = state.store.chain(&record.id)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_output_marks_truncation_once() {
        assert_eq!(cap_output("short", 16), "short");
        let long = "é".repeat(200); // 400 bytes
        let capped = cap_output(&long, 101);
        assert!(capped.starts_with(&"é".repeat(50)));
        assert!(capped.ends_with("[… output truncated: 100 of 400 bytes shown]"));
        // Capping an already capped text changes nothing.
        assert_eq!(cap_output(&capped, 101), capped);
    }
}
