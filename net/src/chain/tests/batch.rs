//! Batch verification. `verify` in the parent module already checks, for every chain there,
//! that the batched answer equals the one-by-one answer; these tests aim at the inputs where
//! a bare batch would be looser than `verify_strict`.

use super::*;

use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
use curve25519_dalek::edwards::EdwardsPoint;
use curve25519_dalek::scalar::Scalar;
use sha2::Sha512;

/// The point of order 2.
fn order_two() -> EdwardsPoint {
    EIGHT_TORSION[4]
}

/// The secret scalar of a host key: ed25519's clamped first half of SHA-512 of the seed.
fn secret_scalar(key: &HostKey) -> Scalar {
    let expanded = Sha512::digest(key.secret_bytes());
    let mut lower = [0u8; 32];
    lower.copy_from_slice(&expanded[..32]);
    lower[0] &= 248;
    lower[31] &= 127;
    lower[31] |= 64;
    Scalar::from_bytes_mod_order(lower)
}

/// What a host holding `secret` can sign that an honest signer never would: the nonce point
/// R = nonce·B + `torsion` encoded as `r_bytes` gives, and s = nonce + H(R, A, M)·secret,
/// against the public key bytes `public`.
fn craft_signature(
    secret: Scalar,
    public: &[u8; 32],
    nonce: Scalar,
    torsion: EdwardsPoint,
    r_bytes: impl Fn(EdwardsPoint) -> [u8; 32],
    message: &[u8],
) -> [u8; 64] {
    let r = r_bytes(nonce * ED25519_BASEPOINT_POINT + torsion);
    let mut hash = Sha512::new();
    hash.update(r);
    hash.update(public);
    hash.update(message);
    let h = Scalar::from_hash(hash);
    let s = nonce + h * secret;
    let mut signature = [0u8; 64];
    signature[..32].copy_from_slice(&r);
    signature[32..].copy_from_slice(s.as_bytes());
    signature
}

/// The hop's crafted signature by the host serving its caller (see [`craft_signature`]).
fn craft_hop(
    fleet: &Fleet,
    envelope: &mut CallEnvelope,
    index: usize,
    nonce: Scalar,
    torsion: EdwardsPoint,
    r_bytes: impl Fn(EdwardsPoint) -> [u8; 32],
) {
    let host = fleet.placements[&envelope.hops[index].caller].clone();
    let key = &fleet.keys[&host];
    // A batch of one: the root is the hop's leaf.
    let root = leaf_hash(&hop_canonical_bytes(&envelope.hops[index]));
    let message = root_message(&root, 1);
    let signature = craft_signature(
        secret_scalar(key),
        &key.public().to_bytes(),
        nonce,
        torsion,
        r_bytes,
        &message,
    );
    envelope.hops[index].signature = Some(HopSignature {
        host,
        signature,
        batch: BatchProof {
            root,
            leaf_index: 0,
            leaf_count: 1,
            path: Vec::new(),
        },
    });
}

fn canonical(point: EdwardsPoint) -> [u8; 32] {
    point.compress().to_bytes()
}

/// What `ed25519_dalek::verify_batch` alone says of the chain's signatures.
fn bare_batch_accepts(ring: &KeyRing, envelope: &CallEnvelope) -> bool {
    let messages: Vec<Vec<u8>> = envelope
        .hops
        .iter()
        .map(|hop| {
            let proof = &hop.signature.as_ref().unwrap().batch;
            root_message(&proof.root, proof.leaf_count)
        })
        .collect();
    let messages: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
    let signatures: Vec<Signature> = envelope
        .hops
        .iter()
        .map(|hop| Signature::from_bytes(&hop.signature.as_ref().unwrap().signature))
        .collect();
    let keys: Vec<VerifyingKey> = envelope
        .hops
        .iter()
        .map(|hop| {
            *ring
                .key(&hop.signature.as_ref().unwrap().host)
                .unwrap()
                .verifying_key()
        })
        .collect();
    ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
}

