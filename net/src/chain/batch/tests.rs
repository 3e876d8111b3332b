//! The Merkle tree and its proofs, apart from chains: every proof of every small tree verifies,
//! the tree is RFC 9162's, and no change to a proof (its path, position, size or root) is
//! accepted.

use proptest::prelude::*;

use super::*;

fn leaves(n: usize) -> Vec<[u8; 32]> {
    (0..n)
        .map(|i| leaf_hash(format!("leaf {i}").as_bytes()))
        .collect()
}

/// RFC 9162's MTH, written as the RFC states it, to compare [`tree`] against.
fn reference_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let mut k = 1;
    while k * 2 < leaves.len() {
        k *= 2;
    }
    node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
}

fn proof(root: [u8; 32], index: usize, count: usize, path: Vec<[u8; 32]>) -> BatchProof {
    BatchProof {
        root,
        leaf_index: index as u32,
        leaf_count: count as u32,
        path,
    }
}

#[test]
fn every_proof_of_every_small_tree_verifies() {
    for n in 1..=70 {
        let leaves = leaves(n);
        let (root, paths) = tree(&leaves);
        assert_eq!(root, reference_root(&leaves), "n = {n}");
        for (index, path) in paths.into_iter().enumerate() {
            assert_eq!(path.len(), path_len(index as u32, n as u32));
            check_proof(0, leaves[index], &proof(root, index, n, path)).unwrap();
        }
    }
}

#[test]
fn a_batch_of_one_is_its_leaf() {
    let leaves = leaves(1);
    let (root, paths) = tree(&leaves);
    assert_eq!(root, leaves[0]);
    assert_eq!(paths, vec![Vec::<[u8; 32]>::new()]);
}

#[test]
fn leaves_and_nodes_are_hashed_apart() {
    // A node's input (two hashes) given as a leaf's bytes does not hash to the node.
    let [left, right]: [[u8; 32]; 2] = leaves(2).try_into().unwrap();
    let mut as_bytes = left.to_vec();
    as_bytes.extend_from_slice(&right);
    assert_ne!(leaf_hash(&as_bytes), node_hash(&left, &right));
}

#[test]
fn the_root_message_binds_the_batch_size() {
    let root = [7; 32];
    assert_ne!(root_message(&root, 1), root_message(&root, 2));
    assert!(
        root_message(&root, 1)
            .windows(ROOT_DOMAIN.len())
            .any(|w| w == ROOT_DOMAIN)
    );
}

#[test]
fn malformed_proofs_are_refused_as_malformed() {
    let leaves = leaves(5);
    let (root, paths) = tree(&leaves);
    let good = proof(root, 2, 5, paths[2].clone());
    let malformed = |proof: &BatchProof| {
        matches!(
            check_proof(3, leaves[2], proof),
            Err(ChainError::MalformedProof { hop: 3, .. })
        )
    };
    let mut truncated = good.clone();
    truncated.path.pop();
    assert!(malformed(&truncated));
    let mut padded = good.clone();
    padded.path.push([0; 32]);
    assert!(malformed(&padded));
    let mut outside = good.clone();
    outside.leaf_index = 5;
    assert!(malformed(&outside));
    let mut empty = good.clone();
    empty.leaf_count = 0;
    empty.leaf_index = 0;
    assert!(malformed(&empty));
    let mut huge = good;
    huge.leaf_count = MAX_BATCH_LEAVES + 1;
    assert!(malformed(&huge));
    // What a signature stored by a build before batches reads as.
    assert!(malformed(&BatchProof::default()));
}

#[test]
fn another_leafs_proof_or_position_does_not_verify() {
    let leaves = leaves(8);
    let (root, paths) = tree(&leaves);
    // Leaf 3 with leaf 4's proof (same path length), and with its own path at position 4.
    assert_eq!(
        check_proof(0, leaves[3], &proof(root, 4, 8, paths[4].clone())),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    assert_eq!(
        check_proof(0, leaves[3], &proof(root, 4, 8, paths[3].clone())),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // Leaves swapped in the batch: each verifies only at its own position.
    assert_eq!(
        check_proof(0, leaves[4], &proof(root, 3, 8, paths[3].clone())),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // Another tree's root.
    let (other_root, _) = tree(&leaves[..7]);
    assert_eq!(
        check_proof(0, leaves[3], &proof(other_root, 3, 8, paths[3].clone())),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever one changes in a valid proof (a bit of its path, its position, its root), it is
    /// refused; only the proof as built is accepted. (A changed size can leave the path's
    /// shape as it was: the size is bound by the signature over [`root_message`] instead.)
    #[test]
    fn no_change_to_a_proof_is_accepted(
        n in 1usize..300,
        pick in any::<prop::sample::Index>(),
        change in 0u8..3,
        which in any::<prop::sample::Index>(),
        bit in 0usize..256,
        other in any::<prop::sample::Index>(),
    ) {
        let leaves = leaves(n);
        let (root, paths) = tree(&leaves);
        let index = pick.index(n);
        let good = proof(root, index, n, paths[index].clone());
        prop_assert!(check_proof(0, leaves[index], &good).is_ok());
        let mut bad = good.clone();
        match change {
            0 if !bad.path.is_empty() => {
                let i = which.index(bad.path.len());
                bad.path[i][bit / 8] ^= 1 << (bit % 8);
            }
            1 if n > 1 => {
                let mut moved = other.index(n);
                if moved == index {
                    moved = (moved + 1) % n;
                }
                bad.leaf_index = moved as u32;
            }
            _ => bad.root[bit / 8] ^= 1 << (bit % 8),
        }
        if bad != good {
            prop_assert!(check_proof(0, leaves[index], &bad).is_err());
        }
        // Another leaf with this proof.
        if n > 1 {
            let stranger = (index + 1) % n;
            prop_assert!(check_proof(0, leaves[stranger], &good).is_err());
        }
    }
}
