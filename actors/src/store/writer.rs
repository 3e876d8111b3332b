//! The store writer: one thread per host that owns every agent store's connection.
//!
//! SQLite is synchronous. Run on a tokio worker, each commit (22–63 µs with
//! `synchronous=NORMAL`, milliseconds with `FULL`) would hold up every actor and link task
//! scheduled on that worker. So no async code touches a connection: an agent actor hands its
//! store a job ([`AgentStore::write_then`], [`AgentStore::write`], a read) and gets the answer
//! when it is committed, while this thread does the SQLite work.
//!
//! **Group commit.** The thread takes every job that is waiting when it wakes (up to
//! [`MAX_BATCH`]), opens one transaction per store that has writes among them, runs each write
//! in a savepoint of its own (a write that fails rolls back alone), commits once per store, and
//! only then answers the batch's jobs, reads included. An answer therefore never reports a
//! write that a crash could still take back, and a read never shows one. Jobs of one store run
//! in the order they were sent: a read sent after an append sees it.
//!
//! **Connections on demand.** A host may serve far more agents than it may hold files open.
//! [`StoreWriter::open`] registers a store and opens it; the writer then keeps at most
//! `max_open` connections ([`DEFAULT_MAX_OPEN`] unless the host says otherwise) and closes the
//! least recently used one, never one with a transaction open in the current batch, when it
//! needs room. A job for a registered store whose connection was closed opens it again first.
//! Closing a WAL store's last connection folds its log into the database, so an idle store
//! costs no file at all.
//!
//! The writer decides nothing about runs; it only orders and commits what it is handed. The
//! WAL checkpoint stays off this thread (see [`RunStore::checkpoint_file`]): a checkpoint is
//! 10–25 ms that no commit should wait behind.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use metrics::Histogram;

use tokio::sync::oneshot;
use tracing::{error, warn};

use consort_net::{Hop, RunId};

use super::postgres::lease::Leases;
use super::{Durability, FolderLock, RunLog, RunStore, StoreBackend, StoreLease};
use crate::ActorsError;
use crate::run::RunRecord;

/// The most jobs committed in one batch: a bound on how long the first job of a busy batch
/// waits for the others.
pub(crate) const MAX_BATCH: usize = 512;

/// The most store connections the writer keeps open by default. Each open WAL store holds
/// three files (the database, its log and the shared-memory index).
pub(crate) const DEFAULT_MAX_OPEN: usize = 128;

/// What a job's answer needs once its store's transaction has ended: `Ok` when it committed
/// (or there was nothing to commit), else why the commit failed.
pub(super) type Deliver = Box<dyn FnOnce(Result<(), &CommitFailure>) + Send>;

/// Why a batch's transaction did not commit, told to every job of the batch.
#[derive(Debug)]
pub(super) struct CommitFailure {
    /// What SQLite said.
    pub(super) detail: String,
    /// Whether the store could not be written (a full disk, a file-size limit): the jobs'
    /// errors say so, so the supervisor can tell it from other failures.
    pub(super) not_writable: bool,
}

impl CommitFailure {
    fn error(&self, path: PathBuf) -> ActorsError {
        if self.not_writable {
            ActorsError::StoreNotWritable {
                path,
                detail: self.detail.clone(),
            }
        } else {
            ActorsError::Commit {
                path,
                detail: self.detail.clone(),
            }
        }
    }
}

/// The work of one job, run on the writer thread against its store.
pub(super) type Work = Box<dyn FnOnce(Result<&mut dyn RunLog, ActorsError>) -> Deliver + Send>;

pub(super) enum Job {
    /// Register a store for writing and open it (creating it if needed); the writer keeps it
    /// registered until [`Job::Close`] and reopens its connection whenever a job needs it.
    Open {
        path: Arc<Path>,
        durability: Durability,
        answer: oneshot::Sender<Result<(), ActorsError>>,
    },
    /// Forget a store and close its connection (an agent that stopped).
    Close { path: Arc<Path> },
    /// Run work against a store. A read of a store that is not registered opens it
    /// read-only for the job; a write needs the store registered.
    Work {
        path: Arc<Path>,
        writes: bool,
        work: Work,
    },
    /// The host stopped: let the PostgreSQL store leases go (after the jobs sent before), so a
    /// successor takes them at once; nothing is written after this. SQLite stores have none.
    Release,
}

