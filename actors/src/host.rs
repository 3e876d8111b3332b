//! [`Host`]: the typed handle an app (or the CLI, or the HTTP API) uses to drive one host.
//!
//! A host is the host supervisor actor with its agents under it. The handle
//! starts runs, waits for them to settle, reads runs and their event logs (and counts them),
//! passes operator decisions, reloads config, drains admission and restarts an agent. Reads go
//! straight to the agents' stores (read-only, through [`DataFolder`]) and are async: each runs
//! on a blocking thread, never on the caller's async worker. Writes go through the supervisor's
//! mailbox. Build one with [`Host::spawn`], or [`Host::spawn_linked`]
//! to put the host under an app's own ractor supervisor.

use std::time::Duration;

use ractor::{ActorCell, ActorRef};
use tokio::sync::broadcast;

use consort_core::step::Decision;
use consort_net::RunId;
use serde::{Deserialize, Serialize};

use crate::ActorsError;
use crate::data::DataFolder;
use crate::feed::RunFeed;
use crate::inbox::HostInbox;
use crate::metrics::HostMetrics;
use crate::run::{Channel, EventRecord, RunRecord};
use crate::store::{StoreWriter, WriterCounts};
use crate::supervisor::{AgentStatus, HostSpec, Reloaded, SupervisorMsg, spawn_supervisor};
use crate::visibility::Identity;

/// The answer to a decision on a gate: the run as committed after it, and the gate decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Decided {
    /// The run after the decision.
    #[serde(flatten)]
    pub run: RunRecord,
    /// The gate decided (see [`consort_core::step::gate_id`]).
    pub gate: String,
    /// The gate had this decision already (a repeat): nothing was written.
    pub already_decided: bool,
}

/// How long a mailbox request may take before the handle reports the host unresponsive.
const ASK_TIMEOUT_MS: u64 = 30_000;

/// A running host.
#[derive(Clone)]
pub struct Host {
    supervisor: ActorRef<SupervisorMsg>,
    data: DataFolder,
    settled: broadcast::Sender<RunRecord>,
    feed: RunFeed,
    /// Shared, not copied: the HTTP API clones the handle once per route it registers.
    agents: std::sync::Arc<[String]>,
    /// Each agent's `description` from its agent.yaml as the host started, in `agents` order.
    descriptions: std::sync::Arc<[String]>,
    writer: StoreWriter,
}

impl Host {
    /// Starts a host as a root actor.
    pub async fn spawn(spec: HostSpec) -> Result<(Self, tokio::task::JoinHandle<()>), ActorsError> {
        Self::spawn_inner(spec, None).await
    }

    /// Starts a host linked under `parent`: the app's supervisor is told if the host fails.
    pub async fn spawn_linked(
        spec: HostSpec,
        parent: ActorCell,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), ActorsError> {
        Self::spawn_inner(spec, Some(parent)).await
    }

    async fn spawn_inner(
        spec: HostSpec,
        parent: Option<ActorCell>,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), ActorsError> {
        let (settled, _) = broadcast::channel(1024);
        let feed = RunFeed::default();
        let data = DataFolder::with_store(spec.data_dir.clone(), &spec.store);
        let agents = spec.agents.names();
        let descriptions = agents
            .iter()
            .map(|name| {
                spec.agents
                    .agents
                    .get(name)
                    .map(|c| c.description.clone())
                    .unwrap_or_default()
            })
            .collect();
        // The host's series are registered here, once, with whatever recorder is installed.
        let metrics = HostMetrics::new(&spec.host_name);
        let writer =
            StoreWriter::start_recording(&spec.store, spec.max_open_stores, metrics.store_commit())
                .await?;
        let (supervisor, join) = spawn_supervisor(
            spec,
            settled.clone(),
            feed.clone(),
            writer.clone(),
            metrics,
            parent,
        )
        .await?;
        Ok((
            Self {
                supervisor,
                data,
                settled,
                feed,
                agents: agents.into(),
                descriptions,
                writer,
            },
            join,
        ))
    }

    /// The supervisor actor's cell, for apps that link or monitor it (its messages are the
    /// crate's own: drive the host through this handle).
    pub fn supervisor(&self) -> ActorCell {
        self.supervisor.get_cell()
    }

