//! The agent actor's state: what it keeps between messages and the small reads and updates
//! of it that every part of the actor shares.
//!
//! Everything here is volatile except through the store: the kept views and records, the
//! counters admission and the callee's cap read, the tool uses and calls out. A restarted
//! actor rebuilds all of it from the store (`post_start` and `AgentState::load`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;
use tracing::{Instrument, Span, debug, warn};

use consort_config::AgentConfig;
use consort_core::machine::AgentMachine;
use consort_net::{Hop, RunId};

use super::{AgentMsg, tell};
use crate::model::Model;
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;
use crate::store::AgentStore;
use crate::tools::AgentTools;
use crate::{ActorsError, AgentOptions};

/// The names a call of `config`'s agent may name: every agent of the fleet and the agent's own
/// A2A agents (the fleet's list itself, shared, when it declares none).
pub(super) fn callable_agents(fleet: &Arc<[String]>, config: &AgentConfig) -> Arc<[String]> {
    if config.a2a_agents.is_empty() {
        return fleet.clone();
    }
    let mut names: Vec<String> = fleet.to_vec();
    names.extend(config.a2a_agents.iter().map(|a| a.name.clone()));
    names.sort();
    names.dedup();
    Arc::from(names)
}

/// The agent actor's state: its config, store, model and tools, and what is in flight.
pub(crate) struct AgentState {
    pub(super) config: AgentConfig,
    pub(super) store: AgentStore,
    pub(super) model: Arc<dyn Model>,
    /// The model was set by an embedding app in code: a reload of agent.yaml keeps it.
    pub(super) model_from_app: bool,
    /// The agent's tools: their catalog, its probe cache, the MCP servers and their listings.
    pub(super) tools: AgentTools,
    pub(super) supervisor: ActorRef<SupervisorMsg>,
    pub(super) fleet_agents: Arc<[String]>,
    /// What a call may name: the fleet's agents and this agent's own A2A agents
    /// ([`callable_agents`]), rebuilt when its config changes.
    pub(super) callable: Arc<[String]>,
    pub(super) options: AgentOptions,
    /// What the agent decides with beside its runs' logs: admission and its reservations, the
    /// uses out, held replies, re-ask timers (see [`AgentMachine`]).
    pub(super) machine: AgentMachine,
    /// The stored records of the runs the machine keeps views of, as of their last committed
    /// append.
    pub(super) records: HashMap<RunId, RunRecord>,
    /// The chains of hops of the kept runs (what a call they place extends).
    pub(super) chains: HashMap<RunId, Vec<Hop>>,
    /// The span of each unsettled run touched since start, kept until it settles so that every
    /// drive of the run enters the same span (see `run_span`).
    pub(super) run_spans: HashMap<RunId, Span>,
    /// Who waits for a verdict of the machine, by the id it hands back.
    pub(super) askers: crate::asker::Askers,
    /// Records of runs whose settling append just committed, for their settle notice.
    pub(super) just_settled: HashMap<RunId, RunRecord>,
    /// The host's presence board: every committed status of this agent's runs goes there.
    pub(super) board: crate::PresenceBoard,
    /// The host's run feed: every committed change of this agent's runs goes there.
    pub(super) feed: crate::RunFeed,
    /// This agent's metric handles (runs, calls) and its host's (mailbox depth).
    pub(super) metrics: crate::metrics::AgentMetrics,
    /// The goals this agent belongs to.
    pub(super) goals: Vec<String>,
    /// When the actor last handled a message other than the timer's.
    pub(super) last_active: Instant,
    /// The last ticket issued when the store was last checkpointed.
    pub(super) checkpointed: u64,
    /// The store was let go on retirement: stopping must not close it again (a successor may
    /// have opened it by then).
    pub(super) store_let_go: bool,
}

impl AgentState {
    /// Whether the actor holds nothing a retirement would lose: no unsettled run, no job out
    /// at the store writer, no task out, nothing held for later.
    pub(super) fn is_idle(&self) -> bool {
        self.machine.is_quiet()
            && self.askers.is_empty()
            && !self.tools.has_waiting()
            && self.just_settled.is_empty()
    }

    /// Whether the actor is idle and has been for the agent's idle time.
    pub(super) fn idle_long_enough(&self) -> bool {
        self.options
            .idle_after
            .is_some_and(|after| self.is_idle() && self.last_active.elapsed() >= after)
    }

    /// Run `id`'s record as last committed, for an effect about to run: the kept one, or the
    /// one its settling append left.
    pub(super) fn current_record(&self, id: &RunId) -> Option<RunRecord> {
        self.records
            .get(id)
            .or_else(|| self.just_settled.get(id))
            .cloned()
    }

    /// Run `record`'s span: the kept one, or a new one whose parent is the span that placed
    /// the run's call (its chain's last hop, read from the store after a restart). A run that
    /// already settled (a late message) gets a span of its own, never kept and not a second
    /// `run` span: its run span ended when it settled.
    pub(super) async fn run_span(&mut self, record: &RunRecord) -> Span {
        if let Some(span) = self.run_spans.get(&record.id) {
            return span.clone();
        }
        if record.status.is_settled() {
            return crate::run_span::open_settled(record);
        }
        let parent = match &record.parent_run {
            None => None,
            Some(_) => match self.chain(&record.id).await {
                Ok(hops) => hops.last().and_then(|hop| hop.trace),
                Err(error) => {
                    debug!(run_id = %record.id, %error, "no chain to parent the run's span");
                    None
                }
            },
        };
        let span = crate::run_span::open(record, parent);
        self.run_spans.insert(record.id.clone(), span.clone());
        span
    }

    /// Run `id`'s chain of hops (what a call it places extends): the kept one, or read from
    /// the store and kept.
    pub(super) async fn chain(&mut self, id: &RunId) -> Result<&[Hop], ActorsError> {
        if !self.chains.contains_key(id) {
            let hops = self.store.chain(id).await?;
            self.chains.insert(id.clone(), hops);
        }
        Ok(self.chains.get(id).map(Vec::as_slice).unwrap_or_default())
    }

    /// A drive of run `id` is over: once the run has settled (the machine says so), what is
    /// kept of it goes; nothing steps it again but a late message, which reads it back.
    pub(super) fn drive_over(&mut self, id: &RunId, settled: bool) {
        self.just_settled.remove(id);
        if settled {
            self.records.remove(id);
            self.chains.remove(id);
            self.run_spans.remove(id);
        }
    }

    /// Run `id`'s stored record: the kept one, or read from the store.
    pub(super) async fn record(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        if let Some(record) = self.records.get(id) {
            return Ok(Some(record.clone()));
        }
        self.store.run(id).await
    }

    /// Casts to this actor's supervisor; a supervisor that is gone is logged, not ignored.
    pub(super) fn tell_supervisor(&self, message: SupervisorMsg) {
        if let Err(e) = self.supervisor.cast(message) {
            warn!(agent = %self.config.name, "the host supervisor is gone; message dropped: {e}");
        }
    }

    /// Runs `work` on a task of its own and tells this actor the message it ends with: the
    /// mailbox keeps moving while a model, a tool, a server or another host answers.
    pub(super) fn spawn_then_tell<F>(&self, myself: &ActorRef<AgentMsg>, work: F)
    where
        F: Future<Output = AgentMsg> + Send + 'static,
    {
        let depth = self.metrics.host().mailbox().clone();
        let me = myself.clone();
        tokio::spawn(
            async move {
                let message = work.await;
                tell(&depth, &me, message);
            }
            .in_current_span(),
        );
    }
}
