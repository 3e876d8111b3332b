use super::*;
use crate::chain::new_reply;
use crate::chain::operator::{
    OPERATOR_FORMAT, OperatorAnswer, OperatorCommand, OperatorRefusal, OperatorRequest,
};
use crate::envelope::ReplyStatus;
use crate::testing::{Fleet, budget_of_hop, trace_of_hop};

fn sample_frames() -> Vec<Frame> {
    let fleet = Fleet::standard();
    // Every optional part of a hop set: a trace context and an allowance of a tree budget.
    let mut envelope = fleet.unsigned_chain_with(
        &["cmo", "cfo", "cdo"],
        |index| Some(trace_of_hop(index)),
        |index| Some(budget_of_hop(index)),
    );
    fleet.sign_all(&mut envelope);
    let last = envelope.hops.last().unwrap().clone();
    let mut reply = new_reply(&last, ReplyStatus::Succeeded, "August spend: 12 400 EUR");
    reply.tree_spent = Some(consort_core::TreeSpend {
        runs: 2,
        tokens: 1_234,
    });
    vec![
        Frame::Call(envelope),
        Frame::Reply(reply),
        Frame::Accepted {
            child_run: last.child_run.clone(),
            existing: true,
        },
        Frame::Refused {
            reason: RefusalReason::DepthLimit,
            text: "call chain depth limit (4) reached: answer with what you have".into(),
        },
        Frame::CheckRun {
            caller: "cmo".into(),
            callee: "cfo".into(),
            parent_run: last.parent_run.clone(),
            child_run: last.child_run.clone(),
        },
        Frame::RunStatus {
            child_run: last.child_run,
            state: RemoteRunState::Blocked,
            output: None,
            hop_depth: 1,
            created_at_ms: 1_700_000_000_000,
            input: "2026-08".into(),
        },
        Frame::Ack,
        Frame::ResendReply {
            callee: "cfo".into(),
            child_run: RunId::random(),
        },
        Frame::PresenceQuery {
            nonce: [9; 16],
            agents: vec!["cfo".into(), "cdo".into()],
        },
        Frame::PresenceReport(PresenceReport {
            host: "beta".into(),
            nonce: [9; 16],
            observed_at_ms: 1_700_000_000_000,
            reports: vec![consort_core::directory::AgentReport {
                agent: "cfo".into(),
                actor: consort_core::directory::ActorState::Up,
                work: consort_core::directory::WorkState {
                    running: 1,
                    oldest_change_ms: Some(1_699_999_999_000),
                    ..Default::default()
                },
                incarnation: "1700000000000-1".into(),
            }],
            signature: vec![0; 64],
        }),
        Frame::Observe {
            asker: Some("cmo".into()),
            agent: "cfo".into(),
            run: Some(RunId::random()),
            source: ExcerptSource::Events,
            lines: 20,
        },
        Frame::WaitRun {
            asker: None,
            agent: "cfo".into(),
            run: RunId::random(),
            until: WaitUntil::Settled,
            after_seq: 7,
            incarnation: Some("1700000000000-1".into()),
            wait_ms: 5_000,
        },
        Frame::Deliver {
            asker: Some("cmo".into()),
            agent: "cfo".into(),
            run: None,
            delivery_id: "d-1".into(),
            text: "please close August".into(),
        },
        Frame::DeliveryStatus {
            asker: None,
            agent: "cfo".into(),
            run: Some(RunId::random()),
            delivery_id: "d-1".into(),
        },
        Frame::DirectoryAnswer {
            json: "{\"outcome\":\"timeout\"}".into(),
        },
        Frame::OperatorRequest(OperatorRequest {
            format: OPERATOR_FORMAT,
            operator: "ops".into(),
            host: "beta".into(),
            command: OperatorCommand::Jobs {
                agent: Some("cfo".into()),
                limit: 20,
                cursor: None,
            },
            issued_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_000_060_000,
            nonce: [3; 16],
            signature: vec![0; 64],
        }),
        Frame::OperatorAnswer(OperatorAnswer::Done {
            json: "{\"draining\":true}".into(),
        }),
        Frame::OperatorAnswer(OperatorAnswer::Refused(OperatorRefusal::Replayed)),
    ]
}

