//! A trial's fleet: hosts, and agents with what their agent.yaml declares (consent lists,
//! limits, tools), and the edits of agent.yaml a reload picks up.

use consort_core::{Limits, TreeLimits};
use rand::Rng;
use rand::rngs::StdRng;

use super::world::MAX_MODEL_TURNS;

/// A declared tool that runs at once.
pub(crate) const LOOKUP: &str = "lookup";
/// A declared tool with `approval: required`.
pub(crate) const DEPLOY: &str = "deploy";

/// A tool an agent declares.
#[derive(Clone, Debug)]
pub(crate) struct ToolDecl {
    pub name: String,
    /// `approval: required`: a use parks the run until an operator decides.
    pub gated: bool,
}

/// One agent, as its agent.yaml declares it now.
#[derive(Clone, Debug)]
pub(crate) struct AgentSpec {
    pub name: String,
    pub host: usize,
    pub can_call: Vec<String>,
    pub accept_from: Vec<String>,
    pub limits: Limits,
    pub admission_limit: usize,
    pub tools: Vec<ToolDecl>,
    /// Bumped by each reload that changed the file, so a snapshot names the config it saw.
    pub version: u32,
    /// The largest per-run cap any version of this config had: what bounds the calls a run
    /// records and the children the fleet holds for it when the cap moved under the run.
    pub max_cap_ever: u32,
    /// The step is told this agent's model answers at once, as the real script model does
    /// (`Policy::immediate_model`: a run's turns after its first record no
    /// `model_turn_started`); the simulated model answers on a task all the same. Every other
    /// agent, so both kinds of log are drawn without a draw from the seed.
    pub immediate_model: bool,
}

/// Every agent of the fleet, and where it lives.
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    pub hosts: usize,
    /// Sorted by name; `names[i]` is `agents[i].name`.
    pub agents: Vec<AgentSpec>,
    pub names: Vec<String>,
}

/// Small limits, so depth and cap refusals happen; one agent in three sets a tree budget
/// (`limits.tree`) for the runs it starts, small enough to be spent.
fn random_limits(rng: &mut StdRng) -> Limits {
    let tree = if rng.gen_bool(1.0 / 3.0) {
        TreeLimits {
            max_runs: rng.gen_bool(0.7).then(|| rng.gen_range(1..=6)),
            max_tokens: rng.gen_bool(0.5).then(|| rng.gen_range(200..=2_000)),
            max_wall_s: rng.gen_bool(0.4).then(|| rng.gen_range(2..=30)),
        }
    } else {
        TreeLimits::default()
    };
    Limits {
        max_depth: rng.gen_range(1..=4),
        max_calls_per_run: rng.gen_range(1..=3),
        max_turns: MAX_MODEL_TURNS,
        tree,
        ..Limits::default()
    }
}

impl Fleet {
    /// A random fleet: 2–4 hosts, 3–7 agents, random consent (each side declares its half, and
    /// the halves do not always match), small limits so depth and cap refusals happen, and
    /// now and then a tool, gated or not.
    pub(crate) fn random(rng: &mut StdRng) -> Self {
        let hosts = rng.gen_range(2..=4);
        let count = rng.gen_range(3..=7);
        let names: Vec<String> = (0..count).map(|i| format!("a{i}")).collect();
        let mut agents: Vec<AgentSpec> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let host = if i < hosts {
                    i
                } else {
                    rng.gen_range(0..hosts)
                };
                let can_call = names
                    .iter()
                    .filter(|other| *other != name && rng.gen_bool(0.6))
                    .cloned()
                    .collect();
                let limits = random_limits(rng);
                AgentSpec {
                    name: name.clone(),
                    host,
                    can_call,
                    accept_from: Vec::new(),
                    limits,
                    admission_limit: rng.gen_range(3..=12),
                    tools: Vec::new(),
                    version: 0,
                    max_cap_ever: limits.max_calls_per_run,
                    immediate_model: i % 2 == 1,
                }
            })
            .collect();
        // The callee's half: mostly accepts those that list it, sometimes not, and now and
        // then names a caller that never lists it.
        for callee in 0..agents.len() {
            let mut accept = Vec::new();
            for caller in 0..agents.len() {
                let listed = agents[caller].can_call.contains(&agents[callee].name);
                let p = if listed { 0.85 } else { 0.2 };
                if caller != callee && rng.gen_bool(p) {
                    accept.push(agents[caller].name.clone());
                }
            }
            agents[callee].accept_from = accept;
        }
        for agent in &mut agents {
            for (name, gated, p) in [(LOOKUP, false, 0.4), (DEPLOY, true, 0.4)] {
                if rng.gen_bool(p) {
                    agent.tools.push(ToolDecl {
                        name: name.to_owned(),
                        gated,
                    });
                }
            }
        }
        Self {
            hosts,
            agents,
            names,
        }
    }

    pub(crate) fn spec(&self, name: &str) -> &AgentSpec {
        &self.agents[self.index(name)]
    }

    fn index(&self, name: &str) -> usize {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .unwrap_or_else(|_| panic!("unknown agent {name}"))
    }

    pub(crate) fn host_of(&self, name: &str) -> usize {
        self.spec(name).host
    }

    /// An edit of one agent's agent.yaml, picked up by a reload: one name more or less in
    /// `can_call` or `accept_from`, or new limits. Returns the agent and what changed.
    pub(crate) fn reload(&mut self, rng: &mut StdRng) -> (String, String) {
        let i = rng.gen_range(0..self.agents.len());
        let others: Vec<String> = self
            .names
            .iter()
            .filter(|n| **n != self.agents[i].name)
            .cloned()
            .collect();
        let other = others[rng.gen_range(0..others.len())].clone();
        let agent = &mut self.agents[i];
        let toggle = |list: &mut Vec<String>| {
            if let Some(at) = list.iter().position(|n| *n == other) {
                list.remove(at);
                format!("-{other}")
            } else {
                list.push(other.clone());
                format!("+{other}")
            }
        };
        let what = match rng.gen_range(0..3) {
            0 => format!("can_call {}", toggle(&mut agent.can_call)),
            1 => format!("accept_from {}", toggle(&mut agent.accept_from)),
            _ => {
                agent.limits = random_limits(rng);
                agent.max_cap_ever = agent.max_cap_ever.max(agent.limits.max_calls_per_run);
                format!("limits {:?}", agent.limits)
            }
        };
        agent.version += 1;
        (
            agent.name.clone(),
            format!("{what} (version {})", agent.version),
        )
    }
}
