use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use consort_core::RunId;

use super::{FrameHandler, LinkConfig, LinkEndpoint};
use crate::codec::{Frame, MAX_FRAME, RefusalReason, decode_frame};
use crate::error::LinkError;
use crate::keys::{HostKey, KeyRing};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn test_config() -> LinkConfig {
    LinkConfig {
        dial_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        redial_backoff: Duration::from_millis(10),
        max_redial_backoff: Duration::from_millis(50),
        ..LinkConfig::default()
    }
}

/// A handler that records each request's peer host, answers `CheckRun` with a status naming
/// that host, and everything else with `Ack`.
fn recording_handler() -> (Arc<dyn FrameHandler>, Arc<Mutex<Vec<String>>>) {
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    let handler = move |peer_host: String, frame: Frame| {
        seen.lock().unwrap().push(peer_host.clone());
        async move {
            match frame {
                Frame::CheckRun { child_run, .. } => Frame::RunStatus {
                    child_run,
                    state: crate::codec::RemoteRunState::Running,
                    output: Some(format!("asked by {peer_host}")),
                    hop_depth: 1,
                    created_at_ms: 0,
                    input: String::new(),
                },
                _ => Frame::Ack,
            }
        }
    };
    (Arc::new(handler), peers)
}

fn check_run() -> Frame {
    let parent = RunId::random();
    Frame::CheckRun {
        caller: "cmo".into(),
        callee: "cfo".into(),
        child_run: RunId::child_of(&parent, "toolu_1"),
        parent_run: parent,
    }
}

struct Pair {
    alpha: LinkEndpoint,
    beta: LinkEndpoint,
    beta_addr: SocketAddr,
    beta_key: HostKey,
    ring: KeyRing,
    beta_peers: Arc<Mutex<Vec<String>>>,
}

async fn pair() -> Pair {
    let alpha_key = HostKey::generate();
    let beta_key = HostKey::generate();
    let ring =
        KeyRing::from_hosts([("alpha", alpha_key.public()), ("beta", beta_key.public())]).unwrap();
    let (alpha_handler, _) = recording_handler();
    let (beta_handler, beta_peers) = recording_handler();
    let alpha = LinkEndpoint::bind_with_config(
        loopback(),
        "alpha",
        alpha_key,
        ring.clone(),
        alpha_handler,
        test_config(),
    )
    .unwrap();
    let beta = LinkEndpoint::bind_with_config(
        loopback(),
        "beta",
        beta_key.clone(),
        ring.clone(),
        beta_handler,
        test_config(),
    )
    .unwrap();
    let beta_addr = beta.local_addr().unwrap();
    Pair {
        alpha,
        beta,
        beta_addr,
        beta_key,
        ring,
        beta_peers,
    }
}

