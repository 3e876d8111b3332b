//! The call chain: canonical bytes of hops and replies, their digests, signing, and the
//! verification a receiving host runs on every envelope that crossed a host boundary.
//!
//! Hop i is signed by the host serving hop i's caller. What it signs is a batch: everything
//! that leaves the host for one peer host at once (the pending hops of several calls, replies)
//! is hashed into a Merkle tree and the host signs the tree's root once (`batch`); each hop
//! carries that signature and its own inclusion proof, so each envelope verifies on its own,
//! and a lone call is a batch of one. A hop's leaf is [`hop_canonical_bytes`]: a domain tag
//! (`consort/hop/v4`) and layout version, then the digest of hop i-1, caller, callee, parent and
//! child run ids, tool-use id, issued-at, expires-at, the digest of the hop's input, the
//! origin (on the first hop the origin's text behind a presence byte, on later hops the absent
//! byte alone), the trace context (a presence byte, then trace id, parent span id and
//! flags) and the hop's allowance of the tree budget (a presence byte, then each of its three
//! counts behind a presence byte of its own), each field length-prefixed. The trace context is
//! signed like the rest: a host on the way cannot move a call into another trace or under
//! another span; nor can it widen an allowance, and each hop's allowance must fit inside the
//! one before it ([`ChainError::BudgetWidened`]). The origin lives in the first hop only: every later
//! hop binds the first one's digest, so no host on the way can change who the tree acts for.
//! These bytes are built by hand, not by the codec, so the wire format can evolve without
//! changing what was signed, and no field boundary can be shifted. A hop's digest covers its
//! canonical bytes and not its signature, which is why a hop that stays inside one host can be
//! signed later, when the chain first leaves the host ([`sign_pending_hops`], or
//! [`sign_batch`] for several envelopes at once).
//!
//! Verifying hop i: its proof must be well formed and lead from hop i's own leaf to the root it
//! names (`batch::check_proof`), then the signature over that root must verify. A chain
//! accepts exactly the signatures `verify_strict` accepts (plain ed25519 verification accepts
//! malleated signatures); nothing here deduplicates calls on signature bytes: the child run id
//! does that. Hops of one chain signed in the same batch share one signature, checked once; a
//! receiver that keeps a [`VerifiedRoots`] cache checks each batch signature once for all the
//! envelopes of the batch (the proofs are still checked per hop). The signatures left to check
//! can be checked in one batch (`ed25519_dalek::verify_batch`, [`verify_chain_batched`]),
//! which is looser than `verify_strict`: it takes a non-canonical or small-order R and, since
//! it checks one combination of the signatures' equations with pseudo-random coefficients
//! that small-order components can vanish under, an R or a key with a small-order component.
//! So a batch is tried only when every key lies in the prime-order subgroup (decided once per
//! pinned key, in `KeyRing`) and every R is a canonical encoding of a point of that subgroup;
//! for such inputs both checks accept the same signatures (but for the 2^-128 chance of any
//! batch). Anything else, and any batch that fails, is checked one signature at a time with
//! `verify_strict`, which also names the bad hop. The R check costs about as much as a
//! signature check, which makes the batch slower than checking one by one
//! (docs/BENCHMARKS.md), so [`verify_chain`] checks one by one.
//!
//! This module proves facts (who signed which hop, how deep the chain is, whether it is fresh);
//! it never decides whether a call is allowed: depth limits, consent and caps belong to the
//! receiving supervisor. It reads no clock: callers pass `now_ms`.

use std::collections::BTreeMap;

use curve25519_dalek::edwards::CompressedEdwardsY;
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::envelope::{CallEnvelope, ENVELOPE_VERSION, Hop, ReplyEnvelope, ReplyStatus};
use crate::error::ChainError;
use crate::keys::{HostKey, KeyRing, PublicKey};
use crate::trace_context::TraceContext;
use batch::{check_proof, leaf_hash, root_message};
use consort_core::RunId;
use consort_core::visibility::Origin;
use roots::RootKey;

mod batch;
pub mod operator;
pub mod presence;
mod roots;

pub use batch::{BatchSigned, MAX_BATCH_LEAVES, MAX_SIGNED_LEAVES, Outgoing, sign_batch};
pub use roots::{DEFAULT_VERIFIED_ROOTS, VerifiedRoots};

