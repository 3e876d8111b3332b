//! What the platform found out about a caller: its principal, a three-valued identity, and
//! per-policy results.
//!
//! Identity is `present` (with a principal and roles), `absent` or `unknown`, and nothing here
//! turns one into another: a missing bearer token is `absent`, an external hook that cannot
//! answer is `unknown`. Policy results exist only while identity is present
//! ([`CallerFacts`] cannot be built otherwise), and a policy without a result reads as
//! [`PolicyResult::NoResult`], never as allow.
//!
//! A present caller also carries the *origin* of its call tree ([`super::origin`]): a peer run's
//! roles are what [`super::acting_roles`] leaves of the callee's grants, never the grants alone.
//!
//! This module holds facts only: it does not check tokens (the HTTP layer does, and reports a
//! [`BearerCheck`]), does not evaluate policies (that is [`super::ladder`]) and does not decide.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::descriptor::{PolicyRef, is_name};
use super::error::VisibilityError;
use super::origin::{ActingRoles, OnBehalfOf, Origin, acting_roles};

/// Who is calling: `api:<token-name>` (an HTTP caller with a bearer token), `agent:<name>` (a
/// peer run) or `anonymous` (nobody). Used by the CLI's `--as PRINCIPAL`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Principal {
    /// `api:<token-name>`: an HTTP caller with a bearer token.
    Api(String),
    /// `agent:<name>`: a peer run.
    Agent(String),
    /// `anonymous`: nobody.
    Anonymous,
}

impl Principal {
    /// Parses the three forms; anything else is [`VisibilityError::UnknownPrincipalForm`], and
    /// a known prefix with an empty or malformed name is
    /// [`VisibilityError::InvalidPrincipalName`].
    pub fn parse(text: &str) -> Result<Self, VisibilityError> {
        if text == "anonymous" {
            return Ok(Self::Anonymous);
        }
        let (prefix, name, build): (&'static str, &str, fn(String) -> Self) =
            if let Some(name) = text.strip_prefix("api:") {
                ("api:", name, Principal::Api)
            } else if let Some(name) = text.strip_prefix("agent:") {
                ("agent:", name, Principal::Agent)
            } else {
                return Err(VisibilityError::UnknownPrincipalForm {
                    input: text.to_owned(),
                });
            };
        if name.is_empty() {
            return Err(VisibilityError::InvalidPrincipalName {
                input: text.to_owned(),
                prefix,
                reason: "is empty",
            });
        }
        if !is_name(name) {
            return Err(VisibilityError::InvalidPrincipalName {
                input: text.to_owned(),
                prefix,
                reason: "must start with a letter or digit and use only letters, digits, _, . or -",
            });
        }
        Ok(build(name.to_owned()))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Api(name) => write!(f, "api:{name}"),
            Self::Agent(name) => write!(f, "agent:{name}"),
            Self::Anonymous => f.write_str("anonymous"),
        }
    }
}

impl FromStr for Principal {
    type Err = VisibilityError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl TryFrom<String> for Principal {
    type Error = VisibilityError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<Principal> for String {
    fn from(principal: Principal) -> Self {
        principal.to_string()
    }
}

/// The roles a host's (or agent's) config grants to principals: tokens (`api:<name>`) and
/// peer agents (`agent:<name>`), and for whom each grant holds. A principal not listed has no
/// roles; a grant holds only on behalf of origins that hold the role too unless it was made
/// with [`RoleGrants::for_any_origin`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleGrants {
    grants: BTreeMap<Principal, BTreeSet<String>>,
    any_origin: BTreeSet<Principal>,
}

impl RoleGrants {
    /// No grants.
    pub fn new() -> Self {
        Self::default()
    }

    /// Grants `roles` to `principal` (adding to what it already has).
    pub fn grant<I, S>(&mut self, principal: Principal, roles: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.grants
            .entry(principal)
            .or_default()
            .extend(roles.into_iter().map(Into::into));
        self
    }

    /// Makes `principal`'s grant hold on behalf of any origin (the callee trusts that agent to
    /// check its own requesters).
    pub fn for_any_origin(&mut self, principal: Principal) -> &mut Self {
        self.any_origin.insert(principal);
        self
    }

