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
//! caller's principal for its origin, or `anonymous` when identity is absent; never when
//! identity or the caller's origin is unknown).
//! Probes run on the first K candidates in ranking order (K = [`Visibility::probe_budget`],
//! [`DEFAULT_PROBE_BUDGET`] by default); outcomes already in the [`ProbeCache`] are used for
//! any candidate, since they cost nothing. `Refused` maps to deny, `ReachedCut` to allow, and
//! `Other` to unknown, disabling probes of that tool until the catalog changes.
//!
//! This module never runs a tool handler itself and performs no I/O: a probe is whatever the
//! [`Probe`] implementation does.
//!
//! Each layer with rules of its own is a child module: `policy` (T1) and `probe` (T2). This
//! module owns the walk down the ladder for a list of candidates ([`evaluate_candidates`]) and
//! what it reports ([`Verdict`], [`DecidedBy`]).

mod policy;
pub(super) mod probe;

#[cfg(test)]
mod tests;

use super::decision::{Decision, Rule, decide};
use super::descriptor::Auth;
use super::facts::{Identity, Principal};
use super::origin::Origin;
use super::probe_cache::{ProbeCache, ProbeSubject};

pub use policy::{PolicyDefinition, PolicyRegistry, evaluate_policies};
pub use probe::{Probe, ProbeOutcome};

/// How many ranked candidates may be probed per search, unless configured otherwise.
pub const DEFAULT_PROBE_BUDGET: usize = 25;

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

    /// Whom a probe runs as: the caller's principal for its origin, `anonymous` when identity
    /// is absent, nobody when identity or the origin is unknown (the caller's roles are not
    /// certain, so no outcome could be kept for it).
    fn probe_subject(&self) -> Option<ProbeSubject> {
        match self.identity {
            Identity::Present(caller) if caller.origin == Origin::Unknown => None,
            Identity::Present(caller) => Some(ProbeSubject {
                principal: caller.principal.clone(),
                origin: caller.origin.clone(),
            }),
            Identity::Absent => Some(ProbeSubject {
                principal: Principal::Anonymous,
                origin: Origin::Absent,
            }),
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
    let subject = visibility.probe_subject();
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
            let Some(subject) = subject.as_ref() else {
                return unresolved;
            };
            if cache.is_disabled(tool) {
                return unresolved;
            }
            let outcome = match cache.outcome(subject, tool) {
                Some(cached) => cached,
                None => match visibility.probe {
                    Some(probe) if position < visibility.probe_budget => {
                        let fresh = probe.probe(tool, &subject.principal);
                        cache.record(subject, tool, fresh);
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
