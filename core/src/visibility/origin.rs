//! The origin of a call tree, and the rule that decides which roles a peer run acts with.
//!
//! Every run has an *origin*: who started the root run of its call tree. A root run's origin
//! is its own identity (`api:<name>`, `anonymous`, or `unknown` when an identity hook could
//! not answer); a run started by `call_agent` inherits the origin of the run that called it,
//! whatever host that run lives on. Without it a callee would see only `agent:<caller>`, and an
//! anonymous request to an agent that may call a privileged peer would borrow that agent's
//! grants (a confused deputy).
//!
//! The rule ([`acting_roles`]): a peer run acts with the roles the callee grants the calling
//! agent *that the origin holds too* (as the callee's host grants roles to that principal). A
//! grant declared to hold on behalf of anyone ([`OnBehalfOf::Any`]) is the explicit opt-out:
//! the calling agent's roles count whoever started the request. An absent origin holds no
//! role; an unknown one leaves every granted role uncertain, never allowed nor denied.
//!
//! This module holds plain data and pure functions only: it reads no config (the caller hands
//! in the grants), performs no I/O, and decides no tool's visibility (the policies and the
//! ladder read what [`acting_roles`] returns).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::VisibilityError;
use super::facts::{Identity, Principal};

/// Who started the root run of a call tree, as three-valued as identity is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Origin {
    /// An established principal (`api:<name>` or `agent:<name>`; never `anonymous`, which is
    /// [`Origin::Absent`]).
    Present(Principal),
    /// Nobody: the root run was anonymous.
    Absent,
    /// The root run's identity could not be established (or the run predates origins).
    Unknown,
}

/// The text of an origin that could not be established.
const UNKNOWN: &str = "unknown";

impl Origin {
    /// The origin of a root run that acts for `identity`.
    pub fn of(identity: &Identity) -> Self {
        match identity {
            Identity::Present(caller) => Self::present(caller.principal.clone()),
            Identity::Absent => Self::Absent,
            Identity::Unknown => Self::Unknown,
        }
    }

    /// A present origin; `anonymous` is [`Origin::Absent`], so one origin has one form.
    pub fn present(principal: Principal) -> Self {
        match principal {
            Principal::Anonymous => Self::Absent,
            named => Self::Present(named),
        }
    }

    /// Reads the stored and wire text: a principal, `anonymous` or `unknown`.
    pub fn parse(text: &str) -> Result<Self, VisibilityError> {
        if text == UNKNOWN {
            return Ok(Self::Unknown);
        }
        Principal::parse(text).map(Self::present)
    }

    /// The principal, when present.
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Self::Present(principal) => Some(principal),
            Self::Absent | Self::Unknown => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Present(principal) => principal.fmt(f),
            Self::Absent => Principal::Anonymous.fmt(f),
            Self::Unknown => f.write_str(UNKNOWN),
        }
    }
}

impl FromStr for Origin {
    type Err = VisibilityError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl TryFrom<String> for Origin {
    type Error = VisibilityError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<Origin> for String {
    fn from(origin: Origin) -> Self {
        origin.to_string()
    }
}

/// For whom a callee's grant to a calling agent holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OnBehalfOf {
    /// Only on behalf of an origin that holds the role too (the default).
    #[default]
    RoleHolders,
    /// On behalf of any origin: the callee trusts the calling agent to check its own
    /// requesters.
    Any,
}

/// The roles a peer run acts with, split by what the origin allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActingRoles {
    /// Roles the run acts with.
    pub held: BTreeSet<String>,
    /// Granted roles that count only if the origin holds them, which is not known.
    pub uncertain: BTreeSet<String>,
    /// Granted roles the run does not act with because the origin does not hold them.
    pub withheld: BTreeSet<String>,
}

