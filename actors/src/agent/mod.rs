//! The agent actor: one per agent, owning that agent's run store, model and tools.
//!
//! The actor decides nothing about a run itself. Every message that concerns a run becomes an
//! [`Input`] to consort-core's [`step`](consort_core::step()); the actor hands the step's
//! transition to the store writer, folds it into the run's kept view, and executes the step's
//! effects: ask the model, place a call, read a call's run, run a tool, ask callees for lost
//! replies, report a settled run. Runs move one message at a time, so a run's log has one
//! writer. The files: [`drive`] (the loop over `step`), [`commits`] (tickets, suspended drives
//! and answers held until their writes are durable), [`admission`] (new runs and accepted
//! calls), [`engine`] (executing effects) and [`tool_use`] (tools and meta-tools).
//!
//! The actor never awaits another actor inside its handler, nor a commit: a call or a
//! `check_run` goes to the supervisor from a spawned task, and a commit comes back as
//! [`AgentMsg::Committed`]. That keeps two agents calling each other at the same moment from
//! deadlocking, and keeps the mailbox moving while a remote host answers or the disk syncs. A
//! task's message goes to the actor that spawned it; when that actor is gone (restarted,
//! stopped) the outcome is dropped with a log line, and the restarted actor recovers the run
//! from its log.

mod admission;
mod commits;
mod drive;
mod engine;
mod tool_use;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{info, warn};

use consort_config::AgentConfig;
use consort_core::step::{CallOutcome, Input, Policy, TurnAsked};
use consort_core::{Refusal, RunView};
use consort_net::{CallEnvelope, Hop, ReplyEnvelope, RunId};

use crate::ActorsError;
use crate::meta_tools::AgentCatalog;
use crate::model::{Model, ModelError, ModelReply};
use crate::routing::SupervisorMsg;
use crate::run::{Channel, RunRecord};
use crate::script::ScriptModel;
use crate::store::{AgentStore, Durability, RunStore, StoreWriter};
use crate::tools::{Tool, ToolError};
use crate::visibility::{Identity, ProbeCache};

/// Tuning of one agent actor.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Largest reply output handed back to a caller, in bytes.
    pub reply_cap: usize,
    /// Most unsettled runs the agent holds before refusing new work.
    pub admission_limit: usize,
    /// Most model turns one run may take.
    pub max_model_turns: u64,
    /// How hard each commit is pushed to disk.
    pub durability: Durability,
    /// How long an envelope stays valid after it is issued.
    pub call_ttl: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            reply_cap: 16 * 1024,
            admission_limit: 256,
            max_model_turns: 64,
            durability: Durability::Normal,
            call_ttl: Duration::from_secs(300),
        }
    }
}

