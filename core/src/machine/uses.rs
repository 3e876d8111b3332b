//! Tool uses with something out, by run: a task running a tool, a call being placed, a
//! blocking call's wait, a gated tool this incarnation started.
//!
//! Plain bookkeeping the machine's rules read (what counts as busy, which reply finds its call
//! still being placed, which gated use may run under its approval). It holds no rule itself
//! and must never learn what a use is for.

use std::collections::{BTreeSet, HashMap};

use crate::RunId;

/// Tool uses with something out, by run: looking up one run's never scans the others'.
#[derive(Clone, Debug, Default)]
pub(crate) struct UsesOut(HashMap<RunId, BTreeSet<String>>);

impl UsesOut {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn insert(&mut self, run: &RunId, tool_use: &str) {
        self.0
            .entry(run.clone())
            .or_default()
            .insert(tool_use.to_owned());
    }

    /// Whether it was out.
    pub(crate) fn remove(&mut self, run: &RunId, tool_use: &str) -> bool {
        let Some(uses) = self.0.get_mut(run) else {
            return false;
        };
        let was = uses.remove(tool_use);
        if uses.is_empty() {
            self.0.remove(run);
        }
        was
    }

    /// Forgets every use of `run`.
    pub(crate) fn forget(&mut self, run: &RunId) {
        self.0.remove(run);
    }

    pub(crate) fn contains(&self, run: &RunId, tool_use: &str) -> bool {
        self.0.get(run).is_some_and(|uses| uses.contains(tool_use))
    }

    pub(crate) fn of(&self, run: &RunId) -> impl Iterator<Item = &String> {
        self.0.get(run).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_with_no_use_left_is_forgotten() {
        let (a, b) = (RunId::random(), RunId::random());
        let mut out = UsesOut::default();
        out.insert(&a, "t1");
        out.insert(&a, "t2");
        out.insert(&b, "t1");
        assert!(out.contains(&a, "t1") && out.contains(&b, "t1"));
        assert!(out.remove(&a, "t1"));
        assert!(!out.remove(&a, "t1"), "a use is out once");
        assert_eq!(out.of(&a).cloned().collect::<Vec<_>>(), ["t2"]);
        assert!(out.remove(&a, "t2"));
        out.forget(&b);
        assert!(out.is_empty());
        assert_eq!(out.of(&a).count(), 0);
    }
}