    /// The roles granted to `principal`; empty when none.
    pub fn roles_of(&self, principal: &Principal) -> BTreeSet<String> {
        self.grants.get(principal).cloned().unwrap_or_default()
    }

    /// For whom `principal`'s grant holds.
    pub fn on_behalf_of(&self, principal: &Principal) -> OnBehalfOf {
        if self.any_origin.contains(principal) {
            OnBehalfOf::Any
        } else {
            OnBehalfOf::RoleHolders
        }
    }
}

/// A caller whose identity is present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Never [`Principal::Anonymous`] when built through [`Identity`]'s constructors.
    pub principal: Principal,
    /// The roles the caller acts with: for a root run, the roles granted to the principal; for
    /// a peer run, what [`acting_roles`] holds of the callee's grant.
    pub roles: BTreeSet<String>,
    /// Granted roles that count only if the origin holds them, which is not known.
    pub uncertain_roles: BTreeSet<String>,
    /// Granted roles the caller does not act with because its origin does not hold them.
    pub withheld_roles: BTreeSet<String>,
    /// Who started the call tree; a root run is its own origin.
    pub origin: Origin,
    /// The roles this host grants the origin (empty unless it is present).
    pub origin_roles: BTreeSet<String>,
}

impl Caller {
    /// A caller that is its own origin (a root run): it acts with `roles`.
    pub fn new(principal: Principal, roles: BTreeSet<String>) -> Self {
        Self {
            origin: Origin::present(principal.clone()),
            origin_roles: roles.clone(),
            principal,
            roles,
            uncertain_roles: BTreeSet::new(),
            withheld_roles: BTreeSet::new(),
        }
    }
}

/// The three-valued identity, with the caller when present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Identity is established: the caller.
    Present(Caller),
    /// There is no caller identity (anonymous).
    Absent,
    /// Identity could not be established.
    Unknown,
}

/// What an HTTP layer found out about a request's bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BearerCheck {
    /// A valid token; its name (from host config) becomes the principal `api:<name>`.
    Valid {
        /// The token's name.
        token_name: String,
    },
    /// No `Authorization` header.
    Missing,
    /// A token that matches no configured token.
    Invalid,
    /// An external identity hook was asked and could not answer (timeout, error).
    HookCannotAnswer,
}

impl Identity {
    /// The identity an operator names with `--as PRINCIPAL`: `anonymous` is absent identity;
    /// any other principal is present, with the roles `grants` gives it.
    pub fn from_principal(principal: &Principal, grants: &RoleGrants) -> Self {
        match principal {
            Principal::Anonymous => Self::Absent,
            named => Self::Present(Caller::new(named.clone(), grants.roles_of(named))),
        }
    }

    /// An HTTP caller: a valid bearer token is present (principal `api:<token-name>`, roles from
    /// the host config); no token or an invalid one is absent; a hook that cannot answer is
    /// unknown.
    pub fn from_bearer(check: &BearerCheck, host_grants: &RoleGrants) -> Self {
        match check {
            BearerCheck::Valid { token_name } => {
                Self::from_principal(&Principal::Api(token_name.clone()), host_grants)
            }
            BearerCheck::Missing | BearerCheck::Invalid => Self::Absent,
            BearerCheck::HookCannotAnswer => Self::Unknown,
        }
    }

    /// A peer run: principal `agent:<caller>`, present, acting for `origin`. Its roles are
    /// what [`acting_roles`] leaves of the callee's grant to that agent, given the roles the
    /// origin holds here: what `host_grants` (the callee host's tokens) and `callee_grants`
    /// give that principal.
    pub fn peer(
        caller_agent: &str,
        callee_grants: &RoleGrants,
        origin: &Origin,
        host_grants: &RoleGrants,
    ) -> Self {
        let principal = Principal::Agent(caller_agent.to_owned());
        let origin_roles: BTreeSet<String> = match origin.principal() {
            Some(of) => host_grants
                .roles_of(of)
                .into_iter()
                .chain(callee_grants.roles_of(of))
                .collect(),
            None => BTreeSet::new(),
        };
        let ActingRoles {
            held,
            uncertain,
            withheld,
        } = acting_roles(
            &callee_grants.roles_of(&principal),
            callee_grants.on_behalf_of(&principal),
            origin,
            &origin_roles,
        );
        Self::Present(Caller {
            principal,
            roles: held,
            uncertain_roles: uncertain,
            withheld_roles: withheld,
            origin: origin.clone(),
            origin_roles,
        })
    }