/// Messages an agent actor handles: requests from the API and the supervisor, the call
/// protocol between agents, and completions of the tasks the actor spawned.
pub(crate) enum AgentMsg {
    // --- requests ---------------------------------------------------------------------------
    /// Start a root run (API, CLI, embedding app).
    Start {
        input: String,
        channel: Channel,
        /// Who the run acts for (the HTTP layer's bearer check, or absent).
        identity: Identity,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// An operator's decision on a blocked run.
    Decide {
        run: RunId,
        approve: bool,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// The agent's config changed (re-read agent.yaml).
    Config(Box<AgentConfig>),
    /// Fold the WAL into the database (timer).
    Checkpoint,

    // --- the call protocol --------------------------------------------------------------------
    /// A call from a peer, already routed by the supervisor.
    Accept {
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
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

    // --- the engine -----------------------------------------------------------------------------
    /// Resume a run after a restart: ask again for its lost replies, then move it forward.
    Resume(RunId),
    /// The outcome of a call this agent placed.
    CallDone {
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    },
    /// The outcome of a tool use run on a separate task (a tool, `check_run`).
    ToolDone {
        run: RunId,
        tool_use_id: String,
        /// The name its result is recorded under (`invoke_tool` for a use through it).
        result_name: String,
        /// The text the model reads, and whether it is an error.
        content: String,
        is_error: bool,
    },
    /// A blocking call's wait is over.
    WaitElapsed { run: RunId, tool_use_id: String },
    /// A model's answer for a turn asked for on a separate task.
    ModelDone {
        run: RunId,
        asked: Box<TurnAsked>,
        result: Result<ModelReply, ModelError>,
    },
    /// The store writer committed a job of this actor (or failed to).
    Committed(Box<commits::Committed>),
}

impl AgentMsg {
    /// The run of this agent a message moves, if any: such a message waits while the run's
    /// drive is suspended.
    fn run(&self) -> Option<&RunId> {
        match self {
            Self::Decide { run, .. }
            | Self::Resume(run)
            | Self::ResendReply(run)
            | Self::CallDone { run, .. }
            | Self::ToolDone { run, .. }
            | Self::WaitElapsed { run, .. }
            | Self::ModelDone { run, .. } => Some(run),
            Self::Reply(reply) | Self::OfferReply { reply, .. } => Some(&reply.parent_run),
            Self::Start { .. }
            | Self::Config(_)
            | Self::Checkpoint
            | Self::Accept { .. }
            | Self::Committed(_) => None,
        }
    }
}

/// Everything needed to (re)start an agent actor.
#[derive(Clone)]
pub(crate) struct AgentArgs {
    pub config: AgentConfig,
    pub store_path: std::path::PathBuf,
    /// The host's store writer, which owns the store's connection.
    pub writer: StoreWriter,
    /// A model set by an embedding app; `None` builds the one agent.yaml declares.
    pub model: Option<Arc<dyn Model>>,
    /// Tools registered by an embedding app, beside the declared ones.
    pub extra_tools: Vec<Arc<dyn Tool>>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub fleet_agents: Vec<String>,
    pub options: AgentOptions,
}

/// The agent actor's state: its config, store, model and tools, and what is in flight.
pub(crate) struct AgentState {
    config: AgentConfig,
    store: AgentStore,
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
    in_flight: UsesOut,
    /// Blocking calls (`wait_s`) whose tool use stays open until the reply or the timeout.
    awaiting: UsesOut,
    /// Runs whose model turn is being answered on a separate task.
    thinking: HashSet<RunId>,
    /// Replies that arrived before the acceptance of their call was recorded, by child run.
    early_replies: HashMap<RunId, ReplyEnvelope>,
    /// When each waiting run next asks its callees again for the replies it lacks, and the
    /// backoff after that.
    reask: HashMap<RunId, (Instant, Duration)>,
    /// Runs of this agent that have not settled (what admission counts): counted once from
    /// the store at start, then kept as runs are stored and settle.
    unsettled: usize,
    /// Child runs accepted per parent run (what the callee's cap counts): read from the store
    /// the first time a parent calls after start, then kept.
    children: HashMap<RunId, u64>,
    /// Admission jobs out that count a parent's children in the store (the kept count was
    /// not known when they were sent), by parent.
    children_counting: HashMap<RunId, u32>,
    /// Views of the unsettled runs touched since start, each updated with the events this
    /// actor appends: a step reads its run's view, never the whole log again.
    views: HashMap<RunId, RunView>,
    /// The stored records of the runs in `views`, as of their last committed append.
    records: HashMap<RunId, RunRecord>,
    /// The chains of hops of the runs in `views` (what a call they place extends).
    chains: HashMap<RunId, Vec<Hop>>,
    /// The jobs out at the store writer, and what waits for their commits.
    commits: commits::Commits,
    /// Records of runs whose settling append just committed, for their settle notice.
    just_settled: HashMap<RunId, RunRecord>,
}

impl AgentState {
    /// Makes sure run `id`'s view and record are kept: read and folded once from the store
    /// if they are not. Returns false when the store has no such run.
    async fn load(&mut self, id: &RunId) -> Result<bool, ActorsError> {
        if self.views.contains_key(id) && self.records.contains_key(id) {
            return Ok(true);
        }
        let (key, found) = (id.clone(), id.clone());
        let loaded = self
            .store
            .read(move |store| {
                let Some(record) = store.run(&key)? else {
                    return Ok(None);
                };
                Ok(Some((record, store.events(&key)?)))
            })
            .await?;
        let Some((record, events)) = loaded else {
            return Ok(false);
        };
        // A settled run is kept only for the drive that loaded it (see `forget_if_settled`).
        let view = RunView::from_events(events.iter().map(|e| &e.event));
        self.views.insert(found.clone(), view);
        self.records.insert(found, record);
        Ok(true)
    }

    /// Drops what is kept of run `id` once it has settled: nothing steps it again but a late
    /// message, which reads it back.
    fn forget_if_settled(&mut self, id: &RunId) {
        self.just_settled.remove(id);
        if self.records.get(id).is_some_and(|r| r.status.is_settled()) {
            self.records.remove(id);
            self.views.remove(id);
            self.chains.remove(id);
        }
    }

    /// Run `id`'s stored record: the kept one, or read from the store.
    async fn record(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        if let Some(record) = self.records.get(id) {
            return Ok(Some(record.clone()));
        }
        self.store.run(id).await
    }

    /// The tool uses of run `id` with a task out.
    fn busy(&self, id: &RunId) -> BTreeSet<String> {
        self.in_flight
            .of(id)
            .chain(self.awaiting.of(id))
            .cloned()
            .collect()
    }

    /// The input that moves run `id` forward now.
    fn advance_input(&self, id: &RunId) -> Input {
        Input::Advance {
            busy: self.busy(id),
            thinking: self.thinking.contains(id),
        }
    }

    /// Keeps the count of child runs accepted for `parent`, as the store counted it (never
    /// below what this actor has counted since).
    fn count_children(&mut self, parent: &RunId, n: u64) {
        if let Some(kept) = self.children.get_mut(parent) {
            *kept = (*kept).max(n);
            return;
        }
        if self.children.len() >= CHILDREN_KEPT {
            // The store is the truth; forgetting the counts only costs one query per parent.
            self.children.clear();
        }
        self.children.insert(parent.clone(), n);
    }

    /// Casts to this actor's supervisor; a supervisor that is gone is logged, not ignored.
    fn tell_supervisor(&self, message: SupervisorMsg) {
        if let Err(e) = self.supervisor.cast(message) {
            warn!(agent = %self.config.name, "the host supervisor is gone; message dropped: {e}");
        }
    }
}

/// Tool uses with something out, by run: looking up one run's never scans the others'.
#[derive(Default)]
struct UsesOut(HashMap<RunId, BTreeSet<String>>);

impl UsesOut {
    fn insert(&mut self, run: &RunId, tool_use: &str) {
        self.0
            .entry(run.clone())
            .or_default()
            .insert(tool_use.to_owned());
    }

    /// Whether it was out.
    fn remove(&mut self, run: &RunId, tool_use: &str) -> bool {
        let Some(uses) = self.0.get_mut(run) else {
            return false;
        };
        let was = uses.remove(tool_use);
        if uses.is_empty() {
            self.0.remove(run);
        }
        was
    }

    fn contains(&self, run: &RunId, tool_use: &str) -> bool {
        self.0.get(run).is_some_and(|uses| uses.contains(tool_use))
    }

    fn of(&self, run: &RunId) -> impl Iterator<Item = &String> {
        self.0.get(run).into_iter().flatten()
    }
}

/// The facts a step needs from the agent's current config and options.
fn policy<'a>(
    config: &'a AgentConfig,
    fleet_agents: &'a [String],
    options: &AgentOptions,
) -> Policy<'a> {
    let mut policy = Policy {
        agent: &config.name,
        can_call: &config.can_call,
        fleet_agents,
        limits: config.limits,
        max_model_turns: options.max_model_turns,
        reply_cap: options.reply_cap,
    };
    if crate::fault::skip_outbound_checks() {
        // Test-only (the `fault-injection` feature): a sending host with its own checks off,
        // to prove the receiving host still enforces every rule.
        warn!(agent = %config.name, "fault switch: outbound checks skipped (tests only)");
        policy.can_call = fleet_agents;
        policy.limits = consort_config::Limits {
            max_depth: consort_config::Limits::MAX_DEPTH_BOUND,
            max_calls_per_run: consort_config::Limits::MAX_CALLS_BOUND,
        };
    }
    policy
}

/// Casts to an agent actor (from a spawned task, or from the supervisor). The actor may have
/// been restarted or stopped meanwhile; the message is then dropped with a log line: the
/// restarted actor resumes its runs from their logs, the re-ask timer recovers lost replies,
/// and a request's asker sees its reply port close.
pub(crate) fn tell(actor: &ActorRef<AgentMsg>, message: AgentMsg) {
    if let Err(e) = actor.cast(message) {
        warn!("agent actor is gone; message dropped (its runs resume from their logs): {e}");
    }
}

/// The agent actor.
pub(crate) struct AgentActor;

fn model_for(config: &AgentConfig) -> Arc<dyn Model> {
    match &config.model {
        consort_config::ModelConfig::Script { steps } => Arc::new(ScriptModel::new(steps.clone())),
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
        let store = args
            .writer
            .open(&args.store_path, args.options.durability)
            .await?;
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
            in_flight: UsesOut::default(),
            awaiting: UsesOut::default(),
            thinking: HashSet::new(),
            early_replies: HashMap::new(),
            reask: HashMap::new(),
            unsettled: 0,
            children: HashMap::new(),
            children_counting: HashMap::new(),
            views: HashMap::new(),
            records: HashMap::new(),
            chains: HashMap::new(),
            commits: commits::Commits::default(),
            just_settled: HashMap::new(),
        })
    }

    /// Resumes every unsettled run: nothing a restart needs is kept only in memory.
    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        let unsettled = state.store.unsettled().await?;
        state.unsettled = unsettled.len();
        if !unsettled.is_empty() {
            info!(agent = %state.config.name, runs = unsettled.len(), "resuming unsettled runs");
        }
        for run in unsettled {
            myself.cast(AgentMsg::Resume(run.id))?;
        }
        Ok(())
    }

    /// Lets the store writer close this agent's connection once its last jobs are done (a
    /// restarted actor opens it again).
    async fn post_stop(
        &self,
        _myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.store.close();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        if let AgentMsg::Committed(committed) = message {
            self.on_committed(&myself, state, *committed).await?;
            return Ok(());
        }
        if let Some(run) = message.run()
            && state.commits.is_suspended(run)
        {
            let run = run.clone();
            state.commits.hold(run, message);
            return Ok(());
        }
        self.dispatch(&myself, state, message).await?;
        Ok(())
    }
}

