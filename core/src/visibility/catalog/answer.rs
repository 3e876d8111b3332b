//! The shapes of the meta-tool answers, as the model reads them: [`SearchAnswer`] with its
//! [`ToolCard`]s, and [`LoadToolAnswer`].
//!
//! These types are the only way catalog data leaves this crate towards a model, so they have
//! no field for auth: a denied tool must not be told apart from a missing one by any byte of an
//! answer. Adding a field here is adding it to what every model sees.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::inputs::InputSummary;

/// A shown tool in a `search_tools` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCard {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// Its input properties.
    pub inputs: Vec<InputSummary>,
    /// The decision was unknown: the tool may refuse when invoked.
    pub auth_uncertain: bool,
}

/// A `search_tools` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchAnswer {
    /// The catalog generation the answer was computed from.
    pub generation: u64,
    /// Shown matches before `limit` (hidden tools are never counted).
    pub total: usize,
    /// The cards shown, best match first, at most `limit`.
    pub tools: Vec<ToolCard>,
}

/// A tool's full definition, as `load_tool` returns it: never any auth field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: Value,
}

/// A `load_tool` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LoadToolAnswer {
    /// The tool's definition.
    Definition(ToolDefinition),
    /// The tool does not exist, or the caller may not see it: the same answer either way.
    NoSuchTool {
        /// The sentence the model reads.
        error: String,
    },
}

impl LoadToolAnswer {
    pub(super) fn no_such_tool(name: &str) -> Self {
        Self::NoSuchTool {
            error: format!(
                "no tool named `{name}`; use search_tools to find the tools you can use"
            ),
        }
    }
}
