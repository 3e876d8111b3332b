//! Bad input against a real served host (QUIC link, SQLite stores), in-process: the test
//! plays the other hosts of the fleet with hand-crafted frames. Each bad input is refused with
//! a typed reason, creates nothing, and the link and host keep serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use consort_actors::run::now_ms;
use consort_actors::visibility::Origin;
use consort_fleet::{ServeOptions, ServedHost};
use consort_net::{
    CallEnvelope, Frame, HostKey, KeyRing, LinkConfig, LinkEndpoint, LinkError, MAX_FRAME, NextHop,
    RefusalReason, ReplyStatus, RunId, encode_frame,
};

mod support;

use support::{agent, free_port};

struct Setup {
    _dir: tempfile::TempDir,
    beta: ServedHost,
    alpha_key: HostKey,
    beta_key: HostKey,
    /// A third host of the fleet, serving an agent of its own: a trusted peer that must still
    /// not relay calls of agents it does not serve.
    gamma_key: HostKey,
    ring: KeyRing,
}

/// alpha serves cmo (played by the test), beta serves cfo (a real host).
async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    agent(
        root,
        "cmo",
        "name: cmo\nagents: {can_call: [cfo], accept_from: [cfo]}\nmodel:\n  script: []\n",
    );
    agent(
        root,
        "cfo",
        "name: cfo\nagents: {accept_from: [cmo], can_call: [cmo]}\nmodel:\n  script:\n    - answer: \"ok {input}\"\n",
    );
    agent(
        root,
        "aux",
        "name: aux\nagents: {can_call: [cfo]}\nmodel:\n  script: []\n",
    );
    let alpha_key = HostKey::generate();
    let beta_key = HostKey::generate();
    let gamma_key = HostKey::generate();
    std::fs::create_dir_all(root.join("keys")).unwrap();
    beta_key.write_new(&root.join("keys/beta.key")).unwrap();
    let yaml = format!(
        "hosts:\n  - name: alpha\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cmo]\n  - name: beta\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cfo]\n  - name: gamma\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/aux]\n",
        free_port(),
        alpha_key.public(),
        free_port(),
        beta_key.public(),
        free_port(),
        gamma_key.public()
    );
    std::fs::write(root.join("fleet.yaml"), yaml).unwrap();
    let beta = ServedHost::start(ServeOptions::new(
        root.join("fleet.yaml"),
        "beta",
        root.join("data"),
    ))
    .await
    .unwrap();
    let mut ring = KeyRing::new();
    ring.insert("alpha", alpha_key.public()).unwrap();
    ring.insert("beta", beta_key.public()).unwrap();
    ring.insert("gamma", gamma_key.public()).unwrap();
    Setup {
        _dir: dir,
        beta,
        alpha_key,
        beta_key,
        gamma_key,
        ring,
    }
}

fn client(name: &str, key: &HostKey, ring: KeyRing) -> LinkEndpoint {
    let handler = |_peer: String, _frame: Frame| async { Frame::Ack };
    LinkEndpoint::bind_with_config(
        "127.0.0.1:0".parse().unwrap(),
        name,
        key.clone(),
        ring,
        Arc::new(handler),
        LinkConfig {
            dial_timeout: Duration::from_secs(2),
            ..LinkConfig::default()
        },
    )
    .unwrap()
}

fn call(input: &str, tool_use_id: &str, issued: u64, expires: u64) -> CallEnvelope {
    let parent = RunId::random();
    consort_net::new_call(
        &Origin::Absent,
        NextHop {
            caller: "cmo",
            callee: "cfo",
            parent_run: &parent,
            tool_use_id,
            input,
            issued_at_ms: issued,
            expires_at_ms: expires,
            trace: None,
        },
    )
}

fn signed(s: &Setup, mut envelope: CallEnvelope) -> CallEnvelope {
    consort_net::sign_pending_hops(&mut envelope, "alpha", &s.alpha_key, |a| a == "cmo");
    consort_net::sign_pending_hops(&mut envelope, "beta", &s.beta_key, |a| a == "cfo");
    envelope
}