impl AgentActor {
    /// Handles one message that is not a commit, for a run that is not suspended.
    async fn dispatch(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        message: AgentMsg,
    ) -> Result<(), ActorsError> {
        match message {
            AgentMsg::Start {
                input,
                channel,
                identity,
                reply,
            } => self.start(myself, state, input, channel, identity, reply)?,
            AgentMsg::Decide {
                run,
                approve,
                reply,
            } => self.decide(myself, state, &run, approve, reply).await?,
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
            AgentMsg::Checkpoint => {
                // On a blocking thread with its own connection: the actor goes on stepping runs
                // while the WAL is folded.
                let (path, agent) = (state.store.path().to_owned(), state.config.name.clone());
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = RunStore::checkpoint_file(&path) {
                        warn!(%agent, error = %e, "checkpoint failed");
                    }
                });
                self.reask_lost_replies(myself, state).await?;
            }
            AgentMsg::Accept { envelope, reply } => self.accept(myself, state, envelope, reply)?,
            AgentMsg::Reply(reply) => {
                self.receive_reply(myself, state, reply, None).await?;
            }
            AgentMsg::OfferReply { reply, taken } => {
                self.receive_reply(myself, state, reply, Some(taken))
                    .await?;
            }
            AgentMsg::ResendReply(child) => {
                if let Some(record) = state.store.run(&child).await?
                    && record.status.is_settled()
                {
                    engine::report_settled(state, &record);
                }
            }
            AgentMsg::Resume(run) => {
                self.drive(myself, state, &run, Input::Resume).await?;
            }
            AgentMsg::CallDone {
                run,
                tool_use_id,
                callee,
                outcome,
            } => {
                self.call_done(myself, state, run, tool_use_id, callee, outcome)
                    .await?;
            }
            AgentMsg::ToolDone {
                run,
                tool_use_id,
                result_name,
                content,
                is_error,
            } => {
                state.in_flight.remove(&run, &tool_use_id);
                let input = Input::ToolFinished {
                    tool_use_id,
                    name: result_name,
                    content,
                    is_error,
                    counts: true,
                };
                self.drive(myself, state, &run, input).await?;
            }
            AgentMsg::WaitElapsed { run, tool_use_id } => {
                if state.awaiting.remove(&run, &tool_use_id) {
                    self.drive(myself, state, &run, Input::WaitElapsed { tool_use_id })
                        .await?;
                }
            }
            AgentMsg::Committed(_) => {
                // `handle` takes every commit before dispatch, and commits are never held.
                warn!(agent = %state.config.name, "a commit notice reached dispatch; ignored");
            }
            AgentMsg::ModelDone { run, asked, result } => {
                state.thinking.remove(&run);
                let input = engine::model_input(*asked, result);
                self.drive(myself, state, &run, input).await?;
            }
        }
        Ok(())
    }
}