#[tokio::test]
async fn a_request_gets_its_response_and_the_peer_is_named() {
    let pair = pair().await;
    let response = pair
        .alpha
        .request("beta", pair.beta_addr, &check_run())
        .await
        .unwrap();
    match response {
        Frame::RunStatus { output, .. } => assert_eq!(output.as_deref(), Some("asked by alpha")),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(*pair.beta_peers.lock().unwrap(), ["alpha"]);
}

#[tokio::test]
async fn many_requests_share_one_connection() {
    let pair = pair().await;
    let requests = (0..64).map(|_| {
        let alpha = pair.alpha.clone();
        let addr = pair.beta_addr;
        tokio::spawn(async move { alpha.request("beta", addr, &Frame::Ack).await })
    });
    for request in requests.collect::<Vec<_>>() {
        assert_eq!(request.await.unwrap().unwrap(), Frame::Ack);
    }
    let (first, reused) = pair.alpha.connection("beta", pair.beta_addr).await.unwrap();
    assert!(reused);
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    let (again, _) = pair.alpha.connection("beta", pair.beta_addr).await.unwrap();
    assert_eq!(first.stable_id(), again.stable_id());
}

#[tokio::test]
async fn a_server_with_the_wrong_key_is_refused_at_the_handshake() {
    let pair = pair().await;
    // An impostor at some address claims to be beta with its own key.
    let (handler, impostor_peers) = recording_handler();
    let impostor = LinkEndpoint::bind_with_config(
        loopback(),
        "beta",
        HostKey::generate(),
        pair.ring.clone(),
        handler,
        test_config(),
    )
    .unwrap();
    let error = pair
        .alpha
        .request("beta", impostor.local_addr().unwrap(), &Frame::Ack)
        .await
        .unwrap_err();
    assert!(
        matches!(error, LinkError::Unreachable { ref host, .. } if host == "beta"),
        "{error}"
    );
    assert!(impostor_peers.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_client_with_the_wrong_key_is_refused_at_the_handshake() {
    let pair = pair().await;
    // An impostor claims to be alpha (its ring pins beta correctly), but beta pins alpha's
    // real key.
    let (handler, _) = recording_handler();
    let impostor = LinkEndpoint::bind_with_config(
        loopback(),
        "alpha",
        HostKey::generate(),
        pair.ring.clone(),
        handler,
        test_config(),
    )
    .unwrap();
    let error = impostor
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap_err();
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
    assert!(pair.beta_peers.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_client_is_refused() {
    let pair = pair().await;
    let stranger_key = HostKey::generate();
    let stranger_ring = KeyRing::from_hosts([
        ("stranger", stranger_key.public()),
        ("beta", pair.beta_key.public()),
    ])
    .unwrap();
    let (handler, _) = recording_handler();
    let stranger = LinkEndpoint::bind_with_config(
        loopback(),
        "stranger",
        stranger_key,
        stranger_ring,
        handler,
        test_config(),
    )
    .unwrap();
    let error = stranger
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap_err();
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
    assert!(pair.beta_peers.lock().unwrap().is_empty());
    // And a host not in our own ring cannot be dialed at all.
    let error = pair
        .alpha
        .request("stranger", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap_err();
    assert!(matches!(error, LinkError::UnknownHost(ref host) if host == "stranger"));
}

#[tokio::test]
async fn garbage_on_a_stream_does_not_kill_the_connection() {
    let pair = pair().await;
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    let (connection, _) = pair.alpha.connection("beta", pair.beta_addr).await.unwrap();

    // Undecodable bytes are answered with a typed refusal.
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    send.write_all(&[0xde, 0xad, 0xbe, 0xef, 0xff])
        .await
        .unwrap();
    send.finish().unwrap();
    let response = decode_frame(&recv.read_to_end(MAX_FRAME).await.unwrap()).unwrap();
    assert!(matches!(
        response,
        Frame::Refused {
            reason: RefusalReason::Malformed,
            ..
        }
    ));

    // An oversized frame is refused without being read to its end.
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    let oversized = vec![0u8; MAX_FRAME + 1024];
    let _ = send.write_all(&oversized).await; // the server may stop the stream first
    let _ = send.finish();
    if let Ok(bytes) = recv.read_to_end(MAX_FRAME).await {
        assert!(matches!(
            decode_frame(&bytes),
            Ok(Frame::Refused {
                reason: RefusalReason::Malformed,
                ..
            })
        ));
    }

    // A stream abandoned half-way is just dropped.
    let (mut send, _recv) = connection.open_bi().await.unwrap();
    send.write_all(&[0, 0]).await.unwrap();
    send.reset(7u32.into()).unwrap();

    // The same connection still serves.
    assert_eq!(
        pair.alpha
            .request("beta", pair.beta_addr, &Frame::Ack)
            .await
            .unwrap(),
        Frame::Ack
    );
    let (after, _) = pair.alpha.connection("beta", pair.beta_addr).await.unwrap();
    assert_eq!(after.stable_id(), connection.stable_id());
    assert!(connection.close_reason().is_none());
}

#[tokio::test]
async fn a_peer_restart_is_survived() {
    let pair = pair().await;
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    pair.beta.close().await;
    drop(pair.beta);

    // The port may take a moment to be released by the old endpoint's driver.
    let (handler, peers) = recording_handler();
    let mut restarted = None;
    for _ in 0..100 {
        match LinkEndpoint::bind_with_config(
            pair.beta_addr,
            "beta",
            pair.beta_key.clone(),
            pair.ring.clone(),
            handler.clone(),
            test_config(),
        ) {
            Ok(endpoint) => {
                restarted = Some(endpoint);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let _restarted = restarted.expect("rebind the restarted peer");
    assert_eq!(
        pair.alpha
            .request("beta", pair.beta_addr, &Frame::Ack)
            .await
            .unwrap(),
        Frame::Ack
    );
    assert_eq!(*peers.lock().unwrap(), ["alpha"]);
}

#[tokio::test]
async fn an_absent_peer_is_unreachable_and_every_request_dials() {
    let pair = pair().await;
    // A bound UDP socket that never answers.
    let silent = std::net::UdpSocket::bind(loopback()).unwrap();
    let addr = silent.local_addr().unwrap();
    let config = LinkConfig {
        dial_timeout: Duration::from_millis(200),
        redial_backoff: Duration::from_millis(100),
        ..test_config()
    };
    let (handler, _) = recording_handler();
    let alpha = LinkEndpoint::bind_with_config(
        loopback(),
        "alpha",
        HostKey::generate(),
        pair.ring.clone(),
        handler,
        config,
    )
    .unwrap();
    let started = Instant::now();
    let error = alpha.request("beta", addr, &Frame::Ack).await.unwrap_err();
    assert!(
        matches!(error, LinkError::Unreachable { ref reason, .. } if reason.contains("no answer to the handshake")),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // The next request waits out the backoff and dials again: its refusal is its own dial's.
    let started = Instant::now();
    let error = alpha.request("beta", addr, &Frame::Ack).await.unwrap_err();
    assert!(
        matches!(error, LinkError::Unreachable { ref reason, .. } if !reason.contains("backoff")),
        "{error}"
    );
    assert!(started.elapsed() >= Duration::from_millis(200), "it dialed");
    // Requests that wait while a dial fails share that dial.
    let (a, b) = tokio::join!(
        alpha.request("beta", addr, &Frame::Ack),
        alpha.request("beta", addr, &Frame::Ack)
    );
    assert!(a.is_err() && b.is_err());
}

#[tokio::test]
async fn a_peer_that_shuts_down_is_noticed_at_once() {
    let pair = pair().await;
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    pair.beta.close().await;
    let started = Instant::now();
    let error = pair
        .alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap_err();
    // The closed connection is dropped and the request redials once, which finds nobody.
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_peer_that_vanishes_is_redialed_when_it_does_not_acknowledge() {
    let alpha_key = HostKey::generate();
    let beta_key = HostKey::generate();
    let ring =
        KeyRing::from_hosts([("alpha", alpha_key.public()), ("beta", beta_key.public())]).unwrap();
    let config = LinkConfig {
        ack_timeout: Duration::from_millis(300),
        ..test_config()
    };
    let (handler, _) = recording_handler();
    let alpha = LinkEndpoint::bind_with_config(
        loopback(),
        "alpha",
        alpha_key,
        ring.clone(),
        handler.clone(),
        config.clone(),
    )
    .unwrap();
    // beta runs on its own runtime, so that dropping the runtime silences it the way a
    // SIGKILL does: no close, no acknowledgements, the socket gone.
    let beta_runtime = tokio::runtime::Runtime::new().unwrap();
    let beta = {
        let _guard = beta_runtime.enter();
        LinkEndpoint::bind_with_config(
            loopback(),
            "beta",
            beta_key.clone(),
            ring.clone(),
            handler.clone(),
            config.clone(),
        )
        .unwrap()
    };
    let beta_addr = beta.local_addr().unwrap();
    alpha.request("beta", beta_addr, &Frame::Ack).await.unwrap();
    beta_runtime.shutdown_background();
    drop(beta);

    // A new incarnation on the same address (same key): the cached connection to the old
    // one is not acknowledged, so the request redials and reaches the new one.
    let mut restarted = None;
    for _ in 0..100 {
        match LinkEndpoint::bind_with_config(
            beta_addr,
            "beta",
            beta_key.clone(),
            ring.clone(),
            handler.clone(),
            config.clone(),
        ) {
            Ok(endpoint) => {
                restarted = Some(endpoint);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let _restarted = restarted.expect("rebind the restarted peer");
    let started = Instant::now();
    let answer = alpha.request("beta", beta_addr, &Frame::Ack).await;
    assert_eq!(answer.unwrap(), Frame::Ack);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_peer_that_dials_in_replaces_the_cached_connection_and_is_served_on_it() {
    let pair = pair().await;
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    // beta answers alpha on the connection alpha dialed: no second connection.
    let alpha_addr = pair.alpha.local_addr().unwrap();
    let answer = pair
        .beta
        .request("alpha", alpha_addr, &check_run())
        .await
        .unwrap();
    assert!(matches!(answer, Frame::RunStatus { .. }), "{answer:?}");
    assert_eq!(pair.alpha.inner.endpoint.open_connections(), 1);
    assert_eq!(pair.beta.inner.endpoint.open_connections(), 1);
}

#[tokio::test]
async fn a_host_removed_from_the_ring_loses_its_connection() {
    let pair = pair().await;
    pair.alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    let without_alpha = KeyRing::from_hosts([("beta", pair.beta_key.public())]).unwrap();
    pair.beta.set_key_ring(without_alpha);
    let error = pair
        .alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await;
    assert!(error.is_err(), "{error:?}");
    let error = pair
        .alpha
        .request("beta", pair.beta_addr, &Frame::Ack)
        .await;
    assert!(error.is_err(), "{error:?}");
    assert_eq!(pair.beta_peers.lock().unwrap().len(), 1);
}

mod operators;
