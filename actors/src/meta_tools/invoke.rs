//! `invoke_tool`'s request checks: the request's shape, and the arguments against the tool's
//! input schema.
//!
//! These checks run before the real authorization and the handler, which the engine calls
//! through [`AgentCatalog::authorize`](super::AgentCatalog::authorize). The schema check is a
//! deliberately small subset of JSON Schema (required keys, closed objects, property types):
//! enough to turn a model's typo into a clear error, never a reason to accept a use that
//! authorization would refuse. Nothing here may consult visibility: a hidden tool is refused by
//! the real check, exactly like a tool that does not exist.

use serde_json::{Value, json};

use super::answer::MetaAnswer;

/// Reads an `invoke_tool` request: `{"name": <text>, "arguments": <object>}`.
pub(crate) fn parse_invoke(input: &Value) -> Result<(String, Value), MetaAnswer> {
    let bad = || {
        MetaAnswer::error(
            "invalid_request",
            "invoke_tool expects {\"name\": <tool name>, \"arguments\": {...}}",
        )
    };
    let Value::Object(map) = input else {
        return Err(bad());
    };
    if map.keys().any(|k| k != "name" && k != "arguments") {
        return Err(bad());
    }
    let Some(name) = map.get("name").and_then(Value::as_str) else {
        return Err(bad());
    };
    let arguments = map.get("arguments").cloned().unwrap_or_else(|| json!({}));
    if !arguments.is_object() {
        return Err(MetaAnswer::error(
            "invalid_arguments",
            "`arguments` must be an object",
        ));
    }
    Ok((name.to_owned(), arguments))
}

fn type_matches(kind: &str, value: &Value) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// Checks `arguments` against a tool's input schema: an object, required keys present, no
/// extra keys when `additionalProperties` is false, and each declared property of its type.
pub(crate) fn validate_arguments(schema: &Value, arguments: &Value) -> Result<(), String> {
    let Value::Object(args) = arguments else {
        return Err("arguments must be an object".into());
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(name) {
            return Err(format!("missing required argument `{name}`"));
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (key, value) in args {
        let property = properties.and_then(|p| p.get(key));
        let Some(property) = property else {
            if closed {
                return Err(format!("unknown argument `{key}`"));
            }
            continue;
        };
        let ok = match property.get("type") {
            Some(Value::String(kind)) => type_matches(kind, value),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .any(|kind| type_matches(kind, value)),
            _ => true,
        };
        if !ok {
            return Err(format!(
                "argument `{key}` must be of type {}",
                property
                    .get("type")
                    .map(Value::to_string)
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}