/// The most parents whose children count is kept in memory.
const CHILDREN_KEPT: usize = 10_000;

/// How long a run waits on its calls before it asks its callees again for their replies, and
/// the longest the backoff between two asks grows.
const REASK_AFTER: Duration = Duration::from_secs(10);
const REASK_MAX: Duration = Duration::from_secs(300);

impl AgentActor {
    /// A reply can be lost on the way (a callee host that crashed right after its run settled,
    /// a link that dropped it, a resend request that found the callee's host down): a run that
    /// has waited `REASK_AFTER` asks again, with a backoff. Asking is idempotent; a callee
    /// whose run has not settled does nothing. The fleet simulation found the hang this closes.
    async fn reask_lost_replies(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorsError> {
        let now = Instant::now();
        let waiting: Vec<RunId> = state
            .views
            .iter()
            .filter(|(id, v)| {
                !state.commits.is_suspended(id)
                    && v.status == Some(consort_core::RunStatus::Waiting)
                    && v.pending_calls() > 0
            })
            .map(|(id, _)| id.clone())
            .collect();
        state.reask.retain(|id, _| waiting.contains(id));
        for id in waiting {
            let (due, backoff) = *state
                .reask
                .entry(id.clone())
                .or_insert((now + REASK_AFTER, REASK_AFTER));
            if now < due {
                continue;
            }
            let next = (backoff * 2).min(REASK_MAX);
            state.reask.insert(id.clone(), (now + next, next));
            info!(run_id = %id, "still waiting on calls: asking the callees again for their replies");
            self.drive(myself, state, &id, Input::Resume).await?;
        }
        Ok(())
    }
}

/// A refusal as this crate's error (for requests that wait on an answer).
fn refused(refusal: Refusal) -> ActorsError {
    ActorsError::Refused(refusal)
}

/// A tool's failure, as the model reads it.
fn tool_error_text(error: &ToolError, via_meta: bool) -> String {
    if via_meta {
        crate::meta_tools::MetaAnswer::from_tool_error(error).content
    } else {
        error.to_string()
    }
}
