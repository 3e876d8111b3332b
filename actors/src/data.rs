//! A host's data folder and run stores, read from outside the actors.
//!
//! Layout: `<data>/agents/<agent>/runs.db`, one SQLite database per agent, or, for a host whose
//! store is PostgreSQL, the rows of each agent in that database (the data folder then keeps
//! everything but the runs). [`DataFolder`] reads those stores only, so the HTTP API's reads,
//! `consort jobs list --data DIR` on a stopped host and the embedding handle all read the same
//! way without going through (or waiting on) an agent's mailbox. It never writes: SQLite files
//! are opened read-only, and the PostgreSQL connection's transactions are read-only.
//!
//! A read-only SQLite store is kept open after a read, a few at a time (`IDLE_STORES`), for
//! the next one: a burst of reads (every `Host::wait` looks at its run first) then does not
//! open and parse each store again. PostgreSQL reads share one connection, opened at the first
//! read and opened again if it is lost. Each statement still sees the latest commit.
//!
//! Reads block: call them on a blocking thread. A PostgreSQL read called from async code
//! anyway runs on a thread of its own (the client must never run on an async worker), and
//! holds the caller until it is done.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use consort_net::RunId;

use crate::ActorsError;
use crate::page::{EventPage, RunCursor, RunPage, events_page, merge_runs};
use crate::run::{EventRecord, RunRecord};
use crate::store::postgres::{Database, PostgresUrl};
use crate::store::{RunLog, RunStore, StoreBackend};

/// The most read-only stores kept open between reads, over all agents: each holds a file
/// open, and a host with many agents must not hold one per agent.
const IDLE_STORES: usize = 32;

/// The data folder of one host.
#[derive(Clone)]
pub struct DataFolder {
    root: PathBuf,
    idle: Arc<Mutex<Vec<(String, RunStore)>>>,
    /// The PostgreSQL store, when the host keeps its runs there.
    postgres: Option<Arc<PostgresReader>>,
}

/// The read-only connection to a PostgreSQL store, opened at the first read.
struct PostgresReader {
    url: PostgresUrl,
    db: Mutex<Option<Database>>,
}

impl Drop for PostgresReader {
    fn drop(&mut self) {
        // The client closes by blocking on a runtime of its own, which must not happen on an
        // async worker (where the last handle may well be dropped): it closes on a thread.
        if let Some(db) = self.db.get_mut().ok().and_then(Option::take) {
            let closing = std::thread::Builder::new()
                .name("consort-store-close".into())
                .spawn(move || drop(db));
            if let Err(e) = closing {
                tracing::warn!(error = %e, "a PostgreSQL connection was not closed cleanly");
            }
        }
    }
}

impl std::fmt::Debug for DataFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFolder")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// A read-only store on loan from the folder's idle ones; it goes back when dropped.
struct Loaned<'a> {
    folder: &'a DataFolder,
    agent: String,
    store: Option<RunStore>,
}

impl Deref for Loaned<'_> {
    type Target = RunStore;
    fn deref(&self) -> &RunStore {
        // Taken only in `drop`.
        self.store
            .as_ref()
            .unwrap_or_else(|| unreachable!("a loaned store is present until dropped"))
    }
}

impl DerefMut for Loaned<'_> {
    fn deref_mut(&mut self) -> &mut RunStore {
        // Taken only in `drop`.
        self.store
            .as_mut()
            .unwrap_or_else(|| unreachable!("a loaned store is present until dropped"))
    }
}

impl Drop for Loaned<'_> {
    fn drop(&mut self) {
        if let (Some(store), Ok(mut idle)) = (self.store.take(), self.folder.idle.lock())
            && idle.len() < IDLE_STORES
        {
            idle.push((std::mem::take(&mut self.agent), store));
        }
    }
}

