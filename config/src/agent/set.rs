//! Sets of agents: the agents one host serves, or one fleet declares, checked together.
//!
//! This module owns [`AgentSet`] and the checks that need more than one file: which folders
//! hold agents, names unique across them (an error names both files), every peer named in
//! `can_call` / `accept_from` existing in the set or on another host, and a reload of one
//! agent against the set it belongs to. Reading and checking one `agent.yaml` is the parent
//! module's job; this module calls it and must not re-check what it already checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{AGENT_FILE, AgentConfig, PeerSpans, load_agent};
use crate::error::{ConfigError, known_list};
use crate::yaml::{Ctx, KeyPath, Pos};

/// The agents one host serves (or one fleet declares), by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentSet {
    /// The agents, by name.
    pub agents: BTreeMap<String, AgentConfig>,
}

/// The agent folders `path` stands for: itself when it holds an `agent.yaml`, else each direct
/// subfolder that holds one, sorted by folder name.
fn agent_dirs(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
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
    if path.join(AGENT_FILE).is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        // The entry's type comes with the listing; a symlink is followed with a stat.
        let is_dir = match entry.file_type() {
            Ok(t) if t.is_symlink() => entry.path().is_dir(),
            Ok(t) => t.is_dir(),
            Err(_) => false,
        };
        let p = entry.path();
        if is_dir && p.join(AGENT_FILE).is_file() {
            dirs.push(p);
        }
    }
    if dirs.is_empty() {
        return Err(ConfigError::NoAgents {
            path: path.to_path_buf(),
        });
    }
    dirs.sort();
    Ok(dirs)
}

/// The fewest folders worth reading on more than one thread.
const PARALLEL_FROM: usize = 256;

/// Reads and checks the agent.yaml of each folder, in order; a host of many agents reads them
/// on as many threads as the machine has cores (each file is independent of the others).
fn load_agents(dirs: &[PathBuf]) -> Vec<Result<(AgentConfig, PeerSpans), ConfigError>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads == 1 || dirs.len() < PARALLEL_FROM {
        return dirs.iter().map(|dir| load_agent(dir)).collect();
    }
    let share = dirs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let readers: Vec<_> = dirs
            .chunks(share)
            .map(|part| {
                scope.spawn(move || part.iter().map(|dir| load_agent(dir)).collect::<Vec<_>>())
            })
            .collect();
        readers
            .into_iter()
            .flat_map(|reader| {
                // Reading a file never panics on its contents; a panic here is a bug, shown as one.
                reader
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
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
/// are neither in the set nor in `known_remote`.
pub(crate) struct SetBuilder {
    agents: BTreeMap<String, AgentConfig>,
    spans: BTreeMap<String, PeerSpans>,
}

impl SetBuilder {
    pub(crate) fn new() -> Self {
        Self {
            agents: BTreeMap::new(),
            spans: BTreeMap::new(),
        }
    }

    /// Loads every agent under `path` (see [`agent_dirs`]); returns the names added.
    pub(crate) fn add_path(&mut self, path: &Path) -> Result<Vec<String>, AddError> {
        let mut added = Vec::new();
        for loaded in load_agents(&agent_dirs(path)?) {
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
            self.spans.insert(agent.name.clone(), spans);
            self.agents.insert(agent.name.clone(), agent);
        }
        Ok(added)
    }

    pub(crate) fn finish(self, known_remote: &[String]) -> Result<AgentSet, ConfigError> {
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
        Ok(AgentSet {
            agents: self.agents,
        })
    }
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
    let mut callable = fleet.clone();
    callable.extend(agent.a2a_agents.iter().map(|a| a.name.as_str()));
    let ctx = Ctx { file: &agent.file };
    for (list, names, positions, known) in [
        ("can_call", &agent.can_call, &spans.can_call, &callable),
        ("accept_from", &agent.accept_from, &spans.accept_from, fleet),
    ] {
        for (i, n) in names.iter().enumerate() {
            if !known.contains(n.as_str()) {
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

    /// As [`AgentSet::load`], for one host of a multi-host fleet: names in `known_remote` (the
    /// agents other hosts serve) also count as existing peers. A local agent that is also in
    /// `known_remote` is an error.
    pub fn load_with_peers(
        paths: &[PathBuf],
        known_remote: &[String],
    ) -> Result<Self, ConfigError> {
        let mut b = SetBuilder::new();
        for p in paths {
            b.add_path(p).map_err(ConfigError::from)?;
        }
        b.finish(known_remote)
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
