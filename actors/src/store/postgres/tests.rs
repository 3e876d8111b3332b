//! The PostgreSQL store against a real server the tests start (skipped, with a message,
//! where no server binary is found): the SQLite store's guarantees, pages identical to
//! SQLite's over the same rows, group commit across agents with a failing write rolled back
//! alone, resume after a restart, read-only inspection, and typed errors at start.

use std::path::{Path, PathBuf};

use consort_core::event::Answer;
use consort_core::testing::{TransitionParts, settled, transition};
use consort_core::{RunEvent, RunStatus, Transition};
use consort_net::RunId;

use super::test_server::TestServer;
use super::{Database, PostgresUrl};
use crate::ActorsError;
use crate::page::RunCursor;
use crate::run::Channel;
use crate::store::{Durability, Inserted, NewRun, RunLog, RunStore, StoreBackend, StoreWriter};
use crate::visibility::{Identity, Origin};

fn new_run(agent: &str, id: &RunId) -> NewRun {
    NewRun {
        id: id.clone(),
        agent: agent.into(),
        channel: Channel::Api,
        parent_run: None,
        parent_agent: None,
        tool_use_id: None,
        chain: vec![],
        input: "August".into(),
        identity: Identity::Absent,
        origin: Origin::Absent,
        budget: None,
    }
}

fn settle(status: RunStatus, text: &str) -> Transition {
    let (output, error) = match status {
        RunStatus::Failed => (None, Some(text.to_owned())),
        _ => (Some(text.to_owned()), None),
    };
    transition(TransitionParts {
        events: vec![RunEvent::Answer(Answer { text: text.into() })],
        status: Some(status),
        output,
        error,
        cost: consort_core::step::CostDelta {
            model_turns: 1,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The store path that names `agent` to the writer (no file is made there).
fn store_path(agent: &str) -> PathBuf {
    Path::new("/nonexistent-data")
        .join("agents")
        .join(agent)
        .join("runs.db")
}

#[test]
fn the_store_keeps_the_sqlite_stores_guarantees() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("guarantees"));
    let mut db = Database::connect(&url).unwrap();
    let id = RunId::random();
    {
        let mut cfo = db.store("cfo");
        assert!(matches!(
            cfo.insert_run(new_run("cfo", &id)).unwrap(),
            Inserted::Created(_)
        ));
        // A replayed call: the primary key turns it into the run that exists.
        let replay = cfo.insert_run(new_run("cfo", &id)).unwrap();
        assert!(matches!(replay, Inserted::Existing(_)));
        assert_eq!(cfo.runs().unwrap().len(), 1);
        assert_eq!(cfo.events(&id).unwrap().len(), 1);
        let stored = replay.record().clone();
        assert_eq!(stored.status, RunStatus::Queued);
        assert_eq!(stored.principal, "anonymous");
    }
    // Another agent's store is its own.
    assert!(matches!(
        db.store("cmo").insert_run(new_run("cmo", &id)).unwrap(),
        Inserted::Created(_)
    ));

    let mut cfo = db.store("cfo");
    let run = cfo.apply(&id, settle(RunStatus::Succeeded, "42")).unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.output.as_deref(), Some("42"));
    assert_eq!(run.cost.model_turns, 1);
    assert!(run.settled_at_ms.is_some());
    let kinds: Vec<_> = cfo.events(&id).unwrap().iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["created", "answer", "status"]);
    assert_eq!(cfo.last_seq(&id).unwrap(), 3);
    let after_one = cfo.events_after(&id, 1, 1).unwrap();
    assert_eq!(after_one.len(), 1);
    assert_eq!(after_one[0].seq, 2);
    assert!(matches!(
        cfo.apply(&RunId::random(), transition(TransitionParts::default())),
        Err(ActorsError::UnknownRun(_))
    ));
    assert!(cfo.unsettled().unwrap().is_empty());

    // Children, unsettled runs, counts, the last failure.
    let mut child = new_run("cfo", &RunId::child_of(&id, "tool-1"));
    child.parent_run = Some(id.clone());
    child.channel = Channel::Agent("cmo".into());
    cfo.insert_run(child).unwrap();
    let failing = RunId::random();
    cfo.insert_run(new_run("cfo", &failing)).unwrap();
    cfo.apply(&failing, settle(RunStatus::Failed, "no"))
        .unwrap();
    assert_eq!(cfo.count_children(&id).unwrap(), 1);
    assert_eq!(cfo.unsettled().unwrap().len(), 1);
    assert_eq!(cfo.count_unsettled().unwrap(), 1);
    let counts = cfo.status_counts().unwrap();
    let mut expected = crate::run::RunCounts::default();
    expected.add(RunStatus::Queued, 1);
    expected.add(RunStatus::Succeeded, 1);
    expected.add(RunStatus::Failed, 1);
    assert_eq!(counts, expected);
    let last = cfo.last_failed().unwrap().unwrap();
    assert_eq!((last.id, last.error.as_deref()), (failing, Some("no")));
    assert!(cfo.chain(&id).unwrap().is_empty());
    assert!(matches!(
        cfo.chain(&RunId::random()),
        Err(ActorsError::UnknownRun(_))
    ));
}

