//! What a real model is told besides its conversation: the system prompt, the
//! `wait_for_replies` tool and, for models that must always call a tool, `final_answer`.
//!
//! The script model needs neither; an adapter for a real model puts [`system_prompt`] first
//! and offers [`offered_tools`], so that a model knows that a call's answer arrives later as a
//! `[reply from <agent>]` message and has a way to say "nothing to do until then". Both are
//! functions of the request alone: a replayed turn is asked for with the same words.

use serde_json::json;

use crate::{ModelRequest, ToolSpec};

/// The tool a real model calls to wait for the replies of calls it placed, offered only while
/// some are out. It maps to [`consort_core::ModelStep::Wait`]; agent.yaml cannot declare a
/// tool of this name.
pub const WAIT_FOR_REPLIES: &str = "wait_for_replies";

/// The tool a model calls with its final answer when every turn must be a tool call
/// (`tool_choice: required`, for small models that otherwise describe a tool call in prose
/// instead of making it). It maps to [`consort_core::ModelStep::Answer`]; agent.yaml cannot
/// declare a tool of this name.
pub const FINAL_ANSWER: &str = "final_answer";

/// The system prompt of a turn: the agent's own (`system:` in agent.yaml) or consort's, then a
/// line about the calls still out, if any. `answer_tool`: the final answer is a `final_answer`
/// call rather than plain text.
pub fn system_prompt(
    request: &ModelRequest<'_>,
    description: &str,
    custom: Option<&str>,
    answer_tool: bool,
) -> String {
    let mut text = match custom {
        Some(custom) => custom.to_owned(),
        None => default_prompt(request, description, answer_tool),
    };
    if request.pending_calls > 0 {
        text.push_str(&format!(
            "\n\n{} call(s) you placed have not replied yet. If you need their answers before you can answer, call `{WAIT_FOR_REPLIES}`; otherwise answer now.",
            request.pending_calls
        ));
    }
    text
}

fn default_prompt(request: &ModelRequest<'_>, description: &str, answer_tool: bool) -> String {
    let mut text = format!("You are the agent `{}`.", request.agent);
    if !description.trim().is_empty() {
        text.push(' ');
        text.push_str(description.trim());
    }
    text.push_str(
        "\nAnswer the request in the first user message. You act through tool calls: to use a tool, call it (never only say that you will); each tool's result comes back as a tool message.",
    );
    if request
        .tools
        .iter()
        .any(|t| t.name == consort_core::step::CALL_AGENT)
    {
        text.push_str(
            "\nTo ask a peer agent, use `call_agent`: the peer sees only the `input` you give it, so make it a complete question. It returns a run id at once; the peer's answer arrives later as a user message that starts with `[reply from <agent>]`, and you are asked again then.",
        );
    }
    if answer_tool {
        text.push_str(&format!(
            "\nWhen you have the answer, call `{FINAL_ANSWER}` with it: that is your final answer."
        ));
    } else {
        text.push_str(
            "\nWhen you have the answer, write it as plain text without calling a tool: plain text is your final answer and ends your work on the request.",
        );
    }
    text
}

/// The tools offered for a turn: the agent's, then `wait_for_replies` while calls are out, then
/// `final_answer` when `answer_tool` is set.
pub fn offered_tools(request: &ModelRequest<'_>, answer_tool: bool) -> Vec<ToolSpec> {
    let mut tools = request.tools.to_vec();
    if request.pending_calls > 0 {
        tools.push(ToolSpec {
            name: WAIT_FOR_REPLIES.into(),
            description: "Wait for the replies of the calls you placed; you are asked again when one arrives.".into(),
            input_schema: json!({"type": "object", "properties": {}}),
        });
    }
    if answer_tool {
        tools.push(ToolSpec {
            name: FINAL_ANSWER.into(),
            description: "Give your final answer to the request. Call it only when you have the answer.".into(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string", "description": "the answer"}}, "required": ["text"]}),
        });
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(tools: &'a [ToolSpec], pending: usize) -> ModelRequest<'a> {
        ModelRequest {
            agent: "cmo",
            conversation: &[],
            pending_calls: pending,
            tools,
        }
    }

    fn call_agent() -> ToolSpec {
        ToolSpec {
            name: "call_agent".into(),
            description: String::new(),
            input_schema: json!({}),
        }
    }

    #[test]
    fn the_default_prompt_names_the_agent_and_explains_calls_only_when_it_may_call() {
        let tools = [call_agent()];
        let text = system_prompt(&request(&tools, 0), "Plans campaigns.", None, false);
        assert!(text.starts_with("You are the agent `cmo`. Plans campaigns."));
        assert!(text.contains("[reply from <agent>]"));
        let text = system_prompt(&request(&[], 0), "", None, false);
        assert!(!text.contains("call_agent"));
    }

    #[test]
    fn a_custom_prompt_replaces_the_default_and_keeps_the_pending_line() {
        let text = system_prompt(&request(&[], 2), "d", Some("Be brief."), false);
        assert!(text.starts_with("Be brief."));
        assert!(text.contains("2 call(s) you placed have not replied yet"));
        assert!(
            !system_prompt(&request(&[], 0), "d", Some("Be brief."), false).contains("replied")
        );
    }

    #[test]
    fn the_answer_tool_is_offered_and_explained_only_when_asked_for() {
        let offered = offered_tools(&request(&[], 0), true);
        assert_eq!(offered.last().map(|t| t.name.as_str()), Some(FINAL_ANSWER));
        let text = system_prompt(&request(&[], 0), "", None, true);
        assert!(text.contains("call `final_answer` with it"), "{text}");
        assert!(!system_prompt(&request(&[], 0), "", None, false).contains(FINAL_ANSWER));
    }

    #[test]
    fn wait_is_offered_only_while_calls_are_out() {
        let tools = [call_agent()];
        assert_eq!(offered_tools(&request(&tools, 0), false).len(), 1);
        let offered = offered_tools(&request(&tools, 1), false);
        assert_eq!(
            offered.last().map(|t| t.name.as_str()),
            Some(WAIT_FOR_REPLIES)
        );
    }
}
