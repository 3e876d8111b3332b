//! The outbox's carrier over real QUIC links on loopback, in-process: alpha serves cmo, beta
//! serves cfo, each with its own SQLite data folder. What a user checks: a delivery to a host
//! that is down is `queued` (never success), and is carried soon after that host is back, not
//! on a fixed pass; either host may restart in between (alpha's journal survives it); and
//! however it is carried, the message lands once: delivering the same id again finds the run
//! it made.

use std::path::Path;
use std::time::{Duration, Instant};

use consort_actors::Channel;
use consort_actors::directory::DeliveryRequest;
use consort_core::directory::{Audience, DeliveryOutcome, Receipt};
use consort_fleet::{ServeOptions, ServedHost};
use consort_net::HostKey;

mod support;

use support::{agent, free_port};

/// How long a receipt may take to arrive once beta is back. Generous: the carrier's attempt
/// may be a dial still waiting on its handshake, which QUIC resends about 1 s, then 3 s, in.
const CARRIED_WITHIN: Duration = Duration::from_secs(20);

/// How long a restarted alpha may take to carry what its journal holds. It tries at once (it
/// used to wait a whole 2 s pass first), so this bound is loose.
const ADOPTED_WITHIN: Duration = Duration::from_millis(1500);

fn fleet(root: &Path) {
    agent(
        root,
        "cmo",
        "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - answer: \"done\"\n",
    );
    agent(
        root,
        "cfo",
        "name: cfo\nagents: {accept_from: [cmo]}\nmodel:\n  script:\n    - answer: \"ok {input}\"\n",
    );
    std::fs::create_dir_all(root.join("keys")).unwrap();
    let (alpha, beta) = (HostKey::generate(), HostKey::generate());
    alpha.write_new(&root.join("keys/alpha.key")).unwrap();
    beta.write_new(&root.join("keys/beta.key")).unwrap();
    let yaml = format!(
        "hosts:\n  - name: alpha\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cmo]\n  - name: beta\n    address: 127.0.0.1:{}\n    public_key: \"{}\"\n    agents: [agents/cfo]\n",
        free_port(),
        alpha.public(),
        free_port(),
        beta.public(),
    );
    std::fs::write(root.join("fleet.yaml"), yaml).unwrap();
}

/// Serves `host`; a restarted host waits until its previous process's link socket is let go.
async fn serve(root: &Path, host: &str) -> ServedHost {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ServedHost::start(ServeOptions::new(
            root.join("fleet.yaml"),
            host,
            root.join("data").join(host),
        ))
        .await
        {
            Ok(served) => return served,
            Err(e) if e.to_string().contains("in use") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{host}: {e}"),
        }
    }
}

/// Stops a host the way its process would end: its supervisor, its link, its API.
async fn stop(host: ServedHost) {
    host.host.stop();
    host.endpoint.close().await;
    host.server.abort();
    // The supervisor's stop is asynchronous: wait until it no longer answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.host.draining().await.is_ok() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn deliver(alpha: &ServedHost, id: &str) -> DeliveryOutcome {
    alpha
        .host
        .deliver(
            Audience::Operator,
            DeliveryRequest {
                agent: "cfo".into(),
                run: None,
                delivery_id: id.into(),
                text: format!("message {id}"),
                timeout: Duration::from_secs(30),
                window: Some(Duration::from_millis(200)),
            },
        )
        .await
        .unwrap()
}

async fn status(alpha: &ServedHost, id: &str) -> Receipt {
    alpha
        .host
        .delivery_status(Audience::Operator, "cfo", None, id)
        .await
        .unwrap()
}

/// Waits until alpha reports `id` enqueued on beta; how long that took.
async fn carried(alpha: &ServedHost, id: &str) -> Duration {
    let since = Instant::now();
    loop {
        match status(alpha, id).await {
            Receipt::Enqueued { .. } => return since.elapsed(),
            Receipt::Queued { .. } => {}
            other => panic!("{id}: {other:?}"),
        }
        assert!(
            since.elapsed() < CARRIED_WITHIN,
            "{id} still not carried after {:?}",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs of cfo on beta that deliveries started.
async fn delivered_runs(beta: &ServedHost) -> usize {
    beta.host
        .jobs(Some("cfo"))
        .await
        .unwrap()
        .iter()
        .filter(|r| matches!(r.channel, Channel::Delivery(_)))
        .count()
}

fn assert_queued(outcome: &DeliveryOutcome) {
    assert!(
        matches!(outcome, DeliveryOutcome::Queued { .. }),
        "{outcome:?}"
    );
    assert!(!outcome.is_success());
}

/// A second delivery with the same id is answered from the first: no second run.
async fn assert_lands_once(alpha: &ServedHost, beta: &ServedHost, id: &str, runs: usize) {
    match deliver(alpha, id).await {
        DeliveryOutcome::Active { receipt, .. } | DeliveryOutcome::Stalled { receipt, .. } => {
            assert!(
                matches!(receipt, Receipt::Enqueued { existing: true, .. }),
                "{id}: {receipt:?}"
            );
        }
        other => panic!("{id}: {other:?}"),
    }
    assert_eq!(
        delivered_runs(beta).await,
        runs,
        "{id} landed more than once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_queued_while_the_peer_is_down_is_carried_once_soon_after_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    fleet(dir.path());
    let alpha = serve(dir.path(), "alpha").await;
    let queued = deliver(&alpha, "while-down").await;
    assert_queued(&queued);
    assert!(matches!(
        status(&alpha, "while-down").await,
        Receipt::Queued { .. }
    ));
    // beta stays down a while: the carrier's backoff grows meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let beta = serve(dir.path(), "beta").await;
    let took = carried(&alpha, "while-down").await;
    eprintln!("carried {took:?} after beta was back");
    assert_eq!(delivered_runs(&beta).await, 1);
    assert_lands_once(&alpha, &beta, "while-down", 1).await;
    stop(alpha).await;
    stop(beta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_survive_a_restart_of_either_host_and_still_land_once() {
    let dir = tempfile::tempdir().unwrap();
    fleet(dir.path());
    let alpha = serve(dir.path(), "alpha").await;
    let beta = serve(dir.path(), "beta").await;
    // Delivered straight away while both are up.
    match deliver(&alpha, "first").await {
        DeliveryOutcome::Active { .. } | DeliveryOutcome::Stalled { .. } => {}
        other => panic!("{other:?}"),
    }
    // The receiver restarts: what is sent meanwhile is queued, then carried once it is back.
    stop(beta).await;
    assert_queued(&deliver(&alpha, "beta-restarting").await);
    let beta = serve(dir.path(), "beta").await;
    let took = carried(&alpha, "beta-restarting").await;
    eprintln!("carried {took:?} after beta restarted");
    assert_eq!(delivered_runs(&beta).await, 2);
    // The sender restarts with a delivery still journaled: its new process carries it.
    stop(beta).await;
    assert_queued(&deliver(&alpha, "alpha-restarting").await);
    stop(alpha).await;
    let beta = serve(dir.path(), "beta").await;
    let alpha = serve(dir.path(), "alpha").await;
    let took = carried(&alpha, "alpha-restarting").await;
    eprintln!("carried {took:?} after alpha restarted");
    assert!(
        took < ADOPTED_WITHIN,
        "carried {took:?} after alpha restarted"
    );
    assert_eq!(delivered_runs(&beta).await, 3);
    for id in ["first", "beta-restarting", "alpha-restarting"] {
        assert_lands_once(&alpha, &beta, id, 3).await;
    }
    stop(alpha).await;
    stop(beta).await;
}