/// Which leases a PostgreSQL writer takes before the host starts: those of `agents`, for host
/// `host`, held as `settings` say.
#[derive(Clone, Debug)]
pub(crate) struct LeasePlan {
    pub(crate) host: String,
    pub(crate) agents: Vec<String>,
    pub(crate) settings: StoreLease,
}

impl LeasePlan {
    /// No lease taken up front: each store's is taken when it is opened (tests of the writer).
    #[cfg(test)]
    pub(crate) fn on_open() -> Self {
        Self {
            host: "test".to_owned(),
            agents: Vec::new(),
            settings: StoreLease::default(),
        }
    }
}

/// The handle of a host's store writer thread; cheap to clone. The thread ends when the last
/// handle (and every [`AgentStore`]) is dropped.
#[derive(Clone)]
pub(crate) struct StoreWriter {
    jobs: mpsc::Sender<Job>,
    counts: Arc<Counts>,
    /// Whether the stores are SQLite files (they have a WAL to checkpoint).
    sqlite: bool,
}

/// What the writer has done since it started (for benchmarks and tests), and the histogram
/// each commit's time goes to (`consort_store_commit_seconds`).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) writes: AtomicU64,
    pub(super) commits: AtomicU64,
    open: AtomicU64,
    opened: AtomicU64,
    commit_time: CommitTime,
}

/// The histogram commit times are recorded into (a no-op one unless the host gave one).
#[derive(Default)]
struct CommitTime(Option<Histogram>);

impl std::fmt::Debug for CommitTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitTime")
    }
}

impl Counts {
    fn recording(commit_time: Histogram) -> Self {
        Self {
            commit_time: CommitTime(Some(commit_time)),
            ..Self::default()
        }
    }

    /// Runs `commit`, counting it and recording how long it took.
    pub(super) fn time_commit<T>(&self, commit: impl FnOnce() -> T) -> T {
        self.commits.fetch_add(1, Ordering::Relaxed);
        let Some(histogram) = &self.commit_time.0 else {
            return commit();
        };
        let started = Instant::now();
        let result = commit();
        histogram.record(started.elapsed());
        result
    }
}

/// How many writes the writer ran and in how many commits (a commit per store per batch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterCounts {
    /// Write jobs run (appends, inserts, admissions).
    pub writes: u64,
    /// Batch transactions committed.
    pub commits: u64,
    /// Store connections open right now.
    pub open: u64,
    /// Store connections opened so far (first opens and reopens).
    pub opened: u64,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreWriter")
    }
}

impl StoreWriter {
    /// Starts the writer thread, keeping at most [`DEFAULT_MAX_OPEN`] connections open.
    #[cfg(test)]
    pub(crate) fn start() -> Result<Self, ActorsError> {
        Self::start_with(DEFAULT_MAX_OPEN)
    }

    /// Starts the writer thread, keeping at most `max_open` store connections open (at least
    /// one).
    #[cfg(test)]
    pub(crate) fn start_with(max_open: usize) -> Result<Self, ActorsError> {
        Self::start_sqlite(max_open, Counts::default(), None)
    }

    /// The thread keeps `lock` (the data folder's) until its last job is done.
    fn start_sqlite(
        max_open: usize,
        counts: Counts,
        lock: Option<FolderLock>,
    ) -> Result<Self, ActorsError> {
        let (jobs, queue) = mpsc::channel();
        let counts = Arc::new(counts);
        let thread_counts = counts.clone();
        std::thread::Builder::new()
            .name("consort-store".into())
            .spawn(move || {
                let _held = lock;
                run(&queue, &thread_counts, max_open.max(1));
            })
            .map_err(|e| {
                ActorsError::Actor(format!("the store writer thread did not start: {e}"))
            })?;
        Ok(Self {
            jobs,
            counts,
            sqlite: true,
        })
    }

