//! The agent actor: one per agent, owning that agent's run store, model and tools.
//!
//! The actor is the driver of the agent's [`AgentMachine`] (consort-core), which decides
//! everything: every message that concerns a run becomes an input to the machine, and the
//! actor executes the machine's commands (read a run's log, append to it, run an effect,
//! answer whoever asked). The files: [`drive`] (the loop over the machine's commands and
//! the execution of its effects),
//! [`commits`] (store jobs, their commits, and the askers waiting for verdicts),
//! [`admission`] (new runs and accepted calls), [`model_turn`]
//! (asking the model), [`calls`] (placing calls, replies both ways), [`tool_use`] (acting on
//! what a tool use resolves to), [`delivery`] (deliveries into the agent),
//! [`messages`] (what the actor is told) and [`state`] (what the actor keeps between
//! messages); its settings are the host's [`AgentOptions`](crate::AgentOptions). Each run's span is made by
//! [`run_span`](crate::run_span).
//!
//! The actor never awaits another actor inside its handler, nor a commit: a call or a
//! `check_run` goes to the supervisor from a spawned task, and a commit comes back as
//! [`AgentMsg::Committed`]. That keeps two agents calling each other at the same moment from
//! deadlocking, and keeps the mailbox moving while a remote host answers or the disk syncs. A
//! task's message goes to the actor that spawned it; when that actor is gone (restarted,
//! stopped) the outcome is dropped with a log line, and the restarted actor recovers the run
//! from its log.

mod admission;
mod calls;
mod commits;
mod delivery;
mod drive;
mod messages;
mod model_turn;
mod state;
mod tool_use;

pub(crate) use messages::AgentMsg;
pub(crate) use state::AgentState;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use metrics::Gauge;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{debug, info, warn};

use consort_config::AgentConfig;
use consort_core::Refusal;
use consort_core::machine::AgentMachine;
use consort_core::step::Input;

use crate::declared_model::declared_model;
use crate::model::Model;
use crate::routing::SupervisorMsg;
use crate::store::StoreWriter;
use crate::tools::{AgentTools, Tool, ToolServers};
use crate::{ActorsError, AgentOptions};

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
    /// The host's MCP client, if it has one.
    pub tool_servers: Option<Arc<dyn ToolServers>>,
    pub supervisor: ActorRef<SupervisorMsg>,
    /// Every agent of the fleet, shared by all agent actors of the host (one list, not one
    /// per agent: a host of many agents would hold the square of their names).
    pub fleet_agents: Arc<[String]>,
    pub options: AgentOptions,
    /// The host's presence board, kept up to date as this agent's commits land.
    pub board: crate::PresenceBoard,
    /// The host's run feed, told of every commit of this agent's runs.
    pub feed: crate::RunFeed,
    /// The host's metric handles; the actor registers its own from them.
    pub metrics: crate::metrics::HostMetrics,
    /// The goals this agent belongs to (it is offered `list_peers` when there are any).
    pub goals: Vec<String>,
}

/// Casts to an agent actor (from a spawned task, or from the supervisor). The actor may have
/// been restarted or stopped meanwhile; the message is then dropped with a log line: the
/// restarted actor resumes its runs from their logs, the re-ask timer recovers lost replies,
/// and a request's asker sees its reply port close.
///
/// Every message to an agent actor is sent through here (or counted as here): `depth` is the
/// host's `consort_mailbox_depth` gauge, up by one for each message queued and down by one
/// as the actor takes it (at the top of `handle`).
pub(crate) fn tell(depth: &Gauge, actor: &ActorRef<AgentMsg>, message: AgentMsg) {
    depth.increment(1.0);
    if let Err(e) = actor.cast(message) {
        depth.decrement(1.0);
        warn!("agent actor is gone; message dropped (its runs resume from their logs): {e}");
    }
}

/// The agent actor.
pub(crate) struct AgentActor;

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
        let model = args.model.unwrap_or_else(|| declared_model(&args.config));
        // Nothing is started here: a server is asked for its tools before the first model
        // turn that needs them (see `tools::served`).
        let tools = AgentTools::new(&args.config, args.extra_tools, args.tool_servers);
        let metrics = args.metrics.agent(&args.config.name);
        let callable = state::callable_agents(&args.fleet_agents, &args.config);
        let machine = AgentMachine::new(
            &args.config.name,
            args.options.reply_cap,
            args.options.admission_limits(),
        );
        Ok(AgentState {
            tools,
            config: args.config,
            store,
            model,
            model_from_app,
            supervisor: args.supervisor,
            callable,
            fleet_agents: args.fleet_agents,
            options: args.options,
            machine,
            records: HashMap::new(),
            chains: HashMap::new(),
            run_spans: HashMap::new(),
            askers: crate::asker::Askers::default(),
            just_settled: HashMap::new(),
            board: args.board,
            feed: args.feed,
            metrics,
            goals: args.goals,
            last_active: Instant::now(),
            checkpointed: 0,
            store_let_go: false,
        })
    }

    /// Resumes every unsettled run: nothing a restart needs is kept only in memory.
    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        let unsettled = state.store.unsettled().await?;
        for run in &unsettled {
            let root_principal = run.parent_run.is_none().then(|| run.principal.clone());
            state
                .machine
                .restore_unsettled(run.id.clone(), root_principal);
        }
        state.board.reset(
            &state.config.name,
            unsettled
                .iter()
                .map(|r| (r.id.clone(), r.status, r.created_at_ms)),
        );
        if !unsettled.is_empty() {
            info!(agent = %state.config.name, runs = unsettled.len(), "resuming unsettled runs");
        }
        let depth = state.metrics.host().mailbox();
        for run in unsettled {
            depth.increment(1.0);
            if let Err(e) = myself.cast(AgentMsg::Resume(run.id)) {
                depth.decrement(1.0);
                return Err(e.into());
            }
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
        if !state.store_let_go {
            state.store.close();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        // Out of the mailbox: every message was counted in when it was sent (see `tell`).
        state.metrics.host().mailbox().decrement(1.0);
        // The timer and the supervisor's retirement are not activity.
        if !matches!(message, AgentMsg::Checkpoint | AgentMsg::Retire(_)) {
            state.last_active = Instant::now();
        }
        // A message for a run whose drive waits on a commit is not held here: its input waits
        // in the machine, behind the drive.
        self.dispatch(&myself, state, message).await?;
        Ok(())
    }
}

