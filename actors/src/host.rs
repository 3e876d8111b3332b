//! [`Host`]: the typed handle an app (or the CLI, or the HTTP API) uses to drive one host.
//!
//! A host is the host supervisor actor with its agents under it. The handle
//! starts runs, waits for them to settle, reads runs and their event logs (and counts them),
//! passes operator decisions, reloads config, drains admission and restarts an agent. Reads go
//! straight to the agents' stores (read-only, through [`DataFolder`]) and are async: each runs
//! on a blocking thread, never on the caller's async worker. Writes go through the supervisor's
//! mailbox. Build one with [`Host::spawn`], or [`Host::spawn_linked`]
//! to put the host under an app's own ractor supervisor.
//!
//! The reads are in `host/reads.rs`, the directory's requests in `host/directory.rs`; this
//! file holds the handle, its start and the requests that write (runs, decisions, cancels,
//! reloads, draining, restarts).

mod directory;
mod reads;

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
use crate::run::{Channel, RunRecord};
use crate::store::{LeasePlan, StoreWriter, WriterCounts};
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
        // Before any store is opened: one host writes a data folder at a time.
        let lock = spec.take_folder_lock()?;
        // A PostgreSQL store's leases are taken before any agent starts (a standby waits here).
        let leases = LeasePlan {
            host: spec.host_name.clone(),
            agents: spec.agents.names(),
            settings: spec.store_lease,
        };
        let commit = (metrics.store_commit(), lock);
        let writer =
            StoreWriter::start_recording(&spec.store, spec.max_open_stores, commit, leases).await?;
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

    /// Stops the host and its agents. Unsettled runs stay in the stores and resume on restart.
    pub fn stop(&self) {
        self.supervisor.stop(Some("host stopping".into()));
    }
}
