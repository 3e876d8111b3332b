//! T1 of the ladder: declarative policies, evaluated for a caller whose identity is present.
//!
//! This module owns the named policies config defines ([`PolicyDefinition`] in a
//! [`PolicyRegistry`]) and the role form `roles:a,b`, which needs no definition. A policy that
//! is not defined, or that needs a resource, reports no result rather than a guess: the rules
//! in [`decide`](crate::visibility::decide) turn a missing result into `unknown`. A role the
//! caller holds only if its unknown origin does ([`Caller::uncertain_roles`]) makes a role
//! requirement `unknown`, never allow; a requirement on the origin's own roles
//! (`origin_roles`) is `unknown` while the origin is. Nothing here may probe or decide; it
//! only produces [`CallerFacts`], and says whether the origin is what stands in a policy's way
//! ([`PolicyRegistry::blocked_by_origin`]) so a refusal can tell the model why.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::visibility::descriptor::{Auth, PolicyRef, is_name};
use crate::visibility::error::VisibilityError;
use crate::visibility::facts::{Caller, CallerFacts, Identity, PolicyResult, Principal};
use crate::visibility::origin::Origin;

/// A named policy as config defines it. Every requirement given must hold (AND): the caller
/// acts with one of `roles`, is one of `principals`, and its origin holds one of
/// `origin_roles`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDefinition {
    /// The caller must have one of these roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The caller must be one of these principals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<Principal>,
    /// The origin of the caller's call tree must hold one of these roles (as this host grants
    /// them to that principal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origin_roles: Vec<String>,
    /// The policy cannot be evaluated without a resource: it reports no result at list time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_resource: bool,
}

/// Whether a requirement on the origin counts, or is set aside to ask "would the caller pass
/// if its origin held everything it was granted".
#[derive(Clone, Copy, PartialEq, Eq)]
enum OriginView {
    AsItIs,
    HoldingEverything,
}

impl PolicyDefinition {
    /// This policy's result for a present caller.
    pub fn evaluate(&self, caller: &Caller) -> PolicyResult {
        self.evaluate_as(caller, OriginView::AsItIs)
    }

    fn evaluate_as(&self, caller: &Caller, view: OriginView) -> PolicyResult {
        if self.needs_resource {
            return PolicyResult::NoResult;
        }
        let roles = if self.roles.is_empty() {
            PolicyResult::Allow
        } else {
            roles_result(&self.roles, caller, view)
        };
        let principal = if self.principals.is_empty() || self.principals.contains(&caller.principal)
        {
            PolicyResult::Allow
        } else {
            PolicyResult::Deny
        };
        let origin = if self.origin_roles.is_empty() || view == OriginView::HoldingEverything {
            PolicyResult::Allow
        } else {
            origin_roles_result(&self.origin_roles, caller)
        };
        all_of([roles, principal, origin])
    }
}

/// A role requirement: allow when the caller acts with one of `required`; unknown when it
/// would only through a role its unknown origin may or may not hold; deny otherwise.
fn roles_result(required: &[String], caller: &Caller, view: OriginView) -> PolicyResult {
    let has =
        |roles: &std::collections::BTreeSet<String>| required.iter().any(|r| roles.contains(r));
    if has(&caller.roles) {
        return PolicyResult::Allow;
    }
    match view {
        OriginView::HoldingEverything
            if has(&caller.uncertain_roles) || has(&caller.withheld_roles) =>
        {
            PolicyResult::Allow
        }
        OriginView::AsItIs if has(&caller.uncertain_roles) => PolicyResult::Unknown,
        _ => PolicyResult::Deny,
    }
}

/// An `origin_roles` requirement: the origin holds one of `required`.
fn origin_roles_result(required: &[String], caller: &Caller) -> PolicyResult {
    match caller.origin {
        Origin::Present(_) if required.iter().any(|r| caller.origin_roles.contains(r)) => {
            PolicyResult::Allow
        }
        Origin::Present(_) | Origin::Absent => PolicyResult::Deny,
        Origin::Unknown => PolicyResult::Unknown,
    }
}

/// Requirements that must all hold: deny if any is denied, else unknown if any is unknown.
fn all_of(results: [PolicyResult; 3]) -> PolicyResult {
    if results.contains(&PolicyResult::Deny) {
        PolicyResult::Deny
    } else if results.contains(&PolicyResult::Unknown) {
        PolicyResult::Unknown
    } else {
        PolicyResult::Allow
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
            && definition.origin_roles.is_empty()
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
        self.evaluate_as(policy, caller, OriginView::AsItIs)
    }

    /// Whether the caller's origin is what keeps `policy` from allowing it: the policy does not
    /// allow the caller as it is, but would if the origin held every role the caller was
    /// granted (and every role the policy asks of the origin). A refusal then says so, in
    /// words the model can act on, instead of a bare "not allowed".
    pub fn blocked_by_origin(&self, policy: &PolicyRef, caller: &Caller) -> bool {
        self.evaluate(policy, caller) != PolicyResult::Allow
            && self.evaluate_as(policy, caller, OriginView::HoldingEverything)
                == PolicyResult::Allow
    }

    fn evaluate_as(&self, policy: &PolicyRef, caller: &Caller, view: OriginView) -> PolicyResult {
        match policy {
            PolicyRef::Roles(roles) => roles_result(roles, caller, view),
            PolicyRef::Named(name) => self.get(name).map_or(PolicyResult::NoResult, |definition| {
                definition.evaluate_as(caller, view)
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
