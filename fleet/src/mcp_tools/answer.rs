//! What an MCP server's answer means for the model: the text of a tool result, and the typed
//! error of a result marked `isError` or of a JSON-RPC error.
//!
//! Pure: it reads a result and words it. It must not retry, reconnect or decide anything about
//! the session (the session does that with what it is given back).

use rmcp::model::{CallToolResult, ContentBlock};

use consort_actors::tools::ToolError;

/// The longest answer handed to the model, in bytes; a longer one is cut at a character
/// boundary and says so.
pub(super) const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// JSON-RPC's codes for a request the server could not take as sent.
const METHOD_NOT_FOUND: i32 = -32601;
const INVALID_PARAMS: i32 = -32602;

/// The text of a tool result: its text blocks in order (other blocks named by their kind), or
/// its structured content when it has no blocks. A result marked `isError` is
/// [`ToolError::Reported`] with that text.
pub(super) fn answer_text(result: &CallToolResult) -> Result<String, ToolError> {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = cap(parts.join("\n"));
    if result.is_error == Some(true) {
        let text = if text.is_empty() {
            "the server gave no detail".to_owned()
        } else {
            text
        };
        return Err(ToolError::Reported(text));
    }
    Ok(text)
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[an image, {}, not shown]", i.mime_type),
        ContentBlock::Audio(a) => format!("[audio, {}, not shown]", a.mime_type),
        ContentBlock::Resource(_) => "[an embedded resource, not shown]".to_owned(),
        ContentBlock::ResourceLink(r) => format!("[a resource: {}]", r.uri),
        _ => "[a kind of content this client does not show]".to_owned(),
    }
}

fn cap(mut text: String) -> String {
    if text.len() <= MAX_ANSWER_BYTES {
        return text;
    }
    let mut end = MAX_ANSWER_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n[the answer was cut at 64 KiB; ask for less]");
    text
}

/// A JSON-RPC error the server answered a call with.
pub(super) fn protocol_error(code: &i32, message: &str) -> ToolError {
    match *code {
        INVALID_PARAMS => ToolError::InvalidInput(format!(
            "the server refused the arguments: {message}; match the tool's input schema"
        )),
        METHOD_NOT_FOUND => ToolError::Failed(format!(
            "the server does not know this tool ({message}); use search_tools to find the tools you can use"
        )),
        _ => ToolError::Reported(message.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_blocks_in_order() {
        let result =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(answer_text(&result).unwrap(), "a\nb");
    }

    #[test]
    fn is_error_is_a_reported_error() {
        let result = CallToolResult::error(vec![ContentBlock::text("Invalid timezone: Mars/Base")]);
        let e = answer_text(&result).unwrap_err();
        assert_eq!(e, ToolError::Reported("Invalid timezone: Mars/Base".into()));
        assert!(e.to_string().contains("check the arguments"), "{e}");
        let empty = CallToolResult::error(vec![]);
        assert!(
            answer_text(&empty)
                .unwrap_err()
                .to_string()
                .contains("no detail")
        );
    }

    #[test]
    fn structured_content_without_blocks() {
        let mut result = CallToolResult::success(vec![]);
        result.structured_content = Some(json!({"t": 1}));
        assert_eq!(answer_text(&result).unwrap(), "{\"t\":1}");
    }

    #[test]
    fn long_answers_are_cut_at_a_char_boundary() {
        let long = "é".repeat(MAX_ANSWER_BYTES);
        let text = answer_text(&CallToolResult::success(vec![ContentBlock::text(long)])).unwrap();
        assert!(text.len() <= MAX_ANSWER_BYTES + 64);
        assert!(text.ends_with("ask for less]"));
    }

    #[test]
    fn protocol_errors() {
        assert!(matches!(
            protocol_error(&INVALID_PARAMS, "missing timezone"),
            ToolError::InvalidInput(_)
        ));
        assert!(matches!(
            protocol_error(&METHOD_NOT_FOUND, "no"),
            ToolError::Failed(_)
        ));
        assert!(matches!(
            protocol_error(&-32603, "boom"),
            ToolError::Reported(_)
        ));
    }
}
