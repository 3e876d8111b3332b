//! A host's data folder, read from outside the actors.
//!
//! Layout: `<data>/agents/<agent>/runs.db`, one SQLite database per agent. [`DataFolder`]
//! opens those databases read-only, so the HTTP API's reads, `consort jobs list --data DIR` on
//! a stopped host and the embedding handle all read the same way without going through (or
//! waiting on) an agent's mailbox. It never writes.
//!
//! A read-only store is kept open after a read, a few at a time (`IDLE_STORES`), for the next
//! one: a burst of reads (every `Host::wait` looks at its run first) then does not open and
//! parse each store again. Each statement still sees the latest commit.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use consort_net::RunId;

use crate::ActorsError;
use crate::page::{EventPage, RunCursor, RunPage, events_page, merge_runs};
use crate::run::{EventRecord, RunRecord};
use crate::store::RunStore;

/// The most read-only stores kept open between reads, over all agents: each holds a file
/// open, and a host with many agents must not hold one per agent.
const IDLE_STORES: usize = 32;

/// The data folder of one host.
#[derive(Clone)]
pub struct DataFolder {
    root: PathBuf,
    idle: Arc<Mutex<Vec<(String, RunStore)>>>,
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
    /// A data folder rooted at `root` (nothing is created until a store opens).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            idle: Arc::default(),
        }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an agent's run store lives.
    pub fn store_path(&self, agent: &str) -> PathBuf {
        self.root.join("agents").join(agent).join("runs.db")
    }

    /// Agents that have a run store here, sorted.
    pub fn agents(&self) -> Result<Vec<String>, ActorsError> {
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

    /// Runs of every agent (or one), newest first.
    pub fn runs(&self, agent: Option<&str>) -> Result<Vec<RunRecord>, ActorsError> {
        let agents = match agent {
            Some(name) => {
                if !self.store_path(name).is_file() {
                    return Err(ActorsError::UnknownAgent(name.to_owned()));
                }
                vec![name.to_owned()]
            }
            None => self.agents()?,
        };
        let mut runs = Vec::new();
        for name in agents {
            runs.extend(self.open(&name)?.runs()?);
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
            Some(name) if !self.store_path(name).is_file() => {
                return Ok(merge_runs(Vec::new(), limit));
            }
            Some(name) => vec![name.to_owned()],
            None => self.agents()?,
        };
        let mut runs = Vec::new();
        for name in agents {
            runs.extend(
                self.open(&name)?
                    .runs_page(cursor, owner, limit.saturating_add(1))?,
            );
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
        for name in self.agents()? {
            let store = self.open(&name)?;
            if store.run(id)?.is_some() {
                let events = store.events_after(id, after, limit.saturating_add(1))?;
                return Ok(Some(events_page(events, limit)));
            }
        }
        Ok(None)
    }

    /// How many of `agent`'s runs are in each status (zero for an agent without a store yet).
    pub fn status_counts(&self, agent: &str) -> Result<crate::run::RunCounts, ActorsError> {
        if !self.store_path(agent).is_file() {
            return Ok(crate::run::RunCounts::default());
        }
        self.open(agent)?.status_counts()
    }

    /// `agent`'s run that failed last, if any.
    pub fn last_failed(&self, agent: &str) -> Result<Option<RunRecord>, ActorsError> {
        if !self.store_path(agent).is_file() {
            return Ok(None);
        }
        self.open(agent)?.last_failed()
    }

    /// One run, wherever it is stored here.
    pub fn run(&self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        for name in self.agents()? {
            if let Some(run) = self.open(&name)?.run(id)? {
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    /// One run of `agent` with its state-change sequence (its last event's number), read
    /// from that agent's store only; `None` when the agent stored no such run.
    pub fn run_of(&self, agent: &str, id: &RunId) -> Result<Option<(RunRecord, u64)>, ActorsError> {
        if !self.store_path(agent).is_file() {
            return Ok(None);
        }
        let store = self.open(agent)?;
        match store.run(id)? {
            Some(run) => Ok(Some((run, store.last_seq(id)?))),
            None => Ok(None),
        }
    }

    /// The event log of one run of `agent`.
    pub fn events_of(&self, agent: &str, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        self.open(agent)?.events(id)
    }

    /// One run's event log.
    pub fn events(&self, id: &RunId) -> Result<Vec<EventRecord>, ActorsError> {
        for name in self.agents()? {
            let store = self.open(&name)?;
            if store.run(id)?.is_some() {
                return store.events(id);
            }
        }
        Err(ActorsError::UnknownRun(id.to_string()))
    }
}
