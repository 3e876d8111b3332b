//! The visibility decision: a pure function of a tool's [`Auth`] and the [`CallerFacts`].
//!
//! Seven rules, applied in order, first match wins:
//!
//! | # | Condition | Decision |
//! |---|---|---|
//! | 1 | anonymous is `no` and identity is absent | deny |
//! | 2 | any declared policy evaluated to deny | deny |
//! | 3 | the tool has an imperative check (a guard) | unknown |
//! | 4 | anonymous is `unknown` | unknown |
//! | 5 | anonymous is `no` and identity is unknown | unknown |
//! | 6 | any declared policy reported no result, or unknown | unknown |
//! | 7 | otherwise | allow |
//!
//! "Not anonymous" (rules 1 and 5) means `anonymous == no`: only a certain `no` may deny on
//! absent identity. A tool whose anonymity is `unknown` might be anonymous, so rule 1 does not
//! deny it; rule 4 makes it unknown (unless a policy denied it first, rule 2). Nothing invents a
//! value: rule 4 for anonymity, rule 5 for identity and rule 6 for policies are the same
//! principle three times. Only the policies the tool declares are read; results for other
//! policies are ignored, and a declared policy without a reported result is `no_result`.
//!
//! This module decides only; it gathers no facts and performs no I/O.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::descriptor::{Anonymity, Auth};
use super::facts::{CallerFacts, IdentityState, PolicyResult};

/// The three decision values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The caller can use the tool for at least one resource: shown.
    Allow,
    /// The caller cannot use it at all: hidden.
    Deny,
    /// Not evaluable: shown, with `authUncertain: true`.
    Unknown,
}

impl Decision {
    /// The decision as the schema and the CLI spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Unknown => "unknown",
        }
    }

    /// Whether `search_tools` shows a tool with this decision.
    pub fn is_shown(self) -> bool {
        self != Self::Deny
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule decided, numbered as in the table above. Serializes as its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1: not anonymous and identity absent → deny.
    AbsentIdentity,
    /// 2: a declared policy denied → deny.
    PolicyDenied,
    /// 3: an imperative check → unknown.
    ImperativeCheck,
    /// 4: anonymity unknown → unknown.
    UnknownAnonymity,
    /// 5: not anonymous and identity unknown → unknown.
    UnknownIdentity,
    /// 6: a declared policy reported no result or unknown → unknown.
    UnresolvedPolicy,
    /// 7: otherwise → allow.
    Otherwise,
}

impl Rule {
    /// Every rule, in order.
    pub const ALL: [Self; 7] = [
        Self::AbsentIdentity,
        Self::PolicyDenied,
        Self::ImperativeCheck,
        Self::UnknownAnonymity,
        Self::UnknownIdentity,
        Self::UnresolvedPolicy,
        Self::Otherwise,
    ];

    /// The rule's number, 1 to 7.
    pub fn number(self) -> u8 {
        match self {
            Self::AbsentIdentity => 1,
            Self::PolicyDenied => 2,
            Self::ImperativeCheck => 3,
            Self::UnknownAnonymity => 4,
            Self::UnknownIdentity => 5,
            Self::UnresolvedPolicy => 6,
            Self::Otherwise => 7,
        }
    }

    /// The rule with this number.
    pub fn from_number(number: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|rule| rule.number() == number)
    }

    /// The decision this rule produces.
    pub fn decision(self) -> Decision {
        match self {
            Self::AbsentIdentity | Self::PolicyDenied => Decision::Deny,
            Self::ImperativeCheck
            | Self::UnknownAnonymity
            | Self::UnknownIdentity
            | Self::UnresolvedPolicy => Decision::Unknown,
            Self::Otherwise => Decision::Allow,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(self.number())
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = u8::deserialize(deserializer)?;
        Self::from_number(number)
            .ok_or_else(|| serde::de::Error::custom(format!("no visibility rule {number}")))
    }
}

