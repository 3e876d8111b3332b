//! The chat-completions wire format: a request body from a conversation, and a [`Draft`] with
//! its token usage from a response body.
//!
//! consort's own serde types, not a crate's: the servers this adapter talks to agree on the
//! core of the format but differ at the edges (arguments as a JSON text or as an object, tool
//! call ids missing or repeated, `content` as a string, `null` or a list of parts), and a
//! lenient reader of exactly the fields consort uses is smaller and steadier than a full typed
//! client of one vendor's API. Nothing here does I/O.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::repair::{Draft, DraftArguments, DraftCall};
pub use crate::turn::Usage;
use crate::{Message, ToolSpec};

/// The settings of a request that come from agent.yaml.
#[derive(Clone, Copy, Debug)]
pub struct Sampling<'a> {
    /// The model name.
    pub model: &'a str,
    /// `temperature`, if set.
    pub temperature: Option<f64>,
    /// `max_tokens`, if set.
    pub max_tokens: Option<u32>,
    /// Ask for a streamed answer.
    pub stream: bool,
    /// Send `tool_choice: "required"` (every turn a tool call; the answer is `final_answer`).
    pub tool_choice_required: bool,
}

/// The request body for one turn.
pub fn request_body(
    sampling: Sampling<'_>,
    system: &str,
    conversation: &[Message],
    tools: &[ToolSpec],
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(sampling.model));
    body.insert(
        "messages".into(),
        Value::Array(messages(system, conversation)),
    );
    if !tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(
                tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description, "parameters": t.input_schema,
                        }})
                    })
                    .collect(),
            ),
        );
    }
    if sampling.tool_choice_required && !tools.is_empty() {
        body.insert("tool_choice".into(), json!("required"));
    }
    if let Some(t) = sampling.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(n) = sampling.max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if sampling.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// The messages of a request: the system prompt, then the conversation in the API's roles.
///
/// The API wants each assistant turn's tool calls answered by tool messages right after it. A
/// run's log can interleave (a peer's reply may land while a slow tool of the same turn still
/// runs), so a user message that arrives while calls of the last turn are unanswered is held
/// until they are; a call with no recorded result gets one that says so.
pub fn messages(system: &str, conversation: &[Message]) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": system})];
    let mut open: Vec<String> = Vec::new();
    let mut held: Vec<Value> = Vec::new();
    for message in conversation {
        match message {
            Message::Assistant { tool_uses } => {
                close(&mut out, &mut open, &mut held);
                out.push(json!({
                    "role": "assistant",
                    "content": Value::Null,
                    "tool_calls": tool_uses.iter().map(|u| json!({
                        "id": u.id,
                        "type": "function",
                        "function": {"name": u.name, "arguments": arguments_text(&u.input)},
                    })).collect::<Vec<_>>(),
                }));
                open = tool_uses.iter().map(|u| u.id.clone()).collect();
            }
            Message::ToolResult {
                tool_use_id,
                content,
                ..
            } => {
                if let Some(at) = open.iter().position(|id| id == tool_use_id) {
                    open.remove(at);
                    out.push(
                        json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}),
                    );
                    if open.is_empty() {
                        out.append(&mut held);
                    }
                } else {
                    // A result of a turn already closed: the model still reads it, as text.
                    push_user(&mut out, &open, &mut held, message.render());
                }
            }
            Message::User(_) | Message::Reply { .. } => {
                push_user(&mut out, &open, &mut held, message.render());
            }
        }
    }
    close(&mut out, &mut open, &mut held);
    out
}

fn push_user(out: &mut Vec<Value>, open: &[String], held: &mut Vec<Value>, text: String) {
    let message = json!({"role": "user", "content": text});
    if open.is_empty() {
        out.push(message);
    } else {
        held.push(message);
    }
}

fn close(out: &mut Vec<Value>, open: &mut Vec<String>, held: &mut Vec<Value>) {
    for id in open.drain(..) {
        out.push(json!({"role": "tool", "tool_call_id": id, "content": "(no result was recorded for this call)"}));
    }
    out.append(held);
}

/// A tool use's input as the API's `arguments` text; a malformed text the model wrote (kept
/// as a string by the repair loop) goes back as it was written.
fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[derive(Deserialize)]
struct RawResponse {
    #[serde(default)]
    choices: Vec<RawChoice>,
    usage: Option<RawUsage>,
}

#[derive(Deserialize)]
struct RawChoice {
    message: Option<RawMessage>,
}

#[derive(Deserialize, Default)]
struct RawMessage {
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_calls: Vec<RawToolCall>,
}

#[derive(Deserialize)]
struct RawToolCall {
    function: Option<RawFunction>,
}

#[derive(Deserialize)]
struct RawFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize, Clone, Copy)]
pub(super) struct RawUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<RawUsage> for Usage {
    fn from(u: RawUsage) -> Self {
        Self {
            input: u.prompt_tokens,
            output: u.completion_tokens,
        }
    }
}

/// Reads a (non-streamed) response body.
pub fn parse_response(body: &[u8]) -> Result<(Draft, Usage), String> {
    let raw: RawResponse = serde_json::from_slice(body)
        .map_err(|e| format!("not a chat-completions response ({e}): {}", excerpt(body)))?;
    let usage = raw.usage.map(Usage::from).unwrap_or_default();
    let Some(message) = raw.choices.into_iter().next().and_then(|c| c.message) else {
        return Err(format!(
            "the response has no choice with a message: {}",
            excerpt(body)
        ));
    };
    let calls = message
        .tool_calls
        .into_iter()
        .filter_map(|c| c.function)
        .map(|f| DraftCall {
            name: f.name,
            arguments: match f.arguments {
                Value::String(s) => DraftArguments::Text(s),
                other => DraftArguments::Value(other),
            },
        })
        .collect();
    Ok((
        Draft {
            text: content_text(&message.content),
            calls,
        },
        usage,
    ))
}

