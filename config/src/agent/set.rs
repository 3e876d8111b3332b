//! Sets of agents: the agents one host serves, or one fleet declares, checked together.
//!
//! This module owns [`AgentSet`] and the checks that need more than one file: which folders
//! hold agents, names unique across them (an error names both files), every peer named in
//! `can_call` / `accept_from` existing in the set or on another host, and a reload of one
//! agent against the set it belongs to. Reading and checking one `agent.yaml` is the parent
//! module's job; this module calls it and must not re-check what it already checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::time::{Duration, SystemTime};

use super::snapshot::{self, FileStamp, Snapshot, SnapshotReport};
use super::{AGENT_FILE, AgentConfig, PeerSpans, absolute_dir, load_agent, load_agent_in};
use crate::error::{ConfigError, known_list};
use crate::yaml::{Ctx, KeyPath, Pos};

/// The agents one host serves (or one fleet declares), by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentSet {
    /// The agents, by name.
    pub agents: BTreeMap<String, AgentConfig>,
    /// The stamp each agent's agent.yaml had when it was read, by agent name (none for an
    /// agent that was not read from a file). A host's config watch starts from these.
    pub stamps: BTreeMap<String, FileStamp>,
}

/// One agent folder the walk found, with one stat of its agent.yaml.
struct Found {
    /// The folder as given or as listed: what an error about it names.
    dir: PathBuf,
    /// Its canonical path when the walk knows it without asking the file system (a plain
    /// subfolder of a canonical folder); `None` for a subfolder reached through a symlink.
    canonical: Option<PathBuf>,
    /// What the stat of its agent.yaml said.
    stamp: FileStamp,
}

impl Found {
    /// The folder's canonical path.
    fn canonical(&self) -> Result<PathBuf, ConfigError> {
        match &self.canonical {
            Some(c) => Ok(c.clone()),
            None => absolute_dir(&self.dir),
        }
    }
}

/// The agent folders `path` stands for: itself when it holds an `agent.yaml`, else each direct
/// subfolder that holds one, sorted by folder name. Each agent.yaml is stat'ed once, here; a
/// host of many agents stats them on several threads.
fn agent_dirs(path: &Path) -> Result<Vec<Found>, ConfigError> {
    let io = |source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a folder",
        )));
    }
    if let Ok(m) = std::fs::metadata(path.join(AGENT_FILE))
        && m.is_file()
    {
        return Ok(vec![Found {
            dir: path.to_path_buf(),
            canonical: Some(absolute_dir(path)?),
            stamp: FileStamp::of(&m),
        }]);
    }
    // One canonical form for the folder: a plain subfolder's is that plus its name, so the
    // agents need no canonicalisation of their own.
    let root = absolute_dir(path)?;
    let mut listed = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        // The entry's type comes with the listing; a symlink is followed with a stat.
        let (is_dir, symlink) = match entry.file_type() {
            Ok(t) if t.is_symlink() => (true, true),
            Ok(t) => (t.is_dir(), false),
            Err(_) => (false, false),
        };
        if is_dir {
            listed.push((entry.file_name(), symlink));
        }
    }
    // By name, as bytes: the order of the paths (one parent), without comparing components.
    listed.sort_unstable_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    let dirs: Vec<Found> = in_parallel(&listed, |(name, symlink)| {
        let dir = path.join(name);
        let canonical = (!symlink).then(|| root.join(name));
        if *symlink && !dir.is_dir() {
            return None;
        }
        let m = std::fs::metadata(dir.join(AGENT_FILE)).ok()?;
        m.is_file().then(|| Found {
            dir,
            canonical,
            stamp: FileStamp::of(&m),
        })
    })
    .into_iter()
    .flatten()
    .collect();
    if dirs.is_empty() {
        return Err(ConfigError::NoAgents {
            path: path.to_path_buf(),
        });
    }
    Ok(dirs)
}

/// The fewest items worth spreading over more than one thread.
const PARALLEL_FROM: usize = 256;