#[test]
fn every_frame_round_trips() {
    for frame in sample_frames() {
        let bytes = encode_frame(&frame).unwrap();
        assert_eq!(decode_frame(&bytes).unwrap(), frame);
    }
}

#[test]
fn envelopes_round_trip() {
    let envelope = Fleet::standard().chain(&["cmo", "cfo"]);
    assert_eq!(
        decode_call(&encode_call(&envelope).unwrap()).unwrap(),
        envelope
    );
    let reply = new_reply(&envelope.hops[0], ReplyStatus::Failed, "no access");
    assert_eq!(decode_reply(&encode_reply(&reply).unwrap()).unwrap(), reply);
}

#[test]
fn the_configuration_is_big_endian_fixed_width() {
    // Frame::Accepted is variant 2: a u32 tag, then the run id as a u64 length and its bytes.
    let run = RunId::random();
    let bytes = encode_frame(&Frame::Accepted {
        child_run: run.clone(),
        existing: false,
    })
    .unwrap();
    assert_eq!(&bytes[..4], &[0, 0, 0, 2]);
    assert_eq!(&bytes[4..12], &36u64.to_be_bytes());
    assert_eq!(&bytes[12..48], run.as_str().as_bytes());
    assert_eq!(&bytes[48..], &[0]);
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    for frame in sample_frames() {
        let bytes = encode_frame(&frame).unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(
                decode_frame(&bytes[..cut]),
                Err(CodecError::Truncated),
                "{frame:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let mut bytes = encode_frame(&Frame::Ack).unwrap();
    bytes.extend_from_slice(&[0, 0]);
    assert_eq!(
        decode_frame(&bytes),
        Err(CodecError::TrailingBytes { extra: 2 })
    );
}

#[test]
fn a_hostile_length_prefix_is_refused_without_allocating() {
    // Frame::Refused { reason: NotAccepted, text } with a text claiming a huge length. If the
    // decoder allocated what the prefix claims, these would abort the test process.
    for claimed in [u64::MAX, 1 << 40, (MAX_FRAME as u64) + 1] {
        let mut bytes = vec![0, 0, 0, 3, 0, 0, 0, 0];
        bytes.extend_from_slice(&claimed.to_be_bytes());
        bytes.extend_from_slice(b"short");
        assert_eq!(
            decode_frame(&bytes),
            Err(CodecError::TooLarge { limit: MAX_FRAME }),
            "claimed {claimed}"
        );
    }
    // A claimed hop count in a Call: a u32 tag, a u16 version, then the Vec length.
    let mut bytes = vec![0, 0, 0, 0];
    bytes.extend_from_slice(&ENVELOPE_VERSION.to_be_bytes());
    bytes.extend_from_slice(&u64::MAX.to_be_bytes());
    assert!(matches!(
        decode_frame(&bytes),
        Err(CodecError::TooLarge { .. } | CodecError::Truncated)
    ));
    // A claim within the limit but beyond the bytes present is simply truncated.
    let mut bytes = vec![0, 0, 0, 3, 0, 0, 0, 0];
    bytes.extend_from_slice(&1000u64.to_be_bytes());
    assert_eq!(decode_frame(&bytes), Err(CodecError::Truncated));
}

#[test]
fn oversized_input_is_refused_unread() {
    let bytes = vec![0u8; MAX_FRAME + 1];
    assert_eq!(
        decode_frame(&bytes),
        Err(CodecError::TooLarge { limit: MAX_FRAME })
    );
    let huge = Frame::Refused {
        reason: RefusalReason::Internal,
        text: "x".repeat(MAX_FRAME),
    };
    assert_eq!(
        encode_frame(&huge),
        Err(CodecError::TooLarge { limit: MAX_FRAME })
    );
}

#[test]
fn garbage_is_refused_as_garbage() {
    // An unknown frame tag.
    assert!(matches!(
        decode_frame(&[0, 0, 0, 99]),
        Err(CodecError::Garbage(_))
    ));
    // An invalid bool in Accepted.
    let mut bytes = encode_frame(&Frame::Accepted {
        child_run: RunId::random(),
        existing: true,
    })
    .unwrap();
    *bytes.last_mut().unwrap() = 7;
    assert!(matches!(decode_frame(&bytes), Err(CodecError::Garbage(_))));
    // A run id that is not one.
    let mut bytes = vec![0, 0, 0, 2];
    bytes.extend_from_slice(&3u64.to_be_bytes());
    bytes.extend_from_slice(b"abc\x00");
    assert!(matches!(decode_frame(&bytes), Err(CodecError::Garbage(_))));
    // Invalid UTF-8 in a text.
    let mut bytes = vec![0, 0, 0, 3, 0, 0, 0, 0];
    bytes.extend_from_slice(&2u64.to_be_bytes());
    bytes.extend_from_slice(&[0xff, 0xfe]);
    assert!(matches!(decode_frame(&bytes), Err(CodecError::Garbage(_))));
}

#[test]
fn other_versions_are_refused() {
    let mut envelope = Fleet::standard().chain(&["cmo", "cfo"]);
    envelope.version = ENVELOPE_VERSION + 1;
    let bytes = encode_call(&envelope).unwrap();
    let wrong = CodecError::WrongVersion {
        found: ENVELOPE_VERSION + 1,
        expected: ENVELOPE_VERSION,
    };
    assert_eq!(decode_call(&bytes), Err(wrong.clone()));
    assert_eq!(
        decode_frame(&encode_frame(&Frame::Call(envelope.clone())).unwrap()),
        Err(wrong)
    );

    let mut reply = new_reply(&envelope.hops[0], ReplyStatus::Succeeded, "ok");
    reply.version = 0;
    assert!(matches!(
        decode_reply(&encode_reply(&reply).unwrap()),
        Err(CodecError::WrongVersion { found: 0, .. })
    ));
    assert!(matches!(
        decode_frame(&encode_frame(&Frame::Reply(reply)).unwrap()),
        Err(CodecError::WrongVersion { found: 0, .. })
    ));
}

/// A call frame exactly as a version 3 build encoded it: hops signed alone, no batch proof.
fn version_3_call_frame(envelope: &CallEnvelope) -> Vec<u8> {
    #[derive(Serialize)]
    struct V3Signature<'a> {
        host: &'a str,
        #[serde(with = "serde_bytes")]
        signature: [u8; 64],
    }
    #[derive(Serialize)]
    struct V3Hop<'a> {
        caller: &'a str,
        callee: &'a str,
        parent_run: &'a RunId,
        child_run: &'a RunId,
        tool_use_id: &'a str,
        issued_at_ms: u64,
        expires_at_ms: u64,
        #[serde(with = "serde_bytes")]
        input_digest: [u8; 32],
        #[serde(with = "serde_bytes")]
        prev_digest: [u8; 32],
        origin: &'a Option<consort_core::visibility::Origin>,
        signature: Option<V3Signature<'a>>,
    }
    #[derive(Serialize)]
    enum V3Frame<'a> {
        Call {
            version: u16,
            hops: Vec<V3Hop<'a>>,
            input: &'a str,
        },
    }
    let hops = envelope
        .hops
        .iter()
        .map(|hop| V3Hop {
            caller: &hop.caller,
            callee: &hop.callee,
            parent_run: &hop.parent_run,
            child_run: &hop.child_run,
            tool_use_id: &hop.tool_use_id,
            issued_at_ms: hop.issued_at_ms,
            expires_at_ms: hop.expires_at_ms,
            input_digest: hop.input_digest,
            prev_digest: hop.prev_digest,
            origin: &hop.origin,
            signature: hop.signature.as_ref().map(|signature| V3Signature {
                host: &signature.host,
                signature: signature.signature,
            }),
        })
        .collect();
    bincode::serde::encode_to_vec(
        V3Frame::Call {
            version: 3,
            hops,
            input: &envelope.input,
        },
        WIRE_CONFIG,
    )
    .unwrap()
}

