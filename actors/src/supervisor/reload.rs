//! Re-reading agent.yaml files: the config watch on the supervisor's tick, and a reload on
//! demand (`POST /reload`, `consort reload`, `consort fleet reload`).
//!
//! The watch looks at the file's stat ([`FileStamp`]) and re-reads only a file whose stat
//! changed, and at most [`WATCHED_PER_TICK`] files a tick, going on from where the last tick
//! stopped: a host of many agents never stats them all at once, and a change is still seen
//! within one sweep. A reload on demand re-reads every file. A file that does not read keeps
//! the agent's previous config (the error is logged and returned). One that reads and differs
//! replaces the agent's config, goes to its actor as `AgentMsg::Config` when it is awake (an
//! asleep agent wakes with it), and bumps the agent's generation.
//!
//! This module only reads files and hands configs on; reviving agents that are down on a
//! reload on demand is `supervisor/lifecycle.rs`'s.

use tracing::{error, info};

use consort_config::{AgentConfig, FileStamp};

use super::{HostSupervisor, SupervisorState};
use crate::ActorsError;
use crate::agent::{AgentMsg, tell};

/// The most agent.yaml files the config watch looks at per tick.
const WATCHED_PER_TICK: usize = 2048;

pub(super) fn stamp_of(config: &AgentConfig) -> Option<FileStamp> {
    FileStamp::read(&config.file).ok()
}

impl HostSupervisor {
    /// Re-reads agent.yaml files: every one on demand, or, for the watcher, those changed
    /// among the next [`WATCHED_PER_TICK`] (a host of many agents does not stat them all on
    /// every tick; a change is seen within a sweep). Returns the agents whose config changed;
    /// on demand that is every change since the last on-demand reload that succeeded, the
    /// watcher's included, so an operator who edits a file and reloads is told it is in force
    /// even when the watcher was quicker.
    pub(super) fn reload(
        state: &mut SupervisorState,
        only_changed: bool,
    ) -> Result<Vec<String>, ActorsError> {
        let mut changed = Vec::new();
        let mut errors = Vec::new();
        let names: Vec<String> = if only_changed {
            let from = state.watch_from.take();
            let after = |name: &&String| from.as_ref().is_none_or(|f| *name > f);
            let names: Vec<String> = state
                .slots
                .keys()
                .filter(after)
                .take(WATCHED_PER_TICK)
                .cloned()
                .collect();
            if names.len() == WATCHED_PER_TICK {
                state.watch_from = names.last().cloned();
            }
            names
        } else {
            state.slots.keys().cloned().collect()
        };
        for name in names {
            let Some(slot) = state.slots.get_mut(&name) else {
                continue;
            };
            let stamp = stamp_of(&slot.config);
            if only_changed && stamp == slot.stamp {
                continue;
            }
            slot.stamp = stamp;
            match state
                .spec
                .agents
                .reload_one_with_peers(&name, &state.spec.remote_agents)
            {
                Ok(config) => {
                    if config != slot.config {
                        slot.config = config.clone();
                        slot.generation = slot.generation.wrapping_add(1);
                        state
                            .spec
                            .agents
                            .agents
                            .insert(name.clone(), config.clone());
                        if let Some(actor) = &slot.actor {
                            tell(
                                state.metrics.mailbox(),
                                actor,
                                AgentMsg::Config(Box::new(config)),
                            );
                        }
                        state.publish_seat(&name);
                        info!(agent = %name, "agent.yaml re-read: new config in force");
                        // Reported by the next on-demand reload that succeeds (this one,
                        // unless it is the watcher's or another file is refused).
                        if let Some(slot) = state.slots.get_mut(&name) {
                            slot.unreported_change = true;
                        }
                        changed.push(name);
                    } else if !only_changed && slot.unreported_change {
                        changed.push(name);
                    }
                }
                Err(e) => {
                    error!(agent = %name, "agent.yaml re-read failed, keeping the previous config: {e}");
                    errors.push(e.to_string());
                }
            }
        }
        if errors.is_empty() {
            if !only_changed {
                for slot in state.slots.values_mut() {
                    slot.unreported_change = false;
                }
            }
            Ok(changed)
        } else {
            Err(ActorsError::InvalidConfig(errors.join("\n")))
        }
    }
}
