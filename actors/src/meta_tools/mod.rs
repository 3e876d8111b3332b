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
//! listing meta-tools (`catalog`), `invoke_tool`'s request checks (`invoke`) and what one
//! tool use of a run comes to (`resolve`). This module names the three meta-tools and says
//! which tools a model turn is shown ([`turn_specs`]).

mod answer;
mod catalog;
mod invoke;
mod resolve;

#[cfg(test)]
mod tests;

use serde_json::json;

use consort_config::AgentConfig;
use consort_core::step;

use crate::model::ToolSpec;
use crate::visibility::{Identity, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, ProbeCache};

pub use answer::MetaAnswer;
pub use catalog::AgentCatalog;
pub(crate) use invoke::{parse_invoke, validate_arguments};
pub(crate) use resolve::{
    Resolution, UseScope, listing_target, resolve, run_identity, tool_error_text,
};

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

/// Every tool a model turn of a run acting as `identity` is shown: the catalog's tools that
/// identity may see, `call_agent` and `check_run` when the agent may call peers, the
/// directory's tools when it belongs to a goal, and the meta-tools.
pub(crate) fn turn_specs(
    catalog: &AgentCatalog,
    identity: &Identity,
    probe_cache: &mut ProbeCache,
    config: &AgentConfig,
    goals: &[String],
) -> Vec<ToolSpec> {
    let mut specs = catalog.visible_specs(identity, probe_cache);
    specs.extend(call_specs(config));
    specs.extend(crate::directory::tools::specs(goals));
    specs.extend(meta_specs());
    specs
}

/// `call_agent` and `check_run`, as the model is told about them.
fn call_specs(config: &AgentConfig) -> Vec<ToolSpec> {
    if config.can_call.is_empty() {
        return Vec::new();
    }
    vec![
        ToolSpec {
            name: step::CALL_AGENT.into(),
            description: format!(
                "Start a run on a peer agent ({}) and return its run id at once; the answer arrives later as a [reply from <agent>] message. With `wait_s` (1 to {}), wait up to that many seconds and get the answer as this tool's result instead. The peer sees only `input`.",
                config.can_call.join(", "),
                consort_config::MAX_WAIT_S
            ),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "input": {"type": "string"}, "wait_s": {"type": "integer", "minimum": 1, "maximum": consort_config::MAX_WAIT_S}}, "required": ["agent", "input"]}),
        },
        ToolSpec {
            name: step::CHECK_RUN.into(),
            description: "Status and output of a run this run placed.".into(),
            input_schema: json!({"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}),
        },
    ]
}
