//! Batch signatures over real QUIC links on loopback, in-process: calls leaving for one host at
//! once share a signature and are all accepted and answered; in a batch with a tampered
//! envelope (or one carrying another's proof) only that one is refused; a replayed envelope
//! creates nothing, and a replayed signature does not pass for another call.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use consort_actors::run::now_ms;
use consort_actors::supervisor::RemoteCalls;
use consort_actors::visibility::Origin;
use consort_actors::{CallOutcome, Channel};
use consort_fleet::{LinkRemote, ServeOptions, ServedHost, prepare};
use consort_net::{
    CallEnvelope, Frame, HostKey, KeyRing, LinkEndpoint, NextHop, Outgoing, RefusalReason, RunId,
};

mod support;

use support::{agent, free_port};

/// fleet.yaml with alpha serving cmo and beta serving cfo; writes the keys of the hosts in
/// `key_files` under `keys/`.
fn fleet(root: &Path, alpha: &HostKey, beta: &HostKey, key_files: &[&str]) {
    agent(
        root,
        "cmo",
        "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"{input}\"}]\n    - answer: \"{reply.cfo}\"\n",
    );
    agent(
        root,
        "cfo",
        "name: cfo\nagents: {accept_from: [cmo]}\nmodel:\n  script:\n    - answer: \"ok {input}\"\n",
    );
    std::fs::create_dir_all(root.join("keys")).unwrap();
    for (name, key) in [("alpha", alpha), ("beta", beta)] {
        if key_files.contains(&name) {
            key.write_new(&root.join(format!("keys/{name}.key")))
                .unwrap();
        }
    }
    let yaml = format!(
        "hosts:\n  - name: alpha\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cmo]\n  - name: beta\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cfo]\n",
        free_port(),
        alpha.public(),
        free_port(),
        beta.public(),
    );
    std::fs::write(root.join("fleet.yaml"), yaml).unwrap();
}

async fn serve(root: &Path, host: &str) -> ServedHost {
    ServedHost::start(ServeOptions::new(
        root.join("fleet.yaml"),
        host,
        root.join("data").join(host),
    ))
    .await
    .unwrap()
}