#[test]
fn a_version_3_envelope_is_refused_as_its_version_not_as_garbage() {
    let envelope = Fleet::standard().chain(&["cmo", "cfo"]);
    let bytes = version_3_call_frame(&envelope);
    let wrong = CodecError::WrongVersion {
        found: 3,
        expected: ENVELOPE_VERSION,
    };
    assert_eq!(decode_frame(&bytes), Err(wrong.clone()));
    // The same envelope without the frame's tag.
    assert_eq!(decode_call(&bytes[4..]), Err(wrong));
}

/// A call frame exactly as a version 4 build encoded it: batch proofs, no trace context.
fn version_4_call_frame(envelope: &CallEnvelope) -> Vec<u8> {
    #[derive(Serialize)]
    struct V4Hop<'a> {
        caller: &'a str,
        callee: &'a str,
        parent_run: &'a RunId,
        child_run: &'a RunId,
        tool_use_id: &'a str,
        issued_at_ms: u64,
        expires_at_ms: u64,
        #[serde(with = "serde_bytes")]
        input_digest: [u8; 32],
        #[serde(with = "serde_bytes")]
        prev_digest: [u8; 32],
        origin: &'a Option<consort_core::visibility::Origin>,
        signature: &'a Option<crate::envelope::HopSignature>,
    }
    #[derive(Serialize)]
    enum V4Frame<'a> {
        Call {
            version: u16,
            hops: Vec<V4Hop<'a>>,
            input: &'a str,
        },
    }
    let hops = envelope
        .hops
        .iter()
        .map(|hop| V4Hop {
            caller: &hop.caller,
            callee: &hop.callee,
            parent_run: &hop.parent_run,
            child_run: &hop.child_run,
            tool_use_id: &hop.tool_use_id,
            issued_at_ms: hop.issued_at_ms,
            expires_at_ms: hop.expires_at_ms,
            input_digest: hop.input_digest,
            prev_digest: hop.prev_digest,
            origin: &hop.origin,
            signature: &hop.signature,
        })
        .collect();
    bincode::serde::encode_to_vec(
        V4Frame::Call {
            version: 4,
            hops,
            input: &envelope.input,
        },
        WIRE_CONFIG,
    )
    .unwrap()
}

