//! The `model:` section of agent.yaml: which model drives an agent and, for the script model,
//! the turns it plays.
//!
//! This module owns [`ModelConfig`], which kind a `model:` mapping is, and the script steps
//! ([`ScriptStep`], [`CallStep`], [`ToolStep`]) with their raw serde shapes and range checks
//! (`count`, `wait_s`). The keys of the adapter kinds are read in `endpoint`. Step texts stay unrendered templates: rendering them is the script model's work
//! in consort-actors, and whether a named peer or tool exists is checked elsewhere (the set,
//! the tools section), never here.

use std::path::Path;

use serde::Deserialize;
use serde_saphyr::Spanned;

pub use super::endpoint::{CommandModel, OpenAiModel, ToolChoice};
use super::endpoint::{convert_command, convert_openai, endpoint_keys};
use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos, SpannedPairs};

/// Which model drives the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    /// The deterministic script model: step `i` is played on the agent's `i`-th model turn.
    Script {
        /// The steps, in turn order.
        steps: Vec<ScriptStep>,
    },
    /// A server that speaks the OpenAI-compatible chat-completions API (`kind: openai`).
    OpenAi(OpenAiModel),
    /// A local program that answers one JSON line per request line (`kind: command`).
    Command(CommandModel),
}

/// One turn of a script model. Text fields are templates rendered by the script model.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptStep {
    /// Final answer.
    Answer(String),
    /// One `call_agent` tool use per entry (an entry with `count: n` places n calls).
    Call(Vec<CallStep>),
    /// One use of a declared tool.
    Tool(ToolStep),
    /// `check_run` on a run id (a template such as `{call.cfo}`).
    Check(String),
    /// `search_tools {query, limit}` (the query is a template; the limit is passed as written,
    /// so a script can exercise the meta-tool's own range check).
    Search {
        /// The search text (a template).
        query: String,
        /// The most results asked for, if given.
        limit: Option<u64>,
    },
    /// `load_tool {name}`.
    Load(String),
    /// `invoke_tool {name, arguments}`; string values inside `arguments` are templates.
    Invoke {
        /// The tool to invoke.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
}