impl AgentActor {
    /// The supervisor's retirement: a still idle actor lets its store go (before answering,
    /// so a successor's open reaches the store writer after this close) and stops.
    fn retire(myself: &ActorRef<AgentMsg>, state: &mut AgentState, reply: RpcReplyPort<bool>) {
        let retiring = state.idle_long_enough();
        if retiring {
            state.store.close();
            state.store_let_go = true;
        }
        if reply.send(retiring).is_err() {
            debug!(agent = %state.config.name, "the supervisor stopped waiting for a retirement");
        }
        if retiring {
            info!(agent = %state.config.name, "idle: the agent's actor is retired until a message needs it");
            myself.stop(Some("idle".into()));
        }
    }

    /// Handles one message.
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
                trace,
                budget,
                reply,
            } => {
                let asked = (identity, trace, budget);
                let starter = crate::asker::Asker::Run(reply);
                self.start(myself, state, input, channel, asked, starter)
                    .await?;
            }
            AgentMsg::Request { run, input, asker } => {
                // A run this agent does not have is answered by the machine (its load finds
                // nothing), as is every refusal.
                self.drive_asked(myself, state, &run, *input, asker).await?;
            }
            AgentMsg::Deliver {
                from,
                run,
                delivery_id,
                text,
                reply,
            } => {
                self.deliver(myself, state, (from, run), (delivery_id, text), reply)
                    .await?;
            }
            AgentMsg::Config(config) => {
                if !state.model_from_app && config.model != state.config.model {
                    // The declared model is part of the config: new turns play the new one.
                    info!(agent = %config.name, "declared model changed; new turns use it");
                    state.model = declared_model(&config);
                }
                state.callable = state::callable_agents(&state.fleet_agents, &config);
                let generation = state.tools.reconfigure(&state.config, &config);
                state.config = *config;
                info!(agent = %state.config.name, generation, "config reloaded; tool catalog generation changed");
            }
            AgentMsg::ToolsListed(listings) => self.tools_listed(myself, state, listings).await?,
            AgentMsg::Checkpoint => {
                // On a blocking thread with its own connection: the actor goes on stepping runs
                // while the WAL is folded. A store not written since needs none.
                if state.machine.tickets_issued() > state.checkpointed {
                    state.checkpointed = state.machine.tickets_issued();
                    let (store, agent) = (state.store.clone(), state.config.name.clone());
                    tokio::task::spawn_blocking(move || {
                        if let Err(e) = store.checkpoint() {
                            warn!(%agent, error = %e, "checkpoint failed");
                        }
                    });
                }
                self.reask_lost_replies(myself, state).await?;
                if state.idle_long_enough() {
                    let idle = SupervisorMsg::Idle {
                        agent: state.config.name.clone(),
                        actor: myself.get_id(),
                    };
                    if state.supervisor.cast(idle).is_err() {
                        debug!(agent = %state.config.name, "the supervisor stopped; an idle report is dropped");
                    }
                }
            }
            AgentMsg::Retire(reply) => Self::retire(myself, state, reply),
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
                    calls::report_settled(state, &record);
                }
            }
            AgentMsg::Resume(run) => {
                self.drive(myself, state, &run, Input::Resume).await?;
            }
            AgentMsg::TaskDone { run, input } => self.drive(myself, state, &run, *input).await?,
            AgentMsg::WaitElapsed { run, tool_use_id } => {
                if state.machine.wait_over(&run, &tool_use_id) {
                    self.drive(myself, state, &run, Input::WaitElapsed { tool_use_id })
                        .await?;
                }
            }
            AgentMsg::Committed(committed) => {
                self.on_committed(myself, state, *committed).await?;
            }
            AgentMsg::ModelDone { run, asked, result } => {
                state.machine.answered(&run);
                let input = model_turn::model_input(*asked, result);
                self.drive(myself, state, &run, input).await?;
            }
        }
        Ok(())
    }
}

impl AgentActor {
    /// Asks the callees of the runs whose re-ask is due
    /// ([`AgentMachine::reask_due_now`]) again for the replies they lack: a reply can be lost
    /// on the way, and asking is idempotent.
    async fn reask_lost_replies(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorsError> {
        for id in state.machine.reask_due_now(Instant::now()) {
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
