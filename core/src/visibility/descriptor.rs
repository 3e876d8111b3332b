//! The auth descriptor every tool carries, and T0: deriving it from a tool's markers.
//!
//! The fields are defined by `schemas/auth-descriptor.schema.json` (`$defs/Auth`, JSON Schema
//! draft 2020-12), the one source of truth. [`Auth`] is its Rust form and
//! [`validate_auth_value`] mirrors the schema's rules with errors that name the file and the
//! key; the tests check, against the schema file itself, that both accept the same fields.
//!
//! This module only describes and validates; it never reads files and never decides.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::VisibilityError;

/// The schema text, embedded so the CLI can print it and tests can check it.
pub const AUTH_DESCRIPTOR_SCHEMA: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../schemas/auth-descriptor.schema.json"
));

/// The `pattern` of a policy name in the schema, restated here; a test checks the two are equal,
/// and the parser below implements it: a named policy, or `roles:` and one or more role names
/// separated by commas. A name starts with a letter or digit and continues with letters,
/// digits, `_`, `.` or `-`.
pub const POLICY_NAME_PATTERN: &str =
    "^(roles:[A-Za-z0-9][A-Za-z0-9_.-]*(,[A-Za-z0-9][A-Za-z0-9_.-]*)*|[A-Za-z0-9][A-Za-z0-9_.-]*)$";

/// The prefix of the role form of a policy name.
pub const ROLE_POLICY_PREFIX: &str = "roles:";

/// Whether the framework lets a tool through without identity. Describes identity only, not
/// the whole of authorization: `Yes` alone never produces allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymity {
    /// An anonymous marker is present: certain.
    Yes,
    /// Declarative policies or a fallback policy are present: certain.
    No,
    /// Neither: no information.
    Unknown,
}

impl Anonymity {
    /// Every value, in schema order.
    pub const ALL: [Self; 3] = [Self::Yes, Self::No, Self::Unknown];

    /// The value as the schema spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Yes => "yes",
            Self::No => "no",
            Self::Unknown => "unknown",
        }
    }
}

/// One entry of `policies`: a named policy (defined in config) or the role form
/// `roles:<name>[,<name>]`, which requires one of the listed roles and needs no definition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PolicyRef {
    /// A policy defined by name in config.
    Named(String),
    /// Role names in the order written; never empty.
    Roles(Vec<String>),
}

/// Why a string is not a policy name (kept apart so file errors and code errors can word it
/// differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PolicyNameProblem {
    EmptyRoleList,
    BadName,
}

pub(crate) fn parse_policy_ref(text: &str) -> Result<PolicyRef, PolicyNameProblem> {
    if let Some(list) = text.strip_prefix(ROLE_POLICY_PREFIX) {
        let roles: Vec<&str> = list.split(',').collect();
        if roles.iter().any(|role| role.is_empty()) {
            return Err(PolicyNameProblem::EmptyRoleList);
        }
        if !roles.iter().all(|role| is_name(role)) {
            return Err(PolicyNameProblem::BadName);
        }
        return Ok(PolicyRef::Roles(
            roles.into_iter().map(str::to_owned).collect(),
        ));
    }
    if is_name(text) {
        Ok(PolicyRef::Named(text.to_owned()))
    } else {
        Err(PolicyNameProblem::BadName)
    }
}

/// A name as [`POLICY_NAME_PATTERN`] defines it.
pub(crate) fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if first.is_ascii_alphanumeric() => {
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        }
        _ => false,
    }
}

impl PolicyRef {
    /// Parses a policy name; the error says which rule it broke.
    pub fn parse(text: &str) -> Result<Self, VisibilityError> {
        parse_policy_ref(text).map_err(|problem| VisibilityError::InvalidPolicyName {
            policy: text.to_owned(),
            reason: match problem {
                PolicyNameProblem::EmptyRoleList => {
                    "a role policy needs at least one non-empty role name (roles:<name>[,<name>])"
                        .to_owned()
                }
                PolicyNameProblem::BadName => format!("it does not match {POLICY_NAME_PATTERN}"),
            },
        })
    }
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Named(name) => f.write_str(name),
            Self::Roles(roles) => write!(f, "{ROLE_POLICY_PREFIX}{}", roles.join(",")),
        }
    }
}