/// The rule: which of the roles `granted` to the calling agent a peer run acts with, given the
/// `origin` of its call tree and the roles `origin_roles` the callee's host grants that origin.
///
/// With [`OnBehalfOf::Any`] every granted role is held. Otherwise a present origin lends only
/// the granted roles it holds itself (the intersection), an absent one none, and an unknown one
/// leaves every granted role uncertain. Every granted role lands in exactly one of the three
/// sets; no role outside `granted` is ever held.
pub fn acting_roles(
    granted: &BTreeSet<String>,
    on_behalf_of: OnBehalfOf,
    origin: &Origin,
    origin_roles: &BTreeSet<String>,
) -> ActingRoles {
    match (on_behalf_of, origin) {
        (OnBehalfOf::Any, _) => ActingRoles {
            held: granted.clone(),
            ..ActingRoles::default()
        },
        (OnBehalfOf::RoleHolders, Origin::Present(_)) => {
            let (held, withheld) = granted
                .iter()
                .cloned()
                .partition(|role| origin_roles.contains(role));
            ActingRoles {
                held,
                withheld,
                ..ActingRoles::default()
            }
        }
        (OnBehalfOf::RoleHolders, Origin::Absent) => ActingRoles {
            withheld: granted.clone(),
            ..ActingRoles::default()
        },
        (OnBehalfOf::RoleHolders, Origin::Unknown) => ActingRoles {
            uncertain: granted.clone(),
            ..ActingRoles::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(roles: &[&str]) -> BTreeSet<String> {
        roles.iter().map(|r| (*r).to_owned()).collect()
    }

    fn alice() -> Origin {
        Origin::Present(Principal::Api("alice".into()))
    }

    #[test]
    fn origins_parse_and_print_round_trip() {
        for text in ["api:alice", "agent:cmo", "anonymous", "unknown"] {
            assert_eq!(Origin::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(Origin::parse("anonymous").unwrap(), Origin::Absent);
        assert_eq!(Origin::parse("unknown").unwrap(), Origin::Unknown);
        assert_eq!(Origin::present(Principal::Anonymous), Origin::Absent);
        for bad in ["", "user:x", "Unknown", "api:", "agent:a b"] {
            assert!(Origin::parse(bad).is_err(), "{bad:?}");
        }
        let json = serde_json::to_string(&alice()).unwrap();
        assert_eq!(json, "\"api:alice\"");
        assert!(serde_json::from_str::<Origin>("\"bogus\"").is_err());
        assert_eq!(alice().principal(), Some(&Principal::Api("alice".into())));
        assert_eq!(Origin::Absent.principal(), None);
        assert_eq!(Origin::Unknown.principal(), None);
    }

    #[test]
    fn a_root_runs_origin_is_its_identity() {
        let present = Identity::from_principal(
            &Principal::Api("alice".into()),
            &super::super::RoleGrants::new(),
        );
        assert_eq!(Origin::of(&present), alice());
        assert_eq!(Origin::of(&Identity::Absent), Origin::Absent);
        assert_eq!(Origin::of(&Identity::Unknown), Origin::Unknown);
    }

    /// Every (grant scope, origin state) pair, with a grant of two roles and an origin that
    /// holds one of them and one role that was not granted.
    #[test]
    fn the_rule_over_every_scope_and_origin() {
        let granted = set(&["hr", "payroll"]);
        let origin_roles = set(&["hr", "finance"]);
        let cases = [
            (
                OnBehalfOf::RoleHolders,
                alice(),
                set(&["hr"]),
                set(&[]),
                set(&["payroll"]),
            ),
            (
                OnBehalfOf::RoleHolders,
                Origin::Absent,
                set(&[]),
                set(&[]),
                set(&["hr", "payroll"]),
            ),
            (
                OnBehalfOf::RoleHolders,
                Origin::Unknown,
                set(&[]),
                set(&["hr", "payroll"]),
                set(&[]),
            ),
            (
                OnBehalfOf::Any,
                alice(),
                set(&["hr", "payroll"]),
                set(&[]),
                set(&[]),
            ),
            (
                OnBehalfOf::Any,
                Origin::Absent,
                set(&["hr", "payroll"]),
                set(&[]),
                set(&[]),
            ),
            (
                OnBehalfOf::Any,
                Origin::Unknown,
                set(&["hr", "payroll"]),
                set(&[]),
                set(&[]),
            ),
        ];
        for (scope, origin, held, uncertain, withheld) in cases {
            let roles = acting_roles(&granted, scope, &origin, &origin_roles);
            assert_eq!(
                roles,
                ActingRoles {
                    held,
                    uncertain,
                    withheld
                },
                "{scope:?} for {origin}"
            );
        }
    }

    #[test]
    fn an_origin_that_holds_nothing_lends_nothing_and_nothing_granted_gives_nothing() {
        let none = BTreeSet::new();
        let roles = acting_roles(&set(&["hr"]), OnBehalfOf::RoleHolders, &alice(), &none);
        assert!(roles.held.is_empty());
        assert_eq!(roles.withheld, set(&["hr"]));
        for origin in [alice(), Origin::Absent, Origin::Unknown] {
            for scope in [OnBehalfOf::RoleHolders, OnBehalfOf::Any] {
                assert_eq!(
                    acting_roles(&none, scope, &origin, &set(&["hr"])),
                    ActingRoles::default()
                );
            }
        }
        assert_eq!(OnBehalfOf::default(), OnBehalfOf::RoleHolders);
    }

    fn roles() -> impl Strategy<Value = BTreeSet<String>> {
        proptest::collection::btree_set(
            prop_oneof![Just("hr"), Just("finance"), Just("ops"), Just("audit")]
                .prop_map(str::to_owned),
            0..4,
        )
    }

    fn origins() -> impl Strategy<Value = Origin> {
        prop_oneof![Just(alice()), Just(Origin::Absent), Just(Origin::Unknown)]
    }

    proptest! {
        /// The three sets split the grant; a run never acts with a role it was not granted,
        /// and by default never with one its origin lacks.
        #[test]
        fn the_sets_partition_the_grant(
            granted in roles(),
            origin_roles in roles(),
            origin in origins(),
            any in any::<bool>(),
        ) {
            let scope = if any { OnBehalfOf::Any } else { OnBehalfOf::RoleHolders };
            let roles = acting_roles(&granted, scope, &origin, &origin_roles);
            let mut all: Vec<&String> = roles.held.iter()
                .chain(&roles.uncertain)
                .chain(&roles.withheld)
                .collect();
            all.sort();
            prop_assert_eq!(all, granted.iter().collect::<Vec<_>>());
            if scope == OnBehalfOf::RoleHolders {
                prop_assert!(roles.held.is_subset(&origin_roles));
                if origin != alice() {
                    prop_assert!(roles.held.is_empty());
                }
            }
        }
    }
}
