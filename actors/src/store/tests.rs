//! Unit tests of the synchronous store: inserts, appends, typed errors, old layouts.
use super::schema::SCHEMA;
use super::*;
use crate::visibility::Origin;
use consort_core::step::CostDelta;
use consort_core::testing::{TransitionParts, transition};
use rusqlite::{Connection, params};

fn new_run(id: RunId) -> NewRun {
    NewRun {
        id,
        agent: "cfo".into(),
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

#[test]
fn insert_is_idempotent_on_the_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RunStore::open(&dir.path().join("runs.db"), Durability::Normal).unwrap();
    let id = RunId::random();
    assert!(matches!(
        store.insert_run(new_run(id.clone())).unwrap(),
        Inserted::Created(_)
    ));
    assert!(matches!(
        store.insert_run(new_run(id.clone())).unwrap(),
        Inserted::Existing(_)
    ));
    assert_eq!(store.runs().unwrap().len(), 1);
    assert_eq!(store.events(&id).unwrap().len(), 1);
}

#[test]
fn apply_writes_events_status_and_cost_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let mut store = RunStore::open(&path, Durability::Full).unwrap();
    let id = RunId::random();
    store.insert_run(new_run(id.clone())).unwrap();
    let update = transition(TransitionParts {
        events: vec![RunEvent::Answer(consort_core::event::Answer {
            text: "42".into(),
        })],
        status: Some(RunStatus::Succeeded),
        output: Some("42".into()),
        cost: CostDelta {
            model_turns: 1,
            ..Default::default()
        },
        ..Default::default()
    });
    let run = store.apply(&id, update).unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.output.as_deref(), Some("42"));
    assert_eq!(run.cost.model_turns, 1);
    assert!(run.settled_at_ms.is_some());
    let kinds: Vec<_> = store
        .events(&id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind())
        .collect();
    assert_eq!(kinds, ["created", "answer", "status"]);
    let mut reader = RunStore::open_read_only(&path).unwrap();
    assert_eq!(
        reader.run(&id).unwrap().unwrap().status,
        RunStatus::Succeeded
    );
    assert!(store.unsettled().unwrap().is_empty());
}

#[test]
fn unknown_run_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RunStore::open(&dir.path().join("runs.db"), Durability::Normal).unwrap();
    let err = store
        .apply(&RunId::random(), transition(TransitionParts::default()))
        .unwrap_err();
    assert!(matches!(err, ActorsError::UnknownRun(_)));
}

#[test]
fn principal_is_stored_and_old_stores_keep_working() {
    use crate::visibility::{Caller, Principal};
    let dir = tempfile::tempdir().unwrap();
    // A store from before runs carried a principal.
    let old = dir.path().join("old.db");
    let conn = Connection::open(&old).unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    conn.execute(
        "INSERT INTO runs (id, agent, status, channel, hop_depth, input, chain, created_at_ms) \
         VALUES (?1, 'cfo', 'succeeded', 'agent:cmo', 1, 'x', '[]', 1)",
        params![RunId::random().as_str()],
    )
    .unwrap();
    drop(conn);
    let mut read_only = RunStore::open_read_only(&old).unwrap();
    assert_eq!(read_only.runs().unwrap()[0].principal, "agent:cmo");
    drop(read_only);
    let mut store = RunStore::open(&old, Durability::Normal).unwrap();
    assert_eq!(store.runs().unwrap()[0].principal, "agent:cmo");
    let mut new = new_run(RunId::random());
    new.identity = Identity::Present(Caller::new(
        Principal::Api("alice".into()),
        ["finance".to_owned()].into(),
    ));
    let record = store.insert_run(new).unwrap().record().clone();
    assert_eq!(record.principal, "api:alice");
    assert_eq!(record.roles, vec!["finance"]);
    assert_eq!(record.identity(), {
        Identity::Present(Caller::new(
            Principal::Api("alice".into()),
            ["finance".to_owned()].into(),
        ))
    });
    let mut unknown = new_run(RunId::random());
    unknown.identity = Identity::Unknown;
    let record = store.insert_run(unknown).unwrap().record().clone();
    assert_eq!(
        (record.principal.as_str(), record.identity()),
        ("unknown", Identity::Unknown)
    );
}