/// A call from cmo to cfo from a fresh parent run, unsigned.
fn call(tool_use_id: &str, input: &str) -> CallEnvelope {
    let parent = RunId::random();
    let now = now_ms();
    consort_net::new_call(
        &Origin::Absent,
        NextHop {
            caller: "cmo",
            callee: "cfo",
            parent_run: &parent,
            tool_use_id,
            input,
            issued_at_ms: now,
            expires_at_ms: now + 60_000,
            trace: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_calls_to_one_host_is_signed_in_batches_and_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (alpha_key, beta_key) = (HostKey::generate(), HostKey::generate());
    fleet(root, &alpha_key, &beta_key, &["alpha", "beta"]);
    let alpha = serve(root, "alpha").await;
    let beta = serve(root, "beta").await;

    // Root runs of cmo, all at once: each calls cfo on beta and answers with its reply.
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..24 {
        let host = alpha.host.clone();
        runs.spawn(async move {
            let input = format!("month {i}");
            let run = host.start_run("cmo", &input, Channel::Api).await.unwrap();
            let done = host.wait(&run.id, Duration::from_secs(60)).await.unwrap();
            assert_eq!(done.output.as_deref(), Some(format!("ok {input}").as_str()));
        });
    }
    while let Some(run) = runs.join_next().await {
        run.unwrap();
    }

    // The link glue itself, as the supervisor uses it: 32 calls placed at once.
    let prepared = prepare(&root.join("fleet.yaml"), "alpha", None).unwrap();
    let remote = Arc::new(LinkRemote::new(
        Arc::new(prepared.map),
        prepared.key,
        alpha.endpoint.clone(),
    ));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..32 {
        let remote = remote.clone();
        calls.spawn(async move {
            let envelope = call(&format!("tu_burst_{i}"), "2026-08");
            let child = envelope.hops[0].child_run.clone();
            match remote.place_call(envelope).await {
                CallOutcome::Accepted {
                    child_run,
                    existing: false,
                } => assert_eq!(child_run, child),
                other => panic!("call {i}: {other:?}"),
            }
            child
        });
    }
    let mut children = Vec::new();
    while let Some(child) = calls.join_next().await {
        children.push(child.unwrap());
    }
    let (signatures, leaves) = remote.signing_counts();
    assert_eq!(leaves, 32);
    assert!(
        signatures < 32,
        "32 calls placed at once took {signatures} signatures"
    );
    for child in &children {
        let done = beta
            .host
            .wait(child, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.output.as_deref(), Some("ok 2026-08"));
    }
    alpha.host.stop();
    beta.host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_batch_only_the_tampered_envelope_is_refused_and_a_replay_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (alpha_key, beta_key) = (HostKey::generate(), HostKey::generate());
    fleet(root, &alpha_key, &beta_key, &["beta"]);
    let beta = serve(root, "beta").await;
    // The test plays alpha.
    let mut ring = KeyRing::new();
    ring.insert("alpha", alpha_key.public()).unwrap();
    ring.insert("beta", beta_key.public()).unwrap();
    let handler = |_peer: String, _frame: Frame| async { Frame::Ack };
    let link = LinkEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        "alpha",
        alpha_key.clone(),
        ring,
        Arc::new(handler),
    )
    .unwrap();
    let addr = beta.link_addr;

    // Six calls signed in one batch; the fourth is tampered after signing, the fifth carries
    // the sixth's proof.
    let mut batch: Vec<CallEnvelope> = (0..6)
        .map(|i| call(&format!("tu_batch_{i}"), &format!("2026-0{i}")))
        .collect();
    {
        let mut items: Vec<Outgoing<'_>> = batch.iter_mut().map(Outgoing::Call).collect();
        let signed = consort_net::sign_batch(&mut items, "alpha", &alpha_key, |a| a == "cmo");
        assert_eq!((signed.leaves, signed.signatures), (6, 1));
    }
    batch[3].hops[0].expires_at_ms += 1;
    batch[4].hops[0].signature = batch[5].hops[0].signature.clone();
    let mut sent = tokio::task::JoinSet::new();
    for (i, envelope) in batch.iter().cloned().enumerate() {
        let link = link.clone();
        sent.spawn(async move {
            let answer = link.request("beta", addr, &Frame::Call(envelope)).await;
            (i, answer.unwrap())
        });
    }
    while let Some(answer) = sent.join_next().await {
        let (i, answer) = answer.unwrap();
        match (i, &answer) {
            (3 | 4, Frame::Refused { reason, .. }) => assert_eq!(*reason, RefusalReason::BadChain),
            (
                0..=2 | 5,
                Frame::Accepted {
                    existing: false, ..
                },
            ) => {}
            _ => panic!("envelope {i}: {answer:?}"),
        }
    }
    let runs = || async { beta.host.jobs(None).await.unwrap().len() };
    assert_eq!(runs().await, 4);

    // Replayed as it was: the same run, nothing new.
    let answer = link
        .request("beta", addr, &Frame::Call(batch[0].clone()))
        .await
        .unwrap();
    assert_eq!(
        answer,
        Frame::Accepted {
            child_run: batch[0].hops[0].child_run.clone(),
            existing: true
        }
    );
    // Its signature and proof on another call: refused.
    let mut stolen = call("tu_stolen", "2026-00");
    stolen.hops[0].signature = batch[0].hops[0].signature.clone();
    let answer = link
        .request("beta", addr, &Frame::Call(stolen))
        .await
        .unwrap();
    assert!(
        matches!(
            answer,
            Frame::Refused {
                reason: RefusalReason::BadChain,
                ..
            }
        ),
        "{answer:?}"
    );
    assert_eq!(runs().await, 4);
    beta.host.stop();
}