    /// Starts the writer thread of `backend`: for SQLite as [`StoreWriter::start_with`]; for
    /// PostgreSQL (one connection for every store, `max_open` does not apply) it connects and
    /// creates the schema if it is missing before it returns, so a server that cannot be
    /// reached is an error here, at start, not at the first write.
    #[cfg(test)]
    pub(crate) async fn start_on(
        backend: &StoreBackend,
        max_open: usize,
    ) -> Result<Self, ActorsError> {
        let plan = LeasePlan::on_open();
        Self::start_counting(backend, max_open, Counts::default(), None, plan).await
    }

    /// As [`StoreWriter::start_on`], recording the time of every commit into `commit_time`
    /// (what a host's `consort_store_commit_seconds{host}` is), and holding the data folder's
    /// `lock` until the writer's last job is done: no other host writes the folder meanwhile.
    pub(crate) async fn start_recording(
        backend: &StoreBackend,
        max_open: usize,
        (commit_time, lock): (Histogram, FolderLock),
        leases: LeasePlan,
    ) -> Result<Self, ActorsError> {
        let counts = Counts::recording(commit_time);
        Self::start_counting(backend, max_open, counts, Some(lock), leases).await
    }

    /// For PostgreSQL, the thread takes the leases of `leases` before it answers (a standby
    /// waits here until they are free).
    async fn start_counting(
        backend: &StoreBackend,
        max_open: usize,
        counts: Counts,
        lock: Option<FolderLock>,
        leases: LeasePlan,
    ) -> Result<Self, ActorsError> {
        let StoreBackend::Postgres(url) = backend else {
            return Self::start_sqlite(max_open, counts, lock);
        };
        let (jobs, queue) = mpsc::channel();
        let counts = Arc::new(counts);
        let thread_counts = counts.clone();
        let (connected, connecting) = oneshot::channel();
        let url = url.clone();
        // The client blocks: it connects and lives on the writer's thread, never on a worker.
        std::thread::Builder::new()
            .name("consort-store".into())
            .spawn(move || {
                let _held = lock;
                let started = super::postgres::Database::connect(&url).and_then(|mut db| {
                    let mut held = Leases::new(&leases.host, leases.settings);
                    held.bound_session(db.client_mut())?;
                    held.acquire_all(db.client_mut(), &leases.agents)?;
                    Ok((db, held))
                });
                match started {
                    Ok((db, held)) => {
                        let _ = connected.send(Ok(()));
                        super::postgres::writer::run(db, held, &queue, &thread_counts);
                    }
                    Err(e) => {
                        let _ = connected.send(Err(e));
                    }
                }
            })
            .map_err(|e| {
                ActorsError::Actor(format!("the store writer thread did not start: {e}"))
            })?;
        connecting.await.map_err(|_| gone())??;
        Ok(Self {
            jobs,
            counts,
            sqlite: false,
        })
    }

    /// Lets the PostgreSQL store leases go once the jobs sent before are done (the host
    /// stopped); nothing is written after.
    pub(crate) fn release_leases(&self) {
        if self.send(Job::Release).is_err() {
            tracing::debug!("the store writer is gone; its leases went with it");
        }
    }

    /// Writes run and commits made so far: `writes / commits` is the group commit's batch.
    pub(crate) fn counts(&self) -> WriterCounts {
        WriterCounts {
            writes: self.counts.writes.load(Ordering::Relaxed),
            commits: self.counts.commits.load(Ordering::Relaxed),
            open: self.counts.open.load(Ordering::Relaxed),
            opened: self.counts.opened.load(Ordering::Relaxed),
        }
    }

    /// Opens the store at `path` for writing (creating it if needed) and returns its handle.
    pub(crate) async fn open(
        &self,
        path: &Path,
        durability: Durability,
    ) -> Result<AgentStore, ActorsError> {
        let path: Arc<Path> = Arc::from(path);
        let (answer, answered) = oneshot::channel();
        self.send(Job::Open {
            path: path.clone(),
            durability,
            answer,
        })?;
        answered.await.map_err(|_| gone())??;
        Ok(AgentStore {
            writer: self.clone(),
            path,
        })
    }