    /// The identity without the caller.
    pub fn state(&self) -> IdentityState {
        match self {
            Self::Present(_) => IdentityState::Present,
            Self::Absent => IdentityState::Absent,
            Self::Unknown => IdentityState::Unknown,
        }
    }
}

/// Identity without the caller: what the decision reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityState {
    /// Identity is established.
    Present,
    /// There is no caller identity.
    Absent,
    /// Identity could not be established.
    Unknown,
}

impl IdentityState {
    /// Every value, in schema order.
    pub const ALL: [Self; 3] = [Self::Present, Self::Absent, Self::Unknown];

    /// The value as the caller-facts file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Present => "present",
            Self::Absent => "absent",
            Self::Unknown => "unknown",
        }
    }
}

/// The result of one policy for one caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyResult {
    /// The policy allows the caller.
    Allow,
    /// The policy denies the caller.
    Deny,
    /// Evaluated, and the answer is not known.
    Unknown,
    /// Not evaluated: it needs a resource, or is not defined, or was never asked.
    NoResult,
}

impl PolicyResult {
    /// Every value, in schema order.
    pub const ALL: [Self; 4] = [Self::Allow, Self::Deny, Self::Unknown, Self::NoResult];

    /// The value as the caller-facts file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Unknown => "unknown",
            Self::NoResult => "no_result",
        }
    }
}

/// The decision's second input: identity and, only while it is present, policy results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerFacts {
    identity: IdentityState,
    policy_results: BTreeMap<PolicyRef, PolicyResult>,
}

impl CallerFacts {
    /// Identity present, with the policy results found.
    pub fn present(policy_results: BTreeMap<PolicyRef, PolicyResult>) -> Self {
        Self {
            identity: IdentityState::Present,
            policy_results,
        }
    }

    /// Identity absent: no policy results (they are not requested).
    pub fn absent() -> Self {
        Self {
            identity: IdentityState::Absent,
            policy_results: BTreeMap::new(),
        }
    }

    /// Identity unknown: no policy results (they are not requested).
    pub fn unknown() -> Self {
        Self {
            identity: IdentityState::Unknown,
            policy_results: BTreeMap::new(),
        }
    }

    /// Facts with `identity` and no policy results.
    pub fn without_results(identity: IdentityState) -> Self {
        Self {
            identity,
            policy_results: BTreeMap::new(),
        }
    }

    /// The caller's identity state.
    pub fn identity(&self) -> IdentityState {
        self.identity
    }

    /// The result for `policy`; [`PolicyResult::NoResult`] when none was reported.
    pub fn result_for(&self, policy: &PolicyRef) -> PolicyResult {
        self.policy_results
            .get(policy)
            .copied()
            .unwrap_or(PolicyResult::NoResult)
    }

