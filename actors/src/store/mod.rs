//! The per-agent run store: the `RunLog` interface, and its embedded default, one SQLite
//! database (WAL) per agent (`RunStore`). The other backend, a PostgreSQL database shared by
//! many agents (and by hosts that fail over to one another), is `store/postgres.rs`.
//!
//! Outside this crate the store is only chosen and observed: [`StoreBackend`] (with its
//! [`PostgresUrl`]) picks the backend, [`Durability`] how hard a commit is pushed to disk, and
//! [`WriterCounts`] is what [`Host::store_counts`](crate::Host::store_counts) reports. The
//! store, its writer thread and their handles are the crate's own: an app reads runs through
//! [`crate::Host`] (or, for a stopped host's folder, [`crate::DataFolder`]).
//!
//! Each agent's runs and their append-only event logs live in the agent's own store; nothing
//! is shared between agents. Every change to a run (its events, its status, its cost) is
//! written in one savepoint through `RunLog::append`, so a crash never leaves a status
//! without the event that explains it. The unique key on the run id, written in the same
//! savepoint as the run's first event, is what turns a replayed call into "the run already
//! exists" (the child run id is derived from the parent run and the tool use). Both backends
//! keep these guarantees, and list runs and events in the same order with the same cursors.
//!
//! A store is synchronous. Inside a host no async code calls it: `StoreWriter` owns the
//! connections on a thread of its own, commits many runs' appends together and answers each
//! once committed; an agent actor holds an `AgentStore` handle and hands it closures over
//! `&mut dyn RunLog`. Inspection (the CLI, the HTTP API's reads) reads through
//! [`crate::DataFolder`] on a blocking thread.
//!
//! `RunStore::probe_writable` tells whether a SQLite store that could not be written (a full
//! disk, a file-size limit) takes writes again.
//!
//! The store decides nothing: it never checks consent or guards, it only records.

use consort_net::{Hop, RunId};

use crate::ActorsError;
use consort_core::event::Created;
use consort_core::{RunEvent, Transition, TreeBudget};

use crate::run::{Channel, Cost, EventRecord, RunRecord, RunStatus};
use crate::visibility::{Identity, Origin};

/// How hard each commit is pushed to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=NORMAL` in WAL mode: survives a process crash, not a power loss (~60 µs).
    #[default]
    Normal,
    /// `synchronous=FULL`: survives a power loss too (~3 ms per commit here).
    Full,
}

impl Durability {
    /// Reads `normal` or `full`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "normal" => Some(Self::Normal),
            "full" => Some(Self::Full),
            _ => None,
        }
    }
}

/// A run to create: what the API or an accepted call knows about it.
#[derive(Clone, Debug)]
pub(crate) struct NewRun {
    /// The run's id (random for a root run, derived for a child run).
    pub(crate) id: RunId,
    /// The agent that runs it.
    pub(crate) agent: String,
    /// Who started it.
    pub(crate) channel: Channel,
    /// The run that placed it, for a delegated run.
    pub(crate) parent_run: Option<RunId>,
    /// The agent that placed it, for a delegated run.
    pub(crate) parent_agent: Option<String>,
    /// The caller's tool use that placed it, for a delegated run.
    pub(crate) tool_use_id: Option<String>,
    /// The chain of hops that led here (empty for a root run); its length is the hop depth.
    pub(crate) chain: Vec<Hop>,
    /// What it is asked.
    pub(crate) input: String,
    /// Who the run acts for (see [`RunRecord::principal`]).
    pub(crate) identity: Identity,
    /// Who started the run's call tree (see [`RunRecord::origin`]): a root run's own identity,
    /// a called run's the first hop of its chain.
    pub(crate) origin: Origin,
    /// The tree budget the run holds (see [`Created::budget`]): a root run's own, a called
    /// run's the allowance its hop carried; `None` without one.
    pub(crate) budget: Option<TreeBudget>,
}

