//! What a real model is told besides its conversation: the system prompt and the
//! `wait_for_replies` tool.
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

/// The system prompt of a turn: the agent's own (`system:` in agent.yaml) or consort's, then a
/// line about the calls still out, if any.
pub fn system_prompt(
    request: &ModelRequest<'_>,
    description: &str,
    custom: Option<&str>,
) -> String {
    let mut text = match custom {
        Some(custom) => custom.to_owned(),
        None => default_prompt(request, description),
    };
    if request.pending_calls > 0 {
        text.push_str(&format!(
            "\n\n{} call(s) you placed have not replied yet. If you need their answers before you can answer, call `{WAIT_FOR_REPLIES}`; otherwise answer now.",
            request.pending_calls
        ));
    }
    text
}

fn default_prompt(request: &ModelRequest<'_>, description: &str) -> String {
    let mut text = format!("You are the agent `{}`.", request.agent);
    if !description.trim().is_empty() {
        text.push(' ');
        text.push_str(description.trim());
    }
    text.push_str(
        "\nAnswer the request in the first user message. Use your tools when they help; each tool's result comes back as a tool message.",
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
    text.push_str(
        "\nWhen you have the answer, write it as plain text without calling a tool: that text is your final answer.",
    );
    text
}

/// The tools offered for a turn: the agent's, then `wait_for_replies` while calls are out.
pub fn offered_tools(request: &ModelRequest<'_>) -> Vec<ToolSpec> {
    let mut tools = request.tools.to_vec();
    if request.pending_calls > 0 {
        tools.push(ToolSpec {
            name: WAIT_FOR_REPLIES.into(),
            description: "Wait for the replies of the calls you placed; you are asked again when one arrives.".into(),
            input_schema: json!({"type": "object", "properties": {}}),
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
        let text = system_prompt(&request(&tools, 0), "Plans campaigns.", None);
        assert!(text.starts_with("You are the agent `cmo`. Plans campaigns."));
        assert!(text.contains("[reply from <agent>]"));
        let text = system_prompt(&request(&[], 0), "", None);
        assert!(!text.contains("call_agent"));
    }

    #[test]
    fn a_custom_prompt_replaces_the_default_and_keeps_the_pending_line() {
        let text = system_prompt(&request(&[], 2), "d", Some("Be brief."));
        assert!(text.starts_with("Be brief."));
        assert!(text.contains("2 call(s) you placed have not replied yet"));
        assert!(!system_prompt(&request(&[], 0), "d", Some("Be brief.")).contains("replied"));
    }

    #[test]
    fn wait_is_offered_only_while_calls_are_out() {
        let tools = [call_agent()];
        assert_eq!(offered_tools(&request(&tools, 0)).len(), 1);
        let offered = offered_tools(&request(&tools, 1));
        assert_eq!(
            offered.last().map(|t| t.name.as_str()),
            Some(WAIT_FOR_REPLIES)
        );
    }
}
