//! Test fixtures: a small fleet of hosts with deterministic keys, and signed chains through it.

use std::collections::BTreeMap;

use crate::chain::{NextHop, extend, new_call, sign_pending_hops};
use crate::envelope::CallEnvelope;
use crate::keys::{HostKey, KeyRing};
use crate::trace_context::TraceContext;
use consort_core::visibility::{Origin, Principal};
use consort_core::{RunId, TreeBudget};

/// A fixed clock for chain tests, Unix milliseconds.
pub(crate) const NOW_MS: u64 = 1_700_000_000_000;
/// The lifetime given to test hops.
pub(crate) const TTL_MS: u64 = 60_000;

/// The origin of the test chains: the token `alice`.
pub(crate) fn alice() -> Origin {
    Origin::Present(Principal::Api("alice".into()))
}

pub(crate) struct Fleet {
    pub(crate) keys: BTreeMap<String, HostKey>,
    pub(crate) ring: KeyRing,
    pub(crate) placements: BTreeMap<String, String>,
}

impl Fleet {
    /// Hosts with the agents they serve; host i gets the secret key `[i + 1; 32]`.
    pub(crate) fn new(hosts: &[(&str, &[&str])]) -> Self {
        let mut keys = BTreeMap::new();
        let mut ring = KeyRing::new();
        let mut placements = BTreeMap::new();
        for (index, (host, agents)) in hosts.iter().enumerate() {
            let key = HostKey::from_secret_bytes(&[index as u8 + 1; 32]);
            ring.insert(*host, key.public()).unwrap();
            keys.insert(host.to_string(), key);
            for agent in *agents {
                placements.insert(agent.to_string(), host.to_string());
            }
        }
        Self {
            keys,
            ring,
            placements,
        }
    }

    /// The usual fleet: `cmo` on alpha, `cfo` on beta, `cdo` and `ceo` on gamma.
    pub(crate) fn standard() -> Self {
        Self::new(&[
            ("alpha", &["cmo"]),
            ("beta", &["cfo"]),
            ("gamma", &["cdo", "ceo"]),
        ])
    }

    /// Every host signs the hops of the agents it serves, as each would before sending.
    pub(crate) fn sign_all(&self, envelope: &mut CallEnvelope) {
        for (host, key) in &self.keys {
            sign_pending_hops(envelope, host, key, |agent| {
                self.placements.get(agent) == Some(host)
            });
        }
    }

    /// An unsigned chain through `agents` (`a -> b -> c` is two hops), rooted at a random run.
    pub(crate) fn unsigned_chain(&self, agents: &[&str]) -> CallEnvelope {
        self.unsigned_chain_traced(agents, |_| None)
    }

    /// As [`Fleet::unsigned_chain`], hop i carrying the trace context `trace(i)`.
    pub(crate) fn unsigned_chain_traced(
        &self,
        agents: &[&str],
        trace: impl Fn(usize) -> Option<TraceContext>,
    ) -> CallEnvelope {
        self.unsigned_chain_with(agents, trace, |_| None)
    }

    /// As [`Fleet::unsigned_chain`], hop i carrying the trace context `trace(i)` and the tree
    /// budget allowance `budget(i)`.
    pub(crate) fn unsigned_chain_with(
        &self,
        agents: &[&str],
        trace: impl Fn(usize) -> Option<TraceContext>,
        budget: impl Fn(usize) -> Option<TreeBudget>,
    ) -> CallEnvelope {
        let root = RunId::random();
        let mut envelope: Option<CallEnvelope> = None;
        for (index, pair) in agents.windows(2).enumerate() {
            let parent = match &envelope {
                None => root.clone(),
                Some(chain) => chain.hops.last().unwrap().child_run.clone(),
            };
            let input = format!("input of hop {index}");
            let tool_use_id = format!("toolu_{index}");
            let next = NextHop {
                caller: pair[0],
                callee: pair[1],
                parent_run: &parent,
                tool_use_id: &tool_use_id,
                input: &input,
                issued_at_ms: NOW_MS,
                expires_at_ms: NOW_MS + TTL_MS,
                trace: trace(index),
            };
            let mut chain = match &envelope {
                None => new_call(&alice(), next),
                Some(chain) => extend(chain, next).unwrap(),
            };
            chain.hops.last_mut().unwrap().budget = budget(index);
            envelope = Some(chain);
        }
        envelope.unwrap()
    }

    /// A chain through `agents` whose hop i carries the allowance `budget_of_hop(i)`, signed by
    /// every host on it.
    pub(crate) fn budgeted_chain(&self, agents: &[&str]) -> CallEnvelope {
        let mut envelope =
            self.unsigned_chain_with(agents, |_| None, |index| Some(budget_of_hop(index)));
        self.sign_all(&mut envelope);
        envelope
    }

    /// A chain through `agents` whose hop i carries [`trace_of_hop`]`(i)`, signed by every
    /// host on it.
    pub(crate) fn traced_chain(&self, agents: &[&str]) -> CallEnvelope {
        let mut envelope = self.unsigned_chain_traced(agents, |index| Some(trace_of_hop(index)));
        self.sign_all(&mut envelope);
        envelope
    }

    /// A chain through `agents`, signed by every host on it.
    pub(crate) fn chain(&self, agents: &[&str]) -> CallEnvelope {
        let mut envelope = self.unsigned_chain(agents);
        self.sign_all(&mut envelope);
        envelope
    }
}

/// A tree of 10 runs, 5,000 tokens and a deadline a minute from [`NOW_MS`], each hop handing on
/// a little less.
pub(crate) fn budget_of_hop(index: usize) -> TreeBudget {
    let index = index as u64;
    TreeBudget {
        max_runs: Some(9 - 2 * index),
        max_tokens: Some(5_000 - 1_000 * index),
        deadline_ms: Some(NOW_MS + 60_000),
    }
}

/// One trace, a span per hop: hop i's caller span id is `i + 1` in every byte.
pub(crate) fn trace_of_hop(index: usize) -> TraceContext {
    let span = u8::try_from(index + 1).unwrap_or(u8::MAX);
    TraceContext {
        trace_id: [0xab; 16],
        parent_span_id: [span; 8],
        flags: 1,
    }
}