/// Domain tag of a hop's canonical bytes (v2: the first hop's bytes carry the origin; v3: they
/// are a leaf of a signed batch, never signed alone; v4: they end with the trace context; v5:
/// then the allowance of the tree budget).
const HOP_DOMAIN: &[u8] = b"consort/hop/v5";
/// Domain tag of a reply's canonical bytes (v2: a leaf of a signed batch; v3: they end with the
/// subtree's spend of its tree budget).
const REPLY_DOMAIN: &[u8] = b"consort/reply/v3";
/// Version of the canonical byte layout (not of the wire format).
const CANONICAL_VERSION: u16 = 1;

/// What a caller's host knows when it places a call: the fields of the next hop.
#[derive(Clone, Copy, Debug)]
pub struct NextHop<'a> {
    /// The calling agent.
    pub caller: &'a str,
    /// The called agent.
    pub callee: &'a str,
    /// The caller's run placing the call.
    pub parent_run: &'a RunId,
    /// The tool use that placed it (the child run id derives from it).
    pub tool_use_id: &'a str,
    /// The input the callee will see.
    pub input: &'a str,
    /// Unix milliseconds.
    pub issued_at_ms: u64,
    /// Unix milliseconds after which the callee's host refuses the call.
    pub expires_at_ms: u64,
    /// The trace context of the span placing the call, if the caller's host records traces.
    pub trace: Option<TraceContext>,
}

/// What a receiving host allows of a chain, and its clock: the bounds [`verify_chain`] checks
/// before (depth) and besides (times) any signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLimits {
    /// The verifier's clock, Unix milliseconds.
    pub now_ms: u64,
    /// Clock skew allowed between hosts when checking issue and expiry times.
    pub allowed_skew_ms: u64,
    /// The deepest chain the receiving host could accept (its largest hop limit). A longer
    /// chain is refused before any hashing or signature check, so a frame of thousands of
    /// hops costs nothing; whether a chain within it is deep enough to refuse is still the
    /// receiving supervisor's decision.
    pub max_depth: usize,
    /// The longest lifetime (`expires_at - issued_at`) the receiver accepts for the hop it is
    /// asked to run; it is also how long ago that hop may have been issued.
    pub max_lifetime_ms: u64,
}

/// A chain that passed [`verify_chain`], with what the receiver needs to decide on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedChain {
    depth: usize,
    root_caller: String,
    origin: Origin,
    signers: Vec<String>,
    last_hop: Hop,
}

impl VerifiedChain {
    /// The number of hops from the root run; `cmo -> cfo` is 1. The caller enforces limits.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The agent whose run started the chain.
    pub fn root_caller(&self) -> &str {
        &self.root_caller
    }

    /// Who started the root run, as the first hop's signer vouched.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The host that signed each hop, oldest first.
    pub fn signers(&self) -> &[String] {
        &self.signers
    }

    /// The hop the receiver is asked to run.
    pub fn last_hop(&self) -> &Hop {
        &self.last_hop
    }
}

/// SHA-256 of an input (or output) text.
pub fn input_digest(input: &str) -> [u8; 32] {
    Sha256::digest(input.as_bytes()).into()
}

/// The bytes a hop's signature covers; see the module documentation for the layout.
pub fn hop_canonical_bytes(hop: &Hop) -> Vec<u8> {
    let mut out = Canonical::new(HOP_DOMAIN);
    out.field(&hop.prev_digest);
    out.field(hop.caller.as_bytes());
    out.field(hop.callee.as_bytes());
    out.field(hop.parent_run.as_str().as_bytes());
    out.field(hop.child_run.as_str().as_bytes());
    out.field(hop.tool_use_id.as_bytes());
    out.field(&hop.issued_at_ms.to_be_bytes());
    out.field(&hop.expires_at_ms.to_be_bytes());
    out.field(&hop.input_digest);
    match &hop.origin {
        Some(origin) => {
            let mut field = vec![1u8];
            field.extend_from_slice(origin.to_string().as_bytes());
            out.field(&field);
        }
        None => out.field(&[0u8]),
    }
    match &hop.trace {
        Some(trace) => {
            let mut field = vec![1u8];
            field.extend_from_slice(&trace.canonical_bytes());
            out.field(&field);
        }
        None => out.field(&[0u8]),
    }
    match &hop.budget {
        Some(budget) => {
            let mut field = vec![1u8];
            for count in [budget.max_runs, budget.max_tokens, budget.deadline_ms] {
                optional_u64(&mut field, count);
            }
            out.field(&field);
        }
        None => out.field(&[0u8]),
    }
    out.finish()
}