impl FromStr for PolicyRef {
    type Err = VisibilityError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl TryFrom<String> for PolicyRef {
    type Error = VisibilityError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<PolicyRef> for String {
    fn from(policy: PolicyRef) -> Self {
        policy.to_string()
    }
}

/// A tool's auth descriptor: `$defs/Auth` of the schema. Every field is required.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// Whether identity is needed (three-valued).
    pub anonymous: Anonymity,
    /// Declared policies; all must allow (policy combination is AND).
    pub policies: Vec<PolicyRef>,
    /// The tool has a guard: code that runs before the handler and decides without the
    /// arguments (a licence or feature gate, a quota).
    pub imperative: bool,
}

impl Auth {
    /// The JSON keys of an auth descriptor, as the Rust side accepts them.
    pub const FIELDS: [&'static str; 3] = ["anonymous", "policies", "imperative"];
}

/// What T0 reads on a tool and its agent/host: the framework's markers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthMarkers {
    /// The tool carries an anonymous marker.
    pub anonymous_marker: bool,
    /// The policies the tool itself declares.
    pub policies: Vec<PolicyRef>,
    /// The fallback policy the agent or host declares for tools that declare none.
    pub fallback_policy: Option<PolicyRef>,
    /// The tool has a guard that runs before its handler.
    pub guard: bool,
}

impl AuthMarkers {
    /// T0: `anonymous` is `yes` with an anonymous marker; `no` when the tool declares policies
    /// or a fallback policy applies; `unknown` otherwise. The fallback policy is listed when the
    /// tool declares none (it is what the framework would check). Policies declared next to an
    /// anonymous marker stay listed: this derivation does not guess which one wins.
    pub fn derive_auth(&self) -> Auth {
        let policies = if self.policies.is_empty() {
            self.fallback_policy.iter().cloned().collect()
        } else {
            self.policies.clone()
        };
        let anonymous = if self.anonymous_marker {
            Anonymity::Yes
        } else if !policies.is_empty() {
            Anonymity::No
        } else {
            Anonymity::Unknown
        };
        Auth {
            anonymous,
            policies,
            imperative: self.guard,
        }
    }
}

/// A short description of a JSON value's kind, for error messages.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 60 => "a long string".to_owned(),
        Value::String(s) => format!("\"{s}\""),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Validates a JSON value as `$defs/Auth` (mirroring the schema: an object with exactly the
/// keys `anonymous`, `policies`, `imperative`; `anonymous` one of the enum values; `policies`
/// unique strings matching [`POLICY_NAME_PATTERN`]; `imperative` a boolean). Errors name `file`
/// and the key.
pub fn validate_auth_value(value: &Value, file: &Path) -> Result<Auth, VisibilityError> {
    let invalid = |key: &str, expected: &str, found: &Value| VisibilityError::InvalidValue {
        file: file.to_path_buf(),
        key: key.to_owned(),
        expected: expected.to_owned(),
        found: describe(found),
    };
    let Value::Object(object) = value else {
        return Err(invalid("$", "an auth descriptor object", value));
    };
    if let Some(key) = object
        .keys()
        .find(|key| !Auth::FIELDS.contains(&key.as_str()))
    {
        return Err(VisibilityError::UnknownKey {
            file: file.to_path_buf(),
            key: key.clone(),
        });
    }
    let field = |key: &str| {
        object.get(key).ok_or_else(|| VisibilityError::MissingKey {
            file: file.to_path_buf(),
            key: key.to_owned(),
        })
    };

    let anonymous_value = field("anonymous")?;
    let anonymous = Anonymity::ALL
        .into_iter()
        .find(|a| anonymous_value.as_str() == Some(a.as_str()))
        .ok_or_else(|| {
            invalid(
                "anonymous",
                "one of \"yes\", \"no\", \"unknown\"",
                anonymous_value,
            )
        })?;

    let policies_value = field("policies")?;
    let Value::Array(items) = policies_value else {
        return Err(invalid(
            "policies",
            "an array of policy names",
            policies_value,
        ));
    };
    let mut policies = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let key = format!("policies[{index}]");
        let Some(text) = item.as_str() else {
            return Err(invalid(&key, "a policy name (string)", item));
        };
        let policy = parse_policy_ref(text).map_err(|problem| match problem {
            PolicyNameProblem::EmptyRoleList => VisibilityError::EmptyRoleList {
                file: file.to_path_buf(),
                key: key.clone(),
                policy: text.to_owned(),
            },
            PolicyNameProblem::BadName => invalid(
                &key,
                "a policy name (<name> or roles:<name>[,<name>])",
                item,
            ),
        })?;
        if !seen.insert(policy.clone()) {
            return Err(VisibilityError::DuplicatePolicy {
                file: file.to_path_buf(),
                key,
                policy: text.to_owned(),
            });
        }
        policies.push(policy);
    }

    let imperative_value = field("imperative")?;
    let imperative = imperative_value
        .as_bool()
        .ok_or_else(|| invalid("imperative", "true or false", imperative_value))?;

    Ok(Auth {
        anonymous,
        policies,
        imperative,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        serde_json::from_str(AUTH_DESCRIPTOR_SCHEMA).expect("the schema file is valid JSON")
    }

    fn schema_auth() -> Value {
        schema()["$defs"]["Auth"].clone()
    }

    #[test]
    fn schema_is_draft_2020_12_and_points_at_auth() {
        let schema = schema();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(schema["$ref"], "#/$defs/Auth");
        assert_eq!(schema_auth()["type"], "object");
        assert_eq!(schema_auth()["additionalProperties"], false);
    }

    #[test]
    fn rust_fields_and_schema_properties_are_the_same_set() {
        let auth = schema_auth();
        let schema_fields: BTreeSet<String> = auth["properties"]
            .as_object()
            .expect("properties is an object")
            .keys()
            .cloned()
            .collect();
        let constant: BTreeSet<String> = Auth::FIELDS.iter().map(|f| f.to_string()).collect();
        assert_eq!(schema_fields, constant);

        // What serde writes for the struct is exactly the field set too.
        let written = serde_json::to_value(Auth {
            anonymous: Anonymity::No,
            policies: vec![],
            imperative: false,
        })
        .unwrap();
        let serde_fields: BTreeSet<String> = written.as_object().unwrap().keys().cloned().collect();
        assert_eq!(serde_fields, schema_fields);

        // Every field is required on both sides: dropping any one fails both ways.
        let required: BTreeSet<String> = auth["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(required, schema_fields);
        for field in Auth::FIELDS {
            let mut object = written.clone();
            object.as_object_mut().unwrap().remove(field);
            assert!(
                serde_json::from_value::<Auth>(object.clone()).is_err(),
                "{field}"
            );
            assert!(matches!(
                validate_auth_value(&object, Path::new("a.json")),
                Err(VisibilityError::MissingKey { key, .. }) if key == field
            ));
        }

        // An extra key fails both ways.
        let mut extra = written;
        extra["scopes"] = json!([]);
        assert!(serde_json::from_value::<Auth>(extra.clone()).is_err());
        assert!(matches!(
            validate_auth_value(&extra, Path::new("a.json")),
            Err(VisibilityError::UnknownKey { key, .. }) if key == "scopes"
        ));
    }

    #[test]
    fn schema_value_rules_match_rust() {
        let auth = schema_auth();
        let properties = &auth["properties"];
        let anonymous: Vec<&str> = properties["anonymous"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let rust: Vec<&str> = Anonymity::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(anonymous, rust);
        for a in Anonymity::ALL {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        assert_eq!(properties["imperative"]["type"], "boolean");
        assert_eq!(properties["policies"]["type"], "array");
        assert_eq!(properties["policies"]["uniqueItems"], true);
        assert_eq!(
            schema()["$defs"]["PolicyName"]["pattern"],
            POLICY_NAME_PATTERN
        );
        assert_eq!(
            properties["policies"]["items"]["$ref"],
            "#/$defs/PolicyName"
        );
    }

    #[test]
    fn policy_names_follow_the_pattern() {
        for good in [
            "finance-read",
            "a",
            "x.y_z-1",
            "roles:finance",
            "roles:a,b,c",
        ] {
            let policy = PolicyRef::parse(good).unwrap();
            assert_eq!(policy.to_string(), good);
        }
        assert_eq!(
            PolicyRef::parse("roles:a,b").unwrap(),
            PolicyRef::Roles(vec!["a".into(), "b".into()])
        );
        for bad in ["", "-x", "has space", "other:x", "roles:a b", "é"] {
            assert!(
                matches!(
                    PolicyRef::parse(bad),
                    Err(VisibilityError::InvalidPolicyName { .. })
                ),
                "{bad:?}"
            );
        }
        for empty in ["roles:", "roles:a,", "roles:,a", "roles:a,,b"] {
            assert_eq!(
                parse_policy_ref(empty),
                Err(PolicyNameProblem::EmptyRoleList),
                "{empty}"
            );
        }
    }

    #[test]
    fn validation_names_the_file_and_key() {
        let file = Path::new("tools/ledger.auth.json");
        let check = |value: Value| validate_auth_value(&value, file).unwrap_err().to_string();
        assert_eq!(
            check(json!({"anonymous": "maybe", "policies": [], "imperative": false})),
            "tools/ledger.auth.json: anonymous: expected one of \"yes\", \"no\", \"unknown\", found \"maybe\""
        );
        assert!(
            check(json!({"anonymous": "no", "policies": ["ok", 3], "imperative": false}))
                .starts_with("tools/ledger.auth.json: policies[1]: expected a policy name")
        );
        assert_eq!(
            check(json!({"anonymous": "no", "policies": ["roles:"], "imperative": false})),
            "tools/ledger.auth.json: policies[0]: role policy `roles:` needs at least one non-empty role name"
        );
        assert!(matches!(
            validate_auth_value(&json!({"anonymous": "no", "policies": ["a", "a"], "imperative": false}), file),
            Err(VisibilityError::DuplicatePolicy { key, .. }) if key == "policies[1]"
        ));
        assert!(matches!(
            validate_auth_value(&json!({"anonymous": "no", "policies": [], "imperative": "yes"}), file),
            Err(VisibilityError::InvalidValue { key, .. }) if key == "imperative"
        ));
        assert!(matches!(
            validate_auth_value(&json!([]), file),
            Err(VisibilityError::InvalidValue { key, .. }) if key == "$"
        ));
        let ok = validate_auth_value(
            &json!({"anonymous": "no", "policies": ["roles:finance,cfo"], "imperative": true}),
            file,
        )
        .unwrap();
        assert_eq!(
            serde_json::from_value::<Auth>(serde_json::to_value(&ok).unwrap()).unwrap(),
            ok
        );
    }

    #[test]
    fn t0_derives_anonymity_from_markers() {
        let finance = PolicyRef::parse("finance").unwrap();
        let none = AuthMarkers::default().derive_auth();
        assert_eq!(none.anonymous, Anonymity::Unknown);
        assert!(none.policies.is_empty());

        let marked = AuthMarkers {
            anonymous_marker: true,
            ..AuthMarkers::default()
        };
        assert_eq!(marked.derive_auth().anonymous, Anonymity::Yes);

        let declared = AuthMarkers {
            policies: vec![finance.clone()],
            guard: true,
            ..AuthMarkers::default()
        }
        .derive_auth();
        assert_eq!(declared.anonymous, Anonymity::No);
        assert!(declared.imperative);

        let fallback = AuthMarkers {
            fallback_policy: Some(finance.clone()),
            ..AuthMarkers::default()
        }
        .derive_auth();
        assert_eq!(fallback.anonymous, Anonymity::No);
        assert_eq!(fallback.policies, vec![finance.clone()]);

        let own_wins = AuthMarkers {
            policies: vec![PolicyRef::parse("roles:cfo").unwrap()],
            fallback_policy: Some(finance),
            ..AuthMarkers::default()
        }
        .derive_auth();
        assert_eq!(own_wins.policies.len(), 1);
        assert_eq!(own_wins.policies[0].to_string(), "roles:cfo");
    }
}
