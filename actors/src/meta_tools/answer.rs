//! What a meta-tool answers with: [`MetaAnswer`], the text a model reads, and the typed error
//! form every refusal takes.
//!
//! Every refusal is `{"error": {"code", "message"}}`, so a model (or a test) can branch on the
//! code without parsing prose. This module only words answers; it must not decide whether a
//! request is refused.

use serde_json::json;

use crate::tools::ToolError;
use crate::visibility::VisibilityError;

/// A meta-tool's answer: the text the model reads, and whether it is an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaAnswer {
    /// The text the model reads.
    pub content: String,
    /// True when the answer reports an error to the model.
    pub is_error: bool,
}

impl MetaAnswer {
    /// A typed error: `{"error": {"code", "message"}}`.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self {
            content: json!({"error": {"code": code, "message": message.into()}}).to_string(),
            is_error: true,
        }
    }

    /// A tool refusal as a typed error (`forbidden`, `invalid_arguments`, `failed`,
    /// `timed_out`, `too_large`, `server_unavailable`, `tool_error`).
    pub fn from_tool_error(error: &ToolError) -> Self {
        match error {
            ToolError::Forbidden(m) => Self::error("forbidden", m.clone()),
            ToolError::InvalidInput(m) => Self::error("invalid_arguments", m.clone()),
            ToolError::Failed(m) => Self::error("failed", m.clone()),
            ToolError::TimedOut { .. } => Self::error("timed_out", error.to_string()),
            ToolError::TooLarge { .. } => Self::error("too_large", error.to_string()),
            ToolError::ServerUnavailable { .. } => {
                Self::error("server_unavailable", error.to_string())
            }
            ToolError::ServerTimedOut { .. } => Self::error("timed_out", error.to_string()),
            ToolError::Reported(_) => Self::error("tool_error", error.to_string()),
        }
    }
}

/// The error code a model reads for a refused `search_tools` request.
pub(super) fn error_code(e: &VisibilityError) -> &'static str {
    match e {
        VisibilityError::QueryTooLong { .. } => "query_too_long",
        VisibilityError::LimitOutOfRange { .. } => "limit_out_of_range",
        _ => "invalid_request",
    }
}