/// The same rows page the same way in both backends: newest first, ties by id in byte
/// order, cursors continuing exactly after the run they name, owners filtered.
#[test]
fn pages_and_cursors_are_the_same_as_sqlites() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("pages"));
    let mut db = Database::connect(&url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = RunStore::open(&dir.path().join("runs.db"), Durability::Normal).unwrap();
    for i in 0..11 {
        let mut new = new_run("cfo", &RunId::random());
        if i % 3 == 0 {
            new.identity = Identity::Present(crate::visibility::Caller::new(
                crate::visibility::Principal::Api("alice".into()),
                Default::default(),
            ));
        }
        db.store("cfo").insert_run(new.clone()).unwrap();
        sqlite.insert_run(new).unwrap();
    }
    // Many runs in the same millisecond, in both: the tie-break decides.
    let ms_of = |i: i64| 1_000 + i % 4;
    let ids: Vec<String> = db
        .store("cfo")
        .runs()
        .unwrap()
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let ms = ms_of(i as i64);
        db.client
            .execute(
                "UPDATE consort.runs SET created_at_ms = $1 WHERE id = $2",
                &[&ms, id],
            )
            .unwrap();
        sqlite_set_created(&dir.path().join("runs.db"), id, ms);
    }
    for owner in [None, Some("api:alice")] {
        for limit in [1, 3, 4, 20] {
            let pages = |store: &mut dyn RunLog| {
                let mut cursor: Option<RunCursor> = None;
                let mut pages = Vec::new();
                loop {
                    let page = store.runs_page(cursor.as_ref(), owner, limit).unwrap();
                    let Some(last) = page.last() else { break };
                    cursor = Some(RunCursor::after(last));
                    pages.push(page.iter().map(|r| r.id.to_string()).collect::<Vec<_>>());
                }
                pages
            };
            let from_pg = pages(&mut db.store("cfo"));
            let from_sqlite = pages(&mut sqlite);
            assert_eq!(from_pg, from_sqlite, "owner {owner:?}, limit {limit}");
            let all: Vec<String> = from_pg.concat();
            let expected = if owner.is_some() { 4 } else { 11 };
            assert_eq!(all.len(), expected, "owner {owner:?}, limit {limit}");
        }
    }
    let listing = |runs: Vec<crate::run::RunRecord>| -> Vec<(u64, String)> {
        runs.into_iter()
            .map(|r| (r.created_at_ms, r.id.to_string()))
            .collect()
    };
    let pg_all = listing(db.store("cfo").runs().unwrap());
    assert_eq!(pg_all, listing(sqlite.runs().unwrap()));
    let mut sorted = pg_all.clone();
    sorted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.as_bytes().cmp(b.1.as_bytes())));
    assert_eq!(pg_all, sorted);
}

fn sqlite_set_created(path: &Path, id: &str, ms: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "UPDATE runs SET created_at_ms = ?1 WHERE id = ?2",
        rusqlite::params![ms, id],
    )
    .unwrap();
}

