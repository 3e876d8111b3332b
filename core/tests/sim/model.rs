//! The scripted models: each turn a deterministic function of the agent's current config and
//! the run's conversation, so a trial replays exactly from its seed.

use consort_core::step::{CALL_AGENT, CHECK_RUN};
use consort_core::{Message, ModelStep, ToolUse};
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::fleet::{AgentSpec, Fleet};

/// The text a timed-out placement's refusal carries; the scripted models retry on it.
pub(crate) const UNREACHABLE_MARK: &str = "sim: no answer within the call timeout";

/// Tokens a turn reads per message of its conversation, as the scripted model reports them.
pub(crate) const INPUT_TOKENS: u64 = 40;
/// Tokens a turn writes.
pub(crate) const OUTPUT_TOKENS: u64 = 20;

/// How many times a model retries one call refused as unreachable.
const MAX_RETRIES: usize = 2;

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

// Salts of the model's choices other than the callees, apart from the call indices (0..4).
const FIRST_TOOL: u32 = 0x7001;
const CHECK: u32 = 0x7002;
const CHECK_UNKNOWN: u32 = 0x7003;
const SECOND_GATE: u32 = 0x7004;

/// The scripted model.
///
/// First turn: a task with depth 0 is answered at once; otherwise it places `f` calls in one
/// turn (mostly to agents its `can_call` names, one in five to any agent of the fleet, so
/// consent refusals happen), each asking one level less with a smaller fan-out. One run in
/// three of an agent with tools also uses one of them in that turn (`t0`), and now and then a
/// run uses a tool nobody declared. Later turns: retry each call refused as unreachable (a new
/// tool use, up to twice); one run in two reads a call still out with `check_run` (`k0`, now
/// and then for a run id it never placed); answer once every call is refused or replied (one
/// run in three with a gated tool uses it once more first, `t1`: a second gate in one run),
/// else wait.
pub(crate) fn answer(spec: &AgentSpec, fleet: &Fleet, conversation: &[Message]) -> ModelStep {
    let Some(Message::User(input)) = conversation.first() else {
        return ModelStep::Answer(format!("{}: no input", spec.name));
    };
    let (depth, fanout, salt) = (field(input, "d"), field(input, "f"), field(input, "s"));
    let mut uses: Vec<&ToolUse> = Vec::new();
    let mut emitted: Vec<&str> = Vec::new();
    let mut turns = 0;
    let mut results: Vec<(&str, &str, bool)> = Vec::new();
    let mut replies: Vec<&str> = Vec::new();
    for message in conversation {
        match message {
            Message::Assistant { tool_uses } => {
                turns += 1;
                emitted.extend(tool_uses.iter().map(|u| u.id.as_str()));
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
        let mut first: Vec<ToolUse> = Vec::new();
        if depth > 0 {
            first.extend((0..fanout).map(|i| {
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
            }));
        }
        let h = mix(salt, FIRST_TOOL);
        if h.is_multiple_of(3) && !spec.tools.is_empty() {
            let tool = &spec.tools[(h as usize / 3) % spec.tools.len()];
            first.push(tool_use("t0", &tool.name, json!({"about": input})));
        } else if h % 23 == 1 {
            first.push(tool_use("t0", "undeclared", json!({})));
        }
        if first.is_empty() {
            return ModelStep::Answer(format!("{} leaf answer to [{input}]", spec.name));
        }
        return ModelStep::ToolUses(first);
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
    let accepted = |u: &&&ToolUse| match result(&u.id) {
        Some((_, content, false)) => serde_json::from_str::<Value>(content)
            .ok()
            .and_then(|v| v.get("run_id").and_then(Value::as_str).map(str::to_owned)),
        _ => None,
    };
    let out: Vec<String> = uses
        .iter()
        .filter_map(|u| accepted(&u))
        .filter(|run| !replies.contains(&run.as_str()))
        .collect();
    if !emitted.contains(&"k0")
        && mix(salt, CHECK).is_multiple_of(2)
        && let Some(child) = out.first()
    {
        let asked = if mix(salt, CHECK_UNKNOWN).is_multiple_of(5) {
            "run_0123456789abcdef0123456789abcdef"
        } else {
            child.as_str()
        };
        return ModelStep::ToolUses(vec![tool_use("k0", CHECK_RUN, json!({"run_id": asked}))]);
    }
    let done = out.is_empty() && uses.iter().all(|u| result(&u.id).is_some());
    if !done {
        return ModelStep::Wait;
    }
    if !emitted.contains(&"t1")
        && mix(salt, SECOND_GATE).is_multiple_of(3)
        && let Some(gated) = spec.tools.iter().find(|t| t.gated)
    {
        return ModelStep::ToolUses(vec![tool_use("t1", &gated.name, json!({"again": true}))]);
    }
    let refused = results.iter().filter(|r| r.2).count();
    ModelStep::Answer(format!(
        "{} answers [{input}] with {} replies, {refused} errors",
        spec.name,
        replies.len()
    ))
}

fn call(id: String, callee: &str, input: String) -> ToolUse {
    ToolUse {
        id,
        name: CALL_AGENT.to_owned(),
        input: json!({"agent": callee, "input": input}),
    }
}

fn tool_use(id: &str, name: &str, input: Value) -> ToolUse {
    ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    }
}
