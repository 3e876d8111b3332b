//! Batch signatures on chains and replies: several envelopes signed at once each verify on
//! their own, a cache of verified roots checks each batch signature once, and every way of
//! moving a proof, a root or a signature between envelopes is refused with a typed error.

use super::*;

/// `n` one-hop calls from cmo (alpha) to cfo (beta), unsigned.
fn calls(fleet: &Fleet, n: usize) -> Vec<CallEnvelope> {
    (0..n)
        .map(|_| fleet.unsigned_chain(&["cmo", "cfo"]))
        .collect()
}

/// Signs `envelopes` as alpha in one batch.
fn sign_as_alpha(fleet: &Fleet, envelopes: &mut [CallEnvelope]) -> BatchSigned {
    let mut items: Vec<Outgoing<'_>> = envelopes.iter_mut().map(Outgoing::Call).collect();
    sign_batch(&mut items, "alpha", &fleet.keys["alpha"], |agent| {
        fleet.placements.get(agent).map(String::as_str) == Some("alpha")
    })
}

/// A batch of `n` calls, signed by alpha at once.
fn batch(fleet: &Fleet, n: usize) -> Vec<CallEnvelope> {
    let mut envelopes = calls(fleet, n);
    assert_eq!(
        sign_as_alpha(fleet, &mut envelopes),
        BatchSigned {
            leaves: n,
            signatures: 1
        }
    );
    envelopes
}

fn proof_of(envelope: &mut CallEnvelope) -> &mut HopSignature {
    envelope.hops[0].signature.as_mut().unwrap()
}

fn cached(
    fleet: &Fleet,
    envelope: &CallEnvelope,
    roots: &VerifiedRoots,
) -> Result<VerifiedChain, ChainError> {
    verify_chain_cached(
        envelope,
        &fleet.ring,
        &fleet.placements,
        &limits(NOW_MS),
        roots,
    )
}

#[test]
fn calls_signed_at_once_share_one_signature_and_each_verifies_alone() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 5);
    let first = proof_of(&mut envelopes[0]).clone();
    for (index, envelope) in envelopes.iter_mut().enumerate() {
        let signature = proof_of(envelope).clone();
        assert_eq!(signature.signature, first.signature);
        assert_eq!(signature.batch.root, first.batch.root);
        assert_eq!(signature.batch.leaf_index, index as u32);
        assert_eq!(signature.batch.leaf_count, 5);
        assert_eq!(verify(&fleet, envelope).unwrap().signers(), ["alpha"]);
    }
}

#[test]
fn a_cache_checks_each_batch_signature_once() {
    let fleet = Fleet::standard();
    let envelopes = batch(&fleet, 6);
    let roots = VerifiedRoots::new(8);
    for envelope in &envelopes {
        cached(&fleet, envelope, &roots).unwrap();
    }
    // One signature checked, five envelopes that skipped it.
    assert_eq!(roots.counts(), (5, 1));
    // A second batch is a second root.
    for envelope in &batch(&fleet, 2) {
        cached(&fleet, envelope, &roots).unwrap();
    }
    assert_eq!(roots.counts(), (6, 2));
    assert_eq!(roots.len(), 2);
}

#[test]
fn a_tampered_envelope_of_a_batch_is_refused_while_the_others_pass() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 4);
    envelopes[2].hops[0].expires_at_ms += 1;
    let roots = VerifiedRoots::new(8);
    for (index, envelope) in envelopes.iter().enumerate() {
        let verified = cached(&fleet, envelope, &roots);
        if index == 2 {
            // Refused although its batch's signature is already in the cache.
            assert_eq!(verified, Err(ChainError::ProofMismatch { hop: 0 }));
        } else {
            assert!(verified.is_ok(), "envelope {index}: {verified:?}");
        }
    }
}

