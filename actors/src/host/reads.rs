//! The host's reads: runs, their event logs, pages of both, a run's waiting gate and tree
//! budget, and the counts the operator's views need. Each goes straight to the agents'
//! stores through the read-only [`DataFolder`] on a blocking thread, never through an actor
//! and never on the caller's async worker.

use consort_net::RunId;

use super::Host;
use crate::ActorsError;
use crate::data::DataFolder;
use crate::run::{EventRecord, RunRecord};

impl Host {
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
}
