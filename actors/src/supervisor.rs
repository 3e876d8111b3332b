//! The host supervisor: one per host process, parent of one actor per agent.
//!
//! It spawns each agent actor linked to itself, restarts a failed one within its
//! [`RestartBudget`] (ractor has no restart strategies of its own), and routes what crosses
//! agents: calls ([`SupervisorMsg::PlaceCall`]) to the callee's actor or, for an agent on
//! another host, to [`RemoteCalls`]; replies back to the caller's actor; settlement notices to
//! whoever waits. It re-reads agent.yaml files on change (or on demand) and hands each agent
//! its new config. The supervisor never decides whether a call is allowed: the caller's and
//! callee's agent actors do, through the run state machine of consort-core.
//!
//! Agents sleep while they have nothing to do: an agent's actor is spawned when a message
//! first needs it and retired once it has been idle for a while (`supervisor/sleep.rs`), so a
//! host can serve many more agents than it keeps actors and files for.
//!
//! An agent that is down says why ([`DownReason`]). One that failed because its store could not
//! be written (a full disk, a file-size limit) is not restarted into the same failure: the
//! supervisor probes the store ([`RunStore::probe_writable`], on a blocking thread) on the
//! [`ProbeBackoff`] schedule and restarts the agent with a fresh budget once a probe passes;
//! its accepted runs resume from the store as after any restart. A reload on demand restarts
//! every agent that is down, whatever the reason.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::broadcast;
use tracing::{debug, error, info, warn};

use consort_config::{AgentConfig, AgentSet, FileStamp};
use consort_core::Refusal;
use consort_core::step::CallOutcome;
use consort_net::ReplyEnvelope;

use crate::ActorsError;
use crate::agent::{AgentActor, AgentArgs, AgentMsg, AgentOptions, tell};
use crate::data::DataFolder;
use crate::directory::{self, DirectoryHost, DirectorySpec, Outbox};
use crate::feed::RunFeed;
use crate::metrics::HostMetrics;
use crate::model::Model;
use crate::presence::PresenceBoard;
use crate::restart::{ProbeBackoff, RestartBudget};
use crate::run::RunRecord;
use crate::store::{RunStore, StoreWriter};
use crate::tools::Tool;
use consort_core::directory::ActorState;

pub use crate::routing::{
    AgentStatus, BoxFuture, Down, DownReason, Reloaded, RemoteCalls, RemoteFailure, SupervisorMsg,
};

/// Everything a host is built from.
#[derive(Clone)]
pub struct HostSpec {
    /// Agents this host serves.
    pub agents: AgentSet,
    /// Agents of the fleet served by other hosts.
    pub remote_agents: Vec<String>,
    /// The data folder (one run store per agent, unless `store` keeps them elsewhere).
    pub data_dir: PathBuf,
    /// Where the agents' run stores are kept: SQLite files in `data_dir` (the default) or a
    /// PostgreSQL database.
    pub store: crate::store::StoreBackend,
    /// Settings every agent actor is started with.
    pub options: AgentOptions,
    /// How often an agent actor may be restarted before it is left down.
    pub restart: RestartBudget,
    /// How often the store of an agent that is down because its store could not be written
    /// is probed.
    pub store_probe: ProbeBackoff,
    /// Models set by an embedding app, by agent (instead of the declared one).
    pub models: BTreeMap<String, Arc<dyn Model>>,
    /// Tools registered by an embedding app, by agent.
    pub tools: BTreeMap<String, Vec<Arc<dyn Tool>>>,
    /// How agents reach the MCP servers their `kind: mcp` entries declare; `None` leaves
    /// those entries without tools (a use is told the host has no MCP client).
    pub tool_servers: Option<Arc<dyn crate::tools::ToolServers>>,
    /// How calls and replies reach agents on other hosts; `None` for a single host.
    pub remote: Option<Arc<dyn RemoteCalls>>,
    /// How calls reach the remote A2A agents agents declare (`a2a_agents:`); `None` refuses
    /// such calls as unreachable.
    pub a2a: Option<Arc<dyn crate::a2a::A2aCalls>>,
    /// How often agent.yaml files are checked for changes; `None` turns watching off.
    pub watch_config: Option<Duration>,
    /// How often each store's WAL is checkpointed.
    pub checkpoint_every: Duration,
    /// This host's name in its fleet (`local` for a host of its own).
    pub host_name: String,
    /// The fleet's goals and placements, for the peer directory.
    pub directory: DirectorySpec,
    /// The most agent store connections kept open at once (see [`StoreWriter`]).
    pub max_open_stores: usize,
}