/// `f` over `items`, in order; many items are spread over as many threads as the machine has
/// cores (each item is independent of the others: one agent folder, one file).
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads == 1 || items.len() < PARALLEL_FROM {
        return items.iter().map(f).collect();
    }
    let share = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .chunks(share)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                // Reading a file never panics on its contents; a panic here is a bug, shown as one.
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Reads and checks the agent.yaml of each folder found, in order.
fn load_found(found: &[&Found]) -> Vec<Result<(AgentConfig, PeerSpans), ConfigError>> {
    in_parallel(found, |f| load_agent_in(f.canonical()?))
}

/// Why [`SetBuilder::add_path`] failed: the fleet loader words duplicates in terms of hosts.
pub(crate) enum AddError {
    Config(ConfigError),
    Duplicate { name: String, error: ConfigError },
}

impl From<ConfigError> for AddError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<AddError> for ConfigError {
    fn from(e: AddError) -> Self {
        match e {
            AddError::Config(e) | AddError::Duplicate { error: e, .. } => e,
        }
    }
}

/// Builds a set from loaded agents: refuses duplicate names (naming both files) and peers that
/// are neither in the set nor in `known_remote`. Given a snapshot, it takes each agent whose
/// agent.yaml is unchanged from it instead of parsing the file.
pub(crate) struct SetBuilder {
    agents: BTreeMap<String, AgentConfig>,
    spans: BTreeMap<String, PeerSpans>,
    stamps: BTreeMap<String, FileStamp>,
    snapshot: Option<Snapshot>,
    from_snapshot: usize,
    parsed: usize,
}

impl SetBuilder {
    pub(crate) fn new() -> Self {
        Self {
            agents: BTreeMap::new(),
            spans: BTreeMap::new(),
            stamps: BTreeMap::new(),
            snapshot: None,
            from_snapshot: 0,
            parsed: 0,
        }
    }

    /// A builder that takes unchanged agents from `snapshot`.
    fn with_snapshot(snapshot: Snapshot) -> Self {
        Self {
            snapshot: Some(snapshot),
            ..Self::new()
        }
    }

    /// Loads every agent under `path` (see [`agent_dirs`]); returns the names added.
    pub(crate) fn add_path(&mut self, path: &Path) -> Result<Vec<String>, AddError> {
        let found = agent_dirs(path)?;
        // What the snapshot holds under an unchanged stamp is taken; the rest is parsed.
        let mut kept: Vec<Option<AgentConfig>> = Vec::with_capacity(found.len());
        let mut to_parse: Vec<&Found> = Vec::new();
        for f in &found {
            let taken = match (&mut self.snapshot, &f.canonical) {
                (Some(snapshot), Some(dir)) => snapshot.take(&dir.join(AGENT_FILE), &f.stamp),
                (Some(snapshot), None) => {
                    let dir = f.canonical()?;
                    snapshot.take(&dir.join(AGENT_FILE), &f.stamp)
                }
                (None, _) => None,
            };
            if taken.is_none() {
                to_parse.push(f);
            }
            kept.push(taken);
        }
        let mut parsed = load_found(&to_parse).into_iter();
        self.from_snapshot += found.len() - to_parse.len();
        self.parsed += to_parse.len();

        let mut added = Vec::new();
        for (f, taken) in found.iter().zip(kept) {
            // There is one parse result per folder not taken, in order.
            let Some(loaded) = taken
                .map(|agent| Ok((agent, PeerSpans::unknown())))
                .or_else(|| parsed.next())
            else {
                continue;
            };
            let (agent, spans) = loaded?;
            if let Some(first) = self.agents.get(&agent.name) {
                let name = agent.name.clone();
                let error = Ctx { file: &agent.file }.invalid(
                    spans.name,
                    &KeyPath::root().key("name"),
                    format!(
                        "duplicate agent name `{}`: also declared in {}",
                        agent.name,
                        first.file.display()
                    ),
                );
                return Err(AddError::Duplicate { name, error });
            }
            added.push(agent.name.clone());
            self.stamps.insert(agent.name.clone(), f.stamp);
            self.spans.insert(agent.name.clone(), spans);
            self.agents.insert(agent.name.clone(), agent);
        }
        Ok(added)
    }

