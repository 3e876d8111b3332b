//! T1 of the ladder: declarative policies, evaluated for a caller whose identity is present.
//!
//! This module owns the named policies config defines ([`PolicyDefinition`] in a
//! [`PolicyRegistry`]) and the role form `roles:a,b`, which needs no definition. A policy that
//! is not defined, or that needs a resource, reports no result rather than a guess: the rules
//! in [`decide`](crate::visibility::decide) turn a missing result into `unknown`. Nothing here may
//! probe or decide; it only produces [`CallerFacts`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::visibility::descriptor::{Auth, PolicyRef, is_name};
use crate::visibility::error::VisibilityError;
use crate::visibility::facts::{Caller, CallerFacts, Identity, PolicyResult, Principal};

/// A named policy as config defines it. Every requirement given must hold (AND): the caller
/// has one of `roles`, and is one of `principals`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDefinition {
    /// The caller must have one of these roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The caller must be one of these principals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<Principal>,
    /// The policy cannot be evaluated without a resource: it reports no result at list time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_resource: bool,
}

impl PolicyDefinition {
    /// This policy's result for a present caller.
    pub fn evaluate(&self, caller: &Caller) -> PolicyResult {
        if self.needs_resource {
            return PolicyResult::NoResult;
        }
        let roles_hold =
            self.roles.is_empty() || self.roles.iter().any(|role| caller.roles.contains(role));
        let principal_holds =
            self.principals.is_empty() || self.principals.contains(&caller.principal);
        if roles_hold && principal_holds {
            PolicyResult::Allow
        } else {
            PolicyResult::Deny
        }
    }
}

/// The named policies an agent or host defines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRegistry {
    policies: BTreeMap<String, PolicyDefinition>,
}

impl PolicyRegistry {
    /// A registry with no policies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Defines (or redefines) `name`. The name must be a named-policy name (not the role form)
    /// and the definition must require something or need a resource.
    pub fn define(
        &mut self,
        name: &str,
        definition: PolicyDefinition,
    ) -> Result<&mut Self, VisibilityError> {
        if !is_name(name) {
            return Err(VisibilityError::InvalidPolicyName {
                policy: name.to_owned(),
                reason: "a defined policy needs a plain name (letters, digits, _, . or -); role policies need no definition".to_owned(),
            });
        }
        if definition.roles.is_empty()
            && definition.principals.is_empty()
            && !definition.needs_resource
        {
            return Err(VisibilityError::EmptyPolicyDefinition {
                policy: name.to_owned(),
            });
        }
        self.policies.insert(name.to_owned(), definition);
        Ok(self)
    }

    /// The definition of the named policy `name`, if defined.
    pub fn get(&self, name: &str) -> Option<&PolicyDefinition> {
        self.policies.get(name)
    }

    /// One policy's result for a present caller; an undefined named policy reports no result.
    pub fn evaluate(&self, policy: &PolicyRef, caller: &Caller) -> PolicyResult {
        match policy {
            PolicyRef::Roles(roles) => {
                if roles.iter().any(|role| caller.roles.contains(role)) {
                    PolicyResult::Allow
                } else {
                    PolicyResult::Deny
                }
            }
            PolicyRef::Named(name) => self.get(name).map_or(PolicyResult::NoResult, |definition| {
                definition.evaluate(caller)
            }),
        }
    }
}

/// T1: the caller facts for one tool. Policy results are requested only while identity is
/// present; otherwise the facts carry identity alone.
pub fn evaluate_policies(
    auth: &Auth,
    identity: &Identity,
    registry: &PolicyRegistry,
) -> CallerFacts {
    match identity {
        Identity::Present(caller) => CallerFacts::present(
            auth.policies
                .iter()
                .map(|policy| (policy.clone(), registry.evaluate(policy, caller)))
                .collect(),
        ),
        other => CallerFacts::without_results(other.state()),
    }
}
