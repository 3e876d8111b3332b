use super::*;
use crate::codec::{Frame, decode_frame, encode_frame};
use crate::testing::NOW_MS;

const SKEW_MS: u64 = 30_000;

fn ops_key() -> HostKey {
    HostKey::from_secret_bytes(&[21; 32])
}

fn operators() -> KeyRing {
    KeyRing::from_hosts([
        ("ops", ops_key().public()),
        ("oncall", HostKey::from_secret_bytes(&[22; 32]).public()),
    ])
    .unwrap()
}

fn limits(now_ms: u64) -> OperatorLimits {
    OperatorLimits {
        now_ms,
        allowed_skew_ms: SKEW_MS,
        max_lifetime_ms: MAX_OPERATOR_LIFETIME_MS,
    }
}

fn every_command() -> Vec<OperatorCommand> {
    let run = RunId::parse("run_00000000000000000000000000000001").unwrap();
    vec![
        OperatorCommand::Status,
        OperatorCommand::Drain,
        OperatorCommand::Resume,
        OperatorCommand::Restart {
            agent: "cfo".into(),
        },
        OperatorCommand::Reload,
        OperatorCommand::Decide {
            run: run.clone(),
            approve: true,
        },
        OperatorCommand::Decide {
            run,
            approve: false,
        },
        OperatorCommand::Jobs {
            agent: None,
            limit: 100,
            cursor: None,
        },
        OperatorCommand::Jobs {
            agent: Some("cfo".into()),
            limit: 5,
            cursor: Some("1700000000000.run_00000000000000000000000000000001".into()),
        },
    ]
}

fn signed(command: OperatorCommand) -> OperatorRequest {
    let mut request = OperatorRequest::new("ops", "beta", command, NOW_MS);
    request.nonce = [7; 16];
    sign_operator_request(&mut request, &ops_key());
    request
}

fn check(request: &OperatorRequest, now_ms: u64) -> Result<(), OperatorRefusal> {
    verify_operator_request(request, &operators(), "beta", "ops", &limits(now_ms))
}

#[test]
fn canonical_bytes_start_with_their_own_domain_and_are_stable() {
    let request = signed(OperatorCommand::Status);
    let bytes = operator_canonical_bytes(&request);
    assert_eq!(&bytes[..8], &(OPERATOR_DOMAIN.len() as u64).to_be_bytes());
    assert_eq!(&bytes[8..8 + OPERATOR_DOMAIN.len()], OPERATOR_DOMAIN);
    assert_ne!(OPERATOR_DOMAIN, super::super::HOP_DOMAIN);
    assert_ne!(OPERATOR_DOMAIN, super::super::REPLY_DOMAIN);
    // The signature is not part of what it signs.
    let mut unsigned = request;
    unsigned.signature.clear();
    assert_eq!(operator_canonical_bytes(&unsigned), bytes);
}