#[test]
fn a_chain_of_several_signed_hops_verifies_in_one_batch() {
    let fleet = Fleet::standard();
    let roomy = ChainLimits {
        max_depth: 16,
        ..limits(NOW_MS)
    };
    for agents in [
        &["cmo", "cfo", "cdo", "ceo"][..],
        &[
            "cmo", "cfo", "cdo", "ceo", "cfo", "cmo", "cfo", "cdo", "cmo",
        ],
    ] {
        let envelope = fleet.chain(agents);
        assert!(bare_batch_accepts(&fleet.ring, &envelope));
        let verified =
            verify_chain_batched(&envelope, &fleet.ring, &fleet.placements, &roomy).unwrap();
        assert_eq!(verified.depth(), agents.len() - 1);
        assert_eq!(
            verify_chain(&envelope, &fleet.ring, &fleet.placements, &roomy),
            Ok(verified)
        );
    }
}

#[test]
fn one_forged_signature_in_the_middle_is_refused_naming_its_hop() {
    let fleet = Fleet::standard();
    let chain = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);

    // A bit flipped in the middle hop's scalar half: R is still a sound point, so the batch is
    // tried, fails, and the one-by-one pass names the hop.
    let mut envelope = chain.clone();
    envelope.hops[1].signature.as_mut().unwrap().signature[40] ^= 1;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 1 })
    );

    // The right host's genuine signature, over another hop: its proof does not lead from
    // this hop to the root it signed.
    let mut envelope = chain.clone();
    let other = fleet.chain(&["cmo", "cfo", "cdo"]);
    envelope.hops[1].signature = other.hops[1].signature.clone();
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::ProofMismatch { hop: 1 })
    );

    // Two bad hops: the first is named, as one-by-one checking would.
    envelope.hops[2].signature.as_mut().unwrap().signature[0] ^= 1;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::ProofMismatch { hop: 1 })
    );
    let mut envelope = chain;
    envelope.hops[1].signature.as_mut().unwrap().signature[40] ^= 1;
    envelope.hops[2].signature.as_mut().unwrap().signature[0] ^= 1;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 1 })
    );
}

#[test]
fn errors_come_in_hop_order_whatever_their_kind() {
    let fleet = Fleet::standard();
    let chain = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);

    // A bad signature before an unsigned hop is what one-by-one checking reports first.
    let mut envelope = chain.clone();
    envelope.hops[0].signature.as_mut().unwrap().signature[40] ^= 1;
    envelope.hops[2].signature = None;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 0 })
    );

    // An unsigned hop before a bad signature.
    let mut envelope = chain.clone();
    envelope.hops[0].signature = None;
    envelope.hops[2].signature.as_mut().unwrap().signature[40] ^= 1;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::Unsigned { hop: 0 })
    );

    // Good signatures, then a wrong signer: the signer is named.
    let mut envelope = chain;
    resign(&fleet, &mut envelope, 2, "alpha");
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::WrongSigner {
            hop: 2,
            expected: "gamma".into(),
            actual: "alpha".into(),
        })
    );
}

#[test]
fn a_small_order_r_is_refused_though_a_bare_batch_would_take_it() {
    // The signing host itself makes R the identity and s = H(R, A, M)·a: the batch equation
    // holds exactly, while `verify_strict` refuses a small-order R.
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);
    craft_hop(
        &fleet,
        &mut envelope,
        1,
        Scalar::ZERO,
        EdwardsPoint::default(),
        canonical,
    );
    assert!(bare_batch_accepts(&fleet.ring, &envelope));
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 1 })
    );

    // The same with the identity encoded non-canonically (y = p + 1).
    let mut non_canonical = [0xff; 32];
    non_canonical[0] = 0xee;
    non_canonical[31] = 0x7f;
    assert_eq!(
        CompressedEdwardsY(non_canonical).decompress(),
        Some(EdwardsPoint::default())
    );
    craft_hop(
        &fleet,
        &mut envelope,
        1,
        Scalar::ZERO,
        EdwardsPoint::default(),
        |_| non_canonical,
    );
    assert!(bare_batch_accepts(&fleet.ring, &envelope));
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 1 })
    );
}

