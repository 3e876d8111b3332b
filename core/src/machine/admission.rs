//! Admission: what an agent counts to decide whether a new run may start, and the
//! reservations that keep those counts right while the run's insert is still at the store.
//!
//! An agent admits two kinds of new run. A root run (the API, the CLI, a delivery) is refused
//! when the input is empty, when the agent holds its admission limit of unsettled runs, or when
//! the run's principal holds its share of them ([`guards::admit`], [`guards::admit_for`]). A
//! call from a peer is checked by the callee's inbound guards ([`guards::check_inbound`]): its
//! consent, the chain's depth, the parent run's call cap and the admission limit.
//!
//! The counts are kept in memory (rebuilt from the store at start) and a run is counted the
//! moment it is *sent* to the store, not when its insert commits: the driver never waits for a
//! commit. So admission *reserves*: the unsettled count, a root run's principal share and a
//! parent's children count go up at once, and a call that the store finds replayed or refused
//! (or that fails to be stored) gives its reservation back. A reserved count can only make
//! admission stricter for a moment, never let a run past a limit.
//!
//! A parent's children count is read from the store the first time one of its calls arrives
//! after a start; until that read is back, later calls of the same parent are counted in the
//! store too (behind the first insert), never from a count that misses a run in flight.
//!
//! The order of a call's admission on the store's side — replay check, guards, insert — is
//! [`InboundGate::admit`]: the store job calls it with what it read. Nothing here touches a
//! store, and nothing outside this module may change a count.

use std::collections::HashMap;

use consort_config::Limits;

use crate::guards::{self, InboundFacts};
use crate::{Refusal, RunId, TreeBudget};

/// The most parents whose children count is kept in memory: the store is the truth, and
/// forgetting the counts only costs one query per parent.
const CHILDREN_KEPT: usize = 10_000;

/// How many unsettled runs an agent takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// The most unsettled runs the agent holds before refusing new work.
    pub admission_limit: usize,
    /// The most unsettled root runs one principal may hold on the agent (anonymous callers
    /// count as one principal), so that no caller can fill the agent on its own.
    pub per_principal_limit: usize,
}

/// The counts admission decides with, and their reservations.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: AdmissionLimits,
    /// Runs of this agent that have not settled, reserved ones included.
    unsettled: usize,
    /// Unsettled root runs by principal.
    shares: PrincipalShares,
    /// Child runs accepted per parent run (the callee's cap), as far as known.
    children: HashMap<RunId, u64>,
    /// Admission jobs out that count a parent's children in the store, by parent.
    counting: HashMap<RunId, u32>,
}

/// A call's reservation: handed to the store job (what it needs to check the call) and given
/// back with the job's outcome ([`AgentMachine::call_admitted`](super::AgentMachine::call_admitted)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallReservation {
    /// The parent run that placed the call.
    pub parent: RunId,
    /// The parent's children count when it was known (and so reserved); `None` when the store
    /// job counts them.
    pub known_children: Option<u64>,
}

/// What the store found for a reserved call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallAdmitted {
    /// Stored, with the parent's children before it.
    Stored {
        /// The parent's children before this one.
        children_before: u64,
    },
    /// The inbound guards refused it; the parent's children as counted.
    Refused {
        /// The parent's children counted.
        children: u64,
    },
    /// The child run existed already: a replayed call.
    Replay,
    /// The store job failed: nothing was stored.
    Failed,
}

impl Admission {
    pub(crate) fn new(limits: AdmissionLimits) -> Self {
        Self {
            limits,
            unsettled: 0,
            shares: PrincipalShares::default(),
            children: HashMap::new(),
            counting: HashMap::new(),
        }
    }

    pub(crate) fn limits(&self) -> AdmissionLimits {
        self.limits
    }

    pub(crate) fn unsettled(&self) -> usize {
        self.unsettled
    }