/// A count that may be absent, as canonical bytes: a presence byte, then its 8 big-endian bytes.
fn optional_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(n) => {
            out.push(1);
            out.extend_from_slice(&n.to_be_bytes());
        }
        None => out.push(0),
    }
}

/// The digest of a hop, as the next hop's `prev_digest` names it. Covers the canonical bytes,
/// not the signature.
pub fn hop_digest(hop: &Hop) -> [u8; 32] {
    Sha256::digest(hop_canonical_bytes(hop)).into()
}

/// The first hop of a chain, placed by a root run whose origin is `origin`, unsigned. The
/// child run id derives from the parent run and tool use.
pub fn first_hop(origin: &Origin, next: NextHop<'_>) -> Hop {
    hop(next, [0; 32], Some(origin.clone()))
}

/// The hop after `prev`, unsigned; it carries no origin (the first hop does).
pub fn next_hop(prev: &Hop, next: NextHop<'_>) -> Hop {
    hop(next, hop_digest(prev), None)
}

fn hop(next: NextHop<'_>, prev_digest: [u8; 32], origin: Option<Origin>) -> Hop {
    Hop {
        caller: next.caller.to_owned(),
        callee: next.callee.to_owned(),
        parent_run: next.parent_run.clone(),
        child_run: RunId::child_of(next.parent_run, next.tool_use_id),
        tool_use_id: next.tool_use_id.to_owned(),
        issued_at_ms: next.issued_at_ms,
        expires_at_ms: next.expires_at_ms,
        input_digest: input_digest(next.input),
        prev_digest,
        origin,
        trace: next.trace,
        budget: None,
        signature: None,
    }
}

/// The envelope of a call placed by a root run (one not started by another agent) whose
/// origin is `origin`.
pub fn new_call(origin: &Origin, next: NextHop<'_>) -> CallEnvelope {
    CallEnvelope {
        version: ENVELOPE_VERSION,
        hops: vec![first_hop(origin, next)],
        input: next.input.to_owned(),
    }
}

/// The envelope of a call placed by a run that was itself called through `chain`: the chain's
/// hops followed by the new one. Refuses (as `BrokenLink`) a next hop whose caller is not the
/// chain's callee or whose parent run is not the chain's child run.
pub fn extend(chain: &CallEnvelope, next: NextHop<'_>) -> Result<CallEnvelope, ChainError> {
    extend_hops(&chain.hops, next)
}

/// The envelope of a call placed by a run that holds the chain `hops`: a root run's (no hops)
/// opens a chain with the run's `origin` ([`new_call`]); a called run's already carries its
/// origin in the first hop and must end in the run ([`extend`]).
pub fn continue_chain(
    hops: &[Hop],
    origin: &Origin,
    next: NextHop<'_>,
) -> Result<CallEnvelope, ChainError> {
    if hops.is_empty() {
        return Ok(new_call(origin, next));
    }
    extend_hops(hops, next)
}

fn extend_hops(hops: &[Hop], next: NextHop<'_>) -> Result<CallEnvelope, ChainError> {
    let last = hops.last().ok_or(ChainError::Empty)?;
    if last.callee != next.caller || &last.child_run != next.parent_run {
        return Err(ChainError::BrokenLink { hop: hops.len() });
    }
    let mut hops = hops.to_vec();
    hops.push(next_hop(last, next));
    Ok(CallEnvelope {
        version: ENVELOPE_VERSION,
        hops,
        input: next.input.to_owned(),
    })
}

/// Signs every hop that is still unsigned and whose caller this host serves, as one batch (one
/// signature, whatever the number of hops). Call it before an envelope leaves the host; to sign
/// several envelopes leaving for the same host at once, use [`sign_batch`]. Returns how many
/// hops were signed.
pub fn sign_pending_hops(
    envelope: &mut CallEnvelope,
    host_name: &str,
    key: &HostKey,
    serves: impl Fn(&str) -> bool,
) -> usize {
    sign_batch(&mut [Outgoing::Call(envelope)], host_name, key, serves).leaves
}

