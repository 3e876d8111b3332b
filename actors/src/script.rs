//! The deterministic `script` model declared in agent.yaml.
//!
//! A script is a list of steps; the model plays step `k` on its `k`-th turn that is not a
//! wait. While calls it placed are still out it waits, so a step after a `call` sees every
//! reply. Step text is a template:
//!
//! | placeholder    | becomes                                                              |
//! |----------------|----------------------------------------------------------------------|
//! | `{input}`      | the run's input                                                      |
//! | `{reply.NAME}` | the last reply from agent NAME, or the refusal if the call was refused |
//! | `{replies}`    | every reply, one `NAME: text` line each                              |
//! | `{tool.NAME}`  | the last result of tool NAME                                         |
//! | `{call.NAME}`  | the run id of the last call placed to NAME                           |
//! | `{last}`       | the last tool result or reply                                        |
//! | `{n}`          | in a `call` entry with `count`, the 1-based index of the call        |
//!
//! A `tool` step puts its `input` template in the tool's first required field, or, with
//! `arguments: {...}`, uses that object (its string values rendered) as the whole input. The
//! SQL of a sql tool holds no placeholder (consort-config refuses one): it binds `:input`.
//!
//! Steps `search: {query, limit}`, `load: NAME` and `invoke: {name, arguments}` use the
//! meta-tools `search_tools`, `load_tool` and `invoke_tool`; their results read back as
//! `{tool.search_tools}`, `{tool.load_tool}` and `{tool.invoke_tool}`.
//!
//! Tool-use ids are `tu_<step>_<index>`: the same on every replay of a turn. The script never
//! touches tools, stores or peers itself; it only reads the conversation it is given.

use serde_json::{Value, json};

use consort_config::ScriptStep;

use crate::model::{Message, Model, ModelFuture, ModelReply, ModelRequest, ModelStep, ToolUse};

/// A model that plays a fixed script.
#[derive(Clone, Debug)]
pub struct ScriptModel {
    steps: Vec<ScriptStep>,
}

impl ScriptModel {
    /// A model that plays `steps`, one per model turn.
    pub fn new(steps: Vec<ScriptStep>) -> Self {
        Self { steps }
    }

    /// The step this conversation is at, decided without I/O.
    pub fn decide(&self, request: &ModelRequest<'_>) -> ModelStep {
        if request.pending_calls > 0 {
            return ModelStep::Wait;
        }
        let index = request
            .conversation
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let Some(step) = self.steps.get(index) else {
            // A script that ran out of steps answers with what it last heard, so a run always ends.
            return ModelStep::Answer(render("{last}", request.conversation, None));
        };
        let conv = request.conversation;
        match step {
            ScriptStep::Answer(text) => ModelStep::Answer(render(text, conv, None)),
            ScriptStep::Call(calls) => {
                let mut uses = Vec::new();
                for call in calls {
                    for n in 1..=call.count.max(1) {
                        let mut input = json!({
                            "agent": call.agent,
                            "input": render(&call.input, conv, Some(n)),
                        });
                        if let Some(wait_s) = call.wait_s {
                            input["wait_s"] = json!(wait_s);
                        }
                        uses.push(ToolUse {
                            id: format!("tu_{index}_{}", uses.len()),
                            name: "call_agent".into(),
                            input,
                        });
                    }
                }
                ModelStep::ToolUses(uses)
            }
            ScriptStep::Tool(tool) if tool.arguments.is_some() => {
                let arguments = tool
                    .arguments
                    .as_ref()
                    .map_or(Value::Null, |a| render_value(a, conv));
                ModelStep::ToolUses(vec![ToolUse {
                    id: format!("tu_{index}_0"),
                    name: tool.name.clone(),
                    input: arguments,
                }])
            }
            ScriptStep::Tool(tool) => {
                let field = request
                    .tools
                    .iter()
                    .find(|t| t.name == tool.name)
                    .and_then(|t| first_required(&t.input_schema))
                    .unwrap_or_else(|| "input".to_owned());
                let mut input = serde_json::Map::new();
                input.insert(field, Value::String(render(&tool.input, conv, None)));
                ModelStep::ToolUses(vec![ToolUse {
                    id: format!("tu_{index}_0"),
                    name: tool.name.clone(),
                    input: Value::Object(input),
                }])
            }
            ScriptStep::Check(run_id) => ModelStep::ToolUses(vec![ToolUse {
                id: format!("tu_{index}_0"),
                name: "check_run".into(),
                input: json!({"run_id": render(run_id, conv, None)}),
            }]),
            ScriptStep::Search { query, limit } => {
                let mut input = json!({"query": render(query, conv, None)});
                if let Some(limit) = limit {
                    input["limit"] = json!(limit);
                }
                ModelStep::ToolUses(vec![ToolUse {
                    id: format!("tu_{index}_0"),
                    name: "search_tools".into(),
                    input,
                }])
            }
            ScriptStep::Load(name) => ModelStep::ToolUses(vec![ToolUse {
                id: format!("tu_{index}_0"),
                name: "load_tool".into(),
                input: json!({"name": render(name, conv, None)}),
            }]),
            ScriptStep::Invoke { name, arguments } => ModelStep::ToolUses(vec![ToolUse {
                id: format!("tu_{index}_0"),
                name: "invoke_tool".into(),
                input: json!({
                    "name": render(name, conv, None),
                    "arguments": render_value(arguments, conv),
                }),
            }]),
        }
    }
}

