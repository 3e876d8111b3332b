//! The call envelope: one delegated request and the chain of hops that led to it.
//!
//! An envelope is the same whether it stays inside one host (handed between actors) or
//! crosses to another host over a link. Its depth is the length of its chain and never a
//! field a sender could set. Each hop binds the digest of the hop before it; hops that never
//! left their host may be unsigned until the chain first leaves it: signing is needed only
//! where a chain crosses hosts. The first hop carries the origin of the call tree (who started
//! its root run), signed with it by the root run's host; later hops carry none, so every
//! receiver reads the origin from the first hop and no host on the way can change it. Every
//! hop carries the trace context of the span that placed it, when there is one, also signed,
//! and, in a call tree with a budget, the share of it the call was handed (its allowance, the
//! child run's budget), signed too: no host on the way can widen it.
//!
//! A host signs what leaves it for one peer host at once as one batch: one ed25519 signature
//! over the Merkle root of the batch's hops and replies. Each [`HopSignature`] carries that
//! signature and its own [`BatchProof`], so every envelope stays verifiable on its own (see
//! `chain::batch`); a lone call is a batch of one.

use serde::{Deserialize, Serialize};

use consort_core::event::ReplyOutcome;
use consort_core::step::CostDelta;
use consort_core::visibility::Origin;
use consort_core::{TreeBudget, TreeSpend};

use crate::RunId;
use crate::trace_context::TraceContext;

/// Current format version of envelopes and replies (2: replies carry the child's tree cost;
/// 3: the first hop carries the origin; 4: signatures cover a batch's Merkle root, and each
/// carries its inclusion proof; 5: each hop carries the caller's trace context, signed; 6: each
/// hop carries its allowance of the tree budget and each reply what its subtree spent of it,
/// both signed).
pub const ENVELOPE_VERSION: u16 = 6;

/// One hop of a call chain: `caller` (running `parent_run`) asked `callee` to run
/// `child_run`, through the tool use `tool_use_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The calling agent.
    pub caller: String,
    /// The called agent.
    pub callee: String,
    /// The caller's run that placed the call.
    pub parent_run: RunId,
    /// The run the callee is asked to run; derived from `parent_run` and `tool_use_id`.
    pub child_run: RunId,
    /// The tool use of `parent_run` that placed the call.
    pub tool_use_id: String,
    /// Unix milliseconds.
    pub issued_at_ms: u64,
    /// Unix milliseconds; the receiver refuses the hop after this (with a small skew).
    pub expires_at_ms: u64,
    /// SHA-256 of this hop's input text.
    #[serde(with = "serde_bytes")]
    pub input_digest: [u8; 32],
    /// Digest of the previous hop's canonical bytes; all zeros for the first hop.
    #[serde(with = "serde_bytes")]
    pub prev_digest: [u8; 32],
    /// Who started the root run of the call tree: set on the first hop only (part of its
    /// signed bytes), `None` on every later hop. Chains stored before origins existed read
    /// `None` everywhere, which a receiver takes as an unknown origin.
    #[serde(default)]
    pub origin: Option<Origin>,
    /// The W3C trace context of the caller's span when it placed this call (part of the
    /// signed bytes); `None` when the caller's host records no trace. The callee's run span
    /// is a child of this span. Chains stored before trace contexts read `None`.
    #[serde(default)]
    pub trace: Option<TraceContext>,
    /// The share of the call tree's budget this call hands the child run (part of the signed
    /// bytes): the child's own budget. `None` in a tree without a budget, and in chains stored
    /// before budgets. Set by the caller's host on the hop it builds, before it is signed (its
    /// signature and the next hop's link cover it).
    #[serde(default)]
    pub budget: Option<TreeBudget>,
    /// The signature of the host serving `caller`; `None` while the hop has not left its host.
    pub signature: Option<HopSignature>,
}

/// A host's ed25519 signature over the root of the batch a hop (or reply) was signed in, and
/// the proof that the hop is in that batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopSignature {
    /// The fleet name of the signing host.
    pub host: String,
    /// The ed25519 signature over the batch root's canonical bytes (its root and size).
    #[serde(with = "serde_bytes")]
    pub signature: [u8; 64],
    /// Where the hop sits in the batch. A signature stored by a build before batches reads an
    /// empty proof here, which no verifier accepts.
    #[serde(default)]
    pub batch: BatchProof,
}