/// `content` as text: a string, or the text parts of a list; `null` is none.
pub(super) fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let text: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            Some(text)
        }
        _ => None,
    }
}

/// The server's own words from an error body (`{"error": {"message": …}}` or a plain text),
/// shortened.
pub fn error_detail(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        let error = v.get("error")?;
        error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .map(str::to_owned)
    });
    match message {
        Some(m) => shorten(&m),
        None => excerpt(body),
    }
}

/// The most characters of a server's text kept in an error.
const EXCERPT_CHARS: usize = 300;

fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if text.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    out
}

pub(super) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".into()
    } else {
        shorten(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolUse;

    fn sampling() -> Sampling<'static> {
        Sampling {
            model: "m",
            temperature: None,
            max_tokens: None,
            stream: false,
            tool_choice_required: false,
        }
    }

    #[test]
    fn a_request_carries_the_conversation_in_api_roles() {
        let conversation = [
            Message::User("What did we spend in August?".into()),
            Message::Assistant {
                tool_uses: vec![ToolUse {
                    id: "tu_0_0".into(),
                    name: "call_agent".into(),
                    input: json!({"agent": "cfo", "input": "August 2026 spend?"}),
                }],
            },
            Message::ToolResult {
                tool_use_id: "tu_0_0".into(),
                name: "call_agent".into(),
                content: "run 7 started".into(),
                is_error: false,
            },
            Message::Reply {
                from: "cfo".into(),
                run_id: consort_core::RunId::random(),
                text: "48250.00 USD".into(),
                failed: false,
            },
        ];
        let tools = [ToolSpec {
            name: "call_agent".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }];
        let body = request_body(
            Sampling {
                temperature: Some(0.0),
                max_tokens: Some(64),
                stream: true,
                tool_choice_required: true,
                ..sampling()
            },
            "sys",
            &conversation,
            &tools,
        );
        assert_eq!(body["model"], "m");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
        let m = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"agent\":\"cfo\",\"input\":\"August 2026 spend?\"}"
        );
        assert_eq!(m[3]["tool_call_id"], "tu_0_0");
        assert_eq!(m[4]["content"], "[reply from cfo] 48250.00 USD");
        assert!(
            request_body(sampling(), "s", &[], &[])
                .get("tools")
                .is_none()
        );
    }

    #[test]
    fn a_reply_landing_between_a_turn_and_its_results_is_held_until_they_are_in() {
        let uses = |ids: &[&str]| Message::Assistant {
            tool_uses: ids
                .iter()
                .map(|id| ToolUse {
                    id: (*id).into(),
                    name: "t".into(),
                    input: json!({}),
                })
                .collect(),
        };
        let result = |id: &str| Message::ToolResult {
            tool_use_id: id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
        };
        let conversation = [
            Message::User("q".into()),
            uses(&["a", "b"]),
            result("a"),
            Message::User("late".into()),
            result("b"),
            uses(&["c"]),
            Message::User("never answered".into()),
        ];
        let m = messages("s", &conversation);
        let shape: Vec<String> = m
            .iter()
            .map(|x| {
                format!(
                    "{}:{}",
                    x["role"].as_str().unwrap(),
                    x.get("tool_call_id").and_then(Value::as_str).unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                "system:",
                "user:",
                "assistant:",
                "tool:a",
                "tool:b",
                "user:",
                "assistant:",
                "tool:c",
                "user:"
            ]
        );
        assert_eq!(m[5]["content"], "late");
        assert!(m[7]["content"].as_str().unwrap().contains("no result"));
    }

    #[test]
    fn responses_are_read_leniently() {
        let (draft, usage) = parse_response(br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"ledger","arguments":"{\"query\":\"SELECT 1\"}"}},{"function":{"name":"t","arguments":{"a":1}}}]}}],"usage":{"prompt_tokens":12,"completion_tokens":5}}"#).unwrap();
        assert_eq!(
            usage,
            Usage {
                input: 12,
                output: 5
            }
        );
        assert_eq!(draft.text, None);
        assert_eq!(
            draft.calls[0].arguments,
            DraftArguments::Text("{\"query\":\"SELECT 1\"}".into())
        );
        assert_eq!(
            draft.calls[1].arguments,
            DraftArguments::Value(json!({"a": 1}))
        );

        let (draft, usage) = parse_response(br#"{"choices":[{"message":{"content":[{"type":"text","text":"48"},{"type":"text","text":"250"}]}}]}"#).unwrap();
        assert_eq!(
            (draft.text.as_deref(), usage),
            (Some("48250"), Usage::default())
        );

        for bad in [
            &b"<html>502</html>"[..],
            br#"{"choices":[]}"#,
            br#"{"choices":"x"}"#,
        ] {
            assert!(parse_response(bad).is_err());
        }
    }

    #[test]
    fn error_details_prefer_the_servers_message_and_are_short() {
        assert_eq!(
            error_detail(br#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(error_detail(br#"{"error":"bad"}"#), "bad");
        assert_eq!(error_detail(b""), "(empty body)");
        let long = "x".repeat(1000);
        assert_eq!(
            error_detail(long.as_bytes()).chars().count(),
            EXCERPT_CHARS + 1
        );
    }
}
