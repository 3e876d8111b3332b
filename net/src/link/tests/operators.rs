//! Operators on a link: who passes the handshake, which frames reach which handler, and what
//! an endpoint reports of its peers.

use std::sync::{Arc, Mutex};

use super::{check_run, loopback, recording_handler, test_config};
use crate::chain::operator::{
    MAX_OPERATOR_REQUEST, OperatorAnswer, OperatorCommand, OperatorRequest,
};
use crate::codec::{Frame, RefusalReason, encode_frame};
use crate::error::LinkError;
use crate::keys::{HostKey, KeyRing, PublicKey};
use crate::link::{
    LinkEndpoint, OperatorAccess, OperatorHandler, OperatorLink, OperatorPeer, PeerLinkState,
};

/// beta serves operator `ops`; alpha is a plain host peer.
struct Served {
    alpha: LinkEndpoint,
    beta: LinkEndpoint,
    beta_addr: std::net::SocketAddr,
    beta_public: PublicKey,
    alpha_public: PublicKey,
    ops_key: HostKey,
    /// Requests beta's frame handler saw (hosts only).
    host_frames: Arc<Mutex<Vec<String>>>,
    /// Requests beta's operator handler saw: who, and the command.
    operator_requests: Seen,
}

/// What an operator handler saw: who sent each request, and its command's name.
type Seen = Arc<Mutex<Vec<(OperatorPeer, String)>>>;

fn operator_handler() -> (Arc<dyn OperatorHandler>, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let handler = move |operator: OperatorPeer, request: OperatorRequest| {
        record
            .lock()
            .unwrap()
            .push((operator.clone(), request.command.name().to_owned()));
        async move {
            OperatorAnswer::Done {
                json: format!("{{\"operator\":\"{}\"}}", operator.name),
            }
        }
    };
    (Arc::new(handler), seen)
}

fn served() -> Served {
    let alpha_key = HostKey::generate();
    let beta_key = HostKey::generate();
    let ops_key = HostKey::generate();
    let ring =
        KeyRing::from_hosts([("alpha", alpha_key.public()), ("beta", beta_key.public())]).unwrap();
    let (alpha_handler, _) = recording_handler();
    let (beta_handler, host_frames) = recording_handler();
    let (handler, operator_requests) = operator_handler();
    let alpha_public = alpha_key.public();
    let alpha = LinkEndpoint::bind_with_config(
        loopback(),
        "alpha",
        alpha_key,
        ring.clone(),
        alpha_handler,
        test_config(),
    )
    .unwrap();
    let beta_public = beta_key.public();
    let beta = LinkEndpoint::bind_with_operators(
        loopback(),
        "beta",
        beta_key,
        ring,
        beta_handler,
        OperatorAccess {
            keys: KeyRing::from_hosts([("ops", ops_key.public())]).unwrap(),
            handler,
        },
        test_config(),
    )
    .unwrap();
    let beta_addr = beta.local_addr().unwrap();
    Served {
        alpha,
        beta,
        beta_addr,
        beta_public,
        alpha_public,
        ops_key,
        host_frames,
        operator_requests,
    }
}

fn status_request() -> Frame {
    Frame::OperatorRequest(OperatorRequest::new(
        "ops",
        "beta",
        OperatorCommand::Status,
        0,
    ))
}

#[tokio::test]
async fn a_listed_operator_reaches_the_operator_handler_only() {
    let s = served();
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    let answer = link
        .request("beta", s.beta_addr, s.beta_public, &status_request())
        .await
        .unwrap();
    assert_eq!(
        answer,
        Frame::OperatorAnswer(OperatorAnswer::Done {
            json: "{\"operator\":\"ops\"}".into()
        })
    );
    let seen = s.operator_requests.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.name, "ops");
    assert_eq!(seen[0].0.key, s.ops_key.public());
    assert_eq!(seen[0].1, "status");
    assert!(s.host_frames.lock().unwrap().is_empty());
    link.close().await;
}