/// The inclusion proof of one leaf (a hop's or a reply's canonical bytes) in the Merkle tree a
/// host signed: the tree's root, the leaf's position, the tree's size, and the sibling hashes
/// from the leaf up to the root. The verifier recomputes the root from the leaf, the position
/// and the path (the tree's shape follows from the size alone), so the proof cannot be moved to
/// another leaf, another position or another tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchProof {
    /// The root the signature covers.
    #[serde(with = "serde_bytes")]
    pub root: [u8; 32],
    /// The leaf's position in the batch, from 0.
    pub leaf_index: u32,
    /// How many leaves the batch holds (at least 1).
    pub leaf_count: u32,
    /// The sibling hashes from the leaf up to the root; empty for a batch of one.
    pub path: Vec<[u8; 32]>,
}

/// A delegated request: the chain of hops (the last one is this call) and this call's input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEnvelope {
    /// Format version; always [`ENVELOPE_VERSION`] when built by this crate.
    pub version: u16,
    /// Every hop from the root run to this call, oldest first. Never empty.
    pub hops: Vec<Hop>,
    /// The input text of the last hop; the callee sees only this.
    pub input: String,
}

impl CallEnvelope {
    /// The hop this envelope asks the receiver to run.
    pub fn last_hop(&self) -> Option<&Hop> {
        self.hops.last()
    }

    /// The chain depth: the number of hops from the root run. `cmo -> cfo` is depth 1.
    pub fn depth(&self) -> usize {
        self.hops.len()
    }

    /// The origin the first hop carries (`None` for an empty chain or one without an origin;
    /// a verified chain always has one).
    pub fn origin(&self) -> Option<&Origin> {
        self.hops.first().and_then(|hop| hop.origin.as_ref())
    }
}

/// How a child run ended, as reported back to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplyStatus {
    /// The child run settled with an answer.
    Succeeded,
    /// The child run failed; the output says why.
    Failed,
}

/// The answer to a call: sent by the callee's host to the caller's host when the child settles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyEnvelope {
    /// Format version; always [`ENVELOPE_VERSION`] when built by this crate.
    pub version: u16,
    /// The agent that placed the call (and receives the reply).
    pub caller: String,
    /// The agent that ran the child run.
    pub callee: String,
    /// The caller's run that placed the call.
    pub parent_run: RunId,
    /// The child run that settled.
    pub child_run: RunId,
    /// The tool use that placed the call.
    pub tool_use_id: String,
    /// How the child run ended.
    pub status: ReplyStatus,
    /// The child's output, already capped by the callee's host.
    pub output: String,
    /// The child's tree cost when it settled: its own work and its descendants'.
    pub tree_cost: CostDelta,
    /// What the child's subtree spent of the tree budget its call handed it (what its own
    /// calls still out held included), which the caller's budget is charged; `None` when it ran
    /// without one.
    pub tree_spent: Option<TreeSpend>,
    /// The signature of the host serving `callee`; `None` inside one host.
    pub signature: Option<HopSignature>,
}

impl ReplyEnvelope {
    /// The reply agent `caller`'s call gets, as the callee's agent machine built it (capped,
    /// with the subtree's spend), ready to be signed if it leaves the host.
    pub fn from_machine(caller: String, reply: consort_core::step::ReplyIn) -> Self {
        Self {
            version: ENVELOPE_VERSION,
            caller,
            callee: reply.callee,
            parent_run: reply.parent_run,
            child_run: reply.child_run,
            tool_use_id: reply.tool_use_id,
            status: match reply.outcome {
                ReplyOutcome::Succeeded => ReplyStatus::Succeeded,
                ReplyOutcome::Failed => ReplyStatus::Failed,
            },
            output: reply.output,
            tree_cost: reply.tree_cost,
            tree_spent: reply.tree_spent,
            signature: None,
        }
    }

    /// The reply as the caller's agent machine reads it (its signature was checked where it
    /// entered the host, if it came from another).
    pub fn into_machine(self) -> consort_core::step::ReplyIn {
        consort_core::step::ReplyIn {
            parent_run: self.parent_run,
            child_run: self.child_run,
            callee: self.callee,
            tool_use_id: self.tool_use_id,
            outcome: match self.status {
                ReplyStatus::Succeeded => ReplyOutcome::Succeeded,
                ReplyStatus::Failed => ReplyOutcome::Failed,
            },
            output: self.output,
            tree_cost: self.tree_cost,
            tree_spent: self.tree_spent,
        }
    }
}