/// Verifies a call envelope received from another host.
///
/// `placements` maps agent -> the host serving it; hop i must be signed by the host serving
/// hop i's caller, with the key pinned for that host in `ring`, and carry a proof that it is a
/// leaf of the batch root that signature covers. The first hop must carry the origin and no
/// later hop may. A chain longer than `limits.max_depth` is refused first
/// ([`ChainError::TooDeep`]), then cheap structural checks run over the whole chain before any
/// signature is verified, so a malformed chain costs no crypto. Only the last hop is checked
/// for expiry, lifetime and age: earlier hops were deadlines for calls already accepted, and a
/// long-running child may legitimately call on after its own call's deadline. No hop may be
/// issued later than `now_ms + allowed_skew_ms`.
///
/// Each batch signature is checked on its own with `verify_strict` (once per chain when
/// several hops share it). A batch that accepts exactly what `verify_strict` accepts
/// ([`verify_chain_batched`]) needs a subgroup check of every signature's R point, which costs
/// about as much as a signature check: measured, it is slower at every chain length
/// (docs/BENCHMARKS.md), so it is not the default. A receiving host passes its
/// [`VerifiedRoots`] to [`verify_chain_cached`] instead, to check each batch signature once.
pub fn verify_chain(
    envelope: &CallEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    limits: &ChainLimits,
) -> Result<VerifiedChain, ChainError> {
    verify_chain_with(envelope, ring, placements, limits, Batching::Never, None)
}

/// [`verify_chain`], skipping the check of a batch signature `roots` holds as verified (every
/// proof is still checked), and adding the signatures it checks to `roots`. Accepts and refuses
/// exactly what [`verify_chain`] does, with the same errors.
pub fn verify_chain_cached(
    envelope: &CallEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    limits: &ChainLimits,
    roots: &VerifiedRoots,
) -> Result<VerifiedChain, ChainError> {
    verify_chain_with(
        envelope,
        ring,
        placements,
        limits,
        Batching::Never,
        Some(roots),
    )
}

/// [`verify_chain`] with the signatures of a chain with several signed hops checked in one
/// batch (after the checks that make the batch as strict as `verify_strict`), falling back to
/// one by one to name the bad hop. Kept to be measured against (`consort-bench chain`) and
/// tested for the same answers.
#[doc(hidden)]
pub fn verify_chain_batched(
    envelope: &CallEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    limits: &ChainLimits,
) -> Result<VerifiedChain, ChainError> {
    verify_chain_with(envelope, ring, placements, limits, Batching::Allowed, None)
}

/// Whether several signatures may be checked in one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Batching {
    Allowed,
    Never,
}