    /// Reads from the store at `path`, open or not (a store that is not open is opened
    /// read-only for the read), without holding up an async worker.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        path: &Path,
        read: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        self.submit(Arc::from(path), false, read).wait().await
    }

    fn send(&self, job: Job) -> Result<(), ActorsError> {
        self.jobs.send(job).map_err(|_| gone())
    }

    fn submit<T: Send + 'static>(
        &self,
        path: Arc<Path>,
        writes: bool,
        f: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
    ) -> Pending<T> {
        let (answer, answered) = oneshot::channel();
        let sent = self.submit_then(path, writes, f, move |result| {
            // An asker that stopped waiting (an actor that stopped) needs no answer.
            let _unwanted = answer.send(result);
        });
        Pending {
            answered: sent.map(|()| answered),
        }
    }

    /// Queues `f`; `then` runs on the writer thread with its result once the batch holding
    /// it has committed (or with the commit's failure).
    fn submit_then<T: Send + 'static>(
        &self,
        path: Arc<Path>,
        writes: bool,
        f: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
        then: impl FnOnce(Result<T, ActorsError>) + Send + 'static,
    ) -> Result<(), ActorsError> {
        let store_path = path.to_path_buf();
        let work: Work = Box::new(move |store| {
            let result = store.and_then(f);
            Box::new(move |committed: Result<(), &CommitFailure>| {
                then(match committed {
                    Ok(()) => result,
                    Err(failure) => Err(failure.error(store_path)),
                });
            })
        });
        self.send(Job::Work { path, writes, work })
    }
}

/// One agent's store, reached through the host's [`StoreWriter`]; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct AgentStore {
    writer: StoreWriter,
    path: Arc<Path>,
}

impl AgentStore {
    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs any write against the store, in one savepoint of the batch's transaction; the
    /// answer comes once it is committed. A caller may go on and [`Pending::wait`] only before
    /// it lets anything out of the host that depends on the write.
    #[cfg(test)]
    pub(crate) fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
    ) -> Pending<T> {
        self.writer.submit(self.path.clone(), true, f)
    }

    /// Runs any write against the store without waiting: `then` gets the result on the
    /// writer thread once it is committed, and must be quick (a send, a cast). This is how an
    /// actor goes on with its other work while a commit is out.
    pub(crate) fn write_then<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
        then: impl FnOnce(Result<T, ActorsError>) + Send + 'static,
    ) -> Result<(), ActorsError> {
        self.writer.submit_then(self.path.clone(), true, f, then)
    }

    /// Runs any read against the store, after the writes sent before it.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn RunLog) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        self.writer.submit(self.path.clone(), false, f).wait().await
    }

    /// One run, if it exists here.
    pub(crate) async fn run(&self, id: &RunId) -> Result<Option<RunRecord>, ActorsError> {
        let id = id.clone();
        self.read(move |store| store.run(&id)).await
    }

    /// The chain of hops that led to a run.
    pub(crate) async fn chain(&self, id: &RunId) -> Result<Vec<Hop>, ActorsError> {
        let id = id.clone();
        self.read(move |store| store.chain(&id)).await
    }

    /// Runs that have not settled.
    pub(crate) async fn unsettled(&self) -> Result<Vec<RunRecord>, ActorsError> {
        self.read(|store| store.unsettled()).await
    }

    /// Folds the store's write-ahead log into its database (SQLite, see
    /// [`RunStore::checkpoint_file`]); nothing to do for PostgreSQL, whose server does it.
    /// Blocking: run it off the async workers.
    pub(crate) fn checkpoint(&self) -> Result<(), ActorsError> {
        if self.writer.sqlite {
            RunStore::checkpoint_file(&self.path)
        } else {
            Ok(())
        }
    }

    /// Lets the writer close the connection once the jobs sent before are done.
    pub(crate) fn close(&self) {
        if self
            .writer
            .send(Job::Close {
                path: self.path.clone(),
            })
            .is_err()
        {
            warn!(store = %self.path.display(), "store writer already stopped");
        }
    }
}

/// A job's answer, once its store's transaction has committed.
#[must_use = "an append is durable only when its answer says so"]
pub(crate) struct Pending<T> {
    answered: Result<oneshot::Receiver<Result<T, ActorsError>>, ActorsError>,
}

