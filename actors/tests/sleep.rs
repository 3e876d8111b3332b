//! Agents that sleep: a host wakes an agent's actor when a message needs it, retires it once
//! it has been idle for its idle time, and after a restart wakes only the agents that may hold
//! unsettled runs. Real actors, real SQLite stores, script models.

use std::path::Path;
use std::time::Duration;

use consort_actors::supervisor::AgentStatus;
use consort_actors::{Channel, Host, HostSpec, RunStatus};
use consort_config::AgentSet;
use consort_core::directory::ActorState;

fn write(dir: &Path, name: &str, yaml: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("agent.yaml"), yaml).unwrap();
}

/// cmo calls cfo, whose ledger waits for an operator's approval; `idle0..idleN` are never
/// called.
fn agents(dir: &Path, idle: usize) -> AgentSet {
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
    for i in 0..idle {
        write(
            &agents,
            &format!("idle{i}"),
            &format!("name: idle{i}\nmodel: {{script: [{{answer: ok}}]}}\n"),
        );
    }
    rusqlite::Connection::open(agents.join("cfo/ledger.db"))
        .unwrap()
        .execute_batch("CREATE TABLE IF NOT EXISTS t (x INTEGER);")
        .unwrap();
    AgentSet::load(std::slice::from_ref(&agents)).unwrap()
}

async fn host(dir: &Path, idle: usize, idle_after: Option<Duration>) -> Host {
    let options = consort_actors::AgentOptions::default().with_idle_after(idle_after);
    let spec = HostSpec::builder(agents(dir, idle), dir.join("data"))
        .options(options)
        .checkpoint_every(Duration::from_millis(50))
        .watch_config(None)
        .build();
    let (host, _join) = Host::spawn(spec).await.unwrap();
    host
}

/// Who holds `agent`'s seat, as this host reports it to the peer directory.
async fn seat(host: &Host, agent: &str) -> String {
    let (_, reports) = host
        .inbox()
        .presence(vec![agent.to_owned()], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reports[0].actor, ActorState::Up, "{reports:?}");
    reports[0].incarnation.clone()
}

fn status<'a>(all: &'a [AgentStatus], name: &str) -> &'a AgentStatus {
    all.iter().find(|s| s.name == name).unwrap()
}

