//! The agent actor's state: what it keeps between messages and the small reads and updates
//! of it that every part of the actor shares.
//!
//! Everything here is volatile except through the store: the kept views and records, the
//! counters admission and the callee's cap read, the tool uses and calls out. A restarted
//! actor rebuilds all of it from the store (`post_start` and `AgentState::load`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::ActorRef;
use tracing::{Span, debug, warn};

use consort_config::AgentConfig;
use consort_core::RunView;
use consort_core::step::{Input, TurnAsked};
use consort_net::{Hop, ReplyEnvelope, RunId};

use super::{AgentOptions, commits};
use crate::ActorsError;
use crate::meta_tools::AgentCatalog;
use crate::model::Model;
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;
use crate::store::AgentStore;
use crate::tools::{ServerSlots, Tool, ToolServers};
use crate::visibility::ProbeCache;

/// Unsettled root runs per principal, and which principal each belongs to.
#[derive(Debug, Default)]
pub(crate) struct PrincipalShares {
    by_principal: HashMap<String, usize>,
    owner: HashMap<RunId, String>,
}

impl PrincipalShares {
    /// Root runs of `principal` that have not settled.
    pub(super) fn active(&self, principal: &str) -> usize {
        self.by_principal.get(principal).copied().unwrap_or(0)
    }

    /// Counts an unsettled root run of `principal`.
    pub(super) fn add(&mut self, run: RunId, principal: String) {
        if self.owner.contains_key(&run) {
            return;
        }
        *self.by_principal.entry(principal.clone()).or_default() += 1;
        self.owner.insert(run, principal);
    }

    /// A run settled: it no longer counts (runs that are not root runs were never counted).
    pub(super) fn settled(&mut self, run: &RunId) {
        let Some(principal) = self.owner.remove(run) else {
            return;
        };
        if let Some(n) = self.by_principal.get_mut(&principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_principal.remove(&principal);
            }
        }
    }
}