/// Applies the seven rules in order; the first match wins.
pub fn decide(auth: &Auth, facts: &CallerFacts) -> (Decision, Rule) {
    let identity = facts.identity();
    let mut declared = auth.policies.iter().map(|policy| facts.result_for(policy));
    let rule = if auth.anonymous == Anonymity::No && identity == IdentityState::Absent {
        Rule::AbsentIdentity
    } else if declared.clone().any(|result| result == PolicyResult::Deny) {
        Rule::PolicyDenied
    } else if auth.imperative {
        Rule::ImperativeCheck
    } else if auth.anonymous == Anonymity::Unknown {
        Rule::UnknownAnonymity
    } else if auth.anonymous == Anonymity::No && identity == IdentityState::Unknown {
        Rule::UnknownIdentity
    } else if declared
        .any(|result| matches!(result, PolicyResult::NoResult | PolicyResult::Unknown))
    {
        Rule::UnresolvedPolicy
    } else {
        Rule::Otherwise
    };
    (rule.decision(), rule)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::visibility::descriptor::PolicyRef;

    /// What a declared policy's slot holds in a generated case: a reported result, or nothing
    /// reported at all.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Slot {
        Reported(PolicyResult),
        NotReported,
    }

    const SLOTS: [Slot; 5] = [
        Slot::Reported(PolicyResult::Allow),
        Slot::Reported(PolicyResult::Deny),
        Slot::Reported(PolicyResult::Unknown),
        Slot::Reported(PolicyResult::NoResult),
        Slot::NotReported,
    ];

    /// Multisets of size 0..=max over the slot alphabet (non-decreasing index sequences).
    fn multisets(max: usize) -> Vec<Vec<Slot>> {
        fn grow(start: usize, left: usize, current: &mut Vec<Slot>, out: &mut Vec<Vec<Slot>>) {
            out.push(current.clone());
            if left == 0 {
                return;
            }
            for (index, slot) in SLOTS.iter().enumerate().skip(start) {
                current.push(*slot);
                grow(index, left - 1, current, out);
                current.pop();
            }
        }
        let mut out = Vec::new();
        grow(0, max, &mut Vec::new(), &mut out);
        out
    }

    /// The oracle: the spec's table as (condition, rule) rows over counts of each kind of
    /// declared result, written independently of `decide`.
    fn oracle(
        anonymous: Anonymity,
        identity: IdentityState,
        imperative: bool,
        slots: &[Slot],
    ) -> Rule {
        let count = |wanted: &[Slot]| slots.iter().filter(|s| wanted.contains(s)).count();
        let denies = count(&[Slot::Reported(PolicyResult::Deny)]);
        let unresolved = count(&[
            Slot::Reported(PolicyResult::Unknown),
            Slot::Reported(PolicyResult::NoResult),
            Slot::NotReported,
        ]);
        let not_anonymous = anonymous == Anonymity::No;
        let table: [(bool, u8); 7] = [
            (not_anonymous && identity == IdentityState::Absent, 1),
            (denies > 0, 2),
            (imperative, 3),
            (anonymous == Anonymity::Unknown, 4),
            (not_anonymous && identity == IdentityState::Unknown, 5),
            (unresolved > 0, 6),
            (true, 7),
        ];
        let number = table
            .iter()
            .find(|(applies, _)| *applies)
            .map(|(_, n)| *n)
            .unwrap_or(7);
        Rule::from_number(number).unwrap()
    }

    fn expected_decision(number: u8) -> Decision {
        match number {
            1 | 2 => Decision::Deny,
            3..=6 => Decision::Unknown,
            _ => Decision::Allow,
        }
    }

    /// Builds the inputs for one case. `extra` adds a deny result for a policy the tool does
    /// not declare, which must be ignored.
    fn case(
        anonymous: Anonymity,
        identity: IdentityState,
        imperative: bool,
        slots: &[Slot],
        extra: bool,
    ) -> (Auth, CallerFacts) {
        let policies: Vec<PolicyRef> = (0..slots.len())
            .map(|i| PolicyRef::Named(format!("p{i}")))
            .collect();
        let mut results = BTreeMap::new();
        for (policy, slot) in policies.iter().zip(slots) {
            if let Slot::Reported(result) = slot {
                results.insert(policy.clone(), *result);
            }
        }
        if extra {
            results.insert(PolicyRef::Named("undeclared".into()), PolicyResult::Deny);
        }
        let facts = match identity {
            IdentityState::Present => CallerFacts::present(results),
            other => CallerFacts::without_results(other),
        };
        let auth = Auth {
            anonymous,
            policies,
            imperative,
        };
        (auth, facts)
    }

    #[test]
    fn every_combination_matches_the_oracle() {
        let mut checked = 0;
        let mut rules_seen = std::collections::BTreeSet::new();
        for anonymous in Anonymity::ALL {
            for identity in IdentityState::ALL {
                for imperative in [false, true] {
                    for slots in multisets(3) {
                        // Results exist only while identity is present; otherwise every
                        // declared policy is unreported.
                        if identity != IdentityState::Present
                            && slots.iter().any(|s| *s != Slot::NotReported)
                        {
                            continue;
                        }
                        for extra in [false, true] {
                            if extra && identity != IdentityState::Present {
                                continue;
                            }
                            let (auth, facts) =
                                case(anonymous, identity, imperative, &slots, extra);
                            let expected = oracle(anonymous, identity, imperative, &slots);
                            let (decision, rule) = decide(&auth, &facts);
                            assert_eq!(
                                rule, expected,
                                "{anonymous:?} {identity:?} imperative={imperative} {slots:?} extra={extra}"
                            );
                            assert_eq!(decision, expected_decision(expected.number()));
                            // Order of declared policies never matters.
                            let mut reversed = auth.clone();
                            reversed.policies.reverse();
                            assert_eq!(decide(&reversed, &facts), (decision, rule));
                            rules_seen.insert(rule.number());
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(rules_seen.len(), 7, "every rule is reached");
        assert!(checked > 500, "{checked} cases");
    }

    #[test]
    fn a_missing_or_no_result_never_becomes_allow() {
        // Metamorphic check: replacing any allow with no result / unknown / not reported never
        // yields allow.
        for anonymous in Anonymity::ALL {
            for imperative in [false, true] {
                for slots in multisets(3) {
                    for (i, slot) in slots.iter().enumerate() {
                        if *slot != Slot::Reported(PolicyResult::Allow) {
                            continue;
                        }
                        for weaker in [
                            Slot::Reported(PolicyResult::NoResult),
                            Slot::Reported(PolicyResult::Unknown),
                            Slot::NotReported,
                        ] {
                            let mut changed = slots.clone();
                            changed[i] = weaker;
                            let (auth, facts) = case(
                                anonymous,
                                IdentityState::Present,
                                imperative,
                                &changed,
                                false,
                            );
                            assert_ne!(decide(&auth, &facts).0, Decision::Allow);
                        }
                    }
                }
            }
        }
    }

    fn auth(anonymous: Anonymity, policies: &[&str], imperative: bool) -> Auth {
        Auth {
            anonymous,
            policies: policies
                .iter()
                .map(|p| PolicyRef::parse(p).unwrap())
                .collect(),
            imperative,
        }
    }

    fn present(results: &[(&str, PolicyResult)]) -> CallerFacts {
        CallerFacts::present(
            results
                .iter()
                .map(|(p, r)| (PolicyRef::parse(p).unwrap(), *r))
                .collect(),
        )
    }

    #[test]
    fn rule_1_absent_identity_denies_a_non_anonymous_tool() {
        let tool = auth(Anonymity::No, &["finance"], true);
        assert_eq!(
            decide(&tool, &CallerFacts::absent()),
            (Decision::Deny, Rule::AbsentIdentity)
        );
        // ...but never one whose anonymity is unknown: it might be anonymous (rule 4).
        let maybe = auth(Anonymity::Unknown, &[], false);
        assert_eq!(
            decide(&maybe, &CallerFacts::absent()),
            (Decision::Unknown, Rule::UnknownAnonymity)
        );
    }

    #[test]
    fn rule_2_one_denial_settles_it_despite_uncertainty_elsewhere() {
        let tool = auth(Anonymity::Unknown, &["a", "roles:b"], true);
        let facts = present(&[
            ("a", PolicyResult::Unknown),
            ("roles:b", PolicyResult::Deny),
        ]);
        assert_eq!(decide(&tool, &facts), (Decision::Deny, Rule::PolicyDenied));
    }

    #[test]
    fn rule_3_a_guard_is_unknown_even_for_anonymous_tools() {
        let tool = auth(Anonymity::Yes, &[], true);
        for facts in [CallerFacts::absent(), CallerFacts::unknown(), present(&[])] {
            assert_eq!(
                decide(&tool, &facts),
                (Decision::Unknown, Rule::ImperativeCheck)
            );
        }
    }

    #[test]
    fn rule_4_unknown_anonymity_is_unknown() {
        let tool = auth(Anonymity::Unknown, &["a"], false);
        let facts = present(&[("a", PolicyResult::Allow)]);
        assert_eq!(
            decide(&tool, &facts),
            (Decision::Unknown, Rule::UnknownAnonymity)
        );
    }

    #[test]
    fn rule_5_unknown_identity_is_unknown_for_non_anonymous_tools() {
        let tool = auth(Anonymity::No, &[], false);
        assert_eq!(
            decide(&tool, &CallerFacts::unknown()),
            (Decision::Unknown, Rule::UnknownIdentity)
        );
        // An anonymous tool does not need identity.
        let open = auth(Anonymity::Yes, &[], false);
        assert_eq!(
            decide(&open, &CallerFacts::unknown()),
            (Decision::Allow, Rule::Otherwise)
        );
    }

    #[test]
    fn rule_6_no_result_or_unknown_policy_is_unknown() {
        let tool = auth(Anonymity::No, &["a", "b"], false);
        assert_eq!(
            decide(&tool, &present(&[("a", PolicyResult::Allow)])),
            (Decision::Unknown, Rule::UnresolvedPolicy)
        );
        assert_eq!(
            decide(
                &tool,
                &present(&[("a", PolicyResult::Allow), ("b", PolicyResult::NoResult)])
            ),
            (Decision::Unknown, Rule::UnresolvedPolicy)
        );
        assert_eq!(
            decide(
                &tool,
                &present(&[("a", PolicyResult::Unknown), ("b", PolicyResult::Allow)])
            ),
            (Decision::Unknown, Rule::UnresolvedPolicy)
        );
        // An anonymous tool with a policy and no identity: the policy was never asked.
        let open = auth(Anonymity::Yes, &["a"], false);
        assert_eq!(
            decide(&open, &CallerFacts::absent()),
            (Decision::Unknown, Rule::UnresolvedPolicy)
        );
    }

    #[test]
    fn rule_7_all_declared_policies_allow() {
        let tool = auth(Anonymity::No, &["a", "roles:x,y"], false);
        let facts = present(&[
            ("a", PolicyResult::Allow),
            ("roles:x,y", PolicyResult::Allow),
        ]);
        assert_eq!(decide(&tool, &facts), (Decision::Allow, Rule::Otherwise));
        assert_eq!(
            decide(&auth(Anonymity::Yes, &[], false), &CallerFacts::absent()),
            (Decision::Allow, Rule::Otherwise)
        );
    }

    #[test]
    fn rules_serialize_as_numbers() {
        for rule in Rule::ALL {
            let json = serde_json::to_string(&rule).unwrap();
            assert_eq!(json, rule.number().to_string());
            assert_eq!(serde_json::from_str::<Rule>(&json).unwrap(), rule);
        }
        assert!(serde_json::from_str::<Rule>("8").is_err());
        assert_eq!(
            serde_json::to_string(&Decision::Unknown).unwrap(),
            "\"unknown\""
        );
    }
}
