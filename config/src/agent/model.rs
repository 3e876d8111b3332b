//! The `model:` section of agent.yaml: which model drives an agent and, for the script model,
//! the turns it plays.
//!
//! This module owns [`ModelConfig`], which kind a `model:` mapping is, and the script steps
//! ([`ScriptStep`], [`CallStep`], [`ToolStep`]) with their raw serde shapes and range checks
//! (`count`, `wait_s`). The keys of the adapter kinds are read in `endpoint`. Step texts stay
//! unrendered templates: rendering them is the script model's work in consort-actors, and
//! whether a named peer or tool exists is checked elsewhere (the set, the tools section), never
//! here. One thing about templates is decided here: a step that hands SQL to a sql tool may not
//! hold a placeholder ([`first_placeholder`]), because rendering would paste text into the
//! query; values reach SQL only as bound parameters.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use serde_saphyr::Spanned;

pub use super::endpoint::{CommandModel, OpenAiModel, ToolChoice};
use super::endpoint::{convert_command, convert_openai, endpoint_keys};
use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos, SpannedPairs};

/// Which model drives the agent.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
        #[serde(with = "super::snapshot::json_value")]
        arguments: serde_json::Value,
    },
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// One `tool:` script step: a use of a declared tool.
pub struct ToolStep {
    /// The declared tool to use.
    pub name: String,
    /// The tool's input (a template), put in the tool's first required field.
    pub input: String,
    /// The tool's whole input object instead (string values are templates), for tools whose
    /// input has several fields.
    #[serde(with = "super::snapshot::json_value::option")]
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
    arguments: Option<Spanned<serde_json::Value>>,
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
    input: Option<Spanned<String>>,
    arguments: Option<Spanned<serde_json::Value>>,
}

