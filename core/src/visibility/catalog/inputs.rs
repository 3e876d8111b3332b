//! A card's view of a tool's input: property names, a short type label, and which are
//! required.
//!
//! Cards are what a model reads before it chooses to `load_tool`, so the summary is short and
//! lossy on purpose: the full JSON Schema is only in the loaded definition. This module reads
//! a schema and never validates one; a schema it does not understand yields fewer inputs or an
//! `any` label, not an error.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One input property of a tool, for a card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    /// The property's name.
    pub name: String,
    /// `string`, `integer`, `array<string>`, `string|null`, `enum`, `any`, ...
    #[serde(rename = "type")]
    pub type_label: String,
    /// Whether the schema requires it.
    pub required: bool,
}

fn type_label(property: &Value) -> String {
    match property.get("type") {
        Some(Value::String(kind)) if kind == "array" => {
            match property.get("items").and_then(|items| items.get("type")) {
                Some(Value::String(item)) => format!("array<{item}>"),
                _ => "array".to_owned(),
            }
        }
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) if kinds.iter().all(Value::is_string) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ if property.get("enum").is_some() => "enum".to_owned(),
        _ if property.get("const").is_some() => "const".to_owned(),
        _ => "any".to_owned(),
    }
}

/// The property names of an input schema with their types, required ones marked; sorted by
/// name. A schema without `properties` has no inputs listed.
pub fn summarize_input_schema(schema: &Value) -> Vec<InputSummary> {
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties: BTreeMap<&String, &Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|object| object.iter().collect())
        .unwrap_or_default();
    properties
        .into_iter()
        .map(|(name, property)| InputSummary {
            name: name.clone(),
            type_label: type_label(property),
            required: required.contains(name.as_str()),
        })
        .collect()
}