    /// The handle a link to other hosts hands their requests to (see [`HostInbox`]).
    pub fn inbox(&self) -> HostInbox {
        HostInbox::new(self.supervisor.clone())
    }

    /// The agents this host serves.
    pub fn agents(&self) -> &[String] {
        &self.agents
    }

    /// Each agent this host serves with the `description` of its agent.yaml as the host started
    /// (empty where it has none).
    pub fn described_agents(&self) -> impl Iterator<Item = (&str, &str)> {
        self.agents
            .iter()
            .map(String::as_str)
            .zip(self.descriptions.iter().map(String::as_str))
    }

    /// Writes and commits of the host's store writer so far: `writes / commits` is how many
    /// writes a group commit carried on average.
    pub fn store_counts(&self) -> WriterCounts {
        self.writer.counts()
    }

    /// The data folder this host keeps its run stores in.
    pub fn data(&self) -> &DataFolder {
        &self.data
    }

    /// Starts a run of `agent` on `input`; returns the stored run at once. The run has no
    /// identity (principal `anonymous`); see [`Host::start_run_as`].
    pub async fn start_run(
        &self,
        agent: &str,
        input: &str,
        channel: Channel,
    ) -> Result<RunRecord, ActorsError> {
        self.start_run_as(agent, input, channel, Identity::Absent)
            .await
    }

    /// Starts a run that acts for `identity` (what the HTTP layer's bearer check found).
    pub async fn start_run_as(
        &self,
        agent: &str,
        input: &str,
        channel: Channel,
        identity: Identity,
    ) -> Result<RunRecord, ActorsError> {
        self.start_run_traced(agent, input, channel, identity, None)
            .await
    }

    /// [`Host::start_run_as`] in the starter's trace: the run's span is a child of the span
    /// `trace` names (an HTTP request's `traceparent`), so the whole call tree joins that trace.
    pub async fn start_run_traced(
        &self,
        agent: &str,
        input: &str,
        channel: Channel,
        identity: Identity,
        trace: Option<consort_net::TraceContext>,
    ) -> Result<RunRecord, ActorsError> {
        self.start_run_budgeted(agent, input, channel, identity, trace, None)
            .await
    }