    /// Every reported policy result.
    pub fn policy_results(&self) -> &BTreeMap<PolicyRef, PolicyResult> {
        &self.policy_results
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_parse_and_print_round_trip() {
        for text in ["api:ci-bot", "agent:cmo", "anonymous"] {
            assert_eq!(Principal::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Principal::parse("agent:cfo").unwrap(),
            Principal::Agent("cfo".into())
        );
        for unknown in ["", "user:x", "Anonymous", "cmo", "agent", "api"] {
            assert!(
                matches!(
                    Principal::parse(unknown),
                    Err(VisibilityError::UnknownPrincipalForm { .. })
                ),
                "{unknown:?}"
            );
        }
        assert!(matches!(
            Principal::parse("api:"),
            Err(VisibilityError::InvalidPrincipalName { prefix: "api:", .. })
        ));
        assert!(matches!(
            Principal::parse("agent:a b"),
            Err(VisibilityError::InvalidPrincipalName {
                prefix: "agent:",
                ..
            })
        ));
        let json = serde_json::to_string(&Principal::Agent("cmo".into())).unwrap();
        assert_eq!(json, "\"agent:cmo\"");
        assert!(serde_json::from_str::<Principal>("\"bogus\"").is_err());
    }

    #[test]
    fn http_identity_is_three_valued_and_invents_nothing() {
        let mut grants = RoleGrants::new();
        grants.grant(Principal::Api("ci".into()), ["deploy"]);
        let valid = Identity::from_bearer(
            &BearerCheck::Valid {
                token_name: "ci".into(),
            },
            &grants,
        );
        assert_eq!(
            valid,
            Identity::Present(Caller::new(
                Principal::Api("ci".into()),
                BTreeSet::from(["deploy".to_owned()]),
            ))
        );
        assert_eq!(
            Identity::from_bearer(&BearerCheck::Missing, &grants),
            Identity::Absent
        );
        assert_eq!(
            Identity::from_bearer(&BearerCheck::Invalid, &grants),
            Identity::Absent
        );
        assert_eq!(
            Identity::from_bearer(&BearerCheck::HookCannotAnswer, &grants),
            Identity::Unknown
        );
        let unlisted = Identity::from_bearer(
            &BearerCheck::Valid {
                token_name: "other".into(),
            },
            &grants,
        );
        assert!(matches!(unlisted, Identity::Present(Caller { roles, .. }) if roles.is_empty()));
    }

    #[test]
    fn peer_identity_uses_the_callees_grants_as_far_as_the_origin_holds_them() {
        let mut callee_grants = RoleGrants::new();
        callee_grants.grant(Principal::Agent("cmo".into()), ["finance", "reports"]);
        let mut host_grants = RoleGrants::new();
        host_grants.grant(Principal::Api("alice".into()), ["finance"]);
        let alice = Origin::Present(Principal::Api("alice".into()));
        let Identity::Present(caller) = Identity::peer("cmo", &callee_grants, &alice, &host_grants)
        else {
            panic!("a peer is present");
        };
        assert_eq!(caller.principal.to_string(), "agent:cmo");
        assert_eq!(caller.roles, BTreeSet::from(["finance".to_owned()]));
        assert_eq!(
            caller.withheld_roles,
            BTreeSet::from(["reports".to_owned()])
        );
        assert_eq!(caller.origin, alice);
        assert_eq!(caller.origin_roles, BTreeSet::from(["finance".to_owned()]));

        let Identity::Present(anonymous) =
            Identity::peer("cmo", &callee_grants, &Origin::Absent, &host_grants)
        else {
            panic!("a peer is present");
        };
        assert!(anonymous.roles.is_empty() && anonymous.origin_roles.is_empty());
        assert_eq!(anonymous.withheld_roles.len(), 2);
        let Identity::Present(unsure) =
            Identity::peer("cmo", &callee_grants, &Origin::Unknown, &host_grants)
        else {
            panic!("a peer is present");
        };
        assert!(unsure.roles.is_empty());
        assert_eq!(unsure.uncertain_roles.len(), 2);

        // An agent origin holds what the callee grants that agent.
        let via_cfo = Origin::Present(Principal::Agent("cfo".into()));
        callee_grants.grant(Principal::Agent("cfo".into()), ["reports"]);
        let Identity::Present(chained) =
            Identity::peer("cmo", &callee_grants, &via_cfo, &host_grants)
        else {
            panic!("a peer is present");
        };
        assert_eq!(chained.roles, BTreeSet::from(["reports".to_owned()]));

        // The explicit opt-out: the grant holds for any origin.
        callee_grants.for_any_origin(Principal::Agent("cmo".into()));
        let Identity::Present(trusted) =
            Identity::peer("cmo", &callee_grants, &Origin::Absent, &host_grants)
        else {
            panic!("a peer is present");
        };
        assert_eq!(trusted.roles.len(), 2);
        assert_eq!(
            callee_grants.on_behalf_of(&Principal::Agent("cfo".into())),
            OnBehalfOf::RoleHolders
        );
        assert_eq!(
            Identity::from_principal(&Principal::Anonymous, &callee_grants),
            Identity::Absent
        );
    }

    #[test]
    fn missing_results_read_as_no_result() {
        let policy = PolicyRef::parse("finance").unwrap();
        let facts = CallerFacts::present(BTreeMap::new());
        assert_eq!(facts.result_for(&policy), PolicyResult::NoResult);
        assert_eq!(CallerFacts::absent().identity(), IdentityState::Absent);
        assert!(CallerFacts::unknown().policy_results().is_empty());
        for result in PolicyResult::ALL {
            assert_eq!(serde_json::to_value(result).unwrap(), result.as_str());
        }
    }
}