fn reason(frame: &Frame) -> RefusalReason {
    match frame {
        Frame::Refused { reason, .. } => *reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn runs(s: &Setup) -> usize {
    s.beta.host.jobs(None).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_typed_and_changes_nothing() {
    let s = setup().await;
    let addr: SocketAddr = s.beta.link_addr;
    let alpha = client("alpha", &s.alpha_key, s.ring.clone());
    let now = now_ms();

    // Garbage, truncated and oversized frames.
    let garbage = alpha
        .request_bytes("beta", addr, b"\xff\xfe garbage")
        .await
        .unwrap();
    assert_eq!(reason(&garbage), RefusalReason::Malformed);
    let good = signed(&s, call("2026-08", "tu_ok", now, now + 60_000));
    let bytes = encode_frame(&Frame::Call(good.clone())).unwrap();
    let truncated = alpha
        .request_bytes("beta", addr, &bytes[..bytes.len() / 2])
        .await
        .unwrap();
    assert_eq!(reason(&truncated), RefusalReason::Malformed);
    let oversized = alpha
        .request_bytes("beta", addr, &vec![0u8; MAX_FRAME + 10])
        .await
        .unwrap();
    assert_eq!(reason(&oversized), RefusalReason::Malformed);

    // A tampered input.
    let mut tampered = good.clone();
    tampered.input = "2026-09".into();
    let answer = alpha
        .request("beta", addr, &Frame::Call(tampered))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);

    // A tampered origin: alpha signed a call for nobody; it now claims to act for `api:root`.
    let mut laundered = good.clone();
    laundered.hops[0].origin = Some(Origin::Present(consort_actors::visibility::Principal::Api(
        "root".into(),
    )));
    let answer = alpha
        .request("beta", addr, &Frame::Call(laundered))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);

    // A forged hop: signed by a key that is not alpha's.
    let mut forged = call("2026-08", "tu_forged", now, now + 60_000);
    consort_net::sign_pending_hops(&mut forged, "alpha", &HostKey::generate(), |_| true);
    let answer = alpha
        .request("beta", addr, &Frame::Call(forged))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);

    // A hop of cmo signed by beta (wrong signer for the placement).
    let mut misplaced = call("2026-08", "tu_misplaced", now, now + 60_000);
    consort_net::sign_pending_hops(&mut misplaced, "beta", &s.beta_key, |_| true);
    let answer = alpha
        .request("beta", addr, &Frame::Call(misplaced))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);

    // An expired envelope.
    let expired = signed(&s, call("2026-08", "tu_old", now - 900_000, now - 600_000));
    let answer = alpha
        .request("beta", addr, &Frame::Call(expired))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::Expired);

    // Five hops (cmo -> cfo -> cmo -> cfo -> cmo -> cfo), each correctly signed: the chain is
    // as deep as it is long, whatever anybody claims; the receiver refuses the fifth hop.
    let mut deep = call("x", "tu_d0", now, now + 60_000);
    for i in 1..5 {
        let last = deep.hops.last().unwrap().clone();
        let (caller, callee) = if i % 2 == 1 {
            ("cfo", "cmo")
        } else {
            ("cmo", "cfo")
        };
        deep = consort_net::extend(
            &deep,
            NextHop {
                caller,
                callee,
                parent_run: &last.child_run,
                tool_use_id: &format!("tu_d{i}"),
                input: "x",
                issued_at_ms: now,
                expires_at_ms: now + 60_000,
                trace: None,
            },
        )
        .unwrap();
    }
    assert_eq!(deep.depth(), 5);
    let deep = signed(&s, deep);
    let answer = alpha
        .request("beta", addr, &Frame::Call(deep))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::DepthLimit);

    // A reply for a call never placed (cfo placed nothing).
    let parent = RunId::random();
    let mut reply = consort_net::new_reply(
        &consort_net::first_hop(
            &Origin::Absent,
            NextHop {
                caller: "cfo",
                callee: "cmo",
                parent_run: &parent,
                tool_use_id: "tu_never",
                input: "x",
                issued_at_ms: now,
                expires_at_ms: now + 60_000,
                trace: None,
            },
        ),
        ReplyStatus::Succeeded,
        "forged answer",
    );
    consort_net::sign_reply(&mut reply, "alpha", &s.alpha_key);
    let answer = alpha
        .request("beta", addr, &Frame::Reply(reply.clone()))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::UnknownRun);
    // ... and one with a bad signature.
    reply.output = "tampered".into();
    let answer = alpha
        .request("beta", addr, &Frame::Reply(reply))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);

    // check_run and a reply resend for runs alpha never placed.
    let answer = alpha
        .request(
            "beta",
            addr,
            &Frame::CheckRun {
                caller: "cmo".into(),
                callee: "cfo".into(),
                parent_run: RunId::random(),
                child_run: RunId::random(),
            },
        )
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::UnknownRun);
    let answer = alpha
        .request(
            "beta",
            addr,
            &Frame::ResendReply {
                callee: "cfo".into(),
                child_run: RunId::random(),
            },
        )
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::UnknownRun);
    // A response frame sent as a request.
    let answer = alpha.request("beta", addr, &Frame::Ack).await.unwrap();
    assert_eq!(reason(&answer), RefusalReason::Malformed);

    // A correctly signed call of alpha's cmo, relayed by gamma (a trusted host of the fleet
    // that does not serve cmo): the host that sends a hop must serve its caller.
    let gamma = client("gamma", &s.gamma_key, s.ring.clone());
    let relayed = signed(&s, call("2026-08", "tu_relayed", now, now + 60_000));
    let answer = gamma
        .request("beta", addr, &Frame::Call(relayed))
        .await
        .unwrap();
    assert_eq!(reason(&answer), RefusalReason::BadChain);
    match &answer {
        Frame::Refused { text, .. } => assert!(text.contains("not served by host gamma"), "{text}"),
        other => panic!("{other:?}"),
    }

    assert_eq!(runs(&s).await, 0, "no bad input created a run");

    // An unknown host and a host presenting the wrong key are refused at the handshake.
    let stranger = client("delta", &HostKey::generate(), s.ring.clone());
    let refused = stranger
        .request("beta", addr, &Frame::Call(good.clone()))
        .await;
    assert!(
        matches!(refused, Err(LinkError::Unreachable { .. })),
        "{refused:?}"
    );
    let impostor = client("alpha", &HostKey::generate(), s.ring.clone());
    let refused = impostor
        .request("beta", addr, &Frame::Call(good.clone()))
        .await;
    assert!(
        matches!(refused, Err(LinkError::Unreachable { .. })),
        "{refused:?}"
    );
    assert_eq!(runs(&s).await, 0);

    // The same link still serves a good call; a replay of it finds the same run.
    let child = good.hops[0].child_run.clone();
    let answer = alpha
        .request("beta", addr, &Frame::Call(good.clone()))
        .await
        .unwrap();
    assert_eq!(
        answer,
        Frame::Accepted {
            child_run: child.clone(),
            existing: false
        }
    );
    let again = alpha
        .request("beta", addr, &Frame::Call(good))
        .await
        .unwrap();
    assert_eq!(
        again,
        Frame::Accepted {
            child_run: child.clone(),
            existing: true
        }
    );
    assert_eq!(runs(&s).await, 1);
    let done = s
        .beta
        .host
        .wait(&child, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.output.as_deref(), Some("ok 2026-08"));
}