#[test]
fn every_field_and_argument_changes_the_canonical_bytes() {
    let base = signed(OperatorCommand::Status);
    let mut variants: Vec<OperatorRequest> = Vec::new();
    let mut with = |edit: &dyn Fn(&mut OperatorRequest)| {
        let mut changed = base.clone();
        edit(&mut changed);
        variants.push(changed);
    };
    with(&|r| r.format += 1);
    with(&|r| r.operator = "oncall".into());
    with(&|r| r.host = "alpha".into());
    with(&|r| r.issued_at_ms += 1);
    with(&|r| r.expires_at_ms += 1);
    with(&|r| r.nonce[15] ^= 1);
    // Field boundaries cannot shift: moving a character from one field to the next changes
    // the bytes.
    with(&|r| {
        r.operator = "opsb".into();
        r.host = "eta".into();
    });
    for command in every_command().into_iter().skip(1) {
        with(&|r| r.command = command.clone());
    }
    // An absent argument and an empty one differ.
    with(&|r| {
        r.command = OperatorCommand::Jobs {
            agent: Some(String::new()),
            limit: 100,
            cursor: None,
        }
    });
    with(&|r| {
        r.command = OperatorCommand::Jobs {
            agent: None,
            limit: 100,
            cursor: Some(String::new()),
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    assert!(seen.insert(operator_canonical_bytes(&base)));
    for variant in &variants {
        assert!(
            seen.insert(operator_canonical_bytes(variant)),
            "two requests sign the same bytes: {variant:?}"
        );
    }
}

#[test]
fn a_signed_request_verifies_for_every_command() {
    for command in every_command() {
        let request = signed(command.clone());
        assert_eq!(check(&request, NOW_MS), Ok(()), "{command:?}");
        // It survives the codec.
        let frame = Frame::OperatorRequest(request.clone());
        let decoded = decode_frame(&encode_frame(&frame).unwrap()).unwrap();
        assert_eq!(decoded, frame);
    }
}

#[test]
fn a_request_signed_by_another_key_is_refused() {
    let host_key = HostKey::from_secret_bytes(&[1; 32]);
    let mut request = OperatorRequest::new("ops", "beta", OperatorCommand::Drain, NOW_MS);
    sign_operator_request(&mut request, &host_key);
    assert_eq!(
        check(&request, NOW_MS),
        Err(OperatorRefusal::BadSignature {
            operator: "ops".into()
        })
    );
    // Signed by a real operator, but not the one it names.
    let mut request = OperatorRequest::new("ops", "beta", OperatorCommand::Drain, NOW_MS);
    sign_operator_request(&mut request, &HostKey::from_secret_bytes(&[22; 32]));
    assert!(matches!(
        check(&request, NOW_MS),
        Err(OperatorRefusal::BadSignature { .. })
    ));
}

#[test]
fn a_tampered_request_is_refused() {
    for command in every_command() {
        let request = signed(command);
        let mut tampered = Vec::new();
        let mut t = request.clone();
        t.nonce[0] ^= 0x80;
        tampered.push(t);
        let mut t = request.clone();
        t.issued_at_ms += 1;
        tampered.push(t);
        let mut t = request.clone();
        t.expires_at_ms -= 1;
        tampered.push(t);
        let mut t = request.clone();
        t.command = match &request.command {
            OperatorCommand::Status => OperatorCommand::Drain,
            OperatorCommand::Restart { .. } => OperatorCommand::Restart {
                agent: "cmo".into(),
            },
            OperatorCommand::Decide { run, approve } => OperatorCommand::Decide {
                run: run.clone(),
                approve: !approve,
            },
            OperatorCommand::Jobs { agent, cursor, .. } => OperatorCommand::Jobs {
                agent: agent.clone(),
                limit: 1_000,
                cursor: cursor.clone(),
            },
            _ => OperatorCommand::Status,
        };
        tampered.push(t);
        let mut t = request.clone();
        t.signature[10] ^= 1;
        tampered.push(t);
        let mut t = request.clone();
        t.signature.truncate(63);
        tampered.push(t);
        let mut t = request.clone();
        t.signature.clear();
        tampered.push(t);
        for t in tampered {
            assert!(
                matches!(check(&t, NOW_MS), Err(OperatorRefusal::BadSignature { .. })),
                "{t:?}"
            );
        }
    }
}

#[test]
fn a_malleated_signature_is_refused() {
    // s + L (the group order) is the same signature to a lax verifier; verify_strict refuses
    // a non-canonical s.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut request = signed(OperatorCommand::Status);
    let mut carry = 0u16;
    for (i, l) in L.iter().enumerate() {
        let sum = u16::from(request.signature[32 + i]) + u16::from(*l) + carry;
        request.signature[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    assert!(matches!(
        check(&request, NOW_MS),
        Err(OperatorRefusal::BadSignature { .. })
    ));
}

#[test]
fn who_sends_it_and_where_it_goes_are_checked() {
    let request = signed(OperatorCommand::Status);
    assert_eq!(
        verify_operator_request(&request, &KeyRing::new(), "beta", "ops", &limits(NOW_MS)),
        Err(OperatorRefusal::UnknownOperator {
            operator: "ops".into()
        })
    );
    assert_eq!(
        verify_operator_request(&request, &operators(), "beta", "oncall", &limits(NOW_MS)),
        Err(OperatorRefusal::NotTheLinkPeer {
            signed_as: "ops".into(),
            link_peer: "oncall".into()
        })
    );
    assert_eq!(
        verify_operator_request(&request, &operators(), "alpha", "ops", &limits(NOW_MS)),
        Err(OperatorRefusal::WrongHost {
            target: "beta".into(),
            here: "alpha".into()
        })
    );
    let mut other_format = request;
    other_format.format = 2;
    sign_operator_request(&mut other_format, &ops_key());
    assert_eq!(
        check(&other_format, NOW_MS),
        Err(OperatorRefusal::WrongFormat {
            found: 2,
            expected: OPERATOR_FORMAT
        })
    );
}

#[test]
fn time_is_checked_with_the_skew() {
    let request = signed(OperatorCommand::Status);
    let expires = request.expires_at_ms;
    // Valid up to its expiry plus the skew, and not a millisecond longer.
    assert_eq!(check(&request, expires + SKEW_MS), Ok(()));
    assert_eq!(
        check(&request, expires + SKEW_MS + 1),
        Err(OperatorRefusal::Expired {
            expires_at_ms: expires,
            now_ms: expires + SKEW_MS + 1
        })
    );
    // Issued up to the skew ahead of the host's clock, and not a millisecond more.
    assert_eq!(check(&request, NOW_MS - SKEW_MS), Ok(()));
    assert_eq!(
        check(&request, NOW_MS - SKEW_MS - 1),
        Err(OperatorRefusal::NotYetValid {
            issued_at_ms: NOW_MS,
            now_ms: NOW_MS - SKEW_MS - 1
        })
    );
    // A lifetime beyond the bound is refused whatever the clock says, so no request is valid
    // for long.
    let mut long = signed(OperatorCommand::Status);
    long.expires_at_ms = long.issued_at_ms + MAX_OPERATOR_LIFETIME_MS + 1;
    sign_operator_request(&mut long, &ops_key());
    assert_eq!(
        check(&long, NOW_MS),
        Err(OperatorRefusal::LifetimeTooLong {
            lifetime_ms: MAX_OPERATOR_LIFETIME_MS + 1,
            limit_ms: MAX_OPERATOR_LIFETIME_MS
        })
    );
    let mut forever = signed(OperatorCommand::Status);
    forever.expires_at_ms = u64::MAX;
    sign_operator_request(&mut forever, &ops_key());
    assert!(matches!(
        check(&forever, NOW_MS),
        Err(OperatorRefusal::LifetimeTooLong { .. })
    ));
    // An expiry before the issue time is a zero lifetime: only the expiry decides.
    let mut backwards = signed(OperatorCommand::Status);
    backwards.expires_at_ms = 0;
    sign_operator_request(&mut backwards, &ops_key());
    assert!(matches!(
        check(&backwards, NOW_MS),
        Err(OperatorRefusal::Expired { .. })
    ));
}

#[test]
fn new_requests_have_fresh_nonces_and_the_bounded_lifetime() {
    let a = OperatorRequest::new("ops", "beta", OperatorCommand::Status, NOW_MS);
    let b = OperatorRequest::new("ops", "beta", OperatorCommand::Status, NOW_MS);
    assert_ne!(a.nonce, b.nonce);
    assert_eq!(a.format, OPERATOR_FORMAT);
    assert_eq!(a.expires_at_ms - a.issued_at_ms, MAX_OPERATOR_LIFETIME_MS);
    assert!(a.signature.is_empty());
}

#[test]
fn a_replay_is_refused_within_the_lifetime() {
    let mut window = ReplayWindow::default();
    let request = signed(OperatorCommand::Drain);
    assert_eq!(window.admit(&request, &limits(NOW_MS)), Ok(()));
    assert_eq!(
        window.admit(&request, &limits(NOW_MS + 1)),
        Err(OperatorRefusal::Replayed)
    );
    // Still refused at the last moment the request itself would be accepted.
    let last = request.expires_at_ms + SKEW_MS;
    assert_eq!(
        window.admit(&request, &limits(last)),
        Err(OperatorRefusal::Replayed)
    );
    // Another operator's request with the same nonce is its own.
    let mut other = request.clone();
    other.operator = "oncall".into();
    assert_eq!(window.admit(&other, &limits(NOW_MS)), Ok(()));
    // Another nonce is another request.
    let mut fresh = request.clone();
    fresh.nonce = [8; 16];
    assert_eq!(window.admit(&fresh, &limits(NOW_MS)), Ok(()));
    assert_eq!(window.len(), 3);
    // Once no copy could pass verification any more, the nonce is forgotten.
    assert_eq!(window.admit(&fresh, &limits(last + 1)), Ok(()));
    assert_eq!(window.len(), 1);
}

#[test]
fn a_full_window_refuses_until_nonces_expire() {
    let mut window = ReplayWindow::with_capacity(2);
    let mut request = signed(OperatorCommand::Status);
    for n in 0..2u8 {
        request.nonce = [n; 16];
        assert_eq!(window.admit(&request, &limits(NOW_MS)), Ok(()));
    }
    request.nonce = [9; 16];
    assert_eq!(
        window.admit(&request, &limits(NOW_MS)),
        Err(OperatorRefusal::ReplayWindowFull)
    );
    // The refused one was not remembered; the earlier ones still are.
    assert_eq!(window.len(), 2);
    request.nonce = [0; 16];
    assert_eq!(
        window.admit(&request, &limits(NOW_MS)),
        Err(OperatorRefusal::Replayed)
    );
    // After the earlier requests' lifetime, there is room again.
    let later = signed(OperatorCommand::Status).expires_at_ms + SKEW_MS + 1;
    request.nonce = [9; 16];
    assert_eq!(window.admit(&request, &limits(later)), Ok(()));
    assert!(!window.is_empty());
}

#[test]
fn every_refusal_has_a_unique_code_and_a_sentence() {
    let every = [
        OperatorRefusal::WrongFormat {
            found: 2,
            expected: 1,
        },
        OperatorRefusal::UnknownOperator {
            operator: "x".into(),
        },
        OperatorRefusal::NotTheLinkPeer {
            signed_as: "a".into(),
            link_peer: "b".into(),
        },
        OperatorRefusal::WrongHost {
            target: "a".into(),
            here: "b".into(),
        },
        OperatorRefusal::LifetimeTooLong {
            lifetime_ms: 2,
            limit_ms: 1,
        },
        OperatorRefusal::NotYetValid {
            issued_at_ms: 2,
            now_ms: 1,
        },
        OperatorRefusal::Expired {
            expires_at_ms: 1,
            now_ms: 2,
        },
        OperatorRefusal::BadSignature {
            operator: "ops".into(),
        },
        OperatorRefusal::Replayed,
        OperatorRefusal::ReplayWindowFull,
    ];
    let mut codes = std::collections::BTreeSet::new();
    for refusal in every {
        assert!(codes.insert(refusal.code()), "{refusal:?}");
        assert!(refusal.to_string().len() > 10);
        let frame = Frame::OperatorAnswer(OperatorAnswer::Refused(refusal));
        assert_eq!(decode_frame(&encode_frame(&frame).unwrap()).unwrap(), frame);
    }
}