impl NewRun {
    /// A root run of `agent`: the root of its call tree, with its own tree `budget`.
    pub(crate) fn root(
        (id, agent): (RunId, &str),
        channel: Channel,
        input: String,
        (identity, origin): (Identity, Origin),
        budget: Option<TreeBudget>,
    ) -> Self {
        Self {
            id,
            agent: agent.to_owned(),
            channel,
            parent_run: None,
            parent_agent: None,
            tool_use_id: None,
            chain: Vec::new(),
            input,
            identity,
            origin,
            budget,
        }
    }

    /// The child run a call of `agent` makes: the call's verified `chain`, whose last hop is
    /// `hop` (it names `agent`), and `input`. The principal is the caller `hop` names, never a
    /// field of the input, with the roles `identity` gives it; the budget is the allowance the
    /// hop carries.
    pub(crate) fn call(
        (agent, hop): (&str, Hop),
        (chain, input): (Vec<Hop>, String),
        identity: Identity,
        origin: Origin,
    ) -> Self {
        Self {
            id: hop.child_run,
            agent: agent.to_owned(),
            channel: Channel::Agent(hop.caller.clone()),
            parent_run: Some(hop.parent_run),
            parent_agent: Some(hop.caller),
            tool_use_id: Some(hop.tool_use_id),
            chain,
            input,
            identity,
            origin,
            budget: hop.budget,
        }
    }

    /// The run's first event, as [`RunStore::insert_run`] writes it.
    pub(crate) fn created_event(&self) -> RunEvent {
        RunEvent::Created(Created {
            channel: self.channel.clone(),
            input: self.input.clone(),
            parent_run: self.parent_run.clone(),
            hop_depth: self.chain.len() as u32,
            principal: crate::run::identity_text(&self.identity).0,
            budget: self.budget,
        })
    }

    /// The run as [`RunStore::insert_run`] stores it (queued, nothing spent), for an actor
    /// that steps a new run while its insert is still being committed.
    pub(crate) fn record(&self, created_at_ms: u64) -> RunRecord {
        let (principal, roles) = crate::run::identity_text(&self.identity);
        RunRecord {
            id: self.id.clone(),
            agent: self.agent.clone(),
            status: RunStatus::Queued,
            channel: self.channel.clone(),
            parent_run: self.parent_run.clone(),
            parent_agent: self.parent_agent.clone(),
            tool_use_id: self.tool_use_id.clone(),
            hop_depth: self.chain.len() as u32,
            input: self.input.clone(),
            output: None,
            error: None,
            created_at_ms,
            settled_at_ms: None,
            cost: Cost::default(),
            tree_cost: Cost::default(),
            principal,
            roles,
            origin: self.origin.to_string(),
        }
    }
}

/// What [`RunStore::insert_run`] found.
#[derive(Clone, Debug)]
pub(crate) enum Inserted {
    /// The run was created.
    Created(RunRecord),
    /// A run with this id already existed (a replayed call): nothing was written.
    Existing(RunRecord),
}

impl Inserted {
    /// The run, created or found.
    pub(crate) fn record(&self) -> &RunRecord {
        match self {
            Self::Created(r) | Self::Existing(r) => r,
        }
    }
}

/// What [`RunStore::append`] wrote.
#[derive(Clone, Debug)]
pub(crate) struct Applied {
    /// The run as it now stands.
    pub(crate) record: RunRecord,
    /// The sequence number of the last event now in the run's log.
    pub(crate) last_seq: u64,
}

/// An agent's run log: what every store backend offers, whatever keeps it (a SQLite file of
/// the agent's own, rows of a PostgreSQL database shared with other agents).
///
/// Each write ([`RunLog::insert_run`], [`RunLog::append`]) is atomic: one savepoint, nested in
/// the writer's batch transaction when there is one (so a failing write rolls back alone), its
/// own transaction otherwise. Listings are newest first by creation time, then by run id in
/// byte order; events are in sequence order. Reads take `&mut self` because a database client
/// is used exclusively while a statement runs.
///
/// A store records; it never checks consent or guards.
pub(crate) trait RunLog {
    /// Creates the run, or finds the run that already has this id
    /// ([`Inserted::Existing`], nothing written: a replayed call).
    ///
    /// The run row and its first event are one transaction: a run that exists always has a log.
    fn insert_run(&mut self, new: NewRun) -> Result<Inserted, ActorsError>;

