//! The I/O half of the operator command `consort visibility --auth FILE --caller FILE`: reads
//! the two JSON files and hands their text to the pure parsing, validation and decision in
//! [`consort_core::visibility`].
//!
//! This module only reads files; it validates nothing itself and decides nothing itself. It
//! stays out of consort-core because consort-core performs no I/O.

use std::path::Path;

use consort_core::visibility::{
    Auth, CallerFacts, Decision, Rule, VisibilityError, decide, parse_json, validate_auth_value,
    validate_caller_value,
};
use serde_json::Value;

fn read_json(file: &Path) -> Result<Value, VisibilityError> {
    let text = std::fs::read_to_string(file).map_err(|source| VisibilityError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    parse_json(&text, file)
}

/// Reads and validates an auth descriptor file.
pub(crate) fn read_auth_file(file: &Path) -> Result<Auth, VisibilityError> {
    validate_auth_value(&read_json(file)?, file)
}

/// Reads and validates a caller-facts file.
pub(crate) fn read_caller_file(file: &Path) -> Result<CallerFacts, VisibilityError> {
    validate_caller_value(&read_json(file)?, file)
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

    use consort_core::visibility::DecisionReport;

    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Self {
            Self {
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