    /// Checks the agents added against each other and `known_remote`, and hands them over.
    pub(crate) fn finish(&mut self, known_remote: &[String]) -> Result<AgentSet, ConfigError> {
        for remote in known_remote {
            if let Some(a) = self.agents.get(remote) {
                let at = self.spans.get(remote).map_or(Pos::START, |s| s.name);
                return Err(Ctx { file: &a.file }.invalid(
                    at,
                    &KeyPath::root().key("name"),
                    format!("agent `{remote}` is also served by another host of the fleet"),
                ));
            }
        }
        let mut known: BTreeSet<&str> = self.agents.keys().map(String::as_str).collect();
        known.extend(known_remote.iter().map(String::as_str));
        for (name, agent) in &self.agents {
            if let Some(spans) = self.spans.get(name) {
                check_a2a_names(agent, spans, &known)?;
                check_peers_exist(agent, spans, &known)?;
            }
        }
        self.spans.clear();
        Ok(AgentSet {
            agents: std::mem::take(&mut self.agents),
            stamps: std::mem::take(&mut self.stamps),
        })
    }

    /// How many agents came from the snapshot, how many were parsed, and how many of the
    /// snapshot's entries no folder claimed (removed or changed agents).
    fn snapshot_counts(&self) -> (usize, usize, usize) {
        let left = self.snapshot.as_ref().map_or(0, Snapshot::left);
        (self.from_snapshot, self.parsed, left)
    }
}

/// Loads a set through `load`, taking unchanged agents from the snapshot at `file`, and
/// writes the snapshot anew when what it would hold changed. Any error of the load is
/// reported by `plain` instead (a load from the YAML files alone), so an error names its
/// file, line and key exactly as without a snapshot; the snapshot is not written then.
pub(crate) fn load_with_snapshot<T>(
    file: &Path,
    margin: Duration,
    load: impl FnOnce(&mut SetBuilder) -> Result<T, ConfigError>,
    set_of: impl Fn(&T) -> &AgentSet,
    plain: impl FnOnce() -> Result<T, ConfigError>,
) -> Result<(T, SnapshotReport), ConfigError> {
    let read_at = SystemTime::now();
    let mut report = SnapshotReport::default();
    let (snapshot, existed) = match snapshot::read(file) {
        Ok(Some(s)) => (s, true),
        Ok(None) => (Snapshot::default(), false),
        Err(why) => {
            report.discarded = Some(why);
            (Snapshot::default(), true)
        }
    };
    let mut builder = SetBuilder::with_snapshot(snapshot);
    let loaded = load(&mut builder);
    let (from_snapshot, parsed, left) = builder.snapshot_counts();
    let Ok(value) = loaded else {
        let value = plain()?;
        report.parsed = set_of(&value).len();
        return Ok((value, report));
    };
    report.from_snapshot = from_snapshot;
    report.parsed = parsed;
    let set = set_of(&value);
    let would_keep = set
        .agents
        .values()
        .filter(|a| {
            snapshot::keepable(a)
                && set
                    .stamps
                    .get(&a.name)
                    .is_some_and(|s| !s.is_racy(read_at, margin))
        })
        .count();
    let unchanged =
        existed && report.discarded.is_none() && left == 0 && would_keep == from_snapshot;
    if !unchanged {
        let agents = set
            .agents
            .values()
            .filter_map(|a| set.stamps.get(&a.name).map(|s| (a, s)));
        match snapshot::write(file, agents, read_at, margin) {
            Ok(kept) => report.written = Some(kept),
            Err(why) => report.write_failed = Some(why),
        }
    }
    Ok((value, report))
}