impl<T> Pending<T> {
    /// Waits for the commit and the job's result.
    pub(crate) async fn wait(self) -> Result<T, ActorsError> {
        self.answered?.await.map_err(|_| gone())?
    }
}

fn gone() -> ActorsError {
    ActorsError::Actor("the store writer stopped".into())
}

/// The writer thread: batches until every handle is dropped.
fn run(queue: &mpsc::Receiver<Job>, counts: &Counts, max_open: usize) {
    let mut stores = Stores::new(max_open, counts);
    while let Ok(first) = queue.recv() {
        let mut batch = Batch {
            counts,
            in_transaction: HashSet::new(),
            held: Vec::new(),
        };
        batch.take(first, &mut stores);
        for _ in 1..MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.take(job, &mut stores),
                Err(_) => break,
            }
        }
        batch.finish_all(&mut stores);
        stores.trim(&HashSet::new());
    }
}

/// The stores the writer writes and the connections it keeps open for them.
struct Stores<'c> {
    /// Stores registered for writing, with how hard their commits are pushed to disk.
    registered: HashMap<Arc<Path>, Durability>,
    /// Open connections, with the tick of their last use.
    open: HashMap<Arc<Path>, (RunStore, u64)>,
    max_open: usize,
    tick: u64,
    counts: &'c Counts,
}

impl<'c> Stores<'c> {
    fn new(max_open: usize, counts: &'c Counts) -> Self {
        Self {
            registered: HashMap::new(),
            open: HashMap::new(),
            max_open,
            tick: 0,
            counts,
        }
    }

    /// Registers `path` and opens its connection, making room first.
    fn register(
        &mut self,
        path: Arc<Path>,
        durability: Durability,
        busy: &HashSet<Arc<Path>>,
    ) -> Result<(), ActorsError> {
        self.registered.insert(path.clone(), durability);
        let opened = self.connection(&path, busy).map(|_| ());
        if opened.is_err() {
            self.registered.remove(&path);
        }
        opened
    }

    /// Forgets `path` and closes its connection.
    fn forget(&mut self, path: &Arc<Path>) {
        self.registered.remove(path);
        self.close(path);
    }

    fn close(&mut self, path: &Arc<Path>) {
        if self.open.remove(path).is_some() {
            self.counts.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The connection of a registered store, opened again if it was closed; `None` for a
    /// store that is not registered.
    fn connection(
        &mut self,
        path: &Arc<Path>,
        busy: &HashSet<Arc<Path>>,
    ) -> Result<Option<&mut RunStore>, ActorsError> {
        self.tick += 1;
        let tick = self.tick;
        if !self.open.contains_key(path) {
            let Some(&durability) = self.registered.get(path) else {
                return Ok(None);
            };
            self.trim_to(self.max_open.saturating_sub(1), busy);
            let store = RunStore::open(path, durability)?;
            self.open.insert(path.clone(), (store, tick));
            self.counts.open.fetch_add(1, Ordering::Relaxed);
            self.counts.opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.open.get_mut(path).map(|(store, used)| {
            *used = tick;
            store
        }))
    }

    /// Closes least recently used connections, never one in `busy`, until at most
    /// `max_open` stay open.
    fn trim(&mut self, busy: &HashSet<Arc<Path>>) {
        self.trim_to(self.max_open, busy);
    }

    fn trim_to(&mut self, keep: usize, busy: &HashSet<Arc<Path>>) {
        while self.open.len() > keep {
            let oldest = self
                .open
                .iter()
                .filter(|(path, _)| !busy.contains(*path))
                .min_by_key(|(_, (_, used))| *used)
                .map(|(path, _)| path.clone());
            match oldest {
                Some(path) => self.close(&path),
                // Every open store is in this batch's transaction: close once it commits.
                None => break,
            }
        }
    }
}

/// The jobs of one wake-up: the stores with a transaction open and the answers held until
/// their store commits.
struct Batch<'c> {
    counts: &'c Counts,
    in_transaction: HashSet<Arc<Path>>,
    held: Vec<(Arc<Path>, Deliver)>,
}

impl Batch<'_> {
    fn take(&mut self, job: Job, stores: &mut Stores<'_>) {
        match job {
            Job::Open {
                path,
                durability,
                answer,
            } => {
                self.finish(&path, stores);
                let opened = stores.register(path, durability, &self.in_transaction);
                let _unwanted = answer.send(opened);
            }
            Job::Close { path } => {
                self.finish(&path, stores);
                stores.forget(&path);
            }
            // SQLite stores are owned through the data folder's lock, held by this thread.
            Job::Release => {}
            Job::Work { path, writes, work } => {
                if writes {
                    self.counts.writes.fetch_add(1, Ordering::Relaxed);
                }
                let deliver = match stores.connection(&path, &self.in_transaction) {
                    Ok(Some(store)) => {
                        if writes && !self.in_transaction.contains(&path) {
                            match store.begin_batch() {
                                Ok(()) => {
                                    self.in_transaction.insert(path.clone());
                                }
                                // The write's own savepoint is then its transaction.
                                Err(e) => {
                                    warn!(store = %path.display(), error = %e, "could not open a batch transaction");
                                }
                            }
                        }
                        guarded(work, Ok(store as &mut dyn RunLog))
                    }
                    Ok(None) if writes => guarded(work, Err(not_open(&path))),
                    Ok(None) => match RunStore::open_read_only(&path) {
                        Ok(mut store) => guarded(work, Ok(&mut store as &mut dyn RunLog)),
                        Err(e) => guarded(work, Err(e)),
                    },
                    // A registered store that could not be opened again: the job says why.
                    Err(e) => guarded(work, Err(e)),
                };
                if let Some(deliver) = deliver {
                    self.held.push((path, deliver));
                }
            }
        }
    }