fn verify_chain_with(
    envelope: &CallEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    limits: &ChainLimits,
    batching: Batching,
    roots: Option<&VerifiedRoots>,
) -> Result<VerifiedChain, ChainError> {
    let ChainLimits {
        now_ms,
        allowed_skew_ms,
        max_depth,
        max_lifetime_ms,
    } = *limits;
    check_version(envelope.version)?;
    if envelope.hops.len() > max_depth {
        return Err(ChainError::TooDeep {
            depth: envelope.hops.len(),
            limit: max_depth,
        });
    }
    let last_index = envelope
        .hops
        .len()
        .checked_sub(1)
        .ok_or(ChainError::Empty)?;

    // Each hop's canonical bytes are built once: hashed here for the next hop's link, and
    // again as the hop's leaf when its signature is checked.
    let mut canonical: Vec<Vec<u8>> = Vec::with_capacity(envelope.hops.len());
    let mut prev_digest = [0u8; 32];
    for (index, hop) in envelope.hops.iter().enumerate() {
        if hop.child_run != RunId::child_of(&hop.parent_run, &hop.tool_use_id) {
            return Err(ChainError::BadRunId { hop: index });
        }
        let linked = match index.checked_sub(1) {
            None => hop.prev_digest == [0; 32],
            Some(prev_index) => {
                let prev = &envelope.hops[prev_index];
                hop.prev_digest == prev_digest
                    && prev.callee == hop.caller
                    && prev.child_run == hop.parent_run
            }
        };
        if !linked {
            return Err(ChainError::BrokenLink { hop: index });
        }
        match (index, &hop.origin) {
            (0, None) => return Err(ChainError::MissingOrigin),
            (1.., Some(_)) => return Err(ChainError::MisplacedOrigin { hop: index }),
            _ => {}
        }
        // A host on the way may narrow the allowance it hands on, never widen it.
        if let Some(prev_budget) = index
            .checked_sub(1)
            .and_then(|prev| envelope.hops[prev].budget)
            && !hop.budget.is_some_and(|budget| budget.within(&prev_budget))
        {
            return Err(ChainError::BudgetWidened { hop: index });
        }
        if hop.issued_at_ms > now_ms.saturating_add(allowed_skew_ms) {
            return Err(ChainError::NotYetValid {
                hop: index,
                issued_at_ms: hop.issued_at_ms,
                now_ms,
            });
        }
        let bytes = hop_canonical_bytes(hop);
        prev_digest = Sha256::digest(&bytes).into();
        canonical.push(bytes);
    }

    let last = &envelope.hops[last_index];
    if last.input_digest != input_digest(&envelope.input) {
        return Err(ChainError::InputTampered);
    }
    // Without these, an expiry of u64::MAX would make a signed call valid forever. The age
    // is checked before the expiry so that a stale hop is refused as what it is.
    let lifetime_ms = last.expires_at_ms.saturating_sub(last.issued_at_ms);
    if lifetime_ms > max_lifetime_ms {
        return Err(ChainError::LifetimeTooLong {
            hop: last_index,
            lifetime_ms,
            limit_ms: max_lifetime_ms,
        });
    }
    if last
        .issued_at_ms
        .saturating_add(max_lifetime_ms)
        .saturating_add(allowed_skew_ms)
        < now_ms
    {
        return Err(ChainError::IssuedTooLongAgo {
            hop: last_index,
            issued_at_ms: last.issued_at_ms,
            now_ms,
        });
    }
    if last.expires_at_ms.saturating_add(allowed_skew_ms) < now_ms {
        return Err(ChainError::Expired {
            hop: last_index,
            expires_at_ms: last.expires_at_ms,
            now_ms,
        });
    }

    let origin = envelope.hops[0]
        .origin
        .clone()
        .ok_or(ChainError::MissingOrigin)?;
    let signers = verify_hop_signatures(
        &envelope.hops,
        &canonical,
        ring,
        placements,
        batching,
        roots,
    )?;
    Ok(VerifiedChain {
        depth: envelope.hops.len(),
        root_caller: envelope.hops[0].caller.clone(),
        origin,
        signers,
        last_hop: last.clone(),
    })
}

/// One batch signature with the key it must verify under, and the first hop that carries it.
struct PendingSignature<'a> {
    hop: usize,
    host: &'a str,
    key: &'a PublicKey,
    key_prime_order: bool,
    signature: Signature,
    message: Vec<u8>,
    entry: RootKey,
}

/// Checks every hop's proof and signature and returns the signing hosts, oldest first. Refuses
/// with the same error, naming the same hop, as checking each hop in turn (its proof, then its
/// signature with `verify_strict`) would. `canonical` holds each hop's canonical bytes.
fn verify_hop_signatures(
    hops: &[Hop],
    canonical: &[Vec<u8>],
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    batching: Batching,
    roots: Option<&VerifiedRoots>,
) -> Result<Vec<String>, ChainError> {
    let mut signers = Vec::with_capacity(hops.len());
    let mut pending: Vec<PendingSignature<'_>> = Vec::with_capacity(hops.len());
    let mut unresolved = None;
    for (index, (hop, bytes)) in hops.iter().zip(canonical).enumerate() {
        let resolved = hop
            .signature
            .as_ref()
            .ok_or(ChainError::Unsigned { hop: index })
            .and_then(|signature| {
                let (key, key_prime_order) =
                    pinned_key(index, &hop.caller, signature, ring, placements)?;
                check_proof(index, leaf_hash(bytes), &signature.batch)?;
                Ok((signature, key, key_prime_order))
            });
        let (signature, key, key_prime_order) = match resolved {
            Ok(resolved) => resolved,
            Err(error) => {
                unresolved = Some(error);
                break;
            }
        };
        signers.push(signature.host.clone());
        let entry = RootKey {
            key: key.to_bytes(),
            root: signature.batch.root,
            leaf_count: signature.batch.leaf_count,
            signature: signature.signature,
        };
        // Hops of this chain signed in one batch share a signature: checked once. A signature
        // the cache holds verified already.
        if pending.iter().any(|seen| seen.entry == entry)
            || roots.is_some_and(|roots| roots.contains(&entry))
        {
            continue;
        }
        pending.push(PendingSignature {
            hop: index,
            host: &signature.host,
            key,
            key_prime_order,
            signature: Signature::from_bytes(&signature.signature),
            message: root_message(&entry.root, entry.leaf_count),
            entry,
        });
    }
    // Checked one by one, a bad signature before the first hop without a usable key or proof
    // was reported first: verify those hops before reporting it.
    verify_signatures(&pending, batching)?;
    if let Some(roots) = roots {
        roots.insert_verified(pending.iter().map(|signature| &signature.entry));
    }
    match unresolved {
        Some(error) => Err(error),
        None => Ok(signers),
    }
}