/// The host's writer: a batch of many agents' writes is one transaction (one commit), a write
/// that fails rolls back alone, an answer means committed, and a new writer on the same
/// database (a restarted host) reads back every unsettled run. Inspection reads it all.
#[test]
fn the_writer_group_commits_across_agents_and_resumes_after_a_restart() {
    // The server is started, and its database made, off the async runtime: the client blocks.
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("writer"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(group_commit_and_resume(url));
}

async fn group_commit_and_resume(url: PostgresUrl) {
    let backend = StoreBackend::Postgres(url.clone());
    let writer = StoreWriter::start_on(&backend, 1).await.unwrap();
    let agents = ["cfo", "cmo", "coo", "cto"];
    let mut stores = Vec::new();
    for agent in agents {
        stores.push(
            writer
                .open(&store_path(agent), Durability::Normal)
                .await
                .unwrap(),
        );
    }
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    for (i, store) in stores.iter().enumerate() {
        for _ in 0..8 {
            let id = RunId::random();
            let new = new_run(agents[i], &id);
            ids.push((i, id));
            pending.push(store.write(move |s| s.insert_run(new)));
        }
    }
    for p in pending {
        assert!(matches!(p.wait().await.unwrap(), Inserted::Created(_)));
    }
    let before = writer.counts();
    // Queued back to back: good appends of every agent, and one append of a run that does
    // not exist, in the middle of the batch.
    let mut good = Vec::new();
    for (i, id) in ids.iter().step_by(2) {
        let id = id.clone();
        good.push(stores[*i].write(move |s| s.append(&id, settle(RunStatus::Succeeded, "kept"))));
    }
    let bad = stores[1].write(|s| s.append(&RunId::random(), settle(RunStatus::Succeeded, "x")));
    let also_good = stores[2].write(|s| s.insert_run(new_run("coo", &RunId::random())));
    assert!(matches!(bad.wait().await, Err(ActorsError::UnknownRun(_))));
    assert!(matches!(
        also_good.wait().await.unwrap(),
        Inserted::Created(_)
    ));
    let settled = good.len() as u64;
    for p in good {
        let applied = p.wait().await.unwrap();
        assert_eq!(applied.record.output.as_deref(), Some("kept"));
        // Answered means committed: another connection sees it.
        let (url, id) = (url.clone(), applied.record.id.clone());
        let agent = applied.record.agent.clone();
        let seen = tokio::task::spawn_blocking(move || {
            let mut other = Database::connect_read_only(&url).unwrap();
            other.store(&agent).run(&id).unwrap().unwrap().status
        })
        .await
        .unwrap();
        assert_eq!(seen, RunStatus::Succeeded);
    }
    let after = writer.counts();
    let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
    assert_eq!(writes, settled + 2);
    assert!(
        commits * 4 <= writes,
        "{writes} queued writes of four agents took {commits} commits: no group commit"
    );

    // A write to a store that is not open is refused; a read is not.
    stores[0].close();
    let refused = stores[0]
        .write(|s| s.insert_run(new_run("cfo", &RunId::random())))
        .wait()
        .await;
    assert!(
        matches!(refused, Err(ActorsError::Commit { ref detail, .. }) if detail.contains("not open")),
        "{refused:?}"
    );

    // A restarted host: a new writer on the same database resumes what was not settled.
    let expected_unsettled: usize = 4 * 8 + 1 - settled as usize;
    drop(stores);
    drop(writer);
    let writer = StoreWriter::start_on(&backend, 1).await.unwrap();
    let mut unsettled = 0;
    for agent in agents {
        let store = writer
            .open(&store_path(agent), Durability::Normal)
            .await
            .unwrap();
        unsettled += store.unsettled().await.unwrap().len();
    }
    assert_eq!(unsettled, expected_unsettled);

    // Read-only inspection sees the same, and never writes.
    let data = crate::DataFolder::with_store("/nonexistent-data", &backend);
    let (first_agent, first_id) = (agents[ids[0].0], ids[0].1.clone());
    let inspected = tokio::task::spawn_blocking(move || {
        let agents = data.agents().unwrap();
        let all = data.runs(None).unwrap();
        let page = data.runs_page(None, None, None, 5).unwrap();
        let run = data.run(&first_id).unwrap().unwrap();
        let events = data.events_page(&first_id, 0, 10).unwrap().unwrap();
        let of = data.run_of(first_agent, &first_id).unwrap().unwrap();
        let known = data.has_store("cfo").unwrap() && !data.has_store("nobody").unwrap();
        let refused = data.runs(Some("nobody")).unwrap_err();
        (agents, all.len(), page, run, events, of, known, refused)
    })
    .await
    .unwrap();
    let (agents_seen, total, page, run, events, of, known, refused) = inspected;
    assert_eq!(agents_seen, agents);
    assert_eq!(total, 4 * 8 + 1);
    assert_eq!(page.runs.len(), 5);
    assert!(page.next.is_some());
    assert_eq!(run.agent, first_agent);
    assert!(!events.events.is_empty());
    assert_eq!(of.0.id, run.id);
    assert!(known);
    assert!(matches!(refused, ActorsError::UnknownAgent(_)));
}

#[tokio::test]
async fn a_missing_url_variable_and_an_unreachable_server_are_typed_errors() {
    let missing = PostgresUrl::from_env("CONSORT_TEST_SURELY_UNSET_PG_URL").unwrap_err();
    assert!(
        matches!(&missing, ActorsError::StoreUrlMissing { var } if var == "CONSORT_TEST_SURELY_UNSET_PG_URL"),
        "{missing}"
    );
    // Port 1 on loopback: nothing listens there.
    let url = PostgresUrl::new("host=127.0.0.1 port=1 user=consort connect_timeout=2");
    let unreachable = StoreWriter::start_on(&StoreBackend::Postgres(url.clone()), 1)
        .await
        .unwrap_err();
    assert!(
        matches!(unreachable, ActorsError::Postgres { ref store, .. } if store == "connect"),
        "{unreachable}"
    );
    assert!(
        !format!("{url:?}").contains("127.0.0.1"),
        "the URL is hidden"
    );
}

/// Not a check: how long the writer takes for 4,000 inserts of 8 agents queued at once (group
/// commit) and for 400 inserts one at a time, on SQLite and on the test server (fsync off).
/// `cargo test --release -p consort-actors --lib measure_the_writer -- --ignored --nocapture`
/// (docs/BENCHMARKS.md).
#[test]
#[ignore = "a measurement, not a check"]
fn measure_the_writer_on_both_backends() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("measure"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, backend) in [
        ("sqlite", StoreBackend::Sqlite),
        ("postgres", StoreBackend::Postgres(url)),
    ] {
        runtime.block_on(async {
            let writer = StoreWriter::start_on(&backend, 128).await.unwrap();
            let mut stores = Vec::new();
            for a in 0..8 {
                let agent = format!("a{a}");
                let path = dir
                    .path()
                    .join(name)
                    .join("agents")
                    .join(&agent)
                    .join("runs.db");
                let store = writer.open(&path, Durability::Normal).await.unwrap();
                stores.push((agent, store));
            }
            let started = std::time::Instant::now();
            let mut pending = Vec::new();
            for i in 0..4000 {
                let (agent, store) = &stores[i % 8];
                let new = new_run(agent, &RunId::random());
                pending.push(store.write(move |s| s.insert_run(new)));
            }
            for p in pending {
                p.wait().await.unwrap();
            }
            eprintln!(
                "{name}: 4000 inserts of 8 agents queued at once: {:?}, {} commits",
                started.elapsed(),
                writer.counts().commits
            );
            let started = std::time::Instant::now();
            for i in 0..400 {
                let (agent, store) = &stores[i % 8];
                let new = new_run(agent, &RunId::random());
                store
                    .write(move |s| s.insert_run(new))
                    .wait()
                    .await
                    .unwrap();
            }
            eprintln!(
                "{name}: 400 inserts one at a time: {:?} each",
                started.elapsed() / 400
            );
        });
    }
}