/// Converts `model:`: the kind, then its keys; the first problem is the error. `sql_tools` are
/// the names of the agent's declared sql tools, whose script steps may not hold templates.
pub(super) fn convert_model(
    ctx: Ctx<'_>,
    dir: &Path,
    model: Spanned<RawModel>,
    sql_tools: &BTreeSet<String>,
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
            convert_script(ctx, steps, sql_tools)
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

/// Converts a script's steps; the first out-of-range `count` or `wait_s`, or the first template
/// in the SQL of a sql tool, is the error.
fn convert_script(
    ctx: Ctx<'_>,
    steps: Vec<Spanned<RawStep>>,
    sql_tools: &BTreeSet<String>,
) -> Result<ModelConfig, ConfigError> {
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
            RawStep::Invoke(i) => {
                // A templated name may resolve to a sql tool at run time: such a step is held
                // to the sql rule whenever the agent has one.
                let may_be_sql = sql_tools.contains(&i.name)
                    || (first_placeholder(&i.name).is_some() && !sql_tools.is_empty());
                if may_be_sql && let Some(arguments) = &i.arguments {
                    refuse_sql_templates_in(
                        ctx,
                        &i.name,
                        Pos::of(arguments),
                        key.key("invoke").key("arguments"),
                        &arguments.value,
                    )?;
                }
                ScriptStep::Invoke {
                    name: i.name,
                    arguments: i.arguments.map_or_else(
                        || serde_json::Value::Object(Default::default()),
                        |a| a.value,
                    ),
                }
            }
            RawStep::Tool(t) => {
                if sql_tools.contains(&t.name) {
                    let step = key.key("tool");
                    if let Some(input) = &t.input
                        && let Some(placeholder) = first_placeholder(&input.value)
                    {
                        return Err(ctx.invalid(
                            Pos::of(input),
                            &step.key("input"),
                            sql_template_message(&t.name, placeholder),
                        ));
                    }
                    if let Some(arguments) = &t.arguments {
                        refuse_sql_templates_in(
                            ctx,
                            &t.name,
                            Pos::of(arguments),
                            step.key("arguments"),
                            &arguments.value,
                        )?;
                    }
                }
                ScriptStep::Tool(ToolStep {
                    name: t.name,
                    input: t.input.map(|i| i.value).unwrap_or_default(),
                    arguments: t.arguments.map(|a| a.value),
                })
            }
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

/// The error for the first placeholder among the string values of a sql tool's `arguments`.
/// Positions inside a JSON value are not tracked, so the error points at the mapping and its
/// key path names the field.
fn refuse_sql_templates_in(
    ctx: Ctx<'_>,
    tool: &str,
    at: Pos,
    key: KeyPath,
    value: &serde_json::Value,
) -> Result<(), ConfigError> {
    match value {
        serde_json::Value::String(text) => match first_placeholder(text) {
            Some(placeholder) => {
                Err(ctx.invalid(at, &key, sql_template_message(tool, placeholder)))
            }
            None => Ok(()),
        },
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| refuse_sql_templates_in(ctx, tool, at, key.index(i), v)),
        serde_json::Value::Object(map) => map
            .iter()
            .try_for_each(|(k, v)| refuse_sql_templates_in(ctx, tool, at, key.key(k), v)),
        _ => Ok(()),
    }
}

/// What to write instead of a placeholder in a sql tool's query.
fn sql_template_message(tool: &str, placeholder: &str) -> String {
    if placeholder == "input" {
        format!(
            "`{{input}}` would paste the run's input into the SQL of tool `{tool}` (SQL \
             injection); bind it instead: write `:input` (without quotes) where `'{{input}}'` \
             stands"
        )
    } else {
        format!(
            "`{{{placeholder}}}` would paste text into the SQL of tool `{tool}` (SQL injection); \
             a sql tool's query takes no templates: `:input` binds the run's input, and `:KEY` \
             an env key the tool lists in `bind_env`"
        )
    }
}

/// The first placeholder in `text` that the script model fills in (`{input}`, `{n}`,
/// `{replies}`, `{last}`, `{reply.NAME}`, `{tool.NAME}`, `{call.NAME}`), without its braces.
///
/// It scans as the renderer does: a `{` up to the next `}`. Anything else in braces (a JSON
/// literal in SQL, say) is left as written by the renderer, so it is not a placeholder here.
pub(crate) fn first_placeholder(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = after.find('}')?;
        let key = &after[..end];
        if is_placeholder(key) {
            return Some(key);
        }
        rest = &after[end + 1..];
    }
    None
}

fn is_placeholder(key: &str) -> bool {
    match key {
        "input" | "n" | "replies" | "last" => true,
        _ => key
            .split_once('.')
            .is_some_and(|(kind, _)| matches!(kind, "reply" | "tool" | "call")),
    }
}

#[cfg(test)]
mod tests {
    use super::first_placeholder;

    #[test]
    fn finds_what_the_renderer_fills() {
        assert_eq!(first_placeholder("WHERE month = '{input}'"), Some("input"));
        assert_eq!(first_placeholder("x {n} y"), Some("n"));
        assert_eq!(first_placeholder("{replies}{last}"), Some("replies"));
        assert_eq!(first_placeholder("a {tool.ledger}"), Some("tool.ledger"));
        assert_eq!(first_placeholder("{reply.cfo}"), Some("reply.cfo"));
        assert_eq!(first_placeholder("{call.cfo}"), Some("call.cfo"));
        assert_eq!(first_placeholder("{x} then {input}"), Some("input"));
    }

    #[test]
    fn leaves_other_braces_alone() {
        assert_eq!(first_placeholder("SELECT 1"), None);
        assert_eq!(first_placeholder("WHERE month = :input"), None);
        assert_eq!(first_placeholder(r#"SELECT json('{"a": 1}')"#), None);
        assert_eq!(first_placeholder("{unknown} {input"), None);
        assert_eq!(first_placeholder("{inputs} {other.x}"), None);
    }
}
