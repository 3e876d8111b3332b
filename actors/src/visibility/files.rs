//! The operator command's entry point: `consort visibility --auth FILE --caller FILE [--json]`.
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
//! This is the only place in the visibility module that performs I/O, and it only reads.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decision::{Decision, Rule, decide};
use super::descriptor::{Auth, PolicyNameProblem, describe, parse_policy_ref, validate_auth_value};
use super::error::VisibilityError;
use super::facts::{CallerFacts, IdentityState, PolicyResult};

/// The keys of a caller-facts file.
pub const CALLER_FIELDS: [&str; 2] = ["identity", "policies"];

/// What the operator command prints with `--json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionReport {
    pub decision: Decision,
    pub rule: Rule,
}

fn read_json(file: &Path) -> Result<Value, VisibilityError> {
    let text = std::fs::read_to_string(file).map_err(|source| VisibilityError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| VisibilityError::Syntax {
        file: file.to_path_buf(),
        source,
    })
}

/// Reads and validates an auth descriptor file.
pub fn read_auth_file(file: &Path) -> Result<Auth, VisibilityError> {
    validate_auth_value(&read_json(file)?, file)
}

/// Reads and validates a caller-facts file.
pub fn read_caller_file(file: &Path) -> Result<CallerFacts, VisibilityError> {
    validate_caller_value(&read_json(file)?, file)
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

/// The operator command: reads both files and decides.
pub fn visibility_from_files(
    auth: &Path,
    caller: &Path,
) -> Result<(Decision, Rule), VisibilityError> {
    let auth = read_auth_file(auth)?;
    let facts = read_caller_file(caller)?;
    Ok(decide(&auth, &facts))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            Files {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    #[test]
    fn decides_from_two_files() {
        let files = Files::new();
        let auth = files.write(
            "auth.json",
            r#"{"anonymous": "no", "policies": ["finance", "roles:cfo,cmo"], "imperative": false}"#,
        );
        let allowed = files.write(
            "allowed.json",
            r#"{"identity": "present", "policies": {"finance": "allow", "roles:cfo,cmo": "allow"}}"#,
        );
        assert_eq!(
            visibility_from_files(&auth, &allowed).unwrap(),
            (Decision::Allow, Rule::Otherwise)
        );
        let partial = files.write(
            "partial.json",
            r#"{"identity": "present", "policies": {"finance": "allow"}}"#,
        );
        assert_eq!(
            visibility_from_files(&auth, &partial).unwrap(),
            (Decision::Unknown, Rule::UnresolvedPolicy)
        );
        let absent = files.write("absent.json", r#"{"identity": "absent"}"#);
        let (decision, rule) = visibility_from_files(&auth, &absent).unwrap();
        assert_eq!(
            serde_json::to_string(&DecisionReport { decision, rule }).unwrap(),
            r#"{"decision":"deny","rule":1}"#
        );
    }

    #[test]
    fn caller_errors_name_the_file_and_key() {
        let files = Files::new();
        let auth = files.write(
            "auth.json",
            r#"{"anonymous": "yes", "policies": [], "imperative": false}"#,
        );
        let cases = [
            (r#"{"identity": "maybe"}"#, "identity: expected one of"),
            (
                r#"{"identity": "present", "roles": []}"#,
                "roles: unknown key",
            ),
            (r#"{}"#, "identity: missing required key"),
            (
                r#"{"identity": "present", "policies": {"roles:": "allow"}}"#,
                "policies.roles:: role policy `roles:` needs at least one",
            ),
            (
                r#"{"identity": "present", "policies": {"x": "yes"}}"#,
                "policies.x: expected one of \"allow\"",
            ),
            (
                r#"{"identity": "present", "policies": {"bad name": "allow"}}"#,
                "policies.bad name: expected a policy name",
            ),
            (
                r#"{"identity": "absent", "policies": {"x": "allow"}}"#,
                "policies: policy results are only requested while identity is present, but identity is absent",
            ),
            (r#"["present"]"#, "$: expected a caller facts object"),
        ];
        for (text, wanted) in cases {
            let caller = files.write("caller.json", text);
            let message = visibility_from_files(&auth, &caller)
                .unwrap_err()
                .to_string();
            assert!(
                message.starts_with(&format!("{}: ", caller.display())),
                "{message}"
            );
            assert!(message.contains(wanted), "{text}: {message}");
        }
        // Absent identity with an empty policies object is fine.
        let caller = files.write("caller.json", r#"{"identity": "absent", "policies": {}}"#);
        assert!(visibility_from_files(&auth, &caller).is_ok());
    }

    #[test]
    fn auth_errors_name_the_file_and_key() {
        let files = Files::new();
        let caller = files.write("caller.json", r#"{"identity": "unknown"}"#);
        let auth = files.write(
            "auth.json",
            r#"{"anonymous": "no", "policies": ["roles:"], "imperative": false}"#,
        );
        let error = visibility_from_files(&auth, &caller).unwrap_err();
        assert!(matches!(
            &error,
            VisibilityError::EmptyRoleList { file, key, .. } if *file == auth && key == "policies[0]"
        ));
        let extra = files.write(
            "extra.json",
            r#"{"anonymous": "no", "policies": [], "imperative": false, "scopes": []}"#,
        );
        assert!(matches!(
            visibility_from_files(&extra, &caller),
            Err(VisibilityError::UnknownKey { key, .. }) if key == "scopes"
        ));
    }

    #[test]
    fn unreadable_and_malformed_files_are_typed() {
        let files = Files::new();
        let caller = files.write("caller.json", r#"{"identity": "unknown"}"#);
        let missing = files.dir.path().join("missing.json");
        assert!(matches!(
            visibility_from_files(&missing, &caller),
            Err(VisibilityError::Read { file, .. }) if file == missing
        ));
        let broken = files.write("broken.json", "{\"anonymous\": ");
        assert!(matches!(
            visibility_from_files(&broken, &caller),
            Err(VisibilityError::Syntax { file, .. }) if file == broken
        ));
    }
}