#[test]
fn a_version_4_envelope_is_refused_as_its_version_not_as_garbage() {
    let envelope = Fleet::standard().chain(&["cmo", "cfo"]);
    let bytes = version_4_call_frame(&envelope);
    let wrong = CodecError::WrongVersion {
        found: 4,
        expected: ENVELOPE_VERSION,
    };
    assert_eq!(decode_frame(&bytes), Err(wrong.clone()));
    assert_eq!(decode_call(&bytes[4..]), Err(wrong));
}

/// A call frame exactly as a version 5 build encoded it: trace contexts, no allowances.
fn version_5_call_frame(envelope: &CallEnvelope) -> Vec<u8> {
    #[derive(Serialize)]
    struct V5Hop<'a> {
        caller: &'a str,
        callee: &'a str,
        parent_run: &'a RunId,
        child_run: &'a RunId,
        tool_use_id: &'a str,
        issued_at_ms: u64,
        expires_at_ms: u64,
        #[serde(with = "serde_bytes")]
        input_digest: [u8; 32],
        #[serde(with = "serde_bytes")]
        prev_digest: [u8; 32],
        origin: &'a Option<consort_core::visibility::Origin>,
        trace: &'a Option<crate::trace_context::TraceContext>,
        signature: &'a Option<crate::envelope::HopSignature>,
    }
    #[derive(Serialize)]
    enum V5Frame<'a> {
        Call {
            version: u16,
            hops: Vec<V5Hop<'a>>,
            input: &'a str,
        },
    }
    let hops = envelope
        .hops
        .iter()
        .map(|hop| V5Hop {
            caller: &hop.caller,
            callee: &hop.callee,
            parent_run: &hop.parent_run,
            child_run: &hop.child_run,
            tool_use_id: &hop.tool_use_id,
            issued_at_ms: hop.issued_at_ms,
            expires_at_ms: hop.expires_at_ms,
            input_digest: hop.input_digest,
            prev_digest: hop.prev_digest,
            origin: &hop.origin,
            trace: &hop.trace,
            signature: &hop.signature,
        })
        .collect();
    bincode::serde::encode_to_vec(
        V5Frame::Call {
            version: 5,
            hops,
            input: &envelope.input,
        },
        WIRE_CONFIG,
    )
    .unwrap()
}