/// Waits until `name` is awake (or asleep), as `awake` says.
async fn until_awake(host: &Host, name: &str, awake: bool) {
    for _ in 0..200 {
        let all = host.agent_status().await.unwrap();
        if status(&all, name).awake == awake {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{name} never became awake={awake}");
}

/// The cfo run of `parent`, once it waits for approval.
async fn blocked_child(
    host: &Host,
    parent: &consort_actors::RunRecord,
) -> consort_actors::RunRecord {
    for _ in 0..200 {
        if let Some(child) = host
            .jobs(Some("cfo"))
            .await
            .ok()
            .into_iter()
            .flatten()
            .find(|r| r.parent_run.as_ref() == Some(&parent.id) && r.status == RunStatus::Blocked)
        {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no blocked child of {}", parent.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_host_wakes_no_agent_and_a_run_wakes_the_ones_it_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path(), 20, None).await;
    let all = host.agent_status().await.unwrap();
    assert_eq!(all.len(), 22);
    assert!(all.iter().all(|s| s.up && !s.awake), "{all:?}");
    // No store was opened, so none exists yet, and the writer holds no connection.
    assert!(!tmp.path().join("data/agents").exists());
    assert_eq!(host.store_counts().open, 0);

    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let child = blocked_child(&host, &parent).await;
    let all = host.agent_status().await.unwrap();
    assert!(status(&all, "cmo").awake && status(&all, "cfo").awake);
    assert_eq!(all.iter().filter(|s| s.awake).count(), 2, "{all:?}");
    host.decide(&child.id, true).await.unwrap();
    let done = host
        .wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("per the CFO: 42"));
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_sleeps_and_the_next_call_wakes_it_with_its_runs_and_seat() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host(tmp.path(), 0, Some(Duration::from_millis(200))).await;
    let seat_before = seat(&host, "cfo").await;

    let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    // A run at its gate keeps its agent awake however long it waits.
    let child = blocked_child(&host, &parent).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let all = host.agent_status().await.unwrap();
    assert!(
        status(&all, "cfo").awake && status(&all, "cmo").awake,
        "{all:?}"
    );
    host.decide(&child.id, true).await.unwrap();
    host.wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();

    // Settled and idle: both retire, let their stores go and leave no marker.
    until_awake(&host, "cfo", false).await;
    until_awake(&host, "cmo", false).await;
    let all = host.agent_status().await.unwrap();
    assert!(all.iter().all(|s| s.up && s.restarts == 0), "{all:?}");
    assert_eq!(host.store_counts().open, 0);
    let markers = std::fs::read_dir(tmp.path().join("data/awake"))
        .unwrap()
        .count();
    assert_eq!(markers, 0);
    // Sleeping is not a restart: the seat the directory pins waits to is the same.
    assert_eq!(seat(&host, "cfo").await, seat_before);

    // The next run wakes both; what they stored before is still read.
    let again = host
        .start_run("cmo", "September", Channel::Api)
        .await
        .unwrap();
    let child = blocked_child(&host, &again).await;
    host.decide(&child.id, true).await.unwrap();
    let done = host.wait(&again.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(host.jobs(None).await.unwrap().len(), 4);
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_wakes_only_the_agents_with_unsettled_runs_and_they_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let (parent, child) = {
        let host = host(tmp.path(), 30, None).await;
        // Each idle agent runs once, so each has a store.
        for i in 0..30 {
            let run = host
                .start_run(&format!("idle{i}"), "x", Channel::Api)
                .await
                .unwrap();
            host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
        }
        let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
        let child = blocked_child(&host, &parent).await;
        host.stop();
        (parent, child)
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The idle agents never retired (no idle time), so their markers stayed: a host that
    // stopped with actors up wakes them all once more; make it a real test of the markers by
    // removing the idle agents' ones, as a retirement would have.
    for i in 0..30 {
        std::fs::remove_file(tmp.path().join(format!("data/awake/idle{i}"))).unwrap();
    }
    let host = host(tmp.path(), 30, None).await;
    let all = host.agent_status().await.unwrap();
    let awake: Vec<&str> = all
        .iter()
        .filter(|s| s.awake)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(awake, ["cfo", "cmo"]);
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
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_without_markers_wakes_every_agent_with_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let (parent, child) = {
        let host = host(tmp.path(), 3, None).await;
        let parent = host.start_run("cmo", "August", Channel::Api).await.unwrap();
        let child = blocked_child(&host, &parent).await;
        host.stop();
        (parent, child)
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // As a folder written before markers existed.
    std::fs::remove_dir_all(tmp.path().join("data/awake")).unwrap();
    let host = host(tmp.path(), 3, None).await;
    let all = host.agent_status().await.unwrap();
    let awake: Vec<&str> = all
        .iter()
        .filter(|s| s.awake)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(awake, ["cfo", "cmo"], "the agents with a store");
    host.decide(&child.id, true).await.unwrap();
    let done = host
        .wait(&parent.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_that_retire_between_every_call_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "caller",
        "name: caller\nagents: {can_call: [callee]}\nmodel:\n  script:\n    - call: [{agent: callee, input: \"{input}\"}]\n    - answer: \"got {reply.callee}\"\n",
    );
    write(
        &agents,
        "callee",
        "name: callee\nagents: {accept_from: [caller]}\nmodel:\n  script:\n    - answer: \"echo {input}\"\n",
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    // Retired at every timer tick they are idle at: sleep and wake race the runs all along.
    let options = consort_actors::AgentOptions::default().with_idle_after(Some(Duration::ZERO));
    let spec = HostSpec::builder(set, tmp.path().join("data"))
        .options(options)
        .checkpoint_every(Duration::from_millis(5))
        .watch_config(None)
        .build();
    let (host, _join) = Host::spawn(spec).await.unwrap();
    for round in 0..10 {
        let mut runs = Vec::new();
        for i in 0..8 {
            let input = format!("r{round}.{i}");
            runs.push((
                input.clone(),
                host.start_run("caller", &input, Channel::Api)
                    .await
                    .unwrap(),
            ));
        }
        for (input, run) in runs {
            let done = host.wait(&run.id, Duration::from_secs(20)).await.unwrap();
            assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
            assert_eq!(done.output, Some(format!("got echo {input}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = host.agent_status().await.unwrap();
    assert!(all.iter().all(|s| s.up && s.restarts == 0), "{all:?}");
    assert_eq!(host.jobs(None).await.unwrap().len(), 160);
    // They did sleep and wake between rounds: each wake opens the agent's store again.
    let opened = host.store_counts().opened;
    assert!(opened >= 10, "stores opened {opened} times in 10 rounds");
    host.stop();
}