#[derive(Clone, Debug, PartialEq)]
/// One `call:` entry of a script step.
pub struct CallStep {
    /// The agent to call.
    pub agent: String,
    /// The call's input (a template).
    pub input: String,
    /// How many calls this entry places (default 1, at least 1).
    pub count: u32,
    /// Keep the turn open up to this many seconds for the reply (`call_agent`'s `wait_s`).
    pub wait_s: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
/// One `tool:` script step: a use of a declared tool.
pub struct ToolStep {
    /// The declared tool to use.
    pub name: String,
    /// The tool's input (a template), put in the tool's first required field.
    pub input: String,
    /// The tool's whole input object instead (string values are templates), for tools whose
    /// input has several fields.
    pub arguments: Option<serde_json::Value>,
}

/// Upper bound of `count` in a script `call` entry: a script is a test fixture, and a typo such
/// as `count: 100000` should not become a fan-out storm.
const MAX_CALL_COUNT: u64 = 1000;

/// The longest a `call_agent` may keep its caller's turn open for the reply, in seconds.
pub const MAX_WAIT_S: u32 = 300;

/// The raw `model:` mapping: `script:` alone (the script model), or `kind:` with the keys of
/// that kind. One flat shape, so an unknown key is a schema error with its own path and a key
/// of another kind gets a sentence that names the kind it belongs to.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) kind: Option<Spanned<RawModelKind>>,
    pub(super) script: Option<Spanned<Option<Vec<Spanned<RawStep>>>>>,
    pub(super) base_url: Option<Spanned<String>>,
    pub(super) model: Option<Spanned<String>>,
    pub(super) api_key_env: Option<Spanned<String>>,
    pub(super) temperature: Option<Spanned<f64>>,
    pub(super) max_tokens: Option<Spanned<u64>>,
    pub(super) timeout_s: Option<Spanned<u64>>,
    pub(super) max_retries: Option<Spanned<u64>>,
    pub(super) repair_attempts: Option<Spanned<u64>>,
    pub(super) stream: Option<Spanned<bool>>,
    pub(super) headers: Option<Spanned<SpannedPairs>>,
    pub(super) system: Option<Spanned<String>>,
    pub(super) tool_choice: Option<Spanned<String>>,
    pub(super) argv: Option<Spanned<Vec<String>>>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawModelKind {
    Script,
    Openai,
    Command,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawStep {
    Answer(String),
    Call(Spanned<Vec<Spanned<RawCall>>>),
    Tool(RawToolStep),
    Check(String),
    Search(RawSearchStep),
    Load(String),
    Invoke(RawInvokeStep),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearchStep {
    query: String,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInvokeStep {
    name: String,
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCall {
    agent: String,
    input: String,
    count: Option<Spanned<u64>>,
    wait_s: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolStep {
    name: String,
    input: Option<String>,
    arguments: Option<serde_json::Value>,
}

/// Converts `model:`: the kind, then its keys; the first problem is the error.
pub(super) fn convert_model(
    ctx: Ctx<'_>,
    dir: &Path,
    model: Spanned<RawModel>,
) -> Result<ModelConfig, ConfigError> {
    let at = Pos::of(&model);
    let raw = model.value;
    let base = KeyPath::root().key("model");
    let kind = match (&raw.kind, &raw.script) {
        (Some(k), _) => k.value,
        (None, Some(_)) => RawModelKind::Script,
        (None, None) => {
            return Err(ctx.schema(
                at,
                &base,
                "missing `kind` (one of script, openai, command), or a `script:` list",
            ));
        }
    };
    match kind {
        RawModelKind::Script => {
            if let Some(key) = endpoint_keys(&raw).first() {
                return Err(ctx.invalid(
                    key.1,
                    &base.key(key.0),
                    format!("`{}` does not apply to the script model", key.0),
                ));
            }
            let steps = raw.script.and_then(|s| s.value).unwrap_or_default();
            convert_script(ctx, steps)
        }
        RawModelKind::Openai | RawModelKind::Command => {
            let name = if kind == RawModelKind::Openai {
                "openai"
            } else {
                "command"
            };
            if let Some(script) = &raw.script {
                return Err(ctx.invalid(
                    Pos::of(script),
                    &base.key("script"),
                    format!("`script` does not apply to kind `{name}`"),
                ));
            }
            if kind == RawModelKind::Openai {
                convert_openai(ctx, &base, at, raw).map(ModelConfig::OpenAi)
            } else {
                convert_command(ctx, &base, at, dir, raw).map(ModelConfig::Command)
            }
        }
    }
}

/// Converts a script's steps; the first out-of-range `count` or `wait_s` is the error.
fn convert_script(ctx: Ctx<'_>, steps: Vec<Spanned<RawStep>>) -> Result<ModelConfig, ConfigError> {
    let base = KeyPath::root().key("model").key("script");
    let mut out = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        let key = base.index(i);
        out.push(match step.value {
            RawStep::Answer(t) => ScriptStep::Answer(t),
            RawStep::Check(t) => ScriptStep::Check(t),
            RawStep::Search(s) => ScriptStep::Search {
                query: s.query,
                limit: s.limit,
            },
            RawStep::Load(name) => ScriptStep::Load(name),
            RawStep::Invoke(i) => ScriptStep::Invoke {
                name: i.name,
                arguments: i
                    .arguments
                    .unwrap_or_else(|| serde_json::Value::Object(Default::default())),
            },
            RawStep::Tool(t) => ScriptStep::Tool(ToolStep {
                name: t.name,
                input: t.input.unwrap_or_default(),
                arguments: t.arguments,
            }),
            RawStep::Call(calls) => {
                if calls.value.is_empty() {
                    return Err(ctx.invalid(
                        Pos::of(&calls),
                        &key.key("call"),
                        "a `call` step needs at least one entry",
                    ));
                }
                let mut entries = Vec::new();
                for (j, c) in calls.value.into_iter().enumerate() {
                    let c = c.value;
                    let count = match c.count {
                        None => 1,
                        Some(n) if (1..=MAX_CALL_COUNT).contains(&n.value) => n.value as u32,
                        Some(n) => {
                            return Err(ctx.invalid(
                                Pos::of(&n),
                                &key.key("call").index(j).key("count"),
                                format!(
                                    "count {} is out of range; expected 1 to {MAX_CALL_COUNT}",
                                    n.value
                                ),
                            ));
                        }
                    };
                    let wait_s = match c.wait_s {
                        None => None,
                        Some(w) if (1..=u64::from(MAX_WAIT_S)).contains(&w.value) => {
                            Some(w.value as u32)
                        }
                        Some(w) => {
                            return Err(ctx.invalid(
                                Pos::of(&w),
                                &key.key("call").index(j).key("wait_s"),
                                format!(
                                    "wait_s {} is out of range; expected 1 to {MAX_WAIT_S}",
                                    w.value
                                ),
                            ));
                        }
                    };
                    entries.push(CallStep {
                        agent: c.agent,
                        input: c.input,
                        count,
                        wait_s,
                    });
                }
                ScriptStep::Call(entries)
            }
        });
    }
    Ok(ModelConfig::Script { steps: out })
}