/// An A2A agent's name must not be an agent of the fleet: a call by that name would be
/// ambiguous, and the fleet's agent would win.
fn check_a2a_names(
    agent: &AgentConfig,
    spans: &PeerSpans,
    fleet: &BTreeSet<&str>,
) -> Result<(), ConfigError> {
    for (i, a2a) in agent.a2a_agents.iter().enumerate() {
        if fleet.contains(a2a.name.as_str()) {
            let at = spans.a2a_agents.get(i).copied().unwrap_or(Pos::START);
            return Err(Ctx { file: &agent.file }.invalid(
                at,
                &KeyPath::root().key("a2a_agents").index(i).key("name"),
                format!(
                    "`{}` is already an agent of the fleet; give the A2A agent another name",
                    a2a.name
                ),
            ));
        }
    }
    Ok(())
}

/// Every peer named exists: an agent of the fleet or, for `can_call`, one of the agent's own
/// A2A agents.
fn check_peers_exist(
    agent: &AgentConfig,
    spans: &PeerSpans,
    fleet: &BTreeSet<&str>,
) -> Result<(), ConfigError> {
    let ctx = Ctx { file: &agent.file };
    let a2a_names = || agent.a2a_agents.iter().map(|a| a.name.as_str());
    for (list, names, positions, with_a2a) in [
        ("can_call", &agent.can_call, &spans.can_call, true),
        ("accept_from", &agent.accept_from, &spans.accept_from, false),
        (
            "show_runs_to",
            &agent.show_runs_to,
            &spans.show_runs_to,
            false,
        ),
    ] {
        for (i, n) in names.iter().enumerate() {
            let n = n.as_str();
            if fleet.contains(n) || (with_a2a && a2a_names().any(|a| a == n)) {
                continue;
            }
            // The names known are gathered for the message only: copying the fleet's names
            // for every agent would make a set of many agents quadratic to load.
            let mut known = fleet.clone();
            if with_a2a {
                known.extend(a2a_names());
            }
            let at = positions.get(i).copied().unwrap_or(Pos::START);
            let listed: Vec<String> = known.iter().map(|s| s.to_string()).collect();
            return Err(ctx.invalid(
                at,
                &KeyPath::root().key("agents").key(list).index(i),
                format!(
                    "no agent named `{n}` (known agents: {})",
                    known_list(&listed)
                ),
            ));
        }
    }
    Ok(())
}

impl AgentSet {
    /// Loads every agent under `paths`. Each path is an agent folder (it holds `agent.yaml`)
    /// or a folder of agent folders (each direct subfolder holding `agent.yaml`, in name order).
    /// Then checks the set: names are unique, and every `can_call` / `accept_from` entry names
    /// an agent of the set.
    pub fn load(paths: &[PathBuf]) -> Result<Self, ConfigError> {
        Self::load_with_peers(paths, &[])
    }

    /// The set of agents built in code ([`AgentConfig::builder`]), checked as a loaded set is:
    /// names are unique, no A2A agent is named as an agent of the set, and every `can_call` /
    /// `accept_from` entry names an agent of the set (or, for `can_call`, one of the agent's A2A
    /// agents). An error is [`ConfigError::InvalidAgent`]; the set has no file stamps (a host's
    /// config watch has nothing to re-read for these agents).
    pub fn from_agents(agents: impl IntoIterator<Item = AgentConfig>) -> Result<Self, ConfigError> {
        let mut set = BTreeMap::new();
        for agent in agents {
            if set.contains_key(&agent.name) {
                return Err(ConfigError::InvalidAgent {
                    key: "name".into(),
                    message: format!("duplicate agent name `{}`", agent.name),
                    agent: agent.name,
                });
            }
            set.insert(agent.name.clone(), agent);
        }
        let known: BTreeSet<&str> = set.keys().map(String::as_str).collect();
        let spans = PeerSpans::unknown();
        for agent in set.values() {
            // The checks of a loaded set, with no positions to point at: their errors say the
            // key and the problem, which is all an agent built in code can be told.
            check_a2a_names(agent, &spans, &known)
                .and_then(|()| check_peers_exist(agent, &spans, &known))
                .map_err(|e| ConfigError::InvalidAgent {
                    agent: agent.name.clone(),
                    key: e.key().unwrap_or_default().to_owned(),
                    message: match e {
                        ConfigError::Invalid { message, .. } => message,
                        other => other.to_string(),
                    },
                })?;
        }
        Ok(Self {
            agents: set,
            stamps: BTreeMap::new(),
        })
    }

