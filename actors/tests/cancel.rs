//! Canceling runs inside one process, through the `Host` handle: a delegated run blocked on
//! an approval (its caller gets a failed reply that says so), a caller waiting on a peer (the
//! peer's later reply changes nothing), and the refusals of a second cancel and of an
//! unknown run.

use std::path::Path;
use std::time::Duration;

use consort_actors::{ActorsError, Channel, Host, HostSpec, RunRecord, RunStatus};
use consort_config::AgentSet;
use consort_core::event::ReplyOutcome;
use consort_core::{Refusal, RunEvent};
use consort_net::RunId;

fn write(dir: &Path, name: &str, yaml: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("agent.yaml"), yaml).unwrap();
}

/// cmo calls cfo, whose ledger waits for an operator's approval.
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
async fn blocked_child(host: &Host, parent: &RunRecord) -> RunRecord {
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

async fn kinds(host: &Host, id: &RunId) -> Vec<&'static str> {
    host.events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.kind())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_child_fails_and_its_caller_reads_why() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path()).await;
    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let child = blocked_child(&host, &parent).await;

    let canceled = host
        .cancel_as(&child.id, "api:alice", Some("nobody will approve".into()))
        .await
        .unwrap();
    assert_eq!(canceled.status, RunStatus::Failed);
    assert_eq!(
        canceled.error.as_deref(),
        Some("canceled by api:alice: nobody will approve")
    );
    let events = host.events(&child.id).await.unwrap();
    let cancel = events
        .iter()
        .find_map(|e| match &e.event {
            RunEvent::Canceled(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a canceled event");
    assert_eq!(cancel.by, "api:alice");
    assert_eq!(cancel.reason.as_deref(), Some("nobody will approve"));
    assert_eq!(kinds(&host, &child.id).await.last(), Some(&"status"));

    // The caller gets the failed reply and goes on with it, as with any failed child.
    let done = host
        .wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    let reply = host
        .events(&parent.id)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .expect("the caller took the reply");
    assert_eq!(reply.status, ReplyOutcome::Failed);
    assert_eq!(reply.output, "canceled by api:alice: nobody will approve");

    // A second cancel, a late decision and an unknown run are refused, writing nothing.
    let before = kinds(&host, &child.id).await;
    match host.cancel(&child.id, None).await {
        Err(ActorsError::Refused(Refusal::AlreadySettled { run, status, .. })) => {
            assert_eq!((run, status.as_str()), (child.id.to_string(), "failed"));
        }
        other => panic!("expected already_settled, got {other:?}"),
    }
    match host.decide(&child.id, true).await {
        Err(ActorsError::Refused(Refusal::NotAwaitingApproval { .. })) => {}
        other => panic!("expected not_awaiting_approval, got {other:?}"),
    }
    assert_eq!(kinds(&host, &child.id).await, before);
    let unknown = RunId::parse("run_00000000000000000000000000000000").unwrap();
    assert!(matches!(
        host.cancel(&unknown, None).await,
        Err(ActorsError::UnknownRun(_))
    ));
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_caller_stays_canceled_when_its_peer_replies_later() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path()).await;
    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let child = blocked_child(&host, &parent).await;
    for _ in 0..200 {
        if host.run(&parent.id).await.unwrap().unwrap().status == RunStatus::Waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let canceled = host.cancel(&parent.id, None).await.unwrap();
    assert_eq!(canceled.status, RunStatus::Failed);
    assert_eq!(canceled.error.as_deref(), Some("canceled by operator"));
    let settled = host.wait(&parent.id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(settled.status, RunStatus::Failed);
    let before = kinds(&host, &parent.id).await;

    // The child it called runs on; once approved it answers, and its reply is taken by the
    // canceled run without a write.
    assert_eq!(
        host.run(&child.id).await.unwrap().unwrap().status,
        RunStatus::Blocked
    );
    host.decide(&child.id, true).await.unwrap();
    let answered = host.wait(&child.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(answered.status, RunStatus::Succeeded, "{answered:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = host.run(&parent.id).await.unwrap().unwrap();
    assert_eq!(after.status, RunStatus::Failed);
    assert_eq!(after.error.as_deref(), Some("canceled by operator"));
    assert_eq!(kinds(&host, &parent.id).await, before, "the log is final");
    assert!(host.agent_status().await.unwrap().iter().all(|a| a.up));
    host.stop();
}
