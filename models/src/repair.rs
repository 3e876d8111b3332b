//! The check of a real model's turn, and what the model is told when the turn is malformed.
//!
//! An adapter reads the wire into a [`Draft`]: the text and the tool calls as the model wrote
//! them. [`check_turn`] turns a draft into a [`ModelStep`] or into [`Problem`]s: a call to a
//! tool the model was not offered, arguments that are not a JSON object, an empty turn,
//! `wait_for_replies` with nothing out. A malformed turn is never recorded; the adapter appends
//! [`feedback`] (the turn as written and one tool result per call saying what was wrong) to its
//! copy of the conversation and asks again, up to `repair_attempts` times, then fails the run
//! with the last problem. Nothing here does I/O.
//!
//! Tool-use ids are assigned here, never taken from the server: `tu_<turn>_<index>`, where
//! `<turn>` counts the tool-using turns already in the conversation. They are unique in a run
//! whatever the server sends (some send none, some repeat them), and a child run id derives
//! from them.

use serde_json::{Map, Value};

use crate::prompt::{FINAL_ANSWER, WAIT_FOR_REPLIES};
use crate::{Message, ModelRequest, ModelStep, ToolSpec, ToolUse};

/// A model's turn as written, before it is checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    /// The text of the turn, if any.
    pub text: Option<String>,
    /// Its tool calls, in order.
    pub calls: Vec<DraftCall>,
}

/// One tool call as the model wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: DraftArguments,
}

/// Arguments as they came: the OpenAI API sends a JSON text, some servers and the command
/// protocol send an object.
#[derive(Clone, Debug, PartialEq)]
pub enum DraftArguments {
    /// A JSON text still to parse.
    Text(String),
    /// Already a JSON value.
    Value(Value),
}

/// What is wrong with a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The call it is about (`None`: the turn as a whole).
    pub call: Option<usize>,
    /// What the model is told.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The index of the next tool-using turn: ids of this turn are `tu_<turn>_<i>`.
fn turn_index(conversation: &[Message]) -> usize {
    conversation
        .iter()
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count()
}

/// The most tool names listed in a "no tool named" message.
const LISTED_NAMES: usize = 20;