    /// As [`AgentSet::load`], for one host of a multi-host fleet: names in `known_remote` (the
    /// agents other hosts serve) also count as existing peers. A local agent that is also in
    /// `known_remote` is an error.
    pub fn load_with_peers(
        paths: &[PathBuf],
        known_remote: &[String],
    ) -> Result<Self, ConfigError> {
        Self::load_into(&mut SetBuilder::new(), paths, known_remote)
    }

    fn load_into(
        b: &mut SetBuilder,
        paths: &[PathBuf],
        known_remote: &[String],
    ) -> Result<Self, ConfigError> {
        for p in paths {
            b.add_path(p).map_err(ConfigError::from)?;
        }
        b.finish(known_remote)
    }

    /// As [`AgentSet::load_with_peers`], for a host that starts often on the same folders: an
    /// agent whose agent.yaml is unchanged since the last load (same size, modification and
    /// change times, device and inode, under the same canonical path) is taken from the
    /// compiled snapshot at `snapshot` instead of being parsed again. The cross-file checks
    /// run over the whole set as always, and any error is reported as the plain load reports
    /// it. The snapshot is rewritten (atomically) when what it holds changed; a snapshot that
    /// cannot be read as a whole, or written, costs a parse and is said in the report.
    pub fn load_cached(
        paths: &[PathBuf],
        known_remote: &[String],
        snapshot: &Path,
    ) -> Result<(Self, SnapshotReport), ConfigError> {
        Self::load_cached_with(paths, known_remote, snapshot, snapshot::RACY_MARGIN)
    }

    pub(crate) fn load_cached_with(
        paths: &[PathBuf],
        known_remote: &[String],
        snapshot: &Path,
        margin: Duration,
    ) -> Result<(Self, SnapshotReport), ConfigError> {
        load_with_snapshot(
            snapshot,
            margin,
            |b| Self::load_into(b, paths, known_remote),
            |set| set,
            || Self::load_with_peers(paths, known_remote),
        )
    }

    /// The agent with this name, if the set holds it.
    pub fn get(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.get(name)
    }

    /// Agent names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }

    /// How many agents the set holds.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True when the set holds no agent.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    /// Re-reads the `agent.yaml` of agent `name` (after an edit) and checks it against the
    /// set: the name must not change, and every peer it names must be in the set. The set
    /// itself is not changed; the caller swaps the result in.
    pub fn reload_one(&self, name: &str) -> Result<AgentConfig, ConfigError> {
        self.reload_one_with_peers(name, &[])
    }

    /// As [`AgentSet::reload_one`], where names in `known_remote` also count as existing peers
    /// (the set does not remember them: it holds this host's agents only).
    pub fn reload_one_with_peers(
        &self,
        name: &str,
        known_remote: &[String],
    ) -> Result<AgentConfig, ConfigError> {
        let Some(current) = self.agents.get(name) else {
            return Err(ConfigError::UnknownAgent {
                name: name.to_owned(),
                known: self.names(),
            });
        };
        let (agent, spans) = load_agent(&current.dir)?;
        if agent.name != name {
            return Err(Ctx { file: &agent.file }.invalid(
                spans.name,
                &KeyPath::root().key("name"),
                format!(
                    "the agent's name changed from `{name}` to `{}`; a rename needs a restart",
                    agent.name
                ),
            ));
        }
        let mut known: BTreeSet<&str> = self.agents.keys().map(String::as_str).collect();
        known.extend(known_remote.iter().map(String::as_str));
        check_a2a_names(&agent, &spans, &known)?;
        check_peers_exist(&agent, &spans, &known)?;
        Ok(agent)
    }
}