impl Model for ScriptModel {
    fn respond<'a>(&'a self, request: ModelRequest<'a>) -> ModelFuture<'a> {
        let step = self.decide(&request);
        Box::pin(async move { Ok(ModelReply::new(step)) })
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

fn first_required(schema: &Value) -> Option<String> {
    schema
        .get("required")?
        .as_array()?
        .first()?
        .as_str()
        .map(str::to_owned)
}

/// Renders every string inside a JSON value as a template (keys are left as written).
pub fn render_value(value: &Value, conv: &[Message]) -> Value {
    match value {
        Value::String(text) => Value::String(render(text, conv, None)),
        Value::Array(items) => Value::Array(items.iter().map(|v| render_value(v, conv)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render_value(v, conv)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Renders a template against the conversation. Unknown placeholders are left as written so
/// a typo shows in the answer instead of vanishing.
pub fn render(template: &str, conv: &[Message], n: Option<u32>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) => {
                let key = &after[..end];
                match resolve(key, conv, n) {
                    Some(value) => out.push_str(&value),
                    None => {
                        out.push('{');
                        out.push_str(key);
                        out.push('}');
                    }
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn resolve(key: &str, conv: &[Message], n: Option<u32>) -> Option<String> {
    match key {
        "input" => conv.iter().find_map(|m| match m {
            Message::User(text) => Some(text.clone()),
            _ => None,
        }),
        "n" => n.map(|n| n.to_string()),
        "replies" => Some(
            conv.iter()
                .filter_map(|m| match m {
                    Message::Reply { from, text, .. } => Some(format!("{from}: {text}")),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        "last" => Some(
            conv.iter()
                .rev()
                .find_map(|m| match m {
                    Message::Reply { text, .. } => Some(text.clone()),
                    Message::ToolResult { content, .. } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
        ),
        _ => {
            let (kind, name) = key.split_once('.')?;
            match kind {
                "reply" => Some(reply_from(conv, name)),
                "tool" => Some(
                    conv.iter()
                        .rev()
                        .find_map(|m| match m {
                            Message::ToolResult {
                                name: tool,
                                content,
                                ..
                            } if tool == name => Some(content.clone()),
                            _ => None,
                        })
                        .unwrap_or_else(|| format!("(no result from tool {name})")),
                ),
                "call" => Some(
                    call_results(conv, name)
                        .filter_map(|(content, _)| {
                            serde_json::from_str::<Value>(content)
                                .ok()?
                                .get("run_id")?
                                .as_str()
                                .map(str::to_owned)
                        })
                        .last()
                        .unwrap_or_else(|| format!("(no call placed to {name})")),
                ),
                _ => None,
            }
        }
    }
}

/// The last reply from `agent`, or the refusal of the last call to it.
fn reply_from(conv: &[Message], agent: &str) -> String {
    let reply = conv.iter().rev().find_map(|m| match m {
        Message::Reply { from, text, .. } if from == agent => Some(text.clone()),
        _ => None,
    });
    reply
        .or_else(|| {
            call_results(conv, agent)
                .filter(|(_, is_error)| *is_error)
                .map(|(content, _)| content.to_owned())
                .last()
        })
        .unwrap_or_else(|| format!("(no reply from {agent})"))
}

/// Results of call_agent tool uses addressed to `agent`, in order: (content, is_error).
fn call_results<'c>(conv: &'c [Message], agent: &'c str) -> impl Iterator<Item = (&'c str, bool)> {
    let to_agent: Vec<&str> = conv
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_uses } => Some(tool_uses),
            _ => None,
        })
        .flatten()
        .filter(|t| {
            t.name == "call_agent" && t.input.get("agent").and_then(Value::as_str) == Some(agent)
        })
        .map(|t| t.id.as_str())
        .collect();
    conv.iter().filter_map(move |m| match m {
        Message::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } if to_agent.contains(&tool_use_id.as_str()) => Some((content.as_str(), *is_error)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use consort_config::{CallStep, ToolStep};
    use consort_net::RunId;

    fn request<'a>(conv: &'a [Message], pending: usize) -> ModelRequest<'a> {
        ModelRequest {
            agent: "cmo",
            conversation: conv,
            pending_calls: pending,
            tools: &[],
        }
    }

    #[test]
    fn plays_steps_in_order_and_waits_for_replies() {
        let model = ScriptModel::new(vec![
            ScriptStep::Call(vec![CallStep {
                agent: "cfo".into(),
                input: "spend in {input}".into(),
                count: 2,
                wait_s: None,
            }]),
            ScriptStep::Answer("cfo says {reply.cfo}".into()),
        ]);
        let mut conv = vec![Message::User("August".into())];
        let ModelStep::ToolUses(uses) = model.decide(&request(&conv, 0)) else {
            panic!("expected calls")
        };
        assert_eq!(uses.len(), 2);
        assert_eq!(uses[0].id, "tu_0_0");
        assert_eq!(uses[1].input["input"], "spend in August");
        conv.push(Message::Assistant { tool_uses: uses });
        assert_eq!(model.decide(&request(&conv, 2)), ModelStep::Wait);
        conv.push(Message::Reply {
            from: "cfo".into(),
            run_id: RunId::random(),
            text: "48,250".into(),
            failed: false,
        });
        assert_eq!(
            model.decide(&request(&conv, 0)),
            ModelStep::Answer("cfo says 48,250".into())
        );
    }

    #[test]
    fn refused_call_renders_as_the_reply() {
        let conv = vec![
            Message::User("x".into()),
            Message::Assistant {
                tool_uses: vec![ToolUse {
                    id: "tu_0_0".into(),
                    name: "call_agent".into(),
                    input: json!({"agent": "e", "input": "x"}),
                }],
            },
            Message::ToolResult {
                tool_use_id: "tu_0_0".into(),
                name: "call_agent".into(),
                content: "call chain depth limit (4) reached".into(),
                is_error: true,
            },
        ];
        assert_eq!(
            render("got: {reply.e}", &conv, None),
            "got: call chain depth limit (4) reached"
        );
        assert_eq!(render("{unknown} {input", &conv, None), "{unknown} {input");
    }

    #[test]
    fn tool_step_uses_the_first_required_field() {
        let model = ScriptModel::new(vec![ScriptStep::Tool(ToolStep {
            name: "lookup".into(),
            input: "find {input}".into(),
            arguments: None,
        })]);
        let conv = vec![Message::User("q".into())];
        let tools = [crate::model::ToolSpec {
            name: "lookup".into(),
            description: String::new(),
            input_schema: json!({"type": "object", "required": ["term"]}),
        }];
        let req = ModelRequest {
            agent: "cfo",
            conversation: &conv,
            pending_calls: 0,
            tools: &tools,
        };
        let ModelStep::ToolUses(uses) = model.decide(&req) else {
            panic!()
        };
        assert_eq!(uses[0].input, json!({"term": "find q"}));
    }
}
