//! The evaluation ladder: how the facts behind a decision are found, cheapest first.
//!
//! | Layer | Reads | Produces |
//! |---|---|---|
//! | T0 | a tool's markers ([`super::AuthMarkers::derive_auth`]) | `auth.anonymous` |
//! | T1 | declarative policies ([`PolicyRegistry`], role policies) | policy results |
//! | T2 | a [`Probe`]: a synthetic request cut off before the handler | allow / deny |
//! | T3 | nothing decided above | unknown |
//!
//! T1 evaluates only while identity is present; a role policy `roles:a,b` allows a caller with
//! one of those roles; a named policy is looked up in the registry, and one that is not defined
//! or needs a resource reports no result. [`decide`] then applies the seven rules. Only a
//! tool the rules leave `unknown` is probed, and only when there is someone to probe as (the
//! caller's principal, or `anonymous` when identity is absent; never when identity is unknown).
//! Probes run on the first K candidates in ranking order (K = [`Visibility::probe_budget`],
//! [`DEFAULT_PROBE_BUDGET`] by default); outcomes already in the [`ProbeCache`] are used for
//! any candidate, since they cost nothing. `Refused` maps to deny, `ReachedCut` to allow, and
//! `Other` to unknown, disabling probes of that tool until the catalog changes.
//!
//! This module never runs a tool handler itself and performs no I/O: a probe is whatever the
//! [`Probe`] implementation does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::decision::{Decision, Rule, decide};
use super::descriptor::{Auth, PolicyRef, is_name};
use super::error::VisibilityError;
use super::facts::{Caller, CallerFacts, Identity, PolicyResult, Principal};
use super::probe_cache::ProbeCache;

/// How many ranked candidates may be probed per search, unless configured otherwise.
pub const DEFAULT_PROBE_BUDGET: usize = 25;

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

/// What a T2 probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// The pipeline refused the synthetic request before the cut: deny.
    Refused,
    /// The request reached the cut before the handler: allow.
    ReachedCut,
    /// Anything else (an error, a timeout, a pipeline that cannot be cut): unknown, and the tool
    /// is not probed again for this catalog generation.
    Other,
}

impl ProbeOutcome {
    /// The decision this outcome stands for: refused is deny, reaching the cut allow, anything else unknown.
    pub fn decision(self) -> Decision {
        match self {
            Self::Refused => Decision::Deny,
            Self::ReachedCut => Decision::Allow,
            Self::Other => Decision::Unknown,
        }
    }
}

/// T2: pushes a synthetic request for `tool`, as `principal`, into the tool's real pipeline and
/// cuts it off before the handler. Implementations must never run the handler.
pub trait Probe {
    /// Probes `tool` as `principal`, stopping at the cut.
    fn probe(&self, tool: &str, principal: &Principal) -> ProbeOutcome;
}

/// Which layer settled a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// T0/T1 facts and the rules settled it (allow or deny).
    Rules(Rule),
    /// A T2 probe outcome (fresh or cached) settled it.
    Probe(ProbeOutcome),
    /// T3: nothing settled it; the rule that left it unknown.
    Unresolved(Rule),
}

/// One tool's decision for one caller, with how it was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Allow, deny or unknown.
    pub decision: Decision,
    /// Which layer settled it.
    pub decided_by: DecidedBy,
}

/// Who is asking and what the ladder may use to find out.
#[derive(Clone, Copy)]
pub struct Visibility<'a> {
    /// The caller's identity.
    pub identity: &'a Identity,
    /// The named policies T1 evaluates.
    pub registry: &'a PolicyRegistry,
    /// T2, if the host has one.
    pub probe: Option<&'a dyn Probe>,
    /// Probes run only on the first this many candidates after ranking.
    pub probe_budget: usize,
}

impl<'a> Visibility<'a> {
    /// T0/T1 only, with the default probe budget and no probe.
    pub fn without_probe(identity: &'a Identity, registry: &'a PolicyRegistry) -> Self {
        Visibility {
            identity,
            registry,
            probe: None,
            probe_budget: DEFAULT_PROBE_BUDGET,
        }
    }

    /// The principal a probe runs as: the caller's, `anonymous` when identity is absent, none
    /// when identity is unknown (there is nobody certain to probe as).
    fn probe_principal(&self) -> Option<Principal> {
        match self.identity {
            Identity::Present(caller) => Some(caller.principal.clone()),
            Identity::Absent => Some(Principal::Anonymous),
            Identity::Unknown => None,
        }
    }
}