impl DataFolder {
    /// A data folder rooted at `root` whose run stores are SQLite files in it (nothing is
    /// created until a store opens).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            idle: Arc::default(),
            postgres: None,
        }
    }

    /// A data folder rooted at `root` whose run stores are kept by `backend` (nothing is
    /// opened or connected until the first read).
    pub fn with_store(root: impl Into<PathBuf>, backend: &StoreBackend) -> Self {
        let mut folder = Self::new(root);
        if let StoreBackend::Postgres(url) = backend {
            folder.postgres = Some(Arc::new(PostgresReader {
                url: url.clone(),
                db: Mutex::new(None),
            }));
        }
        folder
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an agent's SQLite run store lives (for PostgreSQL, the path that names the
    /// agent's store to the store writer; no file is there).
    pub fn store_path(&self, agent: &str) -> PathBuf {
        self.root.join("agents").join(agent).join("runs.db")
    }

    /// Whether `agent` has a run store here (a SQLite file, or runs in PostgreSQL).
    pub fn has_store(&self, agent: &str) -> Result<bool, ActorsError> {
        match &self.postgres {
            None => Ok(self.store_path(agent).is_file()),
            Some(pg) => pg.with(|db| db.has_agent(agent)),
        }
    }

    /// Agents that have a run store here, sorted.
    pub fn agents(&self) -> Result<Vec<String>, ActorsError> {
        if let Some(pg) = &self.postgres {
            return pg.with(Database::agents);
        }
        let dir = self.root.join("agents");
        if !self.root.is_dir() {
            return Err(ActorsError::Io {
                path: self.root.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such data folder"),
            });
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().join("runs.db").is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    fn open(&self, agent: &str) -> Result<Loaned<'_>, ActorsError> {
        let kept = self.idle.lock().ok().and_then(|mut idle| {
            let at = idle.iter().position(|(name, _)| name == agent)?;
            Some(idle.swap_remove(at).1)
        });
        let store = match kept {
            Some(store) => store,
            None => RunStore::open_read_only(&self.store_path(agent))?,
        };
        Ok(Loaned {
            folder: self,
            agent: agent.to_owned(),
            store: Some(store),
        })
    }

    /// Runs `read` against `agent`'s store, whichever backend keeps it.
    fn read<T: Send>(
        &self,
        agent: &str,
        read: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send,
    ) -> Result<T, ActorsError> {
        match &self.postgres {
            None => read(&mut *self.open(agent)?),
            Some(pg) => pg.with(|db| read(&mut db.store(agent))),
        }
    }

    /// The agent whose store holds run `id`, if any.
    fn agent_of_run(&self, id: &RunId) -> Result<Option<String>, ActorsError> {
        if let Some(pg) = &self.postgres {
            return pg.with(|db| db.agent_of_run(id));
        }
        for name in self.agents()? {
            if self.open(&name)?.run(id)?.is_some() {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    /// The agents with runs that have not settled, for a PostgreSQL store (`None` for
    /// SQLite): the store is shared with the hosts that fail over to one another, so what a
    /// host must resume at start is in the database, not in its own data folder.
    pub fn agents_with_unsettled_runs(&self) -> Result<Option<Vec<String>>, ActorsError> {
        match &self.postgres {
            None => Ok(None),
            Some(pg) => pg.with(Database::agents_with_unsettled_runs).map(Some),
        }
    }

    /// Runs of every agent (or one), newest first.
    pub fn runs(&self, agent: Option<&str>) -> Result<Vec<RunRecord>, ActorsError> {
        let agents = match agent {
            Some(name) => {
                if !self.has_store(name)? {
                    return Err(ActorsError::UnknownAgent(name.to_owned()));
                }
                vec![name.to_owned()]
            }
            None => self.agents()?,
        };
        let mut runs = Vec::new();
        for name in agents {
            runs.extend(self.read(&name, |store| store.runs())?);
        }
        runs.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(runs)
    }

    /// One page of runs of every agent (or one), newest first, after `cursor`, only those
    /// acting for `owner` when it is given; at most `limit` rows.
    pub fn runs_page(
        &self,
        agent: Option<&str>,
        cursor: Option<&RunCursor>,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, ActorsError> {
        let agents = match agent {
            Some(name) if !self.has_store(name)? => {
                return Ok(merge_runs(Vec::new(), limit));
            }
            Some(name) => vec![name.to_owned()],
            None => self.agents()?,
        };
        let mut runs = Vec::new();
        for name in agents {
            runs.extend(self.read(&name, |store| {
                store.runs_page(cursor, owner, limit.saturating_add(1))
            })?);
        }
        Ok(merge_runs(runs, limit))
    }

    /// One page of a run's events after sequence number `after`; `None` when no store here
    /// holds the run.
    pub fn events_page(
        &self,
        id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Option<EventPage>, ActorsError> {
        let Some(agent) = self.agent_of_run(id)? else {
            return Ok(None);
        };
        let events = self.read(&agent, |store| {
            store.events_after(id, after, limit.saturating_add(1))
        })?;
        Ok(Some(events_page(events, limit)))
    }

    /// How many of `agent`'s runs are in each status (zero for an agent without a store yet).
    pub fn status_counts(&self, agent: &str) -> Result<crate::run::RunCounts, ActorsError> {
        if !self.has_store(agent)? {
            return Ok(crate::run::RunCounts::default());
        }
        self.read(agent, |store| store.status_counts())
    }

    /// `agent`'s run that failed last, if any.
    pub fn last_failed(&self, agent: &str) -> Result<Option<RunRecord>, ActorsError> {
        if !self.has_store(agent)? {
            return Ok(None);
        }
        self.read(agent, |store| store.last_failed())
    }

    /// One run, wherever it is stored here.
    pub fn run(&self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        match self.agent_of_run(id)? {
            Some(agent) => self.read(&agent, |store| store.run(id)),
            None => Ok(None),
        }
    }

    /// One run of `agent` with its state-change sequence (its last event's number), read
    /// from that agent's store only; `None` when the agent stored no such run.
    pub fn run_of(&self, agent: &str, id: &RunId) -> Result<Option<(RunRecord, u64)>, ActorsError> {
        if !self.has_store(agent)? {
            return Ok(None);
        }
        self.read(agent, |store| match store.run(id)? {
            Some(run) => Ok(Some((run, store.last_seq(id)?))),
            None => Ok(None),
        })
    }

    /// The event log of one run of `agent`.
    pub fn events_of(&self, agent: &str, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        self.read(agent, |store| store.events(id))
    }

    /// The tree budget of `run` and what its tree spent of it, its wall time counted until it
    /// settled or `now_ms`; `None` for a run without a tree budget. A run's first event says
    /// whether it has one: only then is its whole log read and folded.
    pub fn tree_budget(
        &self,
        run: &RunRecord,
        now_ms: u64,
    ) -> Result<Option<consort_core::budget::BudgetReport>, ActorsError> {
        let events = self.read(&run.agent, |store| {
            let first = store.events_after(&run.id, 0, 1)?;
            let budgeted = first.first().is_some_and(|record| {
                matches!(&record.event, consort_core::RunEvent::Created(c) if c.budget.is_some())
            });
            if budgeted {
                store.events(&run.id)
            } else {
                Ok(Vec::new())
            }
        })?;
        let view = consort_core::RunView::from_events(events.iter().map(|record| &record.event));
        Ok(consort_core::budget::BudgetReport::of(
            &view,
            run.created_at_ms,
            run.settled_at_ms.unwrap_or(now_ms),
        ))
    }

    /// One run's event log.
    pub fn events(&self, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        match self.agent_of_run(id)? {
            Some(agent) => self.read(&agent, |store| store.events(id)),
            None => Err(ActorsError::UnknownRun(id.to_string())),
        }
    }
}

impl PostgresReader {
    /// Runs `read` on the connection, opening it first if there is none (or it was lost). In
    /// a tokio context (where the client's own runtime must not block) it runs on a scoped
    /// thread of its own.
    fn with<T: Send>(
        &self,
        read: impl FnOnce(&mut Database) -> Result<T, ActorsError> + Send,
    ) -> Result<T, ActorsError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.with_here(read);
        }
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("consort-store-read".into())
                .spawn_scoped(scope, || self.with_here(read))
                .map_err(|e| ActorsError::Actor(format!("a store read did not start: {e}")))?
                .join()
                .map_err(|_| ActorsError::Actor("a store read panicked".into()))?
        })
    }

    fn with_here<T>(
        &self,
        read: impl FnOnce(&mut Database) -> Result<T, ActorsError>,
    ) -> Result<T, ActorsError> {
        let mut held = self
            .db
            .lock()
            .map_err(|_| ActorsError::Actor("a PostgreSQL read panicked earlier".into()))?;
        let db = match held.take() {
            Some(db) if !db.is_closed() => db,
            _ => Database::connect_read_only(&self.url)?,
        };
        read(held.insert(db))
    }
}