/// The most parents whose children count is kept in memory.
const CHILDREN_KEPT: usize = 10_000;

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
    /// The agent's tools with their auth, policies, grants and catalog generation.
    pub(super) catalog: AgentCatalog,
    /// T2 probe outcomes per principal, for the catalog's generation.
    pub(super) probe_cache: ProbeCache,
    pub(super) extra_tools: Vec<Arc<dyn Tool>>,
    /// The host's MCP client, which opens the sessions of `servers`.
    pub(super) tool_servers: Option<Arc<dyn ToolServers>>,
    /// The agent's MCP servers (`kind: mcp`): their sessions and what each listed.
    pub(super) servers: ServerSlots,
    /// Runs whose model turn waits for a listing of the agent's MCP servers.
    pub(super) awaiting_listing: Vec<(RunId, TurnAsked)>,
    /// Tool uses that wait for a listing of the agent's MCP servers (counted as in flight).
    pub(super) uses_awaiting_listing: Vec<(RunId, String)>,
    pub(super) supervisor: ActorRef<SupervisorMsg>,
    pub(super) fleet_agents: Arc<[String]>,
    /// What a call may name: the fleet's agents and this agent's own A2A agents
    /// ([`callable_agents`]), rebuilt when its config changes.
    pub(super) callable: Arc<[String]>,
    pub(super) options: AgentOptions,
    /// Tool uses whose outcome is being fetched by a spawned task.
    pub(super) in_flight: UsesOut,
    /// Gated tool uses this incarnation recorded as started (`tool_started`): only these may
    /// run under their approval. A restarted actor has none, so a use started before it is in
    /// doubt.
    pub(super) started: UsesOut,
    /// Blocking calls (`wait_s`) whose tool use stays open until the reply or the timeout.
    pub(super) awaiting: UsesOut,
    /// Runs whose model turn is being answered on a separate task.
    pub(super) thinking: HashSet<RunId>,
    /// Replies that arrived before the acceptance of their call was recorded, by child run.
    pub(super) early_replies: HashMap<RunId, ReplyEnvelope>,
    /// When each waiting run next asks its callees again for the replies it lacks, and the
    /// backoff after that.
    pub(super) reask: HashMap<RunId, (Instant, Duration)>,
    /// Runs of this agent that have not settled (what admission counts): counted once from
    /// the store at start, then kept as runs are stored and settle.
    pub(super) unsettled: usize,
    /// Unsettled root runs by the principal they act for (what the per-principal share of
    /// admission counts): rebuilt from the store at start like `unsettled`.
    pub(super) shares: PrincipalShares,
    /// Child runs accepted per parent run (what the callee's cap counts): read from the store
    /// the first time a parent calls after start, then kept.
    pub(super) children: HashMap<RunId, u64>,
    /// Admission jobs out that count a parent's children in the store (the kept count was
    /// not known when they were sent), by parent.
    pub(super) children_counting: HashMap<RunId, u32>,
    /// Views of the unsettled runs touched since start, each updated with the events this
    /// actor appends: a step reads its run's view, never the whole log again.
    pub(super) views: HashMap<RunId, RunView>,
    /// The stored records of the runs in `views`, as of their last committed append.
    pub(super) records: HashMap<RunId, RunRecord>,
    /// The chains of hops of the runs in `views` (what a call they place extends).
    pub(super) chains: HashMap<RunId, Vec<Hop>>,
    /// The span of each unsettled run touched since start, kept until it settles so that every
    /// drive of the run enters the same span (see `run_span`).
    pub(super) run_spans: HashMap<RunId, Span>,
    /// The jobs out at the store writer, and what waits for their commits.
    pub(super) commits: commits::Commits,
    /// Records of runs whose settling append just committed, for their settle notice.
    pub(super) just_settled: HashMap<RunId, RunRecord>,
    /// What each run with a tree budget that just settled reports as its tree's spend
    /// (`consort_core::budget::tree_spent`, read from its view before the view is dropped), for
    /// its reply.
    pub(super) tree_spent: HashMap<RunId, consort_core::TreeSpend>,
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
    /// Builds the catalog again from the config, the app's tools and what the MCP servers
    /// listed, at the next generation (cached probe outcomes of the last one go stale).
    pub(super) fn rebuild_catalog(&mut self) -> u64 {
        let generation = self.catalog.generation() + 1;
        self.catalog = AgentCatalog::build_with_served(
            &self.config,
            &self.extra_tools,
            &self.servers.tools(),
            generation,
        );
        generation
    }

    pub(super) fn is_idle(&self) -> bool {
        self.unsettled == 0
            && self.commits.is_quiet()
            && self.in_flight.is_empty()
            && self.awaiting.is_empty()
            && self.thinking.is_empty()
            && self.awaiting_listing.is_empty()
            && self.uses_awaiting_listing.is_empty()
            && self.early_replies.is_empty()
            && self.children_counting.is_empty()
            && self.just_settled.is_empty()
    }

    /// Whether the actor is idle and has been for the agent's idle time.
    pub(super) fn idle_long_enough(&self) -> bool {
        self.options
            .idle_after
            .is_some_and(|after| self.is_idle() && self.last_active.elapsed() >= after)
    }

    /// Makes sure run `id`'s view and record are kept: read and folded once from the store
    /// if they are not. Returns false when the store has no such run.
    pub(super) async fn load(&mut self, id: &RunId) -> Result<bool, ActorsError> {
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
        let parent = match (&record.parent_run, self.chains.get(&record.id)) {
            (None, _) => None,
            (Some(_), Some(hops)) => hops.last().and_then(|hop| hop.trace),
            // Kept: a call the run places extends the same chain (`build_envelope`).
            (Some(_), None) => match self.store.chain(&record.id).await {
                Ok(hops) => {
                    let trace = hops.last().and_then(|hop| hop.trace);
                    self.chains.insert(record.id.clone(), hops);
                    trace
                }
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

    /// Drops what is kept of run `id` once it has settled: nothing steps it again but a late
    /// message, which reads it back.
    pub(super) fn forget_if_settled(&mut self, id: &RunId) {
        self.just_settled.remove(id);
        self.tree_spent.remove(id);
        if self.records.get(id).is_some_and(|r| r.status.is_settled()) {
            self.records.remove(id);
            self.views.remove(id);
            self.chains.remove(id);
            self.run_spans.remove(id);
            self.started.forget(id);
        }
    }

    /// Run `id`'s stored record: the kept one, or read from the store.
    pub(super) async fn record(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        if let Some(record) = self.records.get(id) {
            return Ok(Some(record.clone()));
        }
        self.store.run(id).await
    }

    /// The tool uses of run `id` with a task out.
    pub(super) fn busy(&self, id: &RunId) -> BTreeSet<String> {
        self.in_flight
            .of(id)
            .chain(self.awaiting.of(id))
            .cloned()
            .collect()
    }

    /// The input that moves run `id` forward now.
    pub(super) fn advance_input(&self, id: &RunId) -> Input {
        Input::Advance {
            busy: self.busy(id),
            thinking: self.thinking.contains(id),
        }
    }

    /// Keeps the count of child runs accepted for `parent`, as the store counted it (never
    /// below what this actor has counted since).
    pub(super) fn count_children(&mut self, parent: &RunId, n: u64) {
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
    pub(super) fn tell_supervisor(&self, message: SupervisorMsg) {
        if let Err(e) = self.supervisor.cast(message) {
            warn!(agent = %self.config.name, "the host supervisor is gone; message dropped: {e}");
        }
    }
}

/// Tool uses with something out, by run: looking up one run's never scans the others'.
#[derive(Default)]
pub(super) struct UsesOut(HashMap<RunId, BTreeSet<String>>);

impl UsesOut {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn insert(&mut self, run: &RunId, tool_use: &str) {
        self.0
            .entry(run.clone())
            .or_default()
            .insert(tool_use.to_owned());
    }

    /// Whether it was out.
    pub(super) fn remove(&mut self, run: &RunId, tool_use: &str) -> bool {
        let Some(uses) = self.0.get_mut(run) else {
            return false;
        };
        let was = uses.remove(tool_use);
        if uses.is_empty() {
            self.0.remove(run);
        }
        was
    }

    /// Forgets every use of `run`.
    pub(super) fn forget(&mut self, run: &RunId) {
        self.0.remove(run);
    }

    pub(super) fn contains(&self, run: &RunId, tool_use: &str) -> bool {
        self.0.get(run).is_some_and(|uses| uses.contains(tool_use))
    }

    pub(super) fn of(&self, run: &RunId) -> impl Iterator<Item = &String> {
        self.0.get(run).into_iter().flatten()
    }
}