#[test]
fn a_new_runs_provisional_record_and_first_event_are_what_the_insert_stores() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RunStore::open(&dir.path().join("runs.db"), Durability::Normal).unwrap();
    let new = new_run(RunId::random());
    let (provisional, first) = (new.record(0), new.created_event());
    let stored = store.insert_run(new).unwrap().record().clone();
    assert_eq!(
        RunRecord {
            // The clock's: when the store wrote it, and how long ago that was.
            created_at_ms: stored.created_at_ms,
            cost: Cost {
                wall_ms: stored.cost.wall_ms,
                ..provisional.cost
            },
            tree_cost: Cost {
                wall_ms: stored.tree_cost.wall_ms,
                ..provisional.tree_cost
            },
            ..provisional
        },
        stored
    );
    assert_eq!(store.events(&stored.id).unwrap()[0].event, first);
}

/// A run's origin is stored with it and read back as it was: after a restart a called run
/// still acts for whoever started its tree. Stores from before origins read a root run as its
/// own origin and a called run's as unknown, and take the column on the next open for writing.
#[test]
fn origin_is_stored_and_old_stores_read_it_as_documented() {
    use crate::visibility::{Caller, Principal};
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    let conn = Connection::open(&old).unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    conn.execute_batch(
        "ALTER TABLE runs ADD COLUMN principal TEXT; \
         ALTER TABLE runs ADD COLUMN principal_roles TEXT;",
    )
    .unwrap();
    let (root, child) = (RunId::random(), RunId::random());
    conn.execute(
        "INSERT INTO runs (id, agent, status, channel, hop_depth, input, chain, created_at_ms, \
         principal) VALUES (?1, 'cmo', 'succeeded', 'api', 0, 'x', '[]', 1, 'api:alice')",
        params![root.as_str()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO runs (id, agent, status, channel, parent_run, hop_depth, input, chain, \
         created_at_ms, principal) VALUES (?1, 'cmo', 'waiting', 'agent:cfo', ?2, 1, 'x', '[]', \
         2, 'agent:cfo')",
        params![child.as_str(), root.as_str()],
    )
    .unwrap();
    drop(conn);
    let origin_of = |store: &mut RunStore, id: &RunId| store.run(id).unwrap().unwrap().origin;
    let mut read_only = RunStore::open_read_only(&old).unwrap();
    assert_eq!(origin_of(&mut read_only, &root), "api:alice");
    assert_eq!(origin_of(&mut read_only, &child), "unknown");
    drop(read_only);

    let mut store = RunStore::open(&old, Durability::Normal).unwrap();
    assert_eq!(origin_of(&mut store, &child), "unknown");
    let mut called = new_run(RunId::random());
    called.channel = Channel::Agent("assistant".into());
    called.parent_run = Some(root);
    called.identity = Identity::Present(Caller::new(
        Principal::Agent("assistant".into()),
        Default::default(),
    ));
    called.origin = Origin::Present(Principal::Api("bob".into()));
    let id = called.id.clone();
    let provisional = called.record(0);
    store.insert_run(called).unwrap();
    drop(store);
    // Another process (a restart) reads the same origin back.
    let mut reopened = RunStore::open(&old, Durability::Normal).unwrap();
    let record = reopened.run(&id).unwrap().unwrap();
    assert_eq!(record.origin, "api:bob");
    assert_eq!(record.origin, provisional.origin);
    assert_eq!(
        record.origin(),
        Origin::Present(Principal::Api("bob".into()))
    );
    let mut garbled = record;
    garbled.origin = "root@host".into();
    assert_eq!(garbled.origin(), Origin::Unknown, "nothing is invented");
}