#[test]
fn a_version_5_envelope_is_refused_as_its_version_not_as_garbage() {
    let envelope = Fleet::standard().traced_chain(&["cmo", "cfo"]);
    let bytes = version_5_call_frame(&envelope);
    let wrong = CodecError::WrongVersion {
        found: 5,
        expected: ENVELOPE_VERSION,
    };
    assert_eq!(decode_frame(&bytes), Err(wrong.clone()));
    assert_eq!(decode_call(&bytes[4..]), Err(wrong));
}

#[test]
fn an_allowance_and_a_trees_spend_survive_the_wire() {
    let envelope = Fleet::standard().budgeted_chain(&["cmo", "cfo", "cdo"]);
    let decoded = decode_call(&encode_call(&envelope).unwrap()).unwrap();
    assert_eq!(decoded, envelope);
    assert_eq!(
        decoded
            .hops
            .iter()
            .map(|hop| hop.budget)
            .collect::<Vec<_>>(),
        [Some(budget_of_hop(0)), Some(budget_of_hop(1))]
    );
    // A budget with counts left open encodes each one (bincode skips nothing).
    let mut open = Fleet::standard().unsigned_chain_with(
        &["cmo", "cfo"],
        |_| None,
        |_| {
            Some(consort_core::TreeBudget {
                max_runs: Some(3),
                ..Default::default()
            })
        },
    );
    Fleet::standard().sign_all(&mut open);
    assert_eq!(decode_call(&encode_call(&open).unwrap()).unwrap(), open);
    let mut reply = new_reply(&envelope.hops[1], ReplyStatus::Failed, "spent");
    reply.tree_spent = Some(consort_core::TreeSpend { runs: 1, tokens: 7 });
    assert_eq!(decode_reply(&encode_reply(&reply).unwrap()).unwrap(), reply);
}

#[test]
fn a_trace_context_survives_the_wire() {
    let envelope = Fleet::standard().traced_chain(&["cmo", "cfo", "cdo"]);
    let decoded = decode_call(&encode_call(&envelope).unwrap()).unwrap();
    assert_eq!(decoded, envelope);
    assert!(decoded.hops.iter().all(|hop| hop.trace.is_some()));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap stand-in for the fuzz target: mutate real frames byte by byte.
    for frame in sample_frames() {
        let bytes = encode_frame(&frame).unwrap();
        for index in 0..bytes.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut mutated = bytes.clone();
                mutated[index] = value;
                let _ = decode_frame(&mutated);
            }
        }
    }
}

/// Writes the fuzz corpus seeds (run with `--ignored` to refresh net/fuzz/corpus).
#[test]
#[ignore]
fn write_fuzz_corpus_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_frame");
    std::fs::create_dir_all(&dir).unwrap();
    for (index, frame) in sample_frames().iter().enumerate() {
        std::fs::write(
            dir.join(format!("seed_{index}")),
            encode_frame(frame).unwrap(),
        )
        .unwrap();
    }
}
