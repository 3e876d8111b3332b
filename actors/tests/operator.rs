//! An operator's host commands inside one process, through the `Host` handle: draining
//! (refused root runs and new-run deliveries, accepted runs and their calls go on), resuming,
//! restarting an agent (its blocked run resumes from the store), and the counts a status
//! reads.

use std::path::Path;
use std::time::Duration;

use consort_actors::directory::DeliveryRequest;
use consort_actors::{ActorsError, Channel, Host, HostSpec, RunStatus};
use consort_config::AgentSet;
use consort_core::Refusal;
use consort_core::directory::{Audience, DeliveryOutcome};

fn write(dir: &Path, name: &str, yaml: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("agent.yaml"), yaml).unwrap();
}

/// cmo calls cfo, whose ledger waits for an operator's approval; `solo`'s model program does
/// not exist, so its runs fail.
async fn host(dir: &Path) -> Host {
    let agents = dir.join("agents");
    write(
        &agents,
        "cmo",
        "name: cmo\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"{input}\"}]\n    - answer: \"per the CFO: {reply.cfo}\"\n",
    );
    write(
        &agents,
        "cfo",
        "name: cfo\nagents: {accept_from: [cmo]}\nmodel:\n  script:\n    - tool: {name: ledger, input: \"SELECT 42\"}\n    - answer: \"{tool.ledger}\"\ntools:\n  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}\n",
    );
    write(
        &agents,
        "solo",
        "name: solo\nmodel: {kind: command, argv: [./no-such-model]}\n",
    );
    rusqlite::Connection::open(agents.join("cfo/ledger.db"))
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER);")
        .unwrap();
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let (host, _join) = Host::spawn(HostSpec::new(set, dir.join("data")))
        .await
        .unwrap();
    host
}

/// The cfo run of `parent`, once it waits for approval.
async fn blocked_child(
    host: &Host,
    parent: &consort_actors::RunRecord,
) -> consort_actors::RunRecord {
    for _ in 0..200 {
        if let Some(child) =
            host.jobs(Some("cfo")).await.unwrap().into_iter().find(|r| {
                r.parent_run.as_ref() == Some(&parent.id) && r.status == RunStatus::Blocked
            })
        {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no blocked child of {}", parent.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_host_starts_no_root_run_and_finishes_the_accepted_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path()).await;
    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let child = blocked_child(&host, &parent).await;

    assert!(!host.draining().await.unwrap());
    assert!(host.set_draining(true).await.unwrap());
    assert!(host.draining().await.unwrap());
    let refused = host.start_run("cmo", "September", Channel::Cli).await;
    match refused {
        Err(ActorsError::Refused(Refusal::Draining { host: name, .. })) => {
            assert_eq!(name, "local");
        }
        other => panic!("expected a draining refusal, got {other:?}"),
    }
    // A delivery that would start a run is refused too, and nothing is written.
    let delivered = host
        .deliver(
            Audience::Operator,
            DeliveryRequest {
                agent: "cmo".into(),
                run: None,
                delivery_id: "d-1".into(),
                text: "plan October".into(),
                timeout: Duration::from_secs(5),
                window: Some(Duration::from_millis(100)),
            },
        )
        .await
        .unwrap();
    match delivered {
        DeliveryOutcome::Rejected { code, .. } => assert_eq!(code, "draining"),
        other => panic!("expected a rejected delivery, got {other:?}"),
    }
    assert_eq!(host.jobs(Some("cmo")).await.unwrap().len(), 1);

    // The accepted run goes on: its gate is decided and its reply taken.
    host.decide(&child.id, true).await.unwrap();
    let done = host
        .wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");

    // Resumed, the host starts runs again.
    assert!(!host.set_draining(false).await.unwrap());
    host.start_run("cmo", "September", Channel::Cli)
        .await
        .unwrap();
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_resumes_its_blocked_run_and_counts_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path()).await;
    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let child = blocked_child(&host, &parent).await;

    let status = host.restart_agent("cfo").await.unwrap();
    assert_eq!(
        (status.name.as_str(), status.up, status.restarts),
        ("cfo", true, 1)
    );
    let status = host.restart_agent("cfo").await.unwrap();
    assert_eq!(status.restarts, 2);
    let seats = host.agent_status().await.unwrap();
    let cfo = seats.iter().find(|s| s.name == "cfo").unwrap();
    assert!(cfo.up && cfo.restarts == 2, "{cfo:?}");
    assert!(matches!(
        host.restart_agent("nobody").await,
        Err(ActorsError::UnknownAgent(_))
    ));
    // The run was resumed from the store, still at its gate, and the gate still works.
    assert_eq!(
        host.run(&child.id).await.unwrap().unwrap().status,
        RunStatus::Blocked
    );
    host.decide(&child.id, true).await.unwrap();
    let done = host
        .wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");

    // What a status counts: runs by status per agent, and the last failure.
    let failed = host.start_run("solo", "x", Channel::Api).await.unwrap();
    let failed = host
        .wait(&failed.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    let counts = host.run_counts().await.unwrap();
    let of = |agent: &str| counts.iter().find(|(a, _)| a == agent).unwrap().1;
    assert_eq!(of("cmo").succeeded, 1);
    assert_eq!(of("cfo").succeeded, 1);
    assert_eq!(of("solo").failed, 1);
    assert_eq!(of("cmo").unsettled(), 0);
    let last = host.last_failed_run().await.unwrap().expect("a failed run");
    assert_eq!(last.id, failed.id);
    host.stop();
}
