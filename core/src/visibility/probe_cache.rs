//! The T2 probe cache: outcomes per (principal and origin, tool), valid for one catalog
//! generation. A peer agent acts with different roles for different origins, so its outcomes
//! are kept per origin.
//!
//! A probe pushes a synthetic request into a tool's real pipeline, which is expensive, so its
//! outcome is kept until the catalog changes: when the catalog's generation number differs
//! from the cache's, the whole cache is dropped (outcomes and disabled tools alike). An `Other`
//! outcome disables probing of that tool, for every principal, until then.
//!
//! In-memory only: this module never probes, never persists and never decides.

use std::collections::{BTreeSet, HashMap};

use super::facts::Principal;
use super::ladder::probe::ProbeOutcome;
use super::origin::Origin;

/// Whom a probe ran as: a principal acting for an origin.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeSubject {
    /// The caller's principal (`anonymous` for absent identity).
    pub principal: Principal,
    /// The origin it acts for (a root run's is itself).
    pub origin: Origin,
}

impl ProbeSubject {
    /// A principal that is its own origin (a root run).
    pub fn root(principal: Principal) -> Self {
        Self {
            origin: Origin::present(principal.clone()),
            principal,
        }
    }
}

/// Probe outcomes for one catalog generation.
#[derive(Clone, Debug, Default)]
pub struct ProbeCache {
    generation: u64,
    outcomes: HashMap<(ProbeSubject, String), ProbeOutcome>,
    disabled_tools: BTreeSet<String>,
}

impl ProbeCache {
    /// An empty cache for catalog `generation`.
    pub fn new(generation: u64) -> Self {
        Self {
            generation,
            ..Self::default()
        }
    }

    /// The catalog generation the cached outcomes belong to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Drops everything when `generation` differs from the cache's; returns whether it did.
    pub fn observe_generation(&mut self, generation: u64) -> bool {
        if generation == self.generation {
            return false;
        }
        *self = Self::new(generation);
        true
    }

    /// The cached outcome of probing `tool` as `subject`, if any.
    pub fn outcome(&self, subject: &ProbeSubject, tool: &str) -> Option<ProbeOutcome> {
        self.outcomes
            .get(&(subject.clone(), tool.to_owned()))
            .copied()
    }

    /// Whether an `Other` outcome disabled probing `tool`.
    pub fn is_disabled(&self, tool: &str) -> bool {
        self.disabled_tools.contains(tool)
    }

    /// Records an outcome; `Other` also disables further probes of `tool`.
    pub fn record(&mut self, subject: &ProbeSubject, tool: &str, outcome: ProbeOutcome) {
        if outcome == ProbeOutcome::Other {
            self.disabled_tools.insert(tool.to_owned());
        }
        self.outcomes
            .insert((subject.clone(), tool.to_owned()), outcome);
    }

    /// How many (subject, tool) outcomes are cached.
    pub fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// Whether nothing is cached: no outcome and no disabled tool.
    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty() && self.disabled_tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_change_drops_everything() {
        let cmo = ProbeSubject::root(Principal::Agent("cmo".into()));
        let mut cache = ProbeCache::new(1);
        cache.record(&cmo, "ledger", ProbeOutcome::ReachedCut);
        cache.record(&cmo, "quota", ProbeOutcome::Other);
        assert_eq!(
            cache.outcome(&cmo, "ledger"),
            Some(ProbeOutcome::ReachedCut)
        );
        assert!(cache.is_disabled("quota"));
        assert!(!cache.observe_generation(1));
        assert_eq!(cache.len(), 2);
        assert!(cache.observe_generation(2));
        assert!(cache.is_empty());
        assert_eq!(cache.generation(), 2);
        assert_eq!(cache.outcome(&cmo, "ledger"), None);
        assert!(!cache.is_disabled("quota"));
    }

    #[test]
    fn outcomes_are_per_principal_origin_and_tool() {
        let cmo = ProbeSubject::root(Principal::Agent("cmo".into()));
        let ci = ProbeSubject::root(Principal::Api("ci".into()));
        let cmo_for_nobody = ProbeSubject {
            principal: Principal::Agent("cmo".into()),
            origin: Origin::Absent,
        };
        let mut cache = ProbeCache::new(0);
        cache.record(&cmo, "ledger", ProbeOutcome::Refused);
        assert_eq!(cache.outcome(&ci, "ledger"), None);
        assert_eq!(cache.outcome(&cmo_for_nobody, "ledger"), None);
        assert_eq!(cache.outcome(&cmo, "other"), None);
        assert_eq!(cache.outcome(&cmo, "ledger"), Some(ProbeOutcome::Refused));
    }
}