#[test]
fn the_proof_of_another_envelope_is_refused() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 3);
    let other = proof_of(&mut envelopes[1]).clone();
    *proof_of(&mut envelopes[0]) = other;
    assert_eq!(
        verify(&fleet, &envelopes[0]),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

#[test]
fn a_swapped_root_is_refused() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 3);
    let mut others = batch(&fleet, 3);
    let other = proof_of(&mut others[0]).clone();
    // The root alone.
    let mut swapped = envelopes[0].clone();
    proof_of(&mut swapped).batch.root = other.batch.root;
    assert_eq!(
        verify(&fleet, &swapped),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // The root with the signature over it.
    let mut swapped = envelopes[0].clone();
    proof_of(&mut swapped).batch.root = other.batch.root;
    proof_of(&mut swapped).signature = other.signature;
    assert_eq!(
        verify(&fleet, &swapped),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // The other batch's whole signature and proof, with its root verified and cached first.
    let roots = VerifiedRoots::new(8);
    cached(&fleet, &others[0], &roots).unwrap();
    *proof_of(&mut envelopes[0]) = other;
    assert_eq!(
        cached(&fleet, &envelopes[0], &roots),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

#[test]
fn reordered_leaves_are_refused() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 4);
    // Each envelope claims the other's position, with its own path, then with the other's.
    let (one, two) = (
        proof_of(&mut envelopes[1]).batch.clone(),
        proof_of(&mut envelopes[2]).batch.clone(),
    );
    let mut moved = envelopes[1].clone();
    proof_of(&mut moved).batch.leaf_index = two.leaf_index;
    assert_eq!(
        verify(&fleet, &moved),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    let mut moved = envelopes[2].clone();
    proof_of(&mut moved).batch = one;
    assert_eq!(
        verify(&fleet, &moved),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

#[test]
fn a_truncated_or_padded_proof_is_refused() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 5);
    let mut truncated = envelopes[0].clone();
    proof_of(&mut truncated).batch.path.pop();
    assert!(matches!(
        verify(&fleet, &truncated),
        Err(ChainError::MalformedProof { hop: 0, .. })
    ));
    proof_of(&mut envelopes[0]).batch.path.push([0; 32]);
    assert!(matches!(
        verify(&fleet, &envelopes[0]),
        Err(ChainError::MalformedProof { hop: 0, .. })
    ));
}

#[test]
fn a_changed_batch_size_is_refused() {
    // Leaf 0 of 5 and leaf 0 of 6 have paths of the same shape: the proof still leads to the
    // root, but the signature covers the size.
    let fleet = Fleet::standard();
    let envelopes = batch(&fleet, 5);
    let roots = VerifiedRoots::new(8);
    cached(&fleet, &envelopes[0], &roots).unwrap();
    let mut resized = envelopes[0].clone();
    proof_of(&mut resized).batch.leaf_count = 6;
    assert_eq!(
        verify(&fleet, &resized),
        Err(ChainError::BadSignature { hop: 0 })
    );
    assert_eq!(
        cached(&fleet, &resized, &roots),
        Err(ChainError::BadSignature { hop: 0 })
    );
}

#[test]
fn other_signature_bytes_over_a_cached_root_are_checked_and_refused() {
    let fleet = Fleet::standard();
    let mut envelopes = batch(&fleet, 2);
    let roots = VerifiedRoots::new(8);
    cached(&fleet, &envelopes[0], &roots).unwrap();
    proof_of(&mut envelopes[1]).signature[5] ^= 1;
    assert_eq!(
        cached(&fleet, &envelopes[1], &roots),
        Err(ChainError::BadSignature { hop: 0 })
    );
}

#[test]
fn a_signature_made_before_batches_is_refused() {
    // A stored chain from a build before batch signatures reads an empty proof.
    let fleet = Fleet::standard();
    let mut envelope = fleet.unsigned_chain(&["cmo", "cfo"]);
    envelope.hops[0].signature = Some(HopSignature {
        host: "alpha".into(),
        signature: fleet.keys["alpha"].sign(&hop_canonical_bytes(&envelope.hops[0])),
        batch: BatchProof::default(),
    });
    assert!(matches!(
        verify(&fleet, &envelope),
        Err(ChainError::MalformedProof {
            hop: 0,
            leaf_count: 0,
            ..
        })
    ));
}

#[test]
fn hops_of_one_chain_signed_at_once_check_one_signature() {
    // cdo -> ceo stays on gamma; ceo -> cfo leaves it: gamma signs both hops in one batch.
    let fleet = Fleet::standard();
    let mut envelope = fleet.unsigned_chain(&["cdo", "ceo", "cfo"]);
    assert_eq!(
        sign_pending_hops(&mut envelope, "gamma", &fleet.keys["gamma"], |agent| {
            fleet.placements.get(agent).map(String::as_str) == Some("gamma")
        }),
        2
    );
    let roots = VerifiedRoots::new(8);
    assert_eq!(cached(&fleet, &envelope, &roots).unwrap().depth(), 2);
    assert_eq!(roots.counts(), (0, 1));
    // Its hops' proofs are not interchangeable.
    let mut swapped = envelope.clone();
    let first = swapped.hops[0].signature.clone();
    swapped.hops[1].signature = first;
    assert_eq!(
        verify(&fleet, &swapped),
        Err(ChainError::ProofMismatch { hop: 1 })
    );
}

#[test]
fn more_calls_than_one_batch_holds_take_several_signatures() {
    let fleet = Fleet::standard();
    let n = MAX_SIGNED_LEAVES + 3;
    let mut envelopes = calls(&fleet, n);
    assert_eq!(
        sign_as_alpha(&fleet, &mut envelopes),
        BatchSigned {
            leaves: n,
            signatures: 2
        }
    );
    let roots = VerifiedRoots::new(8);
    for envelope in &envelopes {
        cached(&fleet, envelope, &roots).unwrap();
    }
    assert_eq!(roots.counts(), (n as u64 - 2, 2));
    assert_eq!(proof_of(&mut envelopes[n - 1]).batch.leaf_count, 3);
}

#[test]
fn replies_and_calls_to_one_host_share_a_batch() {
    // Beta answers two of cmo's calls and calls cmo back, all in one batch to alpha.
    let fleet = Fleet::standard();
    let answered = fleet.chain(&["cmo", "cfo"]);
    let mut replies: Vec<ReplyEnvelope> = (0..2)
        .map(|i| {
            new_reply(
                &answered.hops[0],
                ReplyStatus::Succeeded,
                format!("answer {i}"),
            )
        })
        .collect();
    let mut call = fleet.unsigned_chain(&["cfo", "cmo"]);
    let [first, second] = &mut replies[..] else {
        unreachable!()
    };
    let signed = sign_batch(
        &mut [
            Outgoing::Reply(first),
            Outgoing::Call(&mut call),
            Outgoing::Reply(second),
        ],
        "beta",
        &fleet.keys["beta"],
        |agent| agent == "cfo",
    );
    assert_eq!(
        signed,
        BatchSigned {
            leaves: 3,
            signatures: 1
        }
    );
    let roots = VerifiedRoots::new(8);
    for reply in &replies {
        verify_reply(reply, &fleet.ring, &fleet.placements).unwrap();
        verify_reply_cached(reply, &fleet.ring, &fleet.placements, &roots).unwrap();
    }
    cached(&fleet, &call, &roots).unwrap();
    assert_eq!(roots.counts(), (2, 1));

    // A tampered reply of the batch is refused, cache or not.
    let mut tampered = replies[1].clone();
    tampered.output = "0 EUR".into();
    assert_eq!(
        verify_reply_cached(&tampered, &fleet.ring, &fleet.placements, &roots),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // A reply's proof does not prove a hop, nor another reply.
    let mut borrowed = call;
    borrowed.hops[0].signature = replies[0].signature.clone();
    assert_eq!(
        verify(&fleet, &borrowed),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    let mut borrowed = replies[0].clone();
    borrowed.signature = replies[1].signature.clone();
    assert_eq!(
        verify_reply(&borrowed, &fleet.ring, &fleet.placements),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    // A truncated reply proof.
    let mut truncated = replies[0].clone();
    truncated.signature.as_mut().unwrap().batch.path.clear();
    assert!(matches!(
        verify_reply(&truncated, &fleet.ring, &fleet.placements),
        Err(ChainError::MalformedProof { hop: 0, .. })
    ));
}
