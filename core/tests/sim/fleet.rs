//! A trial's fleet: hosts, agents with their consent lists and limits, and the scripted models.

use consort_core::step::CALL_AGENT;
use consort_core::{Limits, Message, ModelStep, ToolUse};
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// The text a timed-out placement's refusal carries; the scripted models retry on it.
pub(crate) const UNREACHABLE_MARK: &str = "sim: no answer within the call timeout";

/// How many times a model retries one call refused as unreachable.
const MAX_RETRIES: usize = 2;

/// One agent, as its agent.yaml would declare it.
#[derive(Clone, Debug)]
pub(crate) struct AgentSpec {
    pub name: String,
    pub host: usize,
    pub can_call: Vec<String>,
    pub accept_from: Vec<String>,
    pub limits: Limits,
    pub admission_limit: usize,
}

/// Every agent of the fleet, and where it lives.
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    pub hosts: usize,
    /// Sorted by name; `names[i]` is `agents[i].name`.
    pub agents: Vec<AgentSpec>,
    pub names: Vec<String>,
}

impl Fleet {
    /// A random fleet: 2–4 hosts, 3–7 agents, random consent (each side declares its half, and
    /// the halves do not always match), small limits so depth and cap refusals happen.
    pub(crate) fn random(rng: &mut StdRng) -> Self {
        let hosts = rng.gen_range(2..=4);
        let count = rng.gen_range(3..=7);
        let names: Vec<String> = (0..count).map(|i| format!("a{i}")).collect();
        let mut agents: Vec<AgentSpec> = names
            .iter()
            .enumerate()
            .map(|(i, name)| AgentSpec {
                name: name.clone(),
                host: if i < hosts {
                    i
                } else {
                    rng.gen_range(0..hosts)
                },
                can_call: names
                    .iter()
                    .filter(|other| *other != name && rng.gen_bool(0.6))
                    .cloned()
                    .collect(),
                accept_from: Vec::new(),
                limits: Limits {
                    max_depth: rng.gen_range(1..=4),
                    max_calls_per_run: rng.gen_range(1..=3),
                },
                admission_limit: rng.gen_range(3..=12),
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
        Self {
            hosts,
            agents,
            names,
        }
    }

    pub(crate) fn spec(&self, name: &str) -> &AgentSpec {
        let i = self
            .names
            .binary_search_by(|n| n.as_str().cmp(name))
            .unwrap_or_else(|_| panic!("unknown agent {name}"));
        &self.agents[i]
    }

    pub(crate) fn host_of(&self, name: &str) -> usize {
        self.spec(name).host
    }
}

/// A root run's task: ask for `depth` more levels of delegation with `fanout` calls each.
pub(crate) fn root_task(rng: &mut StdRng) -> String {
    task(
        rng.gen_range(0..=5),
        rng.gen_range(1..=4),
        rng.r#gen::<u32>(),
    )
}

fn task(depth: u32, fanout: u32, salt: u32) -> String {
    format!("task d={depth} f={fanout} s={salt}")
}

fn field(input: &str, key: &str) -> u32 {
    input
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mix(a: u32, b: u32) -> u32 {
    a.wrapping_mul(0x9e37_79b9).rotate_left(13) ^ b.wrapping_mul(0x85eb_ca6b)
}

/// The scripted model: a deterministic function of the agent and the conversation.
///
/// First turn: a task with depth 0 is answered at once; otherwise it places `f` calls in one
/// turn (mostly to agents its `can_call` names, one in five to any agent of the fleet, so
/// consent refusals happen), each asking one level less with a smaller fan-out. Later turns:
/// retry each call refused as unreachable (a new tool use, up to twice), answer once every
/// call is refused or replied, else wait.
pub(crate) fn answer(spec: &AgentSpec, fleet: &Fleet, conversation: &[Message]) -> ModelStep {
    let Some(Message::User(input)) = conversation.first() else {
        return ModelStep::Answer(format!("{}: no input", spec.name));
    };
    let (depth, fanout, salt) = (field(input, "d"), field(input, "f"), field(input, "s"));
    let mut uses: Vec<&ToolUse> = Vec::new();
    let mut turns = 0;
    let mut results: Vec<(&str, &str, bool)> = Vec::new();
    let mut replies: Vec<&str> = Vec::new();
    for message in conversation {
        match message {
            Message::Assistant { tool_uses } => {
                turns += 1;
                uses.extend(tool_uses.iter().filter(|u| u.name == CALL_AGENT));
            }
            Message::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => results.push((tool_use_id, content, *is_error)),
            Message::Reply { run_id, .. } => replies.push(run_id.as_str()),
            Message::User(_) => {}
        }
    }
    if turns == 0 {
        if depth == 0 {
            return ModelStep::Answer(format!("{} leaf answer to [{input}]", spec.name));
        }
        let calls: Vec<ToolUse> = (0..fanout)
            .map(|i| {
                let h = mix(salt, i);
                let callee = if !h.is_multiple_of(5) && !spec.can_call.is_empty() {
                    spec.can_call[(h as usize / 5) % spec.can_call.len()].clone()
                } else {
                    fleet.names[(h as usize / 5) % fleet.names.len()].clone()
                };
                call(
                    format!("c{i}"),
                    &callee,
                    task(depth - 1, fanout.saturating_sub(1).max(1), h),
                )
            })
            .collect();
        return ModelStep::ToolUses(calls);
    }
    let result = |id: &str| results.iter().find(|(tu, _, _)| *tu == id);
    let retries: Vec<ToolUse> = uses
        .iter()
        .filter(|u| {
            let retried = uses.iter().any(|o| o.id == format!("{}r", u.id));
            let tries = u.id.chars().filter(|c| *c == 'r').count();
            !retried
                && tries < MAX_RETRIES
                && result(&u.id).is_some_and(|(_, c, e)| *e && c.contains(UNREACHABLE_MARK))
        })
        .map(|u| ToolUse {
            id: format!("{}r", u.id),
            ..(*u).clone()
        })
        .collect();
    if !retries.is_empty() {
        return ModelStep::ToolUses(retries);
    }
    let done = uses.iter().all(|u| match result(&u.id) {
        None => false,
        Some((_, _, true)) => true,
        Some((_, content, false)) => serde_json::from_str::<Value>(content)
            .ok()
            .and_then(|v| v.get("run_id").and_then(Value::as_str).map(str::to_owned))
            .is_some_and(|run| replies.contains(&run.as_str())),
    });
    if done {
        let refused = results.iter().filter(|r| r.2).count();
        return ModelStep::Answer(format!(
            "{} answers [{input}] with {} replies, {refused} refusals",
            spec.name,
            replies.len()
        ));
    }
    ModelStep::Wait
}

fn call(id: String, callee: &str, input: String) -> ToolUse {
    ToolUse {
        id,
        name: CALL_AGENT.to_owned(),
        input: json!({"agent": callee, "input": input}),
    }
}