/// Checks a draft against the tools offered (`offered`, which includes `wait_for_replies`
/// when calls are out).
///
/// `tools_only` (`tool_choice: required`): every turn must be a tool call, the answer a
/// `final_answer` call. A text-only turn is then read for a tool call written into the text
/// (see [`calls_in_text`]); failing that, it is a problem the model is told about.
pub fn check_turn(
    draft: &Draft,
    request: &ModelRequest<'_>,
    offered: &[ToolSpec],
    tools_only: bool,
) -> Result<ModelStep, Vec<Problem>> {
    if draft.calls.is_empty() {
        let text = draft.text.as_deref().map(str::trim).unwrap_or_default();
        if tools_only {
            let calls = calls_in_text(text, offered);
            if calls.is_empty() {
                return Err(vec![Problem {
                    call: None,
                    message: format!(
                        "reply with a tool call, not text: call one of your tools, or `{FINAL_ANSWER}` with your final answer"
                    ),
                }]);
            }
            let found = Draft { text: None, calls };
            return check_turn(&found, request, offered, false);
        }
        return if text.is_empty() {
            Err(vec![Problem {
                call: None,
                message:
                    "your reply was empty: write your answer as text, or call one of your tools"
                        .into(),
            }])
        } else {
            Ok(ModelStep::Answer(text.to_owned()))
        };
    }
    let mut problems = Vec::new();
    let mut uses = Vec::new();
    let mut waits = false;
    let mut answer = None;
    let turn = turn_index(request.conversation);
    for (i, call) in draft.calls.iter().enumerate() {
        if !offered.iter().any(|t| t.name == call.name) {
            let mut names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
            let more = names.len().saturating_sub(LISTED_NAMES);
            names.truncate(LISTED_NAMES);
            let mut message = format!(
                "there is no tool named `{}`; the tools you can call are: {}",
                call.name,
                names.join(", ")
            );
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            problems.push(Problem {
                call: Some(i),
                message,
            });
            continue;
        }
        let input = match arguments_object(&call.arguments) {
            Ok(input) => input,
            Err(why) => {
                problems.push(Problem {
                    call: Some(i),
                    message: format!(
                        "the arguments of `{}` are not a JSON object ({why}); send the call again with a JSON object that matches its schema",
                        call.name
                    ),
                });
                continue;
            }
        };
        if call.name == WAIT_FOR_REPLIES {
            waits = true;
            continue;
        }
        if call.name == FINAL_ANSWER {
            match input.get("text").and_then(Value::as_str).map(str::trim) {
                Some(text) if !text.is_empty() => answer = Some(text.to_owned()),
                _ => problems.push(Problem {
                    call: Some(i),
                    message: format!(
                        "`{FINAL_ANSWER}` needs your answer as a non-empty string in `text`"
                    ),
                }),
            }
            continue;
        }
        uses.push(ToolUse {
            id: format!("tu_{turn}_{}", uses.len()),
            name: call.name.clone(),
            input,
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    if !uses.is_empty() {
        // A wait or an answer beside other calls is premature: those run first, and the model
        // is asked again with their results.
        return Ok(ModelStep::ToolUses(uses));
    }
    if let Some(text) = answer {
        return Ok(ModelStep::Answer(text));
    }
    if waits && request.pending_calls > 0 {
        return Ok(ModelStep::Wait);
    }
    Err(vec![Problem {
        call: draft.calls.iter().position(|c| c.name == WAIT_FOR_REPLIES),
        message:
            "no calls are out, so there is nothing to wait for: answer, or call one of your tools"
                .into(),
    }])
}

/// Tool calls a model wrote into its text instead of the API's `tool_calls`: a JSON object
/// `{"name": …, "arguments": {…}}` (or `"parameters"`), or a list of them, inside
/// `<tool_call>` tags, a fenced code block, or bare, also with doubled outer braces (a small
/// model copying a template's `{{…}}`). Only calls of offered tools count: anything else is
/// text.
pub fn calls_in_text(text: &str, offered: &[ToolSpec]) -> Vec<DraftCall> {
    let mut candidates: Vec<&str> = Vec::new();
    for (open, close) in [
        ("<tool_call>", "</tool_call>"),
        ("```json", "```"),
        ("```", "```"),
    ] {
        let mut rest = text;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len()..];
            let end = after.find(close).unwrap_or(after.len());
            candidates.push(&after[..end]);
            rest = &after[end..];
            if rest.len() >= close.len() {
                rest = &rest[close.len()..];
            }
        }
        if !candidates.is_empty() {
            break;
        }
    }
    if candidates.is_empty()
        && let (Some(start), Some(end)) = (text.find(['{', '[']), text.rfind(['}', ']']))
        && start < end
    {
        candidates.push(&text[start..=end]);
    }
    let calls: Vec<DraftCall> = candidates
        .into_iter()
        .filter_map(parse_embedded)
        .flatten()
        .filter(|c| offered.iter().any(|t| t.name == c.name))
        .collect();
    if !calls.is_empty() {
        return calls;
    }
    named_call_in_text(text, offered).into_iter().collect()
}

/// A call written as an offered tool's name followed by its arguments object
/// (`call_agent with {"agent": "cfo", …}`, `ledger({"query": …})`): the first such name in the
/// text whose next bracket, within a few characters, opens a JSON object.
fn named_call_in_text(text: &str, offered: &[ToolSpec]) -> Option<DraftCall> {
    offered
        .iter()
        .filter_map(|tool| {
            let at = text.find(tool.name.as_str())?;
            let after = &text[at + tool.name.len()..];
            let brace = after.find('{')?;
            let between = &after[..brace];
            // Only a separator may stand between the name and its object: ` with `, `(`, `:`.
            let separator = between
                .trim()
                .trim_start_matches("with")
                .trim_start_matches(['(', ':']);
            if !separator.trim().is_empty() {
                return None;
            }
            let value = serde_json::Deserializer::from_str(&after[brace..])
                .into_iter::<Value>()
                .next()?
                .ok()?;
            value.is_object().then(|| {
                (
                    at,
                    DraftCall {
                        name: tool.name.clone(),
                        arguments: DraftArguments::Value(value),
                    },
                )
            })
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, call)| call)
}

/// One candidate text as calls, if it is one: the first JSON value that starts at one of the
/// candidate's first few brackets (so `{{…}}` and trailing text are read past).
fn parse_embedded(candidate: &str) -> Option<Vec<DraftCall>> {
    let starts = candidate
        .char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .map(|(i, _)| i)
        .take(4);
    starts
        .filter_map(|i| {
            serde_json::Deserializer::from_str(&candidate[i..])
                .into_iter::<Value>()
                .next()?
                .ok()
        })
        .find_map(calls_of)
}

/// `{"name", "arguments" | "parameters"}` or a list of them, as calls.
fn calls_of(value: Value) -> Option<Vec<DraftCall>> {
    let items = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    items
        .into_iter()
        .map(|item| {
            let name = item.get("name")?.as_str()?.to_owned();
            let arguments = item
                .get("arguments")
                .or_else(|| item.get("parameters"))
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            Some(DraftCall {
                name,
                arguments: match arguments {
                    Value::String(s) => DraftArguments::Text(s),
                    other => DraftArguments::Value(other),
                },
            })
        })
        .collect()
}

/// The arguments as an object; an empty text counts as `{}` (models send it for tools without
/// parameters).
fn arguments_object(arguments: &DraftArguments) -> Result<Value, String> {
    let value = match arguments {
        DraftArguments::Value(v) => v.clone(),
        DraftArguments::Text(t) if t.trim().is_empty() => Value::Object(Map::new()),
        DraftArguments::Text(t) => serde_json::from_str(t).map_err(|e| e.to_string())?,
    };
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(format!("found {}", kind_of(&other))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What the model reads before it is asked again: the malformed turn as it wrote it, then one
/// tool result per call (its problem, or that it was not run), or for an empty turn a user
/// line. `attempt` keeps the ids of successive repairs apart.
pub fn feedback(draft: &Draft, problems: &[Problem], attempt: u32) -> Vec<Message> {
    if draft.calls.is_empty() {
        let text = problems
            .iter()
            .map(|p| p.message.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        return vec![Message::User(format!("(consort) {text}"))];
    }
    let ids: Vec<String> = (0..draft.calls.len())
        .map(|i| format!("repair_{attempt}_{i}"))
        .collect();
    let mut out = vec![Message::Assistant {
        tool_uses: draft
            .calls
            .iter()
            .zip(&ids)
            .map(|(call, id)| ToolUse {
                id: id.clone(),
                name: call.name.clone(),
                input: match &call.arguments {
                    DraftArguments::Value(v) => v.clone(),
                    DraftArguments::Text(t) => Value::String(t.clone()),
                },
            })
            .collect(),
    }];
    for (i, (call, id)) in draft.calls.iter().zip(&ids).enumerate() {
        let content = problems
            .iter()
            .find(|p| p.call == Some(i))
            .map(|p| p.message.clone())
            .unwrap_or_else(|| {
                "not run: another call in the same turn was malformed; send the whole turn again"
                    .into()
            });
        out.push(Message::ToolResult {
            tool_use_id: id.clone(),
            name: call.name.clone(),
            content,
            is_error: true,
        });
    }
    out
}

/// The problems of a turn in one line, for the error that fails a run.
pub fn describe(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }
    }

    fn call(name: &str, args: &str) -> DraftCall {
        DraftCall {
            name: name.into(),
            arguments: DraftArguments::Text(args.into()),
        }
    }

    fn check(
        draft: &Draft,
        conversation: &[Message],
        pending: usize,
        offered: &[&str],
    ) -> Result<ModelStep, Vec<Problem>> {
        let offered: Vec<ToolSpec> = offered.iter().map(|n| spec(n)).collect();
        let request = ModelRequest {
            agent: "a",
            conversation,
            pending_calls: pending,
            tools: &offered,
        };
        check_turn(draft, &request, &offered, false)
    }

    #[test]
    fn text_alone_is_the_answer_and_an_empty_turn_is_a_problem() {
        let draft = Draft {
            text: Some("  48250 USD \n".into()),
            calls: vec![],
        };
        assert_eq!(
            check(&draft, &[], 0, &[]),
            Ok(ModelStep::Answer("48250 USD".into()))
        );
        for text in [None, Some(String::new()), Some(" \n".into())] {
            let draft = Draft {
                text,
                calls: vec![],
            };
            let problems = check(&draft, &[], 0, &[]).unwrap_err();
            assert_eq!(problems[0].call, None);
            let fed = feedback(&draft, &problems, 0);
            assert!(matches!(&fed[..], [Message::User(t)] if t.contains("empty")));
        }
    }

    #[test]
    fn calls_get_ids_from_the_turn_count_whatever_the_server_sent() {
        let draft = Draft {
            text: Some("let me look".into()),
            calls: vec![
                call("ledger", "{\"query\": \"SELECT 1\"}"),
                call("call_agent", "{\"agent\":\"cfo\",\"input\":\"q\"}"),
            ],
        };
        let earlier = [
            Message::User("q".into()),
            Message::Assistant { tool_uses: vec![] },
            Message::Assistant { tool_uses: vec![] },
        ];
        let Ok(ModelStep::ToolUses(uses)) = check(&draft, &earlier, 0, &["ledger", "call_agent"])
        else {
            panic!("not tool uses")
        };
        assert_eq!(
            uses.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(),
            ["tu_2_0", "tu_2_1"]
        );
        assert_eq!(uses[0].input, json!({"query": "SELECT 1"}));
    }

    #[test]
    fn empty_or_null_arguments_are_an_empty_object() {
        for args in [
            DraftArguments::Text(String::new()),
            DraftArguments::Text("null".into()),
            DraftArguments::Value(Value::Null),
            DraftArguments::Value(json!({})),
        ] {
            let draft = Draft {
                text: None,
                calls: vec![DraftCall {
                    name: "t".into(),
                    arguments: args,
                }],
            };
            let Ok(ModelStep::ToolUses(uses)) = check(&draft, &[], 0, &["t"]) else {
                panic!()
            };
            assert_eq!(uses[0].input, json!({}));
        }
    }

    #[test]
    fn unknown_tools_and_bad_arguments_are_told_per_call() {
        let draft = Draft {
            text: None,
            calls: vec![
                call("ledger", "{\"query\": \"SELECT"),
                call("payroll", "{}"),
                call("ledger", "[1]"),
                call("ledger", "{}"),
            ],
        };
        let problems = check(&draft, &[], 0, &["ledger"]).unwrap_err();
        assert_eq!(
            problems.iter().map(|p| p.call).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2)]
        );
        assert!(
            problems[0].message.contains("not a JSON object (EOF"),
            "{}",
            problems[0].message
        );
        assert!(
            problems[1]
                .message
                .contains("no tool named `payroll`; the tools you can call are: ledger")
        );
        assert!(problems[2].message.contains("found an array"));

        let fed = feedback(&draft, &problems, 1);
        assert_eq!(fed.len(), 5);
        let Message::Assistant { tool_uses } = &fed[0] else {
            panic!()
        };
        assert_eq!(tool_uses[0].id, "repair_1_0");
        assert_eq!(tool_uses[0].input, json!("{\"query\": \"SELECT"));
        let Message::ToolResult {
            content, is_error, ..
        } = &fed[4]
        else {
            panic!()
        };
        assert!(*is_error && content.starts_with("not run"));
        assert!(describe(&problems).contains("; there is no tool named"));
    }

    #[test]
    fn waiting_needs_calls_out_and_gives_way_to_other_calls() {
        let wait = Draft {
            text: None,
            calls: vec![call(WAIT_FOR_REPLIES, "")],
        };
        assert_eq!(
            check(&wait, &[], 1, &[WAIT_FOR_REPLIES]),
            Ok(ModelStep::Wait)
        );
        let problems = check(&wait, &[], 0, &[WAIT_FOR_REPLIES]).unwrap_err();
        assert!(problems[0].message.contains("nothing to wait for"));
        let both = Draft {
            text: None,
            calls: vec![call(WAIT_FOR_REPLIES, "{}"), call("t", "{}")],
        };
        let Ok(ModelStep::ToolUses(uses)) = check(&both, &[], 1, &[WAIT_FOR_REPLIES, "t"]) else {
            panic!()
        };
        assert_eq!((uses.len(), uses[0].id.as_str()), (1, "tu_0_0"));
    }

    #[test]
    fn final_answer_is_the_answer_unless_other_calls_come_first() {
        let answer = Draft {
            text: Some("Here is the answer:".into()),
            calls: vec![call(FINAL_ANSWER, "{\"text\": \" 48250.00 USD \"}")],
        };
        assert_eq!(
            check(&answer, &[], 0, &[FINAL_ANSWER]),
            Ok(ModelStep::Answer("48250.00 USD".into()))
        );
        let with_call = Draft {
            text: None,
            calls: vec![call("t", "{}"), call(FINAL_ANSWER, "{\"text\": \"soon\"}")],
        };
        assert!(matches!(
            check(&with_call, &[], 0, &["t", FINAL_ANSWER]),
            Ok(ModelStep::ToolUses(u)) if u.len() == 1 && u[0].name == "t"
        ));
        for bad in ["{}", "{\"text\": \"\"}", "{\"text\": 5}"] {
            let draft = Draft {
                text: None,
                calls: vec![call(FINAL_ANSWER, bad)],
            };
            let problems = check(&draft, &[], 0, &[FINAL_ANSWER]).unwrap_err();
            assert!(
                problems[0].message.contains("non-empty string in `text`"),
                "{bad}"
            );
        }
    }

    #[test]
    fn with_tools_only_text_is_read_for_a_call_or_refused() {
        let offered = [spec("ledger"), spec(FINAL_ANSWER)];
        let request = ModelRequest {
            agent: "a",
            conversation: &[],
            pending_calls: 0,
            tools: &offered,
        };
        let turn = |text: &str| {
            let draft = Draft {
                text: Some(text.into()),
                calls: vec![],
            };
            check_turn(&draft, &request, &offered, true)
        };
        let query = json!({"query": "SELECT 1"});
        for text in [
            "{\"name\": \"ledger\", \"arguments\": {\"query\": \"SELECT 1\"}}",
            "{{\"name\": \"ledger\", \"arguments\": {\"query\": \"SELECT 1\"}}}\n\n\n",
            "{{\"name\": \"ledger\", \"arguments\": {\"query\": \"SELECT 1\"}}}}",
            "Calling: {\"name\": \"ledger\", \"arguments\": {\"query\": \"SELECT 1\"}} now.",
            "ledger with {\"query\": \"SELECT 1\"} and nothing else",
            "I call ledger({\"query\": \"SELECT 1\"})",
            "I will run it:\n```json\n{\"name\": \"ledger\", \"arguments\": \"{\\\"query\\\": \\\"SELECT 1\\\"}\"}\n```\nDone.",
            "<tool_call>\n{\"name\": \"ledger\", \"parameters\": {\"query\": \"SELECT 1\"}}\n</tool_call>",
        ] {
            let Ok(ModelStep::ToolUses(uses)) = turn(text) else {
                panic!("{text}: {:?}", turn(text))
            };
            assert_eq!(
                (uses[0].name.as_str(), &uses[0].input),
                ("ledger", &query),
                "{text}"
            );
        }
        assert_eq!(
            turn("```json\n{\"name\": \"final_answer\", \"arguments\": {\"text\": \"48\"}}\n```"),
            Ok(ModelStep::Answer("48".into()))
        );
        for text in [
            "I'll ask the cfo agent for the figure.",
            "{\"name\": \"payroll\", \"arguments\": {}}",
            "the set {1, 2}",
            "the ledger says {\"query\": 1} is odd",
            "",
        ] {
            let problems = turn(text).unwrap_err();
            assert!(
                problems[0]
                    .message
                    .contains("reply with a tool call, not text"),
                "{text}"
            );
        }
        // Without tools_only, text stays the answer.
        let draft = Draft {
            text: Some("{\"name\": \"ledger\", \"arguments\": {}}".into()),
            calls: vec![],
        };
        assert!(matches!(
            check_turn(&draft, &request, &offered, false),
            Ok(ModelStep::Answer(_))
        ));
    }

    #[test]
    fn a_long_tool_list_is_cut_in_the_message() {
        let names: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let draft = Draft {
            text: None,
            calls: vec![call("nope", "{}")],
        };
        let problems = check(&draft, &[], 0, &names).unwrap_err();
        assert!(
            problems[0].message.ends_with("t19 and 10 more"),
            "{}",
            problems[0].message
        );
    }
}
