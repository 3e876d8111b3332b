//! The store writer against real SQLite files: group commit, ordering, and failures that stay
//! with the job that caused them.

use consort_core::event::Answer;
use consort_core::testing::{TransitionParts, transition};
use consort_core::{RunEvent, RunStatus, Transition};
use consort_net::RunId;

use super::{AgentStore, Pending, StoreWriter, WriterCounts};
use crate::ActorsError;
use crate::run::Channel;
use crate::store::{Applied, Durability, Inserted, NewRun, RunLog, RunStore};
use crate::visibility::Identity;

fn new_run(id: &RunId) -> NewRun {
    NewRun {
        id: id.clone(),
        agent: "cfo".into(),
        channel: Channel::Api,
        parent_run: None,
        parent_agent: None,
        tool_use_id: None,
        chain: vec![],
        input: "August".into(),
        identity: Identity::Absent,
        origin: crate::visibility::Origin::Absent,
        budget: None,
    }
}

async fn insert(store: &AgentStore, id: &RunId) {
    let new = new_run(id);
    store
        .write(move |s| s.insert_run(new))
        .wait()
        .await
        .unwrap();
}

fn append(store: &AgentStore, id: &RunId, text: &str) -> Pending<Applied> {
    let (id, transition) = (id.clone(), answer(text));
    store.write(move |s| s.append(&id, transition))
}

fn answer(text: &str) -> Transition {
    transition(TransitionParts {
        events: vec![RunEvent::Answer(Answer { text: text.into() })],
        status: Some(RunStatus::Succeeded),
        output: Some(text.into()),
        ..Default::default()
    })
}

#[tokio::test]
async fn appends_of_many_runs_commit_together_and_each_is_answered_after_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfo.db");
    let writer = StoreWriter::start().unwrap();
    let store = writer.open(&path, Durability::Normal).await.unwrap();
    let ids: Vec<RunId> = (0..64).map(|_| RunId::random()).collect();
    for id in &ids {
        insert(&store, id).await;
    }
    let before = writer.counts();
    // Queued back to back, as an agent stepping many runs does.
    let pending: Vec<_> = ids.iter().map(|id| append(&store, id, "42")).collect();
    for p in pending {
        let applied = p.wait().await.unwrap();
        assert_eq!(applied.record.status, RunStatus::Succeeded);
        // Answered means committed: another connection sees it.
        let mut other = RunStore::open_read_only(&path).unwrap();
        assert_eq!(
            other.run(&applied.record.id).unwrap().unwrap().status,
            RunStatus::Succeeded
        );
    }
    let after = writer.counts();
    let writes = after.writes - before.writes;
    let commits = after.commits - before.commits;
    assert_eq!(writes, 64);
    assert!(
        commits * 4 <= writes,
        "64 queued appends took {commits} commits: no group commit"
    );
}

#[tokio::test]
async fn a_read_sent_after_an_append_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StoreWriter::start().unwrap();
    let store = writer
        .open(&dir.path().join("cfo.db"), Durability::Normal)
        .await
        .unwrap();
    let id = RunId::random();
    insert(&store, &id).await;
    let pending = append(&store, &id, "seen");
    let read = store.run(&id).await.unwrap().unwrap();
    assert_eq!(read.output.as_deref(), Some("seen"));
    pending.wait().await.unwrap();
}

#[tokio::test]
async fn a_failing_append_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StoreWriter::start().unwrap();
    let store = writer
        .open(&dir.path().join("cfo.db"), Durability::Normal)
        .await
        .unwrap();
    let (known, unknown) = (RunId::random(), RunId::random());
    insert(&store, &known).await;
    let good = append(&store, &known, "kept");
    let bad = append(&store, &unknown, "lost");
    let also_good = store.write({
        let id = RunId::random();
        move |s| s.insert_run(new_run(&id))
    });
    assert!(matches!(bad.wait().await, Err(ActorsError::UnknownRun(_))));
    assert_eq!(
        good.wait().await.unwrap().record.output.as_deref(),
        Some("kept")
    );
    assert!(matches!(
        also_good.wait().await.unwrap(),
        Inserted::Created(_)
    ));
}

#[tokio::test]
async fn a_store_that_is_not_open_takes_reads_but_not_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfo.db");
    let writer = StoreWriter::start().unwrap();
    let store = writer.open(&path, Durability::Normal).await.unwrap();
    let id = RunId::random();
    insert(&store, &id).await;
    store.close();
    // Read-only, through a connection of the job's own.
    let key = id.clone();
    let found = writer
        .read(&path, move |s| s.run(&key))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, id);
    let refused = append(&store, &id, "x").wait().await;
    assert!(
        matches!(refused, Err(ActorsError::Commit { ref detail, .. }) if detail.contains("not open")),
        "{refused:?}"
    );
    // Reopened (a restarted agent), it writes again.
    let store = writer.open(&path, Durability::Normal).await.unwrap();
    append(&store, &id, "x").wait().await.unwrap();
    assert_ne!(writer.counts(), WriterCounts::default());
}

#[tokio::test]
async fn more_stores_than_open_connections_all_write_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StoreWriter::start_with(2).unwrap();
    let mut stores = Vec::new();
    for name in ["a", "b", "c", "d", "e"] {
        let path = dir.path().join(format!("{name}.db"));
        stores.push(writer.open(&path, Durability::Normal).await.unwrap());
        assert!(writer.counts().open <= 2, "{:?}", writer.counts());
    }
    let ids: Vec<RunId> = stores.iter().map(|_| RunId::random()).collect();
    for (store, id) in stores.iter().zip(&ids) {
        insert(store, id).await;
    }
    // Writes to every store queued at once: more stores in one batch than connections.
    let pending: Vec<_> = stores
        .iter()
        .zip(&ids)
        .map(|(store, id)| append(store, id, "kept"))
        .collect();
    for p in pending {
        assert_eq!(
            p.wait().await.unwrap().record.output.as_deref(),
            Some("kept")
        );
    }
    for (store, id) in stores.iter().zip(&ids) {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.output.as_deref(), Some("kept"));
    }
    let counts = writer.counts();
    assert!(counts.open <= 2, "{counts:?}");
    assert!(counts.opened > 5, "closed stores were reopened: {counts:?}");
    // A closed store leaves no log behind: its last connection folded the WAL in.
    let wal_files = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with("-wal"))
        .count();
    assert!(wal_files <= 2, "{wal_files} logs for 2 open stores");
}