    /// Counts the unsettled runs found in the store at start (`principal` for a root run).
    pub(crate) fn restore(&mut self, run: RunId, root_principal: Option<String>) {
        self.unsettled += 1;
        if let Some(principal) = root_principal {
            self.shares.add(run, principal);
        }
    }

    /// Admits a root run of `principal` and reserves its place, or says why not.
    pub(crate) fn admit_root(
        &mut self,
        agent: &str,
        run: &RunId,
        input: &str,
        principal: &str,
    ) -> Result<(), Refusal> {
        guards::admit(agent, input, self.unsettled, self.limits.admission_limit)?;
        guards::admit_for(
            agent,
            principal,
            self.shares.active(principal),
            self.limits.per_principal_limit,
        )?;
        self.unsettled += 1;
        self.shares.add(run.clone(), principal.to_owned());
        Ok(())
    }

    /// Reserves an arriving call's place; returns the reservation and the unsettled runs
    /// before it (what the inbound guards compare with the admission limit).
    pub(crate) fn reserve_call(&mut self, parent: &RunId) -> (CallReservation, usize) {
        let active = self.unsettled;
        // The kept count is exact only when no job that counts in the store is out for this
        // parent: such a job's insert is not in the kept count yet.
        let known_children = if self.counting.contains_key(parent) {
            None
        } else {
            self.children.get(parent).copied()
        };
        self.unsettled += 1;
        match known_children {
            Some(_) => {
                if let Some(n) = self.children.get_mut(parent) {
                    *n += 1;
                }
            }
            None => *self.counting.entry(parent.clone()).or_insert(0) += 1,
        }
        let reservation = CallReservation {
            parent: parent.clone(),
            known_children,
        };
        (reservation, active)
    }

    /// Settles a call's reservation with what the store found.
    pub(crate) fn call_admitted(&mut self, reservation: &CallReservation, found: &CallAdmitted) {
        let parent = &reservation.parent;
        let reserved_child = reservation.known_children.is_some();
        if !reserved_child && let Some(n) = self.counting.get_mut(parent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counting.remove(parent);
            }
        }
        if let CallAdmitted::Stored { children_before } = found {
            if !reserved_child {
                self.count_children(parent, children_before + 1);
            }
            return;
        }
        // Nothing was stored: the reservation goes back.
        self.unsettled = self.unsettled.saturating_sub(1);
        if reserved_child && let Some(n) = self.children.get_mut(parent) {
            *n = n.saturating_sub(1);
        }
        if let (CallAdmitted::Refused { children }, false) = (found, reserved_child) {
            self.count_children(parent, *children);
        }
    }

    /// A run settled: it no longer counts.
    pub(crate) fn settled(&mut self, run: &RunId) {
        self.unsettled = self.unsettled.saturating_sub(1);
        self.shares.settled(run);
    }

    /// Whether no store job counts children for a parent.
    pub(crate) fn is_quiet(&self) -> bool {
        self.counting.is_empty()
    }

    /// Keeps `parent`'s children count as the store counted it (never below what was counted
    /// here since).
    fn count_children(&mut self, parent: &RunId, n: u64) {
        if let Some(kept) = self.children.get_mut(parent) {
            *kept = (*kept).max(n);
            return;
        }
        if self.children.len() >= CHILDREN_KEPT {
            self.children.clear();
        }
        self.children.insert(parent.clone(), n);
    }
}

/// Unsettled root runs per principal, and which principal each belongs to.
#[derive(Debug, Default)]
struct PrincipalShares {
    by_principal: HashMap<String, usize>,
    owner: HashMap<RunId, String>,
}

impl PrincipalShares {
    fn active(&self, principal: &str) -> usize {
        self.by_principal.get(principal).copied().unwrap_or(0)
    }

    fn add(&mut self, run: RunId, principal: String) {
        if self.owner.contains_key(&run) {
            return;
        }
        *self.by_principal.entry(principal.clone()).or_default() += 1;
        self.owner.insert(run, principal);
    }