/// A cancel, as `consort_core::step` writes it, stored and read back by `store`.
fn store_a_cancel(store: &mut dyn RunLog) -> Vec<RunEvent> {
    let id = RunId::random();
    store.insert_run(new_run("cfo", &id)).unwrap();
    let cancel = settled(
        vec![RunEvent::Canceled(consort_core::event::Canceled {
            by: "api:alice".into(),
            reason: Some("stale".into()),
        })],
        Err("canceled by api:alice: stale".into()),
    );
    let run = store.apply(&id, cancel).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some("canceled by api:alice: stale"));
    let stored = store.run(&id).unwrap().unwrap();
    assert_eq!(stored.error, run.error);
    assert!(store.unsettled().unwrap().is_empty());
    store
        .events(&id)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

#[test]
fn a_cancel_reads_back_the_same_from_both_backends() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("cancel"));
    let mut db = Database::connect(&url).unwrap();
    let from_postgres = store_a_cancel(&mut db.store("cfo"));
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = RunStore::open(&dir.path().join("runs.db"), Durability::Normal).unwrap();
    let from_sqlite = store_a_cancel(&mut sqlite);
    let kinds: Vec<_> = from_postgres.iter().map(RunEvent::kind).collect();
    assert_eq!(kinds, ["created", "canceled", "failed", "status"]);
    // The created events differ only in their run ids; the rest is the same.
    assert_eq!(from_postgres[1..], from_sqlite[1..]);
}