impl HostSpec {
    /// A spec for `agents` with their stores under `data_dir` and default settings.
    pub fn new(agents: AgentSet, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            agents,
            remote_agents: Vec::new(),
            data_dir: data_dir.into(),
            store: crate::store::StoreBackend::default(),
            options: AgentOptions::default(),
            restart: RestartBudget::default(),
            store_probe: ProbeBackoff::default(),
            models: BTreeMap::new(),
            tools: BTreeMap::new(),
            tool_servers: None,
            remote: None,
            a2a: None,
            watch_config: Some(Duration::from_millis(500)),
            checkpoint_every: Duration::from_secs(5),
            host_name: "local".to_owned(),
            directory: DirectorySpec::default(),
            max_open_stores: crate::store::DEFAULT_MAX_OPEN,
        }
    }
}

struct AgentSlot {
    config: AgentConfig,
    actor: Option<ActorRef<AgentMsg>>,
    restarts: VecDeque<Instant>,
    total_restarts: usize,
    /// What the agent.yaml's stat said when it was last read: the config watch re-reads
    /// the file when this changes.
    stamp: Option<FileStamp>,
    /// Bumped each time the agent's actor starts and each time its config changes: with the
    /// host's start time it names who holds the agent's seat (its incarnation).
    generation: u32,
    /// Why the agent is down, while it is.
    down: Option<Down>,
    /// Bumped each time the agent goes down or is revived: a probe made for an earlier down
    /// period is stale.
    down_period: u64,
    /// The store probe's attempt in the backoff ([`ProbeBackoff::delay`]).
    probe_attempt: u32,
    /// When a passing probe last revived the agent.
    revived_at: Option<Instant>,
}

/// The supervisor's state: its spec and one slot per agent.
pub struct SupervisorState {
    spec: HostSpec,
    slots: BTreeMap<String, AgentSlot>,
    settled: broadcast::Sender<RunRecord>,
    data: DataFolder,
    last_checkpoint: Instant,
    /// The host's store writer: it owns every agent store's connection.
    writer: StoreWriter,
    /// Each agent's open runs, kept by the agent actors, read for presence.
    board: PresenceBoard,
    /// Where the agent actors announce each committed change of a run.
    feed: RunFeed,
    /// When this host process started its supervisor, Unix milliseconds.
    epoch_ms: u64,
    /// What directory requests are answered from.
    directory: DirectoryHost,
    /// Every agent of the fleet, shared with each agent actor.
    fleet_agents: Arc<[String]>,
    /// The task that carries journaled deliveries (hosts with links only).
    carrier: Option<tokio::task::JoinHandle<()>>,
    /// Set by an operator's drain: no new root runs (see `supervisor/operator.rs`).
    draining: bool,
    /// Which agents may hold unsettled runs (see `supervisor/sleep.rs`).
    markers: AwakeMarkers,
    /// Where the config watch goes on from: a tick re-reads a bounded share of the agents.
    watch_from: Option<String>,
    /// The host's metric handles (each agent actor gets its own from them).
    metrics: HostMetrics,
    /// The calls to remote A2A agents placed since the host started (see `supervisor/a2a.rs`).
    a2a_book: Arc<std::sync::Mutex<a2a::A2aBook>>,
}

/// The host supervisor actor.
pub struct HostSupervisor;

/// The most agent.yaml files the config watch looks at per tick.
const WATCHED_PER_TICK: usize = 2048;

fn stamp_of(config: &AgentConfig) -> Option<FileStamp> {
    FileStamp::read(&config.file).ok()
}

impl SupervisorState {
    /// Tells the presence board who holds `agent`'s seat now, and whether (and why not) its
    /// actor is up.
    fn publish_seat(&self, agent: &str) {
        if let Some(slot) = self.slots.get(agent) {
            // An asleep agent is up: the next message wakes it.
            let actor = match (&slot.actor, &slot.down) {
                (Some(_), _) | (None, None) => ActorState::Up,
                (None, Some(down)) if down.reason == DownReason::StoreNotWritable => {
                    ActorState::StoreNotWritable
                }
                (None, Some(_)) => ActorState::Down,
            };
            self.board.set_seat(
                agent,
                actor,
                format!("{}-{}", self.epoch_ms, slot.generation),
            );
        }
    }
}

