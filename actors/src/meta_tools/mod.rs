//! The meta-tools every agent's model gets: `search_tools`, `load_tool`, `invoke_tool`, over an
//! agent's [`AgentCatalog`].
//!
//! [`AgentCatalog`] is one agent's tools as visibility sees them: each tool's auth descriptor
//! (T0 from its markers, the agent's fallback policy and its guards), the agent's named
//! policies, the roles it grants to peers, its probe budget and a catalog generation that the
//! engine bumps on every config reload. The engine and the `consort tools` CLI both answer
//! through it, so an operator sees exactly what a principal's runs would see.
//!
//! - `search_tools` and `load_tool` consult visibility ([`crate::visibility`]); T2 probes go
//!   through [`crate::tool_guard::probe`], which cannot reach a handler.
//! - `invoke_tool` never consults visibility: [`parse_invoke`] and [`validate_arguments`] check
//!   the request, then the engine runs the real authorization ([`AgentCatalog::authorize`],
//!   shared with direct tool use) and the handler.
//!
//! Every refusal is a typed JSON error, `{"error": {"code", "message"}}`. This module performs
//! no I/O and writes no run state: the engine records each answer as a `tool_result` event.
//!
//! The parts are child modules: the answer form (`answer`), the agent's catalog with the
//! listing meta-tools (`catalog`) and `invoke_tool`'s request checks (`invoke`). This module
//! names the three meta-tools and tells the model about them.

mod answer;
mod catalog;
mod invoke;

#[cfg(test)]
mod tests;

use serde_json::json;

use crate::model::ToolSpec;
use crate::visibility::{MAX_QUERY_CHARS, MAX_SEARCH_LIMIT};

pub use answer::MetaAnswer;
pub use catalog::AgentCatalog;
pub(crate) use invoke::{parse_invoke, validate_arguments};

pub(crate) const SEARCH_TOOLS: &str = "search_tools";
pub(crate) const LOAD_TOOL: &str = "load_tool";
pub(crate) const INVOKE_TOOL: &str = "invoke_tool";

/// The specs of the three meta-tools, as the model is told about them.
pub(crate) fn meta_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: SEARCH_TOOLS.into(),
            description: format!(
                "Find tools you can use: ranked cards (name, description, inputs). A card with authUncertain: true may refuse when invoked. Query up to {MAX_QUERY_CHARS} characters, limit 1 to {MAX_SEARCH_LIMIT}."
            ),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT}}, "required": ["query"], "additionalProperties": false}),
        },
        ToolSpec {
            name: LOAD_TOOL.into(),
            description: "The full definition of one tool (name, description, input schema)."
                .into(),
            input_schema: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false}),
        },
        ToolSpec {
            name: INVOKE_TOOL.into(),
            description: "Use a tool by name with arguments that match its input schema.".into(),
            input_schema: json!({"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}, "required": ["name", "arguments"], "additionalProperties": false}),
        },
    ]
}
