//! What the operator command `consort visibility --auth FILE --caller FILE [--json]` reads and
//! prints.
//!
//! Two JSON files in, `{"decision": "...", "rule": N}` out. The auth file is an auth descriptor
//! (validated as `$defs/Auth` of `schemas/auth-descriptor.schema.json`). The caller file holds
//! caller facts:
//!
//! ```json
//! {"identity": "present", "policies": {"finance": "allow", "roles:hr": "no_result"}}
//! ```
//!
//! `identity` (required) is `present`, `absent` or `unknown`; `policies` (optional) maps a
//! policy name to `allow`, `deny`, `unknown` or `no_result`, and may be non-empty only while
//! identity is present. A declared policy missing from the map has no result. Errors name the
//! file and the key; unknown keys are errors.
//!
//! This module is pure: it parses and validates text that someone else read. Reading the two
//! files is the operator command's I/O and lives outside consort-core (consort-actors'
//! `visibility_files`); this module never opens a file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decision::{Decision, Rule};
use super::descriptor::{PolicyNameProblem, describe, parse_policy_ref};
use super::error::VisibilityError;
use super::facts::{CallerFacts, IdentityState, PolicyResult};

/// The keys of a caller-facts file.
pub const CALLER_FIELDS: [&str; 2] = ["identity", "policies"];

/// What the operator command prints with `--json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionReport {
    /// The decision: allow, deny or unknown.
    pub decision: Decision,
    /// The rule that decided, by number.
    pub rule: Rule,
}

/// Parses the text of a JSON file; a syntax error names `file`.
pub fn parse_json(text: &str, file: &Path) -> Result<Value, VisibilityError> {
    serde_json::from_str(text).map_err(|source| VisibilityError::Syntax {
        file: file.to_path_buf(),
        source,
    })
}

/// Validates a JSON value as caller facts (see the module doc). Errors name `file` and the key.
pub fn validate_caller_value(value: &Value, file: &Path) -> Result<CallerFacts, VisibilityError> {
    let invalid = |key: &str, expected: &str, found: &Value| VisibilityError::InvalidValue {
        file: file.to_path_buf(),
        key: key.to_owned(),
        expected: expected.to_owned(),
        found: describe(found),
    };
    let Value::Object(object) = value else {
        return Err(invalid("$", "a caller facts object", value));
    };
    if let Some(key) = object
        .keys()
        .find(|key| !CALLER_FIELDS.contains(&key.as_str()))
    {
        return Err(VisibilityError::UnknownKey {
            file: file.to_path_buf(),
            key: key.clone(),
        });
    }
    let identity_value = object
        .get("identity")
        .ok_or_else(|| VisibilityError::MissingKey {
            file: file.to_path_buf(),
            key: "identity".to_owned(),
        })?;
    let identity = IdentityState::ALL
        .into_iter()
        .find(|state| identity_value.as_str() == Some(state.as_str()))
        .ok_or_else(|| {
            invalid(
                "identity",
                "one of \"present\", \"absent\", \"unknown\"",
                identity_value,
            )
        })?;

    let mut results = BTreeMap::new();
    if let Some(policies_value) = object.get("policies") {
        let Value::Object(entries) = policies_value else {
            return Err(invalid(
                "policies",
                "an object mapping policy names to results",
                policies_value,
            ));
        };
        for (name, result_value) in entries {
            let key = format!("policies.{name}");
            let policy = parse_policy_ref(name).map_err(|problem| match problem {
                PolicyNameProblem::EmptyRoleList => VisibilityError::EmptyRoleList {
                    file: file.to_path_buf(),
                    key: key.clone(),
                    policy: name.clone(),
                },
                PolicyNameProblem::BadName => VisibilityError::InvalidValue {
                    file: file.to_path_buf(),
                    key: key.clone(),
                    expected: "a policy name (<name> or roles:<name>[,<name>])".to_owned(),
                    found: format!("\"{name}\""),
                },
            })?;
            let result = PolicyResult::ALL
                .into_iter()
                .find(|result| result_value.as_str() == Some(result.as_str()))
                .ok_or_else(|| {
                    invalid(
                        &key,
                        "one of \"allow\", \"deny\", \"unknown\", \"no_result\"",
                        result_value,
                    )
                })?;
            if results.insert(policy, result).is_some() {
                return Err(VisibilityError::DuplicatePolicy {
                    file: file.to_path_buf(),
                    key,
                    policy: name.clone(),
                });
            }
        }
    }
    match identity {
        IdentityState::Present => Ok(CallerFacts::present(results)),
        other if results.is_empty() => Ok(CallerFacts::without_results(other)),
        other => Err(VisibilityError::PolicyResultsWithoutIdentity {
            file: file.to_path_buf(),
            key: "policies".to_owned(),
            identity: other.as_str().to_owned(),
        }),
    }
}