impl HostSupervisor {
    fn fleet_agents(spec: &HostSpec) -> Vec<String> {
        let mut names: Vec<String> = spec.agents.names();
        names.extend(spec.remote_agents.iter().cloned());
        names.sort();
        names.dedup();
        names
    }

    /// Spawns `name`'s actor. Its seat (incarnation) changes only when `fresh` (a restart),
    /// not when an asleep agent wakes.
    async fn spawn_agent_as(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        fresh: bool,
    ) -> Result<(), ActorsError> {
        let Some(slot) = state.slots.get(name) else {
            return Err(ActorsError::UnknownAgent(name.to_owned()));
        };
        state.markers.mark(name)?;
        let args = AgentArgs {
            config: slot.config.clone(),
            store_path: state.data.store_path(name),
            writer: state.writer.clone(),
            model: state.spec.models.get(name).cloned(),
            extra_tools: state.spec.tools.get(name).cloned().unwrap_or_default(),
            tool_servers: state.spec.tool_servers.clone(),
            supervisor: myself.clone(),
            fleet_agents: state.fleet_agents.clone(),
            options: state.spec.options.clone(),
            board: state.board.clone(),
            feed: state.feed.clone(),
            metrics: state.metrics.clone(),
            goals: state
                .spec
                .directory
                .goals_of(name)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let (actor, _) = Actor::spawn_linked(None, AgentActor, args, myself.get_cell())
            .await
            .map_err(|e| match e {
                // A store that cannot be written stays typed: the caller probes it.
                ractor::SpawnErr::StartupFailed(failure) => {
                    match failure.downcast::<ActorsError>() {
                        Ok(error) if error.is_store_not_writable() => *error,
                        Ok(error) => {
                            ActorsError::Actor(format!("agent {name} did not start: {error}"))
                        }
                        Err(other) => {
                            ActorsError::Actor(format!("agent {name} did not start: {other}"))
                        }
                    }
                }
                other => ActorsError::Actor(format!("agent {name} did not start: {other}")),
            })?;
        if let Some(slot) = state.slots.get_mut(name) {
            slot.actor = Some(actor);
            if fresh {
                slot.generation = slot.generation.wrapping_add(1);
            }
            slot.down = None;
        }
        state.publish_seat(name);
        Ok(())
    }

    /// Spawns `name`'s actor anew after a failure, a restart or a revival: a new seat.
    async fn spawn_agent(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
    ) -> Result<(), ActorsError> {
        Self::spawn_agent_as(myself, state, name, true).await
    }

    /// Leaves `name` down for `reason`. An agent down on its store is probed from now on.
    fn go_down(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        reason: DownReason,
        detail: String,
    ) {
        let (backoff, settle) = (state.spec.store_probe, state.spec.restart.window);
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        slot.down = Some(Down {
            reason,
            since_ms: crate::run::now_ms(),
            detail,
        });
        slot.down_period += 1;
        if reason == DownReason::StoreNotWritable {
            slot.probe_attempt =
                backoff.start_at(slot.probe_attempt, slot.revived_at, Instant::now(), settle);
            Self::schedule_probe(myself, state, name);
        }
        state.publish_seat(name);
    }

    /// Probes `name`'s store after the backoff's next wait; the answer comes back as
    /// [`SupervisorMsg::StoreProbed`].
    fn schedule_probe(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState, name: &str) {
        let Some(slot) = state.slots.get(name) else {
            return;
        };
        let wait = state.spec.store_probe.delay(slot.probe_attempt);
        let (me, agent, down_period) = (myself.clone(), name.to_owned(), slot.down_period);
        let path = state.data.store_path(name);
        debug!(agent = %name, wait_ms = wait.as_millis() as u64, "store probe scheduled");
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let probed = probe_store(path).await;
            let message = SupervisorMsg::StoreProbed {
                agent,
                down_period,
                probed,
            };
            if me.cast(message).is_err() {
                debug!("the supervisor stopped; a store probe's answer is dropped");
            }
        });
    }

    /// A probe's answer: revive the agent if its store takes writes again, else probe later.
    async fn store_probed(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        down_period: u64,
        probed: Result<(), ActorsError>,
    ) {
        let Some(slot) = state.slots.get_mut(name) else {
            return;
        };
        let waiting = slot.actor.is_none()
            && slot.down_period == down_period
            && slot
                .down
                .as_ref()
                .is_some_and(|d| d.reason == DownReason::StoreNotWritable);
        if !waiting {
            debug!(agent = %name, "a stale store probe's answer is dropped");
            return;
        }
        // A pass counts as an attempt too: if the revived agent is down on its store again
        // soon, the next down period waits longer (see `ProbeBackoff::start_at`).
        slot.probe_attempt = slot.probe_attempt.saturating_add(1);
        match probed {
            Ok(()) => {
                let down_s = slot.down.as_ref().map_or(0, |d| {
                    crate::run::now_ms().saturating_sub(d.since_ms) / 1000
                });
                slot.restarts.clear();
                slot.revived_at = Some(Instant::now());
                slot.down_period += 1;
                slot.total_restarts += 1;
                match Self::spawn_agent(myself, state, name).await {
                    Ok(()) => {
                        info!(agent = %name, down_s, "store writable again: the agent is back with a fresh restart budget; its runs resume");
                    }
                    Err(e) => {
                        error!(agent = %name, "store writable again, but the agent did not start: {e}");
                        Self::down_after_start_failure(myself, state, name, e);
                    }
                }
            }
            Err(e) => {
                let detail = e.to_string();
                if let Some(down) = &mut slot.down {
                    down.detail.clone_from(&detail);
                }
                if e.is_store_not_writable() {
                    debug!(agent = %name, error = %detail, "store still not writable");
                } else {
                    warn!(agent = %name, error = %detail, "store probe failed");
                }
                Self::schedule_probe(myself, state, name);
            }
        }
    }

    /// After a start that failed: down on its store when that is why, else down as not started.
    fn down_after_start_failure(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
        error: ActorsError,
    ) {
        let reason = if error.is_store_not_writable() {
            DownReason::StoreNotWritable
        } else {
            DownReason::StartFailed
        };
        Self::go_down(myself, state, name, reason, error.to_string());
    }

    /// Restarts every agent that is down, each with a fresh restart budget (a reload on
    /// demand: the operator says the cause is dealt with). Returns the agents started.
    async fn revive_all(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Vec<String> {
        let down: Vec<String> = state
            .slots
            .iter()
            .filter(|(_, slot)| slot.actor.is_none() && slot.down.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        let mut revived = Vec::new();
        for name in down {
            if let Some(slot) = state.slots.get_mut(&name) {
                slot.restarts.clear();
                slot.down_period += 1;
                slot.total_restarts += 1;
            }
            match Self::spawn_agent(myself, state, &name).await {
                Ok(()) => {
                    info!(agent = %name, "reload: the agent was down and is back with a fresh restart budget; its runs resume");
                    revived.push(name);
                }
                Err(e) => {
                    error!(agent = %name, "reload: the agent is down and did not start: {e}");
                    Self::down_after_start_failure(myself, state, &name, e);
                }
            }
        }
        revived
    }

    fn actor(state: &SupervisorState, agent: &str) -> Option<ActorRef<AgentMsg>> {
        state.slots.get(agent).and_then(|s| s.actor.clone())
    }

    /// Re-reads agent.yaml files: every one on demand, or, for the watcher, those changed
    /// among the next [`WATCHED_PER_TICK`] (a host of many agents does not stat them all on
    /// every tick; a change is seen within a sweep).
    fn reload(state: &mut SupervisorState, only_changed: bool) -> Result<Vec<String>, ActorsError> {
        let mut changed = Vec::new();
        let mut errors = Vec::new();
        let names: Vec<String> = if only_changed {
            let from = state.watch_from.take();
            let after = |name: &&String| from.as_ref().is_none_or(|f| *name > f);
            let names: Vec<String> = state
                .slots
                .keys()
                .filter(after)
                .take(WATCHED_PER_TICK)
                .cloned()
                .collect();
            if names.len() == WATCHED_PER_TICK {
                state.watch_from = names.last().cloned();
            }
            names
        } else {
            state.slots.keys().cloned().collect()
        };
        for name in names {
            let Some(slot) = state.slots.get_mut(&name) else {
                continue;
            };
            let stamp = stamp_of(&slot.config);
            if only_changed && stamp == slot.stamp {
                continue;
            }
            slot.stamp = stamp;
            match state
                .spec
                .agents
                .reload_one_with_peers(&name, &state.spec.remote_agents)
            {
                Ok(config) => {
                    if config != slot.config {
                        slot.config = config.clone();
                        slot.generation = slot.generation.wrapping_add(1);
                        state
                            .spec
                            .agents
                            .agents
                            .insert(name.clone(), config.clone());
                        if let Some(actor) = &slot.actor {
                            tell(
                                state.metrics.mailbox(),
                                actor,
                                AgentMsg::Config(Box::new(config)),
                            );
                        }
                        state.publish_seat(&name);
                        info!(agent = %name, "agent.yaml re-read: new config in force");
                        changed.push(name);
                    }
                }
                Err(e) => {
                    error!(agent = %name, "agent.yaml re-read failed, keeping the previous config: {e}");
                    errors.push(e.to_string());
                }
            }
        }
        if errors.is_empty() {
            Ok(changed)
        } else {
            Err(ActorsError::InvalidConfig(errors.join("\n")))
        }
    }
}

/// What the supervisor is started with.
pub struct SupervisorArgs {
    /// What the host serves.
    pub spec: HostSpec,
    /// Where every settled run is announced.
    pub settled: broadcast::Sender<RunRecord>,
    /// Where every committed change of a run is announced.
    pub feed: RunFeed,
    /// The host's store writer.
    pub writer: StoreWriter,
    /// The host's metric handles.
    pub metrics: HostMetrics,
}

impl Actor for HostSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    /// Builds the state and starts every agent actor before the host counts as started, so
    /// a handle (and the HTTP API behind it) never sees an agent whose store is not open yet.
    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let slots = args
            .spec
            .agents
            .agents
            .iter()
            .map(|(name, config)| {
                (
                    name.clone(),
                    AgentSlot {
                        // The load's own stat of the file: it is not stat'ed again here.
                        stamp: args
                            .spec
                            .agents
                            .stamps
                            .get(name)
                            .copied()
                            .or_else(|| stamp_of(config)),
                        config: config.clone(),
                        actor: None,
                        restarts: VecDeque::new(),
                        total_restarts: 0,
                        generation: 1,
                        down: None,
                        down_period: 0,
                        probe_attempt: 0,
                        revived_at: None,
                    },
                )
            })
            .collect();
        let board = PresenceBoard::default();
        let fleet_agents: Arc<[String]> = Arc::from(Self::fleet_agents(&args.spec));
        let epoch_ms = crate::run::now_ms();
        let data = DataFolder::with_store(args.spec.data_dir.clone(), &args.spec.store);
        let markers = AwakeMarkers::new(data.root(), args.spec.options.durability);
        peers::write_snapshot(&data, &args.spec);
        let directory = DirectoryHost {
            spec: Arc::new(args.spec.directory.clone()),
            host: args.spec.host_name.clone(),
            remote: args.spec.remote.clone(),
            board: board.clone(),
            data: data.clone(),
            epoch_ms,
            supervisor: Some(myself.clone()),
            outbox: Outbox::new(data.root()),
        };
        // Deliveries journaled while a peer host was down are carried once it is back; the
        // task ends with this supervisor.
        let carrier = args
            .spec
            .remote
            .clone()
            .map(|remote| tokio::spawn(directory::carry(directory.outbox.clone(), remote)));
        let mut state = SupervisorState {
            data,
            spec: args.spec,
            slots,
            settled: args.settled,
            last_checkpoint: Instant::now(),
            writer: args.writer,
            board,
            feed: args.feed,
            epoch_ms,
            directory,
            fleet_agents,
            carrier,
            draining: false,
            markers,
            watch_from: None,
            metrics: args.metrics,
            a2a_book: Arc::default(),
        };
        // Every agent has a seat from the start; only those that may hold unsettled runs
        // are woken now, the others when a message needs them.
        for name in state.slots.keys() {
            state.publish_seat(name);
        }
        let names = state.markers.to_wake(&state.data, state.slots.keys());
        if !names.is_empty() {
            info!(
                agents = names.len(),
                "waking the agents that may hold unsettled runs"
            );
        }
        for name in names {
            match Self::spawn_agent_as(&myself, &mut state, &name, false).await {
                Ok(()) => {}
                // A store with no room is waited out as it is after a failure: the host serves
                // its other agents meanwhile. Anything else keeps the host from starting.
                Err(e) if e.is_store_not_writable() => {
                    warn!(agent = %name, error = %e, "agent not started: its store is not writable; it is down until a probe finds the store writable again");
                    Self::go_down(
                        &myself,
                        &mut state,
                        &name,
                        DownReason::StoreNotWritable,
                        e.to_string(),
                    );
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(carrier) = state.carrier.take() {
            carrier.abort();
        }
        Ok(())
    }

    async fn post_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let period = state
            .spec
            .watch_config
            .unwrap_or(state.spec.checkpoint_every)
            .min(state.spec.checkpoint_every);
        let me = myself;
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if me.cast(SupervisorMsg::Tick).is_err() {
                    break;
                }
            }
        });
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Start {
                agent,
                input,
                channel,
                identity,
                trace,
                budget,
                reply,
            } => match Self::wake(&myself, state, &agent).await {
                _ if state.draining => {
                    answer(reply, Err(Self::draining_refusal(state)));
                }
                Some(actor) => {
                    tell(
                        state.metrics.mailbox(),
                        &actor,
                        AgentMsg::Start {
                            input,
                            channel,
                            identity,
                            trace,
                            budget,
                            reply,
                        },
                    );
                }
                None if state.slots.contains_key(&agent) => {
                    answer(
                        reply,
                        Err(ActorsError::Refused(Refusal::AgentDown { callee: agent })),
                    );
                }
                None => {
                    answer(reply, Err(ActorsError::UnknownAgent(agent)));
                }
            },
            SupervisorMsg::PlaceCall { envelope, reply } => {
                let callee = envelope
                    .last_hop()
                    .map(|h| h.callee.clone())
                    .unwrap_or_default();
                if let Some(actor) = Self::wake(&myself, state, &callee).await {
                    tell(
                        state.metrics.mailbox(),
                        &actor,
                        AgentMsg::Accept { envelope, reply },
                    );
                } else if state.slots.contains_key(&callee) {
                    answer(reply, CallOutcome::Refused(Refusal::AgentDown { callee }));
                } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&callee))
                {
                    tokio::spawn(async move {
                        let outcome = remote.place_call(envelope).await;
                        answer(reply, outcome);
                    });
                } else if let Some((agent, token)) = Self::a2a_callee(state, &envelope) {
                    Self::place_a2a_call(&myself, state, envelope, agent, token, reply);
                } else {
                    let allowed = Self::fleet_agents(&state.spec).join(", ");
                    answer(
                        reply,
                        CallOutcome::Refused(Refusal::UnknownAgent { callee, allowed }),
                    );
                }
            }
            SupervisorMsg::Settled { record, reply } => {
                // Nobody may be waiting for settlements right now: that is no failure.
                if state.settled.send((*record).clone()).is_err() {
                    debug!(run_id = %record.id, "a run settled with nobody waiting on it");
                }
                if let Some(reply) = reply {
                    Self::route_reply(&myself, state, reply).await;
                }
            }
            SupervisorMsg::OfferReply { reply, taken } => {
                match Self::wake(&myself, state, &reply.caller).await {
                    Some(actor) => {
                        tell(
                            state.metrics.mailbox(),
                            &actor,
                            AgentMsg::OfferReply { reply, taken },
                        );
                    }
                    None => {
                        answer(taken, false);
                    }
                }
            }
            SupervisorMsg::ResendReply { callee, child_run } => {
                if let Some(actor) = Self::wake(&myself, state, &callee).await {
                    tell(
                        state.metrics.mailbox(),
                        &actor,
                        AgentMsg::ResendReply(child_run),
                    );
                } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&callee))
                {
                    tokio::spawn(async move { remote.resend_reply(callee, child_run).await });
                }
            }
            SupervisorMsg::ResendA2aReply(call) => {
                Self::ask_a2a_reply(&myself, state, &call);
            }
            SupervisorMsg::RunSummary {
                caller,
                parent_run,
                agent,
                run,
                reply,
            } => {
                if state.slots.contains_key(&agent) {
                    let (writer, path) = (state.writer.clone(), state.data.store_path(&agent));
                    tokio::spawn(async move {
                        let key = run.clone();
                        let found = writer
                            .read(&path, move |store| store.run(&key))
                            .await
                            .and_then(|r| {
                                r.ok_or_else(|| ActorsError::UnknownRun(run.to_string()))
                            });
                        answer(reply, found);
                    });
                } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&agent))
                {
                    tokio::spawn(async move {
                        let summary = remote.run_summary(caller, parent_run, agent, run).await;
                        answer(reply, summary);
                    });
                } else if let Some(said) = Self::a2a_run_summary(state, &caller, &agent, &run) {
                    answer(reply, Err(ActorsError::Remote(said)));
                } else {
                    answer(reply, Err(ActorsError::UnknownAgent(agent)));
                }
            }
            SupervisorMsg::Decide {
                agent,
                run,
                gate,
                decision,
                by,
                reply,
            } => match Self::wake(&myself, state, &agent).await {
                Some(actor) => {
                    tell(
                        state.metrics.mailbox(),
                        &actor,
                        AgentMsg::Decide {
                            run,
                            gate,
                            decision,
                            by,
                            reply,
                        },
                    );
                }
                None => {
                    answer(reply, Err(ActorsError::UnknownAgent(agent)));
                }
            },
            SupervisorMsg::Cancel {
                agent,
                run,
                by,
                reason,
                reply,
            } => match Self::wake(&myself, state, &agent).await {
                Some(actor) => {
                    tell(
                        state.metrics.mailbox(),
                        &actor,
                        AgentMsg::Cancel {
                            run,
                            by,
                            reason,
                            reply,
                        },
                    );
                }
                None => answer(reply, Err(ActorsError::UnknownAgent(agent))),
            },
            SupervisorMsg::Reload {
                only_changed,
                reply,
            } => {
                let result = Self::reload(state, only_changed);
                // Only a reload on demand revives: the file watcher's must not undo a budget.
                let revived = if only_changed {
                    Vec::new()
                } else {
                    Self::revive_all(&myself, state).await
                };
                if let Some(reply) = reply {
                    answer(reply, result.map(|changed| Reloaded { changed, revived }));
                }
            }
            SupervisorMsg::Agents(reply) => {
                let list = state
                    .slots
                    .iter()
                    .map(|(name, slot)| AgentStatus {
                        name: name.clone(),
                        up: slot.down.is_none(),
                        awake: slot.actor.is_some(),
                        restarts: slot.total_restarts,
                        down: slot.down.clone(),
                    })
                    .collect();
                answer(reply, list);
            }
            SupervisorMsg::DeliverHere {
                from,
                agent,
                run,
                delivery_id,
                text,
                reply,
            } => {
                Self::deliver_here(&myself, state, from, agent, run, delivery_id, text, reply)
                    .await;
            }
            SupervisorMsg::Idle { agent, actor } => Self::retire_idle(state, &agent, actor).await,
            message @ (SupervisorMsg::Directory { .. }
            | SupervisorMsg::Observe { .. }
            | SupervisorMsg::WaitRun { .. }
            | SupervisorMsg::Deliver { .. }
            | SupervisorMsg::DeliveryStatus { .. }
            | SupervisorMsg::Attention { .. }
            | SupervisorMsg::Presence { .. }) => Self::directory_message(state, message),
            SupervisorMsg::StoreProbed {
                agent,
                down_period,
                probed,
            } => Self::store_probed(&myself, state, &agent, down_period, probed).await,
            SupervisorMsg::Drain { draining, reply } => {
                Self::set_draining(state, draining, reply);
            }
            SupervisorMsg::RestartAgent { agent, reply } => {
                let restarted = Self::restart_agent(&myself, state, &agent).await;
                answer(reply, restarted);
            }
            SupervisorMsg::Tick => {
                // Each agent's re-read error is logged where it happens; the old config stays.
                if state.spec.watch_config.is_some() && Self::reload(state, true).is_err() {
                    debug!("a watched agent.yaml did not re-read; its previous config stays");
                }
                if state.last_checkpoint.elapsed() >= state.spec.checkpoint_every {
                    state.last_checkpoint = Instant::now();
                    for slot in state.slots.values() {
                        if let Some(actor) = &slot.actor {
                            tell(state.metrics.mailbox(), actor, AgentMsg::Checkpoint);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason, not_writable) = match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                let not_writable = err
                    .downcast_ref::<ActorsError>()
                    .is_some_and(ActorsError::is_store_not_writable);
                (cell, err.to_string(), not_writable)
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()), false)
            }
            _ => return Ok(()),
        };
        let Some(name) = state
            .slots
            .iter()
            .find(|(_, s)| {
                s.actor
                    .as_ref()
                    .is_some_and(|a| a.get_id() == cell.get_id())
            })
            .map(|(n, _)| n.clone())
        else {
            return Ok(());
        };
        let budget = state.spec.restart;
        let Some(slot) = state.slots.get_mut(&name) else {
            return Ok(());
        };
        slot.actor = None;
        state.publish_seat(&name);
        if not_writable {
            // Restarted now, it would fail on its first write: ask the store first. A store
            // that takes writes again (a passing hiccup) leaves the decision to the budget.
            if let Err(probe) = probe_store(state.data.store_path(&name)).await {
                warn!(agent = %name, %reason, probe = %probe, "agent actor failed: its store is not writable; it is down until a probe finds the store writable again");
                Self::go_down(&myself, state, &name, DownReason::StoreNotWritable, reason);
                return Ok(());
            }
        }
        let Some(slot) = state.slots.get_mut(&name) else {
            return Ok(());
        };
        if budget.admit(&mut slot.restarts, Instant::now()) {
            slot.total_restarts += 1;
            warn!(agent = %name, %reason, "agent actor failed; restarting it (its runs resume from the store)");
            if let Err(e) = Self::spawn_agent(&myself, state, &name).await {
                error!(agent = %name, "restart failed: {e}");
                Self::down_after_start_failure(&myself, state, &name, e);
            }
        } else if not_writable {
            error!(agent = %name, %reason, "agent actor failed past its restart budget on a store that is not writable; it is down until a probe finds the store writable again");
            Self::go_down(&myself, state, &name, DownReason::StoreNotWritable, reason);
        } else {
            error!(agent = %name, %reason, "agent actor failed past its restart budget; it is down until a reload or a host restart");
            Self::go_down(
                &myself,
                state,
                &name,
                DownReason::RestartBudgetSpent,
                reason,
            );
        }
        Ok(())
    }
}