    /// Applies one change to a run atomically and returns the run as it now stands.
    #[cfg(test)]
    fn apply(&mut self, id: &RunId, update: Transition) -> Result<RunRecord, ActorsError> {
        self.append(id, update).map(|applied| applied.record)
    }

    /// As [`RunLog::apply`], and also returns the sequence number of the last event appended
    /// (the update's, with the status changes the store derived).
    fn append(&mut self, id: &RunId, update: Transition) -> Result<Applied, ActorsError>;

    /// One run, if it exists here.
    fn run(&mut self, id: &RunId) -> Result<Option<RunRecord>, ActorsError>;

    /// Whether a run with this id is stored here (a replay check: nothing of it is read).
    fn has_run(&mut self, id: &RunId) -> Result<bool, ActorsError> {
        Ok(self.run(id)?.is_some())
    }

    /// The chain of hops that led to a run (empty for a root run).
    fn chain(&mut self, id: &RunId) -> Result<Vec<Hop>, ActorsError>;

    /// All runs, newest first.
    fn runs(&mut self) -> Result<Vec<RunRecord>, ActorsError>;

    /// Up to `limit` runs after `cursor` in listing order (newest first), only those acting for
    /// `owner` when it is given: one page of a listing (see [`crate::page`]).
    fn runs_page(
        &mut self,
        cursor: Option<&crate::page::RunCursor>,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, ActorsError>;

    /// Runs that have not settled yet (what a restarted host resumes).
    fn unsettled(&mut self) -> Result<Vec<RunRecord>, ActorsError>;

    /// How many runs have not settled (what admission counts); an index lookup, not a scan
    /// of the rows.
    #[cfg(test)]
    fn count_unsettled(&mut self) -> Result<usize, ActorsError>;

    /// How many runs are in each status: one grouped count over the status index, not a read
    /// of the rows. A status this build does not know is not counted.
    fn status_counts(&mut self) -> Result<crate::run::RunCounts, ActorsError>;

    /// The run that failed last (by settlement time), if any failed.
    fn last_failed(&mut self) -> Result<Option<RunRecord>, ActorsError>;

    /// How many distinct child runs this store has accepted for one parent run.
    fn count_children(&mut self, parent: &RunId) -> Result<u64, ActorsError>;

    /// The sequence number of a run's last event (0 for a run without events): its
    /// state-change sequence, which only moves forward.
    fn last_seq(&mut self, id: &RunId) -> Result<u64, ActorsError>;

    /// A run's event log, in order.
    fn events(&mut self, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        self.events_after(id, 0, usize::MAX)
    }

    /// Up to `limit` events of a run whose sequence number is above `after`, oldest first.
    fn events_after(
        &mut self,
        id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, ActorsError>;
}

/// Which store backend a host keeps its agents' runs in.
#[derive(Clone, Debug, Default)]
pub enum StoreBackend {
    /// One SQLite file per agent under the host's data folder (the embedded default).
    #[default]
    Sqlite,
    /// One PostgreSQL database for every agent, shared by the hosts that fail over to one
    /// another.
    Postgres(PostgresUrl),
}

mod admit;
mod folder_lock;
mod jobs;
pub(crate) mod postgres;
mod probe;
mod rows;
mod schema;
mod sqlite;
#[cfg(test)]
mod tests;
mod writer;

pub(crate) use admit::{Admission, admit_call};
pub use folder_lock::FolderLock;
pub(crate) use jobs::{Committed, Done};
pub use postgres::PostgresUrl;
pub use postgres::lease::{OnHeld, StoreLease};
pub(crate) use sqlite::RunStore;
pub use writer::WriterCounts;
pub(crate) use writer::{AgentStore, DEFAULT_MAX_OPEN, LeasePlan, StoreWriter};