    /// Runs that are not root runs were never counted.
    fn settled(&mut self, run: &RunId) {
        let Some(principal) = self.owner.remove(run) else {
            return;
        };
        if let Some(n) = self.by_principal.get_mut(&principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_principal.remove(&principal);
            }
        }
    }
}

/// The callee's inbound guards for one arriving call, as owned facts: the store job runs them
/// once it knows the parent's children count.
#[derive(Clone, Debug)]
pub struct InboundGate {
    caller: String,
    callee: String,
    accept_from: Vec<String>,
    chain_depth: usize,
    active_runs: usize,
    admission_limit: usize,
    limits: Limits,
    known_children: Option<u64>,
    budget: Option<TreeBudget>,
    now_ms: u64,
    /// The refusal this agent gave a copy of the same call before.
    refused_before: Option<Refusal>,
}

/// What a call's admission decided, on the store's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallAdmission {
    /// The child run exists: a replayed call, answered with it.
    Replay,
    /// Refused by the inbound guards.
    Refused {
        /// The parent's children counted.
        children: u64,
        /// Why.
        refusal: Refusal,
    },
    /// Insert the run.
    Insert {
        /// The parent's children before it.
        children_before: u64,
    },
}

impl InboundGate {
    /// The gate of a call from `caller`, reserved with `reservation` while `active_runs` runs
    /// were unsettled.
    pub(crate) fn new(
        (caller, callee): (&str, &str),
        accept_from: &[String],
        chain_depth: usize,
        (reservation, active_runs): (&CallReservation, usize),
        (admission_limit, limits): (usize, Limits),
    ) -> Self {
        Self {
            caller: caller.to_owned(),
            callee: callee.to_owned(),
            accept_from: accept_from.to_vec(),
            chain_depth,
            active_runs,
            admission_limit,
            limits,
            known_children: reservation.known_children,
            budget: None,
            now_ms: 0,
            refused_before: None,
        }
    }

    /// A copy of a call this agent refused before: it is refused the same (unless its run
    /// exists after all), whatever the config says by now.
    pub(crate) fn refusing(mut self, refusal: Refusal) -> Self {
        self.refused_before = Some(refusal);
        self
    }

    /// The call's share of a tree budget (its hop's allowance), checked at `now_ms`.
    pub(crate) fn with_budget(mut self, budget: Option<TreeBudget>, now_ms: u64) -> Self {
        self.budget = budget;
        self.now_ms = now_ms;
        self
    }

    /// The order of a call's admission: a child run that exists is a replay (never refused,
    /// never stored twice); a copy of a call refused before is refused the same; then the
    /// guards, with the parent's children as known or as the
    /// store counts them (`count`, called only when needed); then the insert.
    pub fn admit<E>(
        &self,
        exists: bool,
        count: impl FnOnce() -> Result<u64, E>,
    ) -> Result<CallAdmission, E> {
        if exists {
            return Ok(CallAdmission::Replay);
        }
        let children = match self.known_children {
            Some(n) => n,
            None => count()?,
        };
        if let Some(refusal) = &self.refused_before {
            return Ok(CallAdmission::Refused {
                children,
                refusal: refusal.clone(),
            });
        }
        let checked = guards::check_inbound(&InboundFacts {
            caller: &self.caller,
            callee: &self.callee,
            accept_from: &self.accept_from,
            chain_depth: self.chain_depth,
            children_accepted: children,
            active_runs: self.active_runs,
            admission_limit: self.admission_limit,
            limits: self.limits,
            budget: self.budget,
            now_ms: self.now_ms,
        });
        Ok(match checked {
            Ok(()) => CallAdmission::Insert {
                children_before: children,
            },
            Err(refusal) => CallAdmission::Refused { children, refusal },
        })
    }
}

#[cfg(test)]
mod tests;