impl HostSupervisor {
    async fn route_reply(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        reply: ReplyEnvelope,
    ) {
        if let Some(actor) = Self::wake(myself, state, &reply.caller).await {
            tell(state.metrics.mailbox(), &actor, AgentMsg::Reply(reply));
        } else if let Some(remote) = state
            .spec
            .remote
            .clone()
            .filter(|r| r.serves(&reply.caller))
        {
            tokio::spawn(async move { remote.send_reply(reply).await });
        } else {
            warn!(caller = %reply.caller, child = %reply.child_run, "reply for an agent that is not reachable; it will be re-sent when the caller resumes");
        }
    }
}

/// Spawns a host's supervisor as a child of `parent` (an embedding app's own supervisor), or
/// as a root actor when `parent` is `None`.
pub async fn spawn_supervisor(
    spec: HostSpec,
    settled: broadcast::Sender<RunRecord>,
    feed: RunFeed,
    writer: StoreWriter,
    metrics: HostMetrics,
    parent: Option<ActorCell>,
) -> Result<(ActorRef<SupervisorMsg>, tokio::task::JoinHandle<()>), ActorsError> {
    let args = SupervisorArgs {
        spec,
        settled,
        feed,
        writer,
        metrics,
    };
    let spawned = match parent {
        Some(parent) => Actor::spawn_linked(None, HostSupervisor, args, parent).await,
        None => Actor::spawn(None, HostSupervisor, args).await,
    };
    spawned.map_err(|e| ActorsError::Actor(format!("host supervisor did not start: {e}")))
}

/// Whether the store at `path` takes writes again, asked on a blocking thread.
async fn probe_store(path: PathBuf) -> Result<(), ActorsError> {
    tokio::task::spawn_blocking(move || RunStore::probe_writable(&path))
        .await
        .map_err(|e| ActorsError::Actor(format!("a store probe did not finish: {e}")))?
}

/// Answers a request; an asker that stopped waiting is no failure of this host.
fn answer<T>(port: RpcReplyPort<T>, value: T) {
    if port.send(value).is_err() {
        debug!("the asker stopped waiting; answer dropped");
    }
}

mod a2a;
mod operator;
mod peers;
mod sleep;

use sleep::AwakeMarkers;
