//! Batch signatures: one ed25519 signature over the Merkle root of everything a host sends one
//! peer host at once, and one inclusion proof per hop or reply, so that each envelope still
//! verifies on its own.
//!
//! The tree is the one of RFC 9162 (Certificate Transparency 2.0, section 2.1) over SHA-256:
//! a leaf hashes `0x00 ‖ canonical bytes` (a hop's [`hop_canonical_bytes`] or a reply's
//! [`reply_canonical_bytes`], each opening with its own domain tag), an inner node hashes
//! `0x01 ‖ left ‖ right`, and a tree of n > 1 leaves splits at the largest power of two below
//! n. The prefixes keep a leaf from passing for a node (no second preimage across levels); the
//! split, which never duplicates a leaf, makes the tree's shape a function of its size alone,
//! so the leaf's position and the tree's size fix which side each sibling of the path is on
//! and how long the path is. The host signs [`root_message`]: a domain tag of its own
//! (`consort/batch-root/v1`, so no other signature of the fleet can pass for one), the root
//! and the number of leaves. A lone hop is a batch of one: its root is its leaf hash, its path
//! empty.
//!
//! What a receiver checks per hop ([`check_proof`]): the proof's size and position are sane
//! (at least one leaf, at most [`MAX_BATCH_LEAVES`], the position inside, the path exactly as
//! long as the shape says), and the path leads from this hop's own leaf to the root the proof
//! names; then the signature over that root, strictly, with the key pinned for the host
//! (`chain.rs`), or a cached fact that this exact signature verified ([`super::VerifiedRoots`]).
//!
//! This module builds trees and proofs and checks them; it never decides whether the hops it
//! proves are allowed, and it reads no clock. Batching does not weaken what one signature
//! proves: the signer vouches for every leaf under the root it signs, and a proof only shows
//! that this leaf is one of them.

use sha2::{Digest, Sha256};

use super::{Canonical, hop_canonical_bytes, reply_canonical_bytes};
use crate::envelope::{BatchProof, CallEnvelope, HopSignature, ReplyEnvelope};
use crate::error::ChainError;
use crate::keys::HostKey;

/// The most leaves a receiver accepts in one batch (a path of at most 12 hashes). A signer
/// keeps its batches far smaller ([`MAX_SIGNED_LEAVES`]).
pub const MAX_BATCH_LEAVES: u32 = 4096;
/// The most leaves one signature covers when signing; what is queued beyond waits for the
/// next signature, so one batch never delays its first call by more than its own hashing.
pub const MAX_SIGNED_LEAVES: usize = 256;
/// Domain tag of the bytes a batch signature covers.
const ROOT_DOMAIN: &[u8] = b"consort/batch-root/v1";
/// Prefix of a leaf's hash input (RFC 9162).
const LEAF_PREFIX: u8 = 0x00;
/// Prefix of an inner node's hash input (RFC 9162).
const NODE_PREFIX: u8 = 0x01;

/// The hash of a leaf: SHA-256 of `0x00 ‖ canonical`.
pub(crate) fn leaf_hash(canonical: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update([LEAF_PREFIX]);
    hash.update(canonical);
    hash.finalize().into()
}

/// The hash of an inner node: SHA-256 of `0x01 ‖ left ‖ right`.
fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update([NODE_PREFIX]);
    hash.update(left);
    hash.update(right);
    hash.finalize().into()
}

/// The bytes a batch signature covers: domain tag, layout version, the root, the leaf count.
pub(crate) fn root_message(root: &[u8; 32], leaf_count: u32) -> Vec<u8> {
    let mut out = Canonical::new(ROOT_DOMAIN);
    out.field(root);
    out.field(&leaf_count.to_be_bytes());
    out.finish()
}

/// The largest power of two strictly below `n` (n >= 2): where a tree of n leaves splits.
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The root of the tree over `leaves` and each leaf's path (siblings from the leaf up).
/// `leaves` must not be empty.
pub(crate) fn tree(leaves: &[[u8; 32]]) -> ([u8; 32], Vec<Vec<[u8; 32]>>) {
    let mut paths = vec![Vec::new(); leaves.len()];
    let root = subtree(leaves, &mut paths);
    (root, paths)
}

fn subtree(leaves: &[[u8; 32]], paths: &mut [Vec<[u8; 32]>]) -> [u8; 32] {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let k = split(leaves.len());
    let (left_paths, right_paths) = paths.split_at_mut(k);
    let left = subtree(&leaves[..k], left_paths);
    let right = subtree(&leaves[k..], right_paths);
    // Pushed after the recursion: a path lists the deepest sibling first.
    left_paths.iter_mut().for_each(|path| path.push(right));
    right_paths.iter_mut().for_each(|path| path.push(left));
    node_hash(&left, &right)
}