/// Verifies these signatures: in one batch when there are several and every one is safe to
/// batch (see the module documentation), else, or when the batch fails, one by one.
fn verify_signatures(
    pending: &[PendingSignature<'_>],
    batching: Batching,
) -> Result<(), ChainError> {
    let batchable = batching == Batching::Allowed
        && pending.len() > 1
        && pending.iter().all(|signature| {
            signature.key_prime_order && r_is_prime_order(signature.signature.r_bytes())
        });
    if batchable {
        let messages: Vec<&[u8]> = pending.iter().map(|s| s.message.as_slice()).collect();
        let signatures: Vec<Signature> = pending.iter().map(|s| s.signature).collect();
        let keys: Vec<VerifyingKey> = pending.iter().map(|s| *s.key.verifying_key()).collect();
        if ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok() {
            return Ok(());
        }
    }
    for signature in pending {
        signature
            .key
            .verifying_key()
            .verify_strict(&signature.message, &signature.signature)
            .map_err(|_| {
                tracing::debug!(
                    hop = signature.hop,
                    host = signature.host,
                    "bad batch signature"
                );
                ChainError::BadSignature { hop: signature.hop }
            })?;
    }
    Ok(())
}

/// Whether a signature's R is a canonical encoding of a point of the prime-order subgroup
/// other than the identity. `verify_strict` accepts no other R under a prime-order key (it
/// refuses a small-order R, and compares R's bytes with a canonical encoding of a point of
/// that subgroup), while a batch could accept one. The subgroup check is a full scalar
/// multiplication, about as costly as a signature check: see docs/BENCHMARKS.md.
fn r_is_prime_order(r_bytes: &[u8; 32]) -> bool {
    let compressed = CompressedEdwardsY(*r_bytes);
    let Some(r) = compressed.decompress() else {
        return false;
    };
    r.compress() == compressed && !r.is_small_order() && r.is_torsion_free()
}

/// The (unsigned) reply to the call `hop`, carrying the child's capped output.
pub fn new_reply(hop: &Hop, status: ReplyStatus, output: impl Into<String>) -> ReplyEnvelope {
    ReplyEnvelope {
        version: ENVELOPE_VERSION,
        caller: hop.caller.clone(),
        callee: hop.callee.clone(),
        parent_run: hop.parent_run.clone(),
        child_run: hop.child_run.clone(),
        tool_use_id: hop.tool_use_id.clone(),
        status,
        output: output.into(),
        tree_cost: Default::default(),
        tree_spent: None,
        signature: None,
    }
}

/// The bytes a reply's signature covers: domain tag, layout version, envelope version, the
/// agents, run ids and tool use, the status, the output's digest, the tree cost and the
/// subtree's spend of its tree budget (a presence byte, then runs and tokens), length-prefixed.
pub fn reply_canonical_bytes(reply: &ReplyEnvelope) -> Vec<u8> {
    let mut out = Canonical::new(REPLY_DOMAIN);
    out.field(&reply.version.to_be_bytes());
    out.field(reply.caller.as_bytes());
    out.field(reply.callee.as_bytes());
    out.field(reply.parent_run.as_str().as_bytes());
    out.field(reply.child_run.as_str().as_bytes());
    out.field(reply.tool_use_id.as_bytes());
    out.field(match reply.status {
        ReplyStatus::Succeeded => b"succeeded",
        ReplyStatus::Failed => b"failed",
    });
    out.field(&input_digest(&reply.output));
    let c = reply.tree_cost;
    for count in [
        c.model_turns,
        c.tool_calls,
        c.calls_placed,
        c.input_tokens,
        c.output_tokens,
    ] {
        out.field(&count.to_be_bytes());
    }
    match reply.tree_spent {
        Some(spent) => {
            let mut field = vec![1u8];
            field.extend_from_slice(&spent.runs.to_be_bytes());
            field.extend_from_slice(&spent.tokens.to_be_bytes());
            out.field(&field);
        }
        None => out.field(&[0u8]),
    }
    out.finish()
}

/// Signs a reply as the host serving its callee, as a batch of one. To sign several replies
/// (and calls) leaving for the same host at once, use [`sign_batch`].
pub fn sign_reply(reply: &mut ReplyEnvelope, host_name: &str, key: &HostKey) {
    sign_batch(&mut [Outgoing::Reply(reply)], host_name, key, |_| false);
}

/// Verifies a reply received from another host: signed (strictly) by the host serving the
/// callee, in a batch whose root its proof leads to, with a child run id derived from its
/// parent run and tool use. Whether the reply answers a call this host actually placed is the
/// receiver's check.
pub fn verify_reply(
    reply: &ReplyEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
) -> Result<(), ChainError> {
    verify_reply_with(reply, ring, placements, None)
}

/// [`verify_reply`], skipping the check of a batch signature `roots` holds as verified (the
/// proof is still checked), and adding the signature it checks to `roots`.
pub fn verify_reply_cached(
    reply: &ReplyEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    roots: &VerifiedRoots,
) -> Result<(), ChainError> {
    verify_reply_with(reply, ring, placements, Some(roots))
}

fn verify_reply_with(
    reply: &ReplyEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    roots: Option<&VerifiedRoots>,
) -> Result<(), ChainError> {
    check_version(reply.version)?;
    if reply.child_run != RunId::child_of(&reply.parent_run, &reply.tool_use_id) {
        return Err(ChainError::BadRunId { hop: 0 });
    }
    let signature = reply
        .signature
        .as_ref()
        .ok_or(ChainError::Unsigned { hop: 0 })?;
    let (key, _) = pinned_key(0, &reply.callee, signature, ring, placements)?;
    check_proof(
        0,
        leaf_hash(&reply_canonical_bytes(reply)),
        &signature.batch,
    )?;
    let entry = RootKey {
        key: key.to_bytes(),
        root: signature.batch.root,
        leaf_count: signature.batch.leaf_count,
        signature: signature.signature,
    };
    if roots.is_some_and(|roots| roots.contains(&entry)) {
        return Ok(());
    }
    key.verifying_key()
        .verify_strict(
            &root_message(&entry.root, entry.leaf_count),
            &Signature::from_bytes(&signature.signature),
        )
        .map_err(|_| ChainError::BadSignature { hop: 0 })?;
    if let Some(roots) = roots {
        roots.insert_verified([&entry]);
    }
    Ok(())
}

/// The key `signature` must verify under: the one pinned for the host serving `agent`, which
/// must be the host the signature names. With it, whether it lies in the prime-order subgroup.
fn pinned_key<'a>(
    index: usize,
    agent: &str,
    signature: &crate::envelope::HopSignature,
    ring: &'a KeyRing,
    placements: &BTreeMap<String, String>,
) -> Result<(&'a PublicKey, bool), ChainError> {
    let expected = placements
        .get(agent)
        .ok_or_else(|| ChainError::UnknownAgent {
            hop: index,
            agent: agent.to_owned(),
        })?;
    if &signature.host != expected {
        return Err(ChainError::WrongSigner {
            hop: index,
            expected: expected.clone(),
            actual: signature.host.clone(),
        });
    }
    ring.pinned(expected)
        .ok_or_else(|| ChainError::UnknownHost {
            hop: index,
            host: expected.clone(),
        })
}

fn check_version(found: u16) -> Result<(), ChainError> {
    if found == ENVELOPE_VERSION {
        Ok(())
    } else {
        Err(ChainError::WrongVersion {
            found,
            expected: ENVELOPE_VERSION,
        })
    }
}

/// Builder of canonical bytes: a domain tag, the layout version, then length-prefixed fields.
struct Canonical(Vec<u8>);

impl Canonical {
    fn new(domain: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(&(domain.len() as u64).to_be_bytes());
        bytes.extend_from_slice(domain);
        bytes.extend_from_slice(&CANONICAL_VERSION.to_be_bytes());
        Self(bytes)
    }

    fn field(&mut self, value: &[u8]) {
        self.0
            .extend_from_slice(&(value.len() as u64).to_be_bytes());
        self.0.extend_from_slice(value);
    }

    fn finish(self) -> Vec<u8> {
        self.0
    }
}

#[cfg(test)]
mod tests;
