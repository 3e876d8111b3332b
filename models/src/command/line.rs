//! The JSON-lines protocol of `kind: command` models: one request object per line on the
//! program's stdin, one answer object per line on its stdout. Nothing here does I/O.
//!
//! A request:
//!
//! ```json
//! {"version": 1, "agent": "cfo", "system": "You are the agent `cfo`. …",
//!  "messages": [
//!    {"role": "user", "content": "What did we spend in August 2026?"},
//!    {"role": "assistant", "tool_uses": [{"id": "tu_0_0", "name": "ledger", "input": {"query": "…"}}]},
//!    {"role": "tool", "tool_use_id": "tu_0_0", "name": "ledger", "content": "48250.00", "is_error": false},
//!    {"role": "reply", "from": "cfo", "run_id": "run_…", "content": "…", "failed": false}],
//!  "tools": [{"name": "ledger", "description": "…", "input_schema": {…}}],
//!  "pending_calls": 0}
//! ```
//!
//! An answer is one of `{"answer": "text"}`, `{"tool_uses": [{"name": …, "input": {…}}]}`
//! (`input` may also be a JSON text) or `{"wait": true}`, each with an optional
//! `"usage": {"input_tokens": n, "output_tokens": n}`; or `{"error": "text"}`, which fails the
//! run with that text. Unknown keys are ignored, so the format can grow.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::repair::{Draft, DraftArguments, DraftCall};
use crate::turn::Usage;
use crate::{Message, ModelRequest, ToolSpec};

/// The protocol version a request carries.
pub const LINE_VERSION: u32 = 1;

/// One request line, without its newline.
pub fn request_line(
    request: &ModelRequest<'_>,
    system: &str,
    conversation: &[Message],
    tools: &[ToolSpec],
) -> String {
    let messages: Vec<Value> = conversation.iter().map(message).collect();
    json!({
        "version": LINE_VERSION,
        "agent": request.agent,
        "system": system,
        "messages": messages,
        "tools": tools,
        "pending_calls": request.pending_calls,
    })
    .to_string()
}

fn message(m: &Message) -> Value {
    match m {
        Message::User(text) => json!({"role": "user", "content": text}),
        Message::Assistant { tool_uses } => json!({"role": "assistant", "tool_uses": tool_uses}),
        Message::ToolResult {
            tool_use_id,
            name,
            content,
            is_error,
        } => {
            json!({"role": "tool", "tool_use_id": tool_use_id, "name": name, "content": content, "is_error": is_error})
        }
        Message::Reply {
            from,
            run_id,
            text,
            failed,
        } => {
            json!({"role": "reply", "from": from, "run_id": run_id.to_string(), "content": text, "failed": failed})
        }
    }
}

#[derive(Deserialize)]
struct RawAnswer {
    answer: Option<String>,
    tool_uses: Option<Vec<RawUse>>,
    #[serde(default)]
    wait: bool,
    error: Option<String>,
    usage: Option<RawUsage>,
}

#[derive(Deserialize)]
struct RawUse {
    #[serde(default)]
    name: String,
    #[serde(default)]
    input: Value,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// What an answer line says.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// A turn to check.
    Turn(Draft, Usage),
    /// The program gave up with this text.
    Error(String),
}

/// Reads one answer line. `{"wait": true}` becomes a call of `wait_for_replies`, so the same
/// check decides whether waiting makes sense.
pub fn parse_answer(line: &str) -> Result<Answer, String> {
    let raw: RawAnswer = serde_json::from_str(line).map_err(|e| {
        let shown: String = line.chars().take(200).collect();
        format!("the model program's answer is not a JSON object ({e}): {shown}")
    })?;
    if let Some(error) = raw.error {
        return Ok(Answer::Error(error));
    }
    let usage = raw
        .usage
        .map(|u| Usage {
            input: u.input_tokens,
            output: u.output_tokens,
        })
        .unwrap_or_default();
    let mut calls: Vec<DraftCall> = raw
        .tool_uses
        .unwrap_or_default()
        .into_iter()
        .map(|u| DraftCall {
            name: u.name,
            arguments: match u.input {
                Value::String(s) => DraftArguments::Text(s),
                other => DraftArguments::Value(other),
            },
        })
        .collect();
    if raw.wait && calls.is_empty() {
        calls.push(DraftCall {
            name: crate::prompt::WAIT_FOR_REPLIES.into(),
            arguments: DraftArguments::Value(json!({})),
        });
    }
    Ok(Answer::Turn(
        Draft {
            text: raw.answer,
            calls,
        },
        usage,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolUse;

    #[test]
    fn a_request_is_one_line_with_every_message_kind() {
        let conversation = [
            Message::User("q\nwith a newline".into()),
            Message::Assistant {
                tool_uses: vec![ToolUse {
                    id: "tu_0_0".into(),
                    name: "t".into(),
                    input: json!({"a": 1}),
                }],
            },
            Message::ToolResult {
                tool_use_id: "tu_0_0".into(),
                name: "t".into(),
                content: "ok".into(),
                is_error: false,
            },
            Message::Reply {
                from: "cfo".into(),
                run_id: consort_core::RunId::random(),
                text: "48".into(),
                failed: true,
            },
        ];
        let request = ModelRequest {
            agent: "cmo",
            conversation: &conversation,
            pending_calls: 1,
            tools: &[],
        };
        let line = request_line(&request, "sys", &conversation, &[]);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["pending_calls"], 1);
        let roles: Vec<&str> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "reply"]);
        assert_eq!(v["messages"][1]["tool_uses"][0]["input"]["a"], 1);
        assert_eq!(v["messages"][3]["failed"], true);
    }

    #[test]
    fn answers_are_read() {
        let Ok(Answer::Turn(d, u)) = parse_answer(
            r#"{"answer":"48","usage":{"input_tokens":3,"output_tokens":1},"extra":1}"#,
        ) else {
            panic!()
        };
        assert_eq!(
            (d.text.as_deref(), u),
            (
                Some("48"),
                Usage {
                    input: 3,
                    output: 1
                }
            )
        );
        let Ok(Answer::Turn(d, _)) = parse_answer(
            r#"{"tool_uses":[{"name":"t","input":{"q":1}},{"name":"u","input":"{\"q\":"}]}"#,
        ) else {
            panic!()
        };
        assert_eq!(d.calls[0].arguments, DraftArguments::Value(json!({"q": 1})));
        assert_eq!(d.calls[1].arguments, DraftArguments::Text("{\"q\":".into()));
        let Ok(Answer::Turn(d, _)) = parse_answer(r#"{"wait":true}"#) else {
            panic!()
        };
        assert_eq!(d.calls[0].name, crate::prompt::WAIT_FOR_REPLIES);
        assert_eq!(
            parse_answer(r#"{"error":"out of memory"}"#),
            Ok(Answer::Error("out of memory".into()))
        );
        assert!(parse_answer("hello").is_err());
        assert!(parse_answer("[1]").is_err());
    }
}