/// How long the path of leaf `index` is in a tree of `count` leaves (`index < count`).
fn path_len(mut index: u32, mut count: u32) -> usize {
    let mut len = 0;
    while count > 1 {
        let k = split(count as usize) as u32;
        if index < k {
            count = k;
        } else {
            index -= k;
            count -= k;
        }
        len += 1;
    }
    len
}

/// Checks that `proof` is well formed and leads from `leaf` to the root it names (RFC 9162,
/// 2.1.3.2). `hop` names the hop (0 for a reply) in the error.
pub(crate) fn check_proof(
    hop: usize,
    leaf: [u8; 32],
    proof: &BatchProof,
) -> Result<(), ChainError> {
    let BatchProof {
        root,
        leaf_index,
        leaf_count,
        path,
    } = proof;
    let (index, count) = (*leaf_index, *leaf_count);
    if count == 0
        || count > MAX_BATCH_LEAVES
        || index >= count
        || path.len() != path_len(index, count)
    {
        return Err(ChainError::MalformedProof {
            hop,
            leaf_index: index,
            leaf_count: count,
            path_len: path.len(),
        });
    }
    // `fn_` is the node's index at the current level, `sn` the last index at that level.
    let (mut fn_, mut sn) = (index, count - 1);
    let mut node = leaf;
    for sibling in path {
        if sn == 0 {
            return Err(ChainError::ProofMismatch { hop });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            node = node_hash(sibling, &node);
            // A rightmost node without a sibling at this level moves up unchanged.
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            node = node_hash(&node, sibling);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 || node != *root {
        return Err(ChainError::ProofMismatch { hop });
    }
    Ok(())
}

/// What one batch signature covers: the pending hops of call envelopes and replies, all
/// leaving for the same peer host.
#[derive(Debug)]
pub enum Outgoing<'a> {
    /// A call: every hop still unsigned whose caller this host serves is signed.
    Call(&'a mut CallEnvelope),
    /// A reply of a child run this host ran: signed (any signature it had is replaced).
    Reply(&'a mut ReplyEnvelope),
}

/// What one [`sign_batch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchSigned {
    /// Hops and replies signed.
    pub leaves: usize,
    /// Signatures made: 1, or 0 when there was nothing to sign.
    pub signatures: usize,
}

/// Signs every pending hop of the calls (those whose caller `serves` says this host serves)
/// and every reply in `items` with one signature over their batch's root, and gives each its
/// own [`HopSignature`] (the signature, the root and its inclusion proof). Items beyond
/// [`MAX_SIGNED_LEAVES`] leaves are signed in further batches. Call it right before they leave
/// for one peer host: batches never mix peers, so no host learns of another's traffic.
pub fn sign_batch(
    items: &mut [Outgoing<'_>],
    host_name: &str,
    key: &HostKey,
    serves: impl Fn(&str) -> bool,
) -> BatchSigned {
    // (item, hop index or None for a reply) of every leaf, in order.
    let mut slots: Vec<(usize, Option<usize>)> = Vec::new();
    let mut leaves: Vec<[u8; 32]> = Vec::new();
    for (item_index, item) in items.iter().enumerate() {
        match item {
            Outgoing::Call(envelope) => {
                for (hop_index, hop) in envelope.hops.iter().enumerate() {
                    if hop.signature.is_none() && serves(&hop.caller) {
                        slots.push((item_index, Some(hop_index)));
                        leaves.push(leaf_hash(&hop_canonical_bytes(hop)));
                    }
                }
            }
            Outgoing::Reply(reply) => {
                slots.push((item_index, None));
                leaves.push(leaf_hash(&reply_canonical_bytes(reply)));
            }
        }
    }
    let mut signed = BatchSigned::default();
    for (chunk_slots, chunk_leaves) in slots
        .chunks(MAX_SIGNED_LEAVES)
        .zip(leaves.chunks(MAX_SIGNED_LEAVES))
    {
        let (root, paths) = tree(chunk_leaves);
        // MAX_SIGNED_LEAVES fits in u32.
        let leaf_count = chunk_leaves.len() as u32;
        let signature = key.sign(&root_message(&root, leaf_count));
        signed.signatures += 1;
        for (leaf_index, (&(item_index, hop_index), path)) in
            chunk_slots.iter().zip(paths).enumerate()
        {
            let hop_signature = HopSignature {
                host: host_name.to_owned(),
                signature,
                batch: BatchProof {
                    root,
                    leaf_index: leaf_index as u32,
                    leaf_count,
                    path,
                },
            };
            let target = match (&mut items[item_index], hop_index) {
                (Outgoing::Call(envelope), Some(hop_index)) => {
                    &mut envelope.hops[hop_index].signature
                }
                (Outgoing::Reply(reply), None) => &mut reply.signature,
                // Slots are built from the items above, kind by kind.
                _ => continue,
            };
            *target = Some(hop_signature);
            signed.leaves += 1;
        }
    }
    signed
}

#[cfg(test)]
mod tests;