    /// [`Host::start_run_traced`] with a budget over the run's whole call tree: `budget`
    /// narrows, field by field, the agent's own `limits.tree` (it can never widen it). Each
    /// field must be within [`TreeLimits::check`](consort_core::TreeLimits::check)'s bounds.
    pub async fn start_run_budgeted(
        &self,
        agent: &str,
        input: &str,
        channel: Channel,
        identity: Identity,
        trace: Option<consort_net::TraceContext>,
        budget: Option<consort_core::TreeLimits>,
    ) -> Result<RunRecord, ActorsError> {
        let (agent, input) = (agent.to_owned(), input.to_owned());
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Start {
                agent: agent.clone(),
                input: input.clone(),
                channel: channel.clone(),
                identity: identity.clone(),
                trace,
                budget,
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))?
    }

    /// Waits until the run settles (or `timeout` passes, then returns it as it stands).
    pub async fn wait(&self, id: &RunId, timeout: Duration) -> Result<RunRecord, ActorsError> {
        let mut notices = self.settled.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let run = self
                .run(id)
                .await?
                .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
            if run.status.is_settled() {
                return Ok(run);
            }
            // Re-read on every notice (and at least every second, in case one was missed).
            let wake = tokio::time::Instant::now() + Duration::from_secs(1);
            let until = wake.min(deadline);
            loop {
                match tokio::time::timeout_at(until, notices.recv()).await {
                    Ok(Ok(r)) if &r.id == id => return Ok(r),
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => break,
                    Ok(Err(broadcast::error::RecvError::Closed)) => {
                        return Err(ActorsError::Actor("host stopped".into()));
                    }
                    Err(_) => break,
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return self
                    .run(id)
                    .await?
                    .ok_or_else(|| ActorsError::UnknownRun(id.to_string()));
            }
        }
    }

    /// Notices of every run that settles on this host.
    pub fn subscribe(&self) -> broadcast::Receiver<RunRecord> {
        self.settled.subscribe()
    }

    /// The host's run feed: a notice for every committed change of a run, for followers
    /// that then read the store (see [`crate::feed`]).
    pub fn feed(&self) -> &RunFeed {
        &self.feed
    }

    /// Runs `read` against the host's stores on a blocking thread: the SQLite files and the
    /// PostgreSQL client are never called on an async worker. It reads through [`DataFolder`],
    /// not the store writer: every write the handle answered has committed, and each read sees
    /// the latest commit, while the writer thread is left to the agents' group commits.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&DataFolder) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        let data = self.data.clone();
        tokio::task::spawn_blocking(move || read(&data))
            .await
            .map_err(|e| ActorsError::Actor(format!("a store read did not finish: {e}")))?
    }

    /// The run with this id from any local agent's store; `None` when no store holds it.
    pub async fn run(&self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        let id = id.clone();
        self.read(move |data| data.run(&id)).await
    }

    /// The run's event log, oldest first.
    pub async fn events(&self, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        let id = id.clone();
        self.read(move |data| data.events(&id)).await
    }

    /// Runs of every agent (or one), newest first.
    pub async fn jobs(&self, agent: Option<&str>) -> Result<Vec<RunRecord>, ActorsError> {
        let agent = agent.map(str::to_owned);
        if let Some(name) = &agent
            && !self.agents.iter().any(|a| a == name)
        {
            return Err(ActorsError::UnknownAgent(name.clone()));
        }
        self.read(move |data| {
            if let Some(name) = &agent
                && !data.has_store(name)?
            {
                return Ok(Vec::new());
            }
            data.runs(agent.as_deref())
        })
        .await
    }

    /// One page of runs of every agent (or one), newest first: after `cursor`, only those
    /// acting for `owner` when it is given, at most `limit` (see [`crate::page`]).
    pub async fn jobs_page(
        &self,
        agent: Option<&str>,
        cursor: Option<&crate::page::RunCursor>,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<crate::page::RunPage, ActorsError> {
        if let Some(name) = agent
            && !self.agents.iter().any(|a| a == name)
        {
            return Err(ActorsError::UnknownAgent(name.to_owned()));
        }
        let (agent, cursor, owner) = (
            agent.map(str::to_owned),
            cursor.cloned(),
            owner.map(str::to_owned),
        );
        self.read(move |data| {
            data.runs_page(agent.as_deref(), cursor.as_ref(), owner.as_deref(), limit)
        })
        .await
    }

    /// One page of a run's event log, oldest first, after sequence number `after`.
    pub async fn events_page(
        &self,
        id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<crate::page::EventPage, ActorsError> {
        let id = id.clone();
        self.read(move |data| {
            data.events_page(&id, after, limit)?
                .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))
        })
        .await
    }

    /// The approval request a run waits on, if it waits on one: the last `approval_requested`
    /// of its log that no decision followed, with its gate id
    /// ([`consort_core::step::waiting_request`]).
    pub async fn pending_gate(
        &self,
        run: &RunRecord,
    ) -> Result<Option<consort_core::event::ApprovalRequested>, ActorsError> {
        let (agent, id) = (run.agent.clone(), run.id.clone());
        self.read(move |data| {
            let events = data.events_of(&agent, &id)?;
            Ok(consort_core::step::waiting_request(
                &id,
                events.iter().map(|record| &record.event),
            ))
        })
        .await
    }

    /// The tree budget of `run` and what its tree spent of it, as `GET /runs/{id}` shows it;
    /// `None` for a run without one.
    pub async fn tree_budget(
        &self,
        run: &RunRecord,
    ) -> Result<Option<consort_core::budget::BudgetReport>, ActorsError> {
        let run = run.clone();
        self.read(move |data| data.tree_budget(&run, crate::run::now_ms()))
            .await
    }

    /// An operator's approve (or deny) of the gate a blocked run waits on; the event log
    /// records the decision as the local `operator`'s (see [`Host::decide_as`]).
    pub async fn decide(&self, id: &RunId, approve: bool) -> Result<Decided, ActorsError> {
        self.decide_as(id, None, Decision::from(approve), "operator")
            .await
    }

    /// A decision on gate `gate` of run `id` (`None`: the gate the run waits on), recording
    /// `by` (a principal the caller checked) as who decided. The same decision again on a gate
    /// that has it is answered [`Decided::already_decided`] and writes nothing; a gate that does
    /// not wait is refused ([`Refusal::StaleDecision`](consort_core::Refusal::StaleDecision)),
    /// as is a run that waits on none when no gate is named
    /// ([`Refusal::NotAwaitingApproval`](consort_core::Refusal::NotAwaitingApproval)).
    pub async fn decide_as(
        &self,
        id: &RunId,
        gate: Option<&str>,
        decision: Decision,
        by: &str,
    ) -> Result<Decided, ActorsError> {
        let by = by.to_owned();
        let run = self
            .run(id)
            .await?
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        let target = id.clone();
        let gate = gate.map(str::to_owned);
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Decide {
                agent: run.agent.clone(),
                run: target.clone(),
                gate: gate.clone(),
                decision: decision.clone(),
                by: by.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))?
    }

    /// An operator's cancel of a run that is no longer wanted; the event log records it as the
    /// local `operator`'s (see [`Host::cancel_as`]).
    pub async fn cancel(
        &self,
        id: &RunId,
        reason: Option<String>,
    ) -> Result<RunRecord, ActorsError> {
        self.cancel_as(id, "operator", reason).await
    }

    /// Cancels run `id`, recording `by` (a principal the caller checked) and `reason`: an
    /// unsettled run settles `failed` with error `canceled by <by>[: <reason>]` and a
    /// `canceled` event, and is returned as committed. Its model turn or tool task still out
    /// finishes unread; calls it placed run on, and their replies are taken without effect; a
    /// delegated run's caller gets a failed reply. A settled run is
    /// `ActorsError::Refused(Refusal::AlreadySettled)`, an unknown one `UnknownRun`.
    pub async fn cancel_as(
        &self,
        id: &RunId,
        by: &str,
        reason: Option<String>,
    ) -> Result<RunRecord, ActorsError> {
        let run = self
            .run(id)
            .await?
            .ok_or_else(|| ActorsError::UnknownRun(id.to_string()))?;
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Cancel {
                agent: run.agent.clone(),
                run: id.clone(),
                by: by.to_owned(),
                reason: reason.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))?
    }

    /// Re-reads every agent.yaml now and starts again every agent that is down (whatever
    /// took it down, each with a fresh restart budget); returns the agents whose config changed
    /// and the agents revived. An agent.yaml that does not re-read is an error (its previous
    /// config stays in force); the agents that were down are started all the same.
    pub async fn reload(&self) -> Result<Reloaded, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Reload {
                only_changed: false,
                reply: Some(reply)
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))?
    }

    /// Every served agent, whether its actor is up (and if not, why not and since when), and
    /// how often it restarted.
    pub async fn agent_status(&self) -> Result<Vec<AgentStatus>, ActorsError> {
        ractor::call_t!(self.supervisor, SupervisorMsg::Agents, ASK_TIMEOUT_MS)
            .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// How many runs of each agent this host serves are in each status, by agent name: a
    /// grouped count per store, not a read of the runs.
    pub async fn run_counts(&self) -> Result<Vec<(String, crate::run::RunCounts)>, ActorsError> {
        let agents = self.agents.clone();
        self.read(move |data| {
            agents
                .iter()
                .map(|agent| Ok((agent.clone(), data.status_counts(agent)?)))
                .collect()
        })
        .await
    }

    /// The run of this host's agents that failed last (by settlement time), if any.
    pub async fn last_failed_run(&self) -> Result<Option<RunRecord>, ActorsError> {
        let agents = self.agents.clone();
        self.read(move |data| {
            let mut last: Option<RunRecord> = None;
            for agent in agents.iter() {
                if let Some(run) = data.last_failed(agent)?
                    && last
                        .as_ref()
                        .is_none_or(|l| run.settled_at_ms > l.settled_at_ms)
                {
                    last = Some(run);
                }
            }
            Ok(last)
        })
        .await
    }

    /// An operator's drain (`true`: no new root runs, accepted runs go on; see
    /// `Refusal::Draining`) or resume (`false`). Returns whether the host is draining now.
    pub async fn set_draining(&self, draining: bool) -> Result<bool, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Drain {
                draining: Some(draining),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Whether the host is draining.
    pub async fn draining(&self) -> Result<bool, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Drain {
                draining: None,
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// An operator's restart of `agent`'s actor: stopped and started again, its unsettled runs
    /// resume from the store as after a crash. Returns the agent's status afterwards.
    pub async fn restart_agent(&self, agent: &str) -> Result<AgentStatus, ActorsError> {
        let agent = agent.to_owned();
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::RestartAgent {
                agent: agent.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))?
    }

    /// The peer directory of `goal` (or of the one goal `audience` may see) as `audience` may
    /// see it. `audience` must be what this host established about the caller (a run's agent,
    /// an operator's credentials), never a name the caller gave.
    pub async fn directory(
        &self,
        audience: consort_core::directory::Audience,
        goal: Option<String>,
    ) -> Result<consort_core::directory::DirectoryPacket, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Directory {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// What `audience` may see of `agent` and (optionally) one of its runs: typed state, and
    /// an excerpt of at most `lines` lines from `source` when the audience placed the run.
    pub async fn observe(
        &self,
        audience: consort_core::directory::Audience,
        agent: &str,
        run: Option<RunId>,
        source: consort_core::directory::ExcerptSource,
        lines: usize,
    ) -> Result<consort_core::directory::Observation, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Observe {
                audience: audience.clone(),
                agent: agent.to_owned(),
                run: run.clone(),
                source,
                lines,
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Waits, pinned to the agent's incarnation, up to `timeout` for the run to reach what
    /// `request.until` asks after `request.after_seq`; `Err(gap)` inside when `audience` may
    /// not wait on it.
    pub async fn wait_run(
        &self,
        audience: consort_core::directory::Audience,
        request: crate::directory::WaitRequest,
        timeout: Duration,
    ) -> Result<Result<crate::directory::WaitAnswer, consort_core::directory::ScopeGap>, ActorsError>
    {
        let timeout = timeout.min(crate::directory::MAX_WAIT);
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::WaitRun {
                audience: audience.clone(),
                request: request.clone(),
                timeout,
                reply
            },
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX) + ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Delivers a message for `audience` (see `consort_actors::directory::DeliveryRequest`):
    /// the receipt, then whether the run moved inside the window. An agent audience delivers
    /// only to agents its `agents.can_call` on this host lists (`rejected`,
    /// `delivery_not_in_can_call` otherwise, decided before anything is sent).
    pub async fn deliver(
        &self,
        audience: consort_core::directory::Audience,
        request: crate::directory::DeliveryRequest,
    ) -> Result<consort_core::directory::DeliveryOutcome, ActorsError> {
        let bound = request.timeout + request.window.unwrap_or(crate::directory::MAX_WAIT);
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Deliver {
                audience: audience.clone(),
                request: request.clone(),
                reply
            },
            u64::try_from(bound.as_millis()).unwrap_or(u64::MAX) + ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// The receipt of an earlier delivery of `audience`'s (`unknown_delivery` when none,
    /// `unreachable` when the host that holds it could not be asked).
    pub async fn delivery_status(
        &self,
        audience: consort_core::directory::Audience,
        agent: &str,
        run: Option<RunId>,
        delivery_id: &str,
    ) -> Result<consort_core::directory::Receipt, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::DeliveryStatus {
                audience: audience.clone(),
                agent: agent.to_owned(),
                run: run.clone(),
                delivery_id: delivery_id.to_owned(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// The attention rollup of `goal` (or of the one goal `audience` may see).
    pub async fn attention(
        &self,
        audience: consort_core::directory::Audience,
        goal: Option<String>,
    ) -> Result<consort_core::directory::AttentionRollup, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Attention {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Stops the host and its agents. Unsettled runs stay in the stores and resume on restart.
    pub fn stop(&self) {
        self.supervisor.stop(Some("host stopping".into()));
    }
}