#[test]
fn an_r_with_a_small_order_component_is_refused_though_a_bare_batch_may_take_it() {
    // R = r·B + T with T of order 2 and s = r + H(R, A, M)·a: the batch equation is off by
    // z·T, which vanishes whenever the batch's coefficient z is even. Try nonces until it is.
    let fleet = Fleet::standard();
    let chain = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);
    let mut fooled_the_bare_batch = false;
    for nonce in 1..64u64 {
        let mut envelope = chain.clone();
        craft_hop(
            &fleet,
            &mut envelope,
            2,
            Scalar::from(nonce),
            order_two(),
            canonical,
        );
        fooled_the_bare_batch |= bare_batch_accepts(&fleet.ring, &envelope);
        assert_eq!(
            verify(&fleet, &envelope),
            Err(ChainError::BadSignature { hop: 2 })
        );
        if fooled_the_bare_batch && nonce >= 4 {
            break;
        }
    }
    assert!(fooled_the_bare_batch);
}

#[test]
fn a_pinned_key_with_a_small_order_component_is_never_batched() {
    // Alpha's pinned key is A' = a·B + T (T of order 2), yet alpha signs with a. Then
    // s·B − H·A' = R − H·T: `verify_strict` accepts exactly when H is even, and a bare batch
    // also whenever its coefficient is even.
    let fleet = Fleet::standard();
    let secret = secret_scalar(&fleet.keys["alpha"]);
    let mixed = secret * ED25519_BASEPOINT_POINT + order_two();
    let mixed_bytes = canonical(mixed);
    let mut ring = fleet.ring.clone();
    ring.insert("alpha", PublicKey::from_bytes(&mixed_bytes).unwrap())
        .unwrap();
    assert_eq!(ring.pinned("alpha").map(|(_, prime)| prime), Some(false));
    assert_eq!(ring.pinned("beta").map(|(_, prime)| prime), Some(true));

    let chain = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);
    let (mut accepted, mut fooled_the_bare_batch) = (false, false);
    for nonce in 1..64u64 {
        let mut envelope = chain.clone();
        let root = leaf_hash(&hop_canonical_bytes(&envelope.hops[0]));
        let message = root_message(&root, 1);
        let signature = craft_signature(
            secret,
            &mixed_bytes,
            Scalar::from(nonce),
            EdwardsPoint::default(),
            canonical,
            &message,
        );
        envelope.hops[0].signature = Some(HopSignature {
            host: "alpha".into(),
            signature,
            batch: BatchProof {
                root,
                leaf_index: 0,
                leaf_count: 1,
                path: Vec::new(),
            },
        });
        let strict = ring
            .key("alpha")
            .unwrap()
            .verifying_key()
            .verify_strict(&message, &Signature::from_bytes(&signature));
        let verified = verify_with(&envelope, &ring, &fleet.placements, NOW_MS);
        if strict.is_ok() {
            accepted = true;
            assert!(verified.is_ok());
        } else {
            fooled_the_bare_batch |= bare_batch_accepts(&ring, &envelope);
            assert_eq!(verified, Err(ChainError::BadSignature { hop: 0 }));
        }
        if accepted && fooled_the_bare_batch {
            break;
        }
    }
    assert!(accepted && fooled_the_bare_batch);
}

#[test]
fn a_weak_key_cannot_be_pinned() {
    // `verify_strict` refuses every signature under a small-order key; such a key never
    // reaches verification, since it cannot be parsed into a `PublicKey`.
    for point in EIGHT_TORSION {
        assert_eq!(PublicKey::from_bytes(&canonical(point)), None);
    }
}
