//! The host supervisor: one per host process, parent of one actor per agent.
//!
//! It spawns each agent actor linked to itself, restarts a failed one within its
//! [`RestartBudget`](crate::restart::RestartBudget) (ractor has no restart strategies of its
//! own), and routes what crosses agents: calls (`SupervisorMsg::PlaceCall`) to the callee's
//! actor or, for an agent on another host, to [`RemoteCalls`]; replies back to the caller's
//! actor; settlement notices to whoever waits. It re-reads agent.yaml files on change (or on
//! demand) and hands each agent its new config. The supervisor never decides whether a call is
//! allowed: the caller's and callee's agent actors do, through the run state machine of
//! consort-core.
//!
//! Agents sleep while they have nothing to do: an agent's actor is spawned when a message
//! first needs it and retired once it has been idle for a while (`supervisor/sleep.rs`), so a
//! host can serve many more agents than it keeps actors and files for.
//!
//! An agent that is down says why ([`DownReason`]). One that failed because its store could not
//! be written (a full disk, a file-size limit) is not restarted into the same failure: the
//! supervisor probes the store
//! (`RunStore::probe_writable`, on a blocking thread)
//! on the [`ProbeBackoff`](crate::restart::ProbeBackoff) schedule and restarts the agent with a
//! fresh budget once a probe passes; its accepted runs resume from the store as after any
//! restart. A reload on demand restarts every agent that is down, whatever the reason.
//!
//! The actor's state and its handler dispatch are this file; each arm hands its work to the
//! child module that owns it: routing calls and replies (`supervisor/calls.rs`), an agent
//! actor's life from spawn to restart, going down and the store probe
//! (`supervisor/lifecycle.rs`), re-reading agent.yaml (`supervisor/reload.rs`), sleeping and
//! waking (`supervisor/sleep.rs`), the peer directory (`supervisor/peers.rs`), calls to remote
//! A2A agents (`supervisor/a2a.rs`) and an operator's commands (`supervisor/operator.rs`). The
//! messages themselves are `SupervisorMsg` (the crate's own), defined with what crosses agents in
//! `routing.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use consort_config::{AgentConfig, FileStamp};
use consort_core::Refusal;

use crate::ActorsError;
use crate::agent::{AgentMsg, tell};
use crate::data::DataFolder;
use crate::directory::{self, DirectoryHost, Outbox};
use crate::feed::RunFeed;
use crate::metrics::HostMetrics;
use crate::presence::PresenceBoard;
use crate::run::RunRecord;
use crate::store::StoreWriter;

pub(crate) use crate::routing::SupervisorMsg;
pub use crate::routing::{
    AgentStatus, BoxFuture, Down, DownReason, Reloaded, RemoteCalls, RemoteFailure,
};

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
    /// The store probe's attempt in the backoff ([`ProbeBackoff::delay`](crate::restart::ProbeBackoff::delay)).
    probe_attempt: u32,
    /// When a passing probe last revived the agent.
    revived_at: Option<Instant>,
    /// The watcher put a new config in force that no explicit reload has reported yet: the
    /// next `consort reload` lists the agent as changed, whoever applied the change.
    unreported_change: bool,
}

/// The supervisor's state: its spec and one slot per agent.
pub(crate) struct SupervisorState {
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
pub(crate) struct HostSupervisor;

impl HostSupervisor {
    fn fleet_agents(spec: &HostSpec) -> Vec<String> {
        let mut names: Vec<String> = spec.agents.names();
        names.extend(spec.remote_agents.iter().cloned());
        names.sort();
        names.dedup();
        names
    }

    fn actor(state: &SupervisorState, agent: &str) -> Option<ActorRef<AgentMsg>> {
        state.slots.get(agent).and_then(|s| s.actor.clone())
    }
}

/// What the supervisor is started with.
pub(crate) struct SupervisorArgs {
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
                        unreported_change: false,
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
        // A stopped host lets its PostgreSQL store leases go: a successor takes them at once.
        state.writer.release_leases();
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
                        Err(ActorsError::Refused(Refusal::agent_down(&agent))),
                    );
                }
                None => {
                    answer(reply, Err(ActorsError::UnknownAgent(agent)));
                }
            },
            SupervisorMsg::PlaceCall { envelope, reply } => {
                Self::place_call(&myself, state, envelope, reply).await;
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
                Self::offer_reply(&myself, state, reply, taken).await;
            }
            SupervisorMsg::ResendReply { callee, child_run } => {
                Self::resend_reply(&myself, state, callee, child_run).await;
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
            } => Self::run_summary(state, caller, parent_run, agent, run, reply),
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
                        AgentMsg::decide(run, (gate, decision, by), reply),
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
                        AgentMsg::cancel(run, (by, reason), reply),
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
        Self::agent_stopped(&myself, state, &name, reason, not_writable).await;
        Ok(())
    }
}

/// Spawns a host's supervisor as a child of `parent` (an embedding app's own supervisor), or
/// as a root actor when `parent` is `None`.
pub(crate) async fn spawn_supervisor(
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

/// Answers a request; an asker that stopped waiting is no failure of this host.
fn answer<T>(port: RpcReplyPort<T>, value: T) {
    if port.send(value).is_err() {
        debug!("the asker stopped waiting; answer dropped");
    }
}

mod a2a;
mod calls;
mod lifecycle;
mod operator;
mod peers;
mod reload;
mod sleep;
mod spec;

use reload::stamp_of;
use sleep::AwakeMarkers;
pub use spec::{HostSpec, HostSpecBuilder};