#[tokio::test]
async fn an_operator_may_send_nothing_but_operator_requests() {
    let s = served();
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    for frame in [check_run(), Frame::Ack] {
        let answer = link
            .request("beta", s.beta_addr, s.beta_public, &frame)
            .await
            .unwrap();
        assert!(
            matches!(
                answer,
                Frame::Refused {
                    reason: RefusalReason::Malformed,
                    ..
                }
            ),
            "{answer:?}"
        );
    }
    assert!(s.host_frames.lock().unwrap().is_empty());
    assert!(s.operator_requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_host_may_not_send_operator_requests() {
    let s = served();
    let answer = s
        .alpha
        .request("beta", s.beta_addr, &status_request())
        .await
        .unwrap();
    assert!(
        matches!(
            answer,
            Frame::Refused {
                reason: RefusalReason::Malformed,
                ..
            }
        ),
        "{answer:?}"
    );
    assert!(s.host_frames.lock().unwrap().is_empty());
    assert!(s.operator_requests.lock().unwrap().is_empty());
    // Its host frames still go through.
    s.alpha
        .request("beta", s.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    assert_eq!(*s.host_frames.lock().unwrap(), ["alpha"]);
}

#[tokio::test]
async fn an_unlisted_key_is_refused_at_the_handshake() {
    let s = served();
    let stranger = OperatorLink::new("ops", &HostKey::generate(), test_config()).unwrap();
    let error = stranger
        .request("beta", s.beta_addr, s.beta_public, &status_request())
        .await
        .unwrap_err();
    assert!(
        matches!(error, LinkError::Unreachable { ref reason, .. } if reason.contains("refused")),
        "{error}"
    );
    assert!(s.operator_requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_host_that_serves_no_operators_refuses_an_operator_key() {
    let s = served();
    // alpha was bound without operators.
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    let alpha_addr = s.alpha.local_addr().unwrap();
    let error = link
        .request("alpha", alpha_addr, s.alpha_public, &status_request())
        .await
        .unwrap_err();
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
}

#[tokio::test]
async fn the_operator_pins_the_host_key() {
    let s = served();
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    let error = link
        .request(
            "beta",
            s.beta_addr,
            HostKey::generate().public(),
            &status_request(),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error}");
    assert!(s.operator_requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_oversized_operator_request_is_refused_unread() {
    let s = served();
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    let mut request = OperatorRequest::new(
        "ops",
        "beta",
        OperatorCommand::Restart {
            agent: "x".repeat(MAX_OPERATOR_REQUEST),
        },
        0,
    );
    request.signature = vec![0; 64];
    let bytes = encode_frame(&Frame::OperatorRequest(request)).unwrap();
    let answer = link
        .request_bytes("beta", s.beta_addr, s.beta_public, &bytes)
        .await
        .unwrap();
    assert!(
        matches!(
            answer,
            Frame::Refused { reason: RefusalReason::Malformed, ref text } if text.contains("at most")
        ),
        "{answer:?}"
    );
    assert!(s.operator_requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn peer_links_report_what_the_endpoint_knows_and_never_list_operators() {
    let s = served();
    let before = s.beta.peer_links();
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].host, "alpha");
    assert_eq!(
        before[0].state,
        PeerLinkState::NotConnected { last_error: None }
    );
    let link = OperatorLink::new("ops", &s.ops_key, test_config()).unwrap();
    link.request("beta", s.beta_addr, s.beta_public, &status_request())
        .await
        .unwrap();
    s.alpha
        .request("beta", s.beta_addr, &Frame::Ack)
        .await
        .unwrap();
    let links = s.beta.peer_links();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].state, PeerLinkState::Connected);
    assert_eq!(s.alpha.peer_links()[0].state, PeerLinkState::Connected);
    // A host that cannot be reached is not connected, with the reason.
    let addr = s.beta_addr;
    s.beta.close().await;
    let _ = s.alpha.request("beta", addr, &Frame::Ack).await;
    let _ = s.alpha.request("beta", addr, &Frame::Ack).await;
    let after = s.alpha.peer_links();
    assert!(
        matches!(&after[0].state, PeerLinkState::NotConnected { .. }),
        "{after:?}"
    );
}