/// Leases: refused while held, taken when released or ended, taken over with a new epoch, and
/// a batch under a lease another host took is refused by the fence.
#[test]
fn an_agent_store_has_one_lease_holder_at_a_time() {
    use super::lease::{Leases, OnHeld, StoreLease};
    use std::time::{Duration, Instant};

    let Some(server) = TestServer::start() else {
        return;
    };
    let url = PostgresUrl::new(server.database("leases"));
    let mut a_db = Database::connect(&url).unwrap();
    let mut b_db = Database::connect(&url).unwrap();
    let agents = vec!["cfo".to_owned()];
    let short = StoreLease::default().with_ttl(Duration::from_secs(1));

    let mut a = Leases::new("alpha", short);
    a.acquire_all(a_db.client_mut(), &agents).unwrap();
    assert!(a.holds("cfo"));
    // Taking it again is a renewal, not a new epoch: the fence still passes.
    a.ensure(a_db.client_mut(), "cfo").unwrap();
    a_db.begin_batch().unwrap();
    a.fence(a_db.client_mut(), &agents).unwrap();
    a_db.commit_batch().unwrap();

    // Another host is refused, and told who holds it.
    let mut b = Leases::new("beta", short);
    match b.acquire_all(b_db.client_mut(), &agents) {
        Err(ActorsError::StoreLeased { agent, holder, .. }) => {
            assert_eq!(agent, "cfo");
            assert!(holder.contains("host alpha"), "{holder}");
        }
        other => panic!("expected StoreLeased, got {other:?}"),
    }
    assert!(!b.holds("cfo"));

    // Taken over now: the holder's next batch is fenced off, and it drops the lease.
    let mut b = Leases::new("beta", short.on_held(OnHeld::TakeOver));
    b.acquire_all(b_db.client_mut(), &agents).unwrap();
    a_db.begin_batch().unwrap();
    let fenced = a.fence(a_db.client_mut(), &agents).unwrap_err();
    assert!(
        fenced.contains("cfo") && fenced.contains("host beta"),
        "{fenced}"
    );
    a_db.rollback_batch().unwrap();
    assert!(!a.holds("cfo"));

    // Released (the host stopped): a third host takes it at once.
    b.release_all(b_db.client_mut());
    let mut c = Leases::new("gamma", short);
    c.acquire_all(a_db.client_mut(), &agents).unwrap();
    assert!(c.holds("cfo"));

    // A standby waits for a lease nobody renews, then takes it.
    let started = Instant::now();
    let mut d = Leases::new("delta", short.on_held(OnHeld::Standby));
    d.acquire_all(b_db.client_mut(), &agents).unwrap();
    assert!(d.holds("cfo"));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // The host it took it from finds out at its next renewal.
    std::thread::sleep(Duration::from_millis(400));
    c.renew_if_due(a_db.client_mut());
    assert!(!c.holds("cfo"));
}
