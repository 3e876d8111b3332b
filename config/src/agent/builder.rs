//! An agent declared in code: [`AgentConfig::builder`] and the [`AgentConfigBuilder`] it
//! returns, for an embedding app that has no agent folders.
//!
//! The builder checks what it is given with the rules agent.yaml's reader applies (the name,
//! the peer lists, `env:`, `limits:`), so a host never serves an agent built in code that its
//! file would have been refused for; an error is [`ConfigError::InvalidAgent`], naming the key
//! the value would have in an agent.yaml. The model, the tools, the visibility declarations and
//! the A2A agents are taken as given: their checks read files (a sql tool's database) or refer
//! to one another in ways only a file's reader sees whole. Peers named must exist: that is a
//! check of the set ([`AgentSet::from_agents`](crate::AgentSet::from_agents)), not of one agent.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use super::{
    A2aAgentConfig, AGENT_FILE, AgentConfig, Limits, ModelConfig, ToolConfig, env_problem,
    is_valid_name, name_problem, peer_problem,
};
use crate::error::ConfigError;
use crate::visibility::VisibilityConfig;

/// An agent being declared in code; [`AgentConfigBuilder::build`] checks it.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct AgentConfigBuilder {
    config: AgentConfig,
}

impl AgentConfig {
    /// Starts an agent named `name`, declared in code: no peers, no tools, no env, the default
    /// limits and a script model with no steps (for an agent whose model the embedding app
    /// sets on the host). Its folder is `name` (relative) unless [`AgentConfigBuilder::dir`]
    /// says otherwise; nothing is read from it.
    pub fn builder(name: impl Into<String>) -> AgentConfigBuilder {
        let name = name.into();
        AgentConfigBuilder {
            config: Self {
                dir: PathBuf::from(&name),
                file: PathBuf::from(&name).join(AGENT_FILE),
                name,
                description: String::new(),
                can_call: Vec::new(),
                accept_from: Vec::new(),
                show_runs_to: Vec::new(),
                model: ModelConfig::Script { steps: Vec::new() },
                tools: Vec::new(),
                env: BTreeMap::new(),
                visibility: VisibilityConfig::default(),
                limits: Limits::default(),
                a2a_agents: Vec::new(),
            },
        }
    }
}

impl AgentConfigBuilder {
    /// What the agent does, as its callers are told (`description:`).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.config.description = description.into();
        self
    }

    /// Peers this agent's model may call (`agents.can_call`), added to those given before.
    pub fn can_call<S: Into<String>>(mut self, peers: impl IntoIterator<Item = S>) -> Self {
        self.config
            .can_call
            .extend(peers.into_iter().map(Into::into));
        self
    }

    /// Peers this agent consents to serve (`agents.accept_from`), added to those given before.
    pub fn accept_from<S: Into<String>>(mut self, peers: impl IntoIterator<Item = S>) -> Self {
        self.config
            .accept_from
            .extend(peers.into_iter().map(Into::into));
        self
    }

    /// Peers that may read this agent's runs in full through the directory
    /// (`agents.show_runs_to`), added to those given before.
    pub fn show_runs_to<S: Into<String>>(mut self, peers: impl IntoIterator<Item = S>) -> Self {
        self.config
            .show_runs_to
            .extend(peers.into_iter().map(Into::into));
        self
    }

    /// Which model drives the agent (`model:`), unless the host is given a model of the app's
    /// own for it.
    pub fn model(mut self, model: ModelConfig) -> Self {
        self.config.model = model;
        self
    }

    /// A declared tool (`tools:`), after those given before.
    pub fn tool(mut self, tool: ToolConfig) -> Self {
        self.config.tools.push(tool);
        self
    }

    /// One `env:` entry, visible to this agent's own tools only (a key given twice keeps the
    /// last value).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.env.insert(key.into(), value.into());
        self
    }

    /// The agent's folder (its `agent.yaml` is `dir/agent.yaml`): where relative paths of its
    /// tools are resolved. Nothing is read from it here.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.dir = dir.into();
        self.config.file = self.config.dir.join(AGENT_FILE);
        self
    }

    /// Named policies, fallback policy, grants to peers and the probe budget.
    pub fn visibility(mut self, visibility: VisibilityConfig) -> Self {
        self.config.visibility = visibility;
        self
    }

    /// The loop guards of this agent's calls and runs (`limits:`).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.limits = limits;
        self
    }

    /// A remote A2A agent this agent may call once `can_call` names it too (`a2a_agents:`).
    pub fn a2a_agent(mut self, agent: A2aAgentConfig) -> Self {
        self.config.a2a_agents.push(agent);
        self
    }

    /// The agent, once its name, peers, env and limits pass agent.yaml's checks.
    pub fn build(self) -> Result<AgentConfig, ConfigError> {
        let config = self.config;
        let invalid = |key: String, message: String| ConfigError::InvalidAgent {
            agent: config.name.clone(),
            key,
            message,
        };
        if !is_valid_name(&config.name) {
            return Err(invalid("name".into(), name_problem(&config.name)));
        }
        for (list, peers) in [
            ("can_call", &config.can_call),
            ("accept_from", &config.accept_from),
            ("show_runs_to", &config.show_runs_to),
        ] {
            let mut seen = HashSet::with_capacity(peers.len());
            for (i, peer) in peers.iter().enumerate() {
                if let Some(problem) = peer_problem(&config.name, peer, &mut seen) {
                    return Err(invalid(format!("agents.{list}[{i}]"), problem));
                }
            }
        }
        for (key, value) in &config.env {
            let (Err(problem) | Ok(Some(problem))) = env_problem(key, value) else {
                continue;
            };
            return Err(invalid(format!("env.{key}"), problem.to_owned()));
        }
        if let Some((key, message)) = config.limits.problem() {
            return Err(invalid(key, message));
        }
        Ok(config)
    }
}