    /// Commits `path`'s transaction, if one is open, and answers its held jobs.
    fn finish(&mut self, path: &Arc<Path>, stores: &mut Stores<'_>) {
        let committed = self.commit(path, stores);
        let held = std::mem::take(&mut self.held);
        for (p, deliver) in held {
            if &p == path {
                deliver(committed.as_ref().map(|_| ()));
            } else {
                self.held.push((p, deliver));
            }
        }
    }

    fn finish_all(mut self, stores: &mut Stores<'_>) {
        let paths: Vec<Arc<Path>> = self.in_transaction.iter().cloned().collect();
        let mut failed: HashMap<Arc<Path>, CommitFailure> = HashMap::new();
        for path in paths {
            if let Err(failure) = self.commit(&path, stores) {
                failed.insert(path, failure);
            }
        }
        for (path, deliver) in self.held {
            deliver(failed.get(&path).map_or(Ok(()), Err));
        }
    }

    fn commit(&mut self, path: &Arc<Path>, stores: &mut Stores<'_>) -> Result<(), CommitFailure> {
        if !self.in_transaction.remove(path) {
            return Ok(());
        }
        let Some((store, _)) = stores.open.get_mut(path) else {
            return Err(CommitFailure {
                detail: "the store closed with writes uncommitted".into(),
                not_writable: false,
            });
        };
        self.counts.time_commit(|| store.commit_batch()).map_err(|e| {
            error!(store = %path.display(), error = %e, "group commit failed; the batch's writes are rolled back");
            CommitFailure {
                detail: e.to_string(),
                not_writable: crate::error::sqlite_not_writable(&e),
            }
        })
    }
}

/// Runs a job's work; a panic in it (a bug, never input) is logged and the job's asker sees
/// the writer's answer channel close instead of the thread dying with every store.
pub(super) fn guarded(work: Work, store: Result<&mut dyn RunLog, ActorsError>) -> Option<Deliver> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| work(store))) {
        Ok(deliver) => Some(deliver),
        Err(_) => {
            error!("a store job panicked; its asker gets no answer");
            None
        }
    }
}

pub(super) fn not_open(path: &Path) -> ActorsError {
    ActorsError::Commit {
        path: PathBuf::from(path),
        detail: "the store is not open for writing".into(),
    }
}

#[cfg(test)]
mod tests;