/// The whole ladder over `candidates` (tool name and auth, in ranking order) from a catalog of
/// `generation`: one verdict per candidate, in the same order. Drops the cache first if the
/// generation changed.
pub fn evaluate_candidates(
    candidates: &[(&str, &Auth)],
    generation: u64,
    visibility: &Visibility<'_>,
    cache: &mut ProbeCache,
) -> Vec<Verdict> {
    cache.observe_generation(generation);
    let principal = visibility.probe_principal();
    candidates
        .iter()
        .enumerate()
        .map(|(position, (tool, auth))| {
            let facts = evaluate_policies(auth, visibility.identity, visibility.registry);
            let (decision, rule) = decide(auth, &facts);
            if decision != Decision::Unknown {
                return Verdict {
                    decision,
                    decided_by: DecidedBy::Rules(rule),
                };
            }
            let unresolved = Verdict {
                decision: Decision::Unknown,
                decided_by: DecidedBy::Unresolved(rule),
            };
            let Some(principal) = principal.as_ref() else {
                return unresolved;
            };
            if cache.is_disabled(tool) {
                return unresolved;
            }
            let outcome = match cache.outcome(principal, tool) {
                Some(cached) => cached,
                None => match visibility.probe {
                    Some(probe) if position < visibility.probe_budget => {
                        let fresh = probe.probe(tool, principal);
                        cache.record(principal, tool, fresh);
                        fresh
                    }
                    _ => return unresolved,
                },
            };
            match outcome {
                ProbeOutcome::Other => unresolved,
                settled => Verdict {
                    decision: settled.decision(),
                    decided_by: DecidedBy::Probe(settled),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::visibility::descriptor::Anonymity;
    use crate::visibility::facts::RoleGrants;

    /// A probe that answers from a table (default `ReachedCut`) and counts its invocations.
    struct CountingProbe {
        calls: Cell<usize>,
        seen: RefCell<Vec<(String, Principal)>>,
        answers: BTreeMap<String, ProbeOutcome>,
    }

    impl CountingProbe {
        fn new(answers: &[(&str, ProbeOutcome)]) -> Self {
            Self {
                calls: Cell::new(0),
                seen: RefCell::new(Vec::new()),
                answers: answers
                    .iter()
                    .map(|(tool, outcome)| (tool.to_string(), *outcome))
                    .collect(),
            }
        }
    }

    impl Probe for CountingProbe {
        fn probe(&self, tool: &str, principal: &Principal) -> ProbeOutcome {
            self.calls.set(self.calls.get() + 1);
            self.seen
                .borrow_mut()
                .push((tool.to_owned(), principal.clone()));
            self.answers
                .get(tool)
                .copied()
                .unwrap_or(ProbeOutcome::ReachedCut)
        }
    }

    fn guarded() -> Auth {
        Auth {
            anonymous: Anonymity::No,
            policies: vec![],
            imperative: true,
        }
    }

    fn caller(name: &str, roles: &[&str]) -> Identity {
        let mut grants = RoleGrants::new();
        grants.grant(Principal::Agent(name.into()), roles.iter().copied());
        Identity::peer(name, &grants)
    }

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("tool{i:02}")).collect()
    }

    #[test]
    fn t1_role_and_named_policies() {
        let mut registry = PolicyRegistry::new();
        registry
            .define(
                "finance",
                PolicyDefinition {
                    roles: vec!["finance".into()],
                    ..PolicyDefinition::default()
                },
            )
            .unwrap()
            .define(
                "cmo-only",
                PolicyDefinition {
                    principals: vec![Principal::Agent("cmo".into())],
                    ..PolicyDefinition::default()
                },
            )
            .unwrap()
            .define(
                "own-records",
                PolicyDefinition {
                    needs_resource: true,
                    ..PolicyDefinition::default()
                },
            )
            .unwrap();
        let Identity::Present(cmo) = caller("cmo", &["finance"]) else {
            unreachable!()
        };
        let Identity::Present(cfo) = caller("cfo", &["audit"]) else {
            unreachable!()
        };
        let eval =
            |policy: &str, who: &Caller| registry.evaluate(&PolicyRef::parse(policy).unwrap(), who);
        assert_eq!(eval("finance", &cmo), PolicyResult::Allow);
        assert_eq!(eval("finance", &cfo), PolicyResult::Deny);
        assert_eq!(eval("cmo-only", &cmo), PolicyResult::Allow);
        assert_eq!(eval("cmo-only", &cfo), PolicyResult::Deny);
        assert_eq!(eval("own-records", &cmo), PolicyResult::NoResult);
        assert_eq!(eval("undefined", &cmo), PolicyResult::NoResult);
        assert_eq!(eval("roles:audit,legal", &cfo), PolicyResult::Allow);
        assert_eq!(eval("roles:audit,legal", &cmo), PolicyResult::Deny);

        assert!(matches!(
            registry.define("empty", PolicyDefinition::default()),
            Err(VisibilityError::EmptyPolicyDefinition { .. })
        ));
        assert!(matches!(
            registry.define(
                "roles:x",
                PolicyDefinition {
                    roles: vec!["x".into()],
                    ..PolicyDefinition::default()
                }
            ),
            Err(VisibilityError::InvalidPolicyName { .. })
        ));
        let parsed: PolicyDefinition =
            serde_json::from_str(r#"{"roles": ["finance"], "principals": ["agent:cmo"]}"#).unwrap();
        assert_eq!(parsed.evaluate(&cmo), PolicyResult::Allow);
        assert_eq!(parsed.evaluate(&cfo), PolicyResult::Deny);
        assert!(serde_json::from_str::<PolicyDefinition>(r#"{"role": ["x"]}"#).is_err());
    }

    #[test]
    fn t1_asks_nothing_without_present_identity() {
        let auth = Auth {
            anonymous: Anonymity::No,
            policies: vec![PolicyRef::parse("roles:x").unwrap()],
            imperative: false,
        };
        let registry = PolicyRegistry::new();
        assert_eq!(
            evaluate_policies(&auth, &Identity::Absent, &registry),
            CallerFacts::absent()
        );
        assert_eq!(
            evaluate_policies(&auth, &Identity::Unknown, &registry),
            CallerFacts::unknown()
        );
    }

    #[test]
    fn probes_run_only_on_the_first_k_candidates() {
        let identity = caller("cmo", &[]);
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[]);
        let visibility = Visibility {
            identity: &identity,
            registry: &registry,
            probe: Some(&probe),
            probe_budget: 5,
        };
        let auth = guarded();
        let tools = names(12);
        let candidates: Vec<(&str, &Auth)> = tools.iter().map(|n| (n.as_str(), &auth)).collect();
        let mut cache = ProbeCache::new(7);
        let verdicts = evaluate_candidates(&candidates, 7, &visibility, &mut cache);
        assert_eq!(probe.calls.get(), 5);
        assert!(verdicts[..5].iter().all(|v| v.decision == Decision::Allow
            && v.decided_by == DecidedBy::Probe(ProbeOutcome::ReachedCut)));
        assert!(verdicts[5..].iter().all(|v| v.decision == Decision::Unknown
            && v.decided_by == DecidedBy::Unresolved(Rule::ImperativeCheck)));
        let probed: BTreeSet<String> = probe.seen.borrow().iter().map(|(t, _)| t.clone()).collect();
        assert_eq!(probed, tools[..5].iter().cloned().collect());
        assert!(
            probe
                .seen
                .borrow()
                .iter()
                .all(|(_, p)| *p == Principal::Agent("cmo".into()))
        );
    }

    #[test]
    fn default_budget_is_25() {
        let identity = caller("cmo", &[]);
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[]);
        let visibility = Visibility {
            probe: Some(&probe),
            ..Visibility::without_probe(&identity, &registry)
        };
        let auth = guarded();
        let tools = names(40);
        let candidates: Vec<(&str, &Auth)> = tools.iter().map(|n| (n.as_str(), &auth)).collect();
        evaluate_candidates(&candidates, 0, &visibility, &mut ProbeCache::new(0));
        assert_eq!(probe.calls.get(), DEFAULT_PROBE_BUDGET);
        assert_eq!(DEFAULT_PROBE_BUDGET, 25);
    }

    #[test]
    fn settled_tools_are_not_probed_and_cache_hits_do_not_reprobe() {
        let identity = caller("cmo", &[]);
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[("b", ProbeOutcome::Refused)]);
        let visibility = Visibility {
            identity: &identity,
            registry: &registry,
            probe: Some(&probe),
            probe_budget: 25,
        };
        let open = Auth {
            anonymous: Anonymity::Yes,
            policies: vec![],
            imperative: false,
        };
        let auth = guarded();
        let candidates = [("open", &open), ("a", &auth), ("b", &auth)];
        let mut cache = ProbeCache::new(1);
        let first = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
        assert_eq!(probe.calls.get(), 2, "the allowed tool is never probed");
        assert_eq!(first[0].decided_by, DecidedBy::Rules(Rule::Otherwise));
        assert_eq!(first[2].decision, Decision::Deny);
        let second = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
        assert_eq!(probe.calls.get(), 2, "cache hits do not re-probe");
        assert_eq!(first, second);

        // A cached outcome is used even beyond the budget: it costs nothing.
        let tight = Visibility {
            probe_budget: 0,
            ..visibility
        };
        let third = evaluate_candidates(&candidates, 1, &tight, &mut cache);
        assert_eq!(third, first);
        assert_eq!(probe.calls.get(), 2);
    }

    #[test]
    fn a_generation_change_drops_the_cache_and_probes_again() {
        let identity = caller("cmo", &[]);
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[]);
        let visibility = Visibility {
            identity: &identity,
            registry: &registry,
            probe: Some(&probe),
            probe_budget: 25,
        };
        let auth = guarded();
        let candidates = [("a", &auth)];
        let mut cache = ProbeCache::new(1);
        evaluate_candidates(&candidates, 1, &visibility, &mut cache);
        evaluate_candidates(&candidates, 1, &visibility, &mut cache);
        assert_eq!(probe.calls.get(), 1);
        evaluate_candidates(&candidates, 2, &visibility, &mut cache);
        assert_eq!(probe.calls.get(), 2);
        assert_eq!(cache.generation(), 2);
    }

    #[test]
    fn an_other_outcome_disables_the_tool_for_everyone() {
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[("flaky", ProbeOutcome::Other)]);
        let auth = guarded();
        let candidates = [("flaky", &auth)];
        let mut cache = ProbeCache::new(1);
        for name in ["cmo", "cfo", "cmo"] {
            let identity = caller(name, &[]);
            let visibility = Visibility {
                identity: &identity,
                registry: &registry,
                probe: Some(&probe),
                probe_budget: 25,
            };
            let verdicts = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
            assert_eq!(
                verdicts[0],
                Verdict {
                    decision: Decision::Unknown,
                    decided_by: DecidedBy::Unresolved(Rule::ImperativeCheck),
                }
            );
        }
        assert_eq!(probe.calls.get(), 1);
        assert!(cache.is_disabled("flaky"));
    }

    #[test]
    fn probes_run_as_anonymous_for_absent_identity_and_never_for_unknown() {
        let registry = PolicyRegistry::new();
        let probe = CountingProbe::new(&[]);
        let maybe_open = Auth {
            anonymous: Anonymity::Unknown,
            policies: vec![],
            imperative: false,
        };
        let candidates = [("maybe", &maybe_open)];
        let mut cache = ProbeCache::new(1);
        let absent = Visibility {
            probe: Some(&probe),
            ..Visibility::without_probe(&Identity::Absent, &registry)
        };
        let verdicts = evaluate_candidates(&candidates, 1, &absent, &mut cache);
        assert_eq!(verdicts[0].decision, Decision::Allow);
        assert_eq!(probe.seen.borrow()[0].1, Principal::Anonymous);

        let unknown = Visibility {
            probe: Some(&probe),
            ..Visibility::without_probe(&Identity::Unknown, &registry)
        };
        let verdicts = evaluate_candidates(&candidates, 1, &unknown, &mut cache);
        assert_eq!(
            verdicts[0].decided_by,
            DecidedBy::Unresolved(Rule::UnknownAnonymity)
        );
        assert_eq!(probe.calls.get(), 1);
    }

    #[test]
    fn without_a_probe_unknown_stays_unknown() {
        let identity = caller("cmo", &[]);
        let registry = PolicyRegistry::new();
        let auth = guarded();
        let verdicts = evaluate_candidates(
            &[("a", &auth)],
            0,
            &Visibility::without_probe(&identity, &registry),
            &mut ProbeCache::new(0),
        );
        assert_eq!(
            verdicts[0].decided_by,
            DecidedBy::Unresolved(Rule::ImperativeCheck)
        );
    }
}
