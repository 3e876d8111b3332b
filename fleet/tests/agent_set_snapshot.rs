//! A `consort dev` host and the agent set's snapshot in its data folder: a restart on unchanged
//! agent folders takes every agent from it and serves them as the first start did, and a
//! snapshot that can be neither read nor written never keeps a host from serving.

use std::path::Path;
use std::time::Duration;

use consort_actors::{Channel, RunStatus};
use consort_fleet::dev::{AGENT_SET_SNAPSHOT, DevHost, DevOptions};

fn agents(root: &Path) -> std::path::PathBuf {
    let agents = root.join("agents");
    for (name, yaml) in [
        (
            "a",
            "name: a\nagents: {accept_from: [caller]}\nmodel: {script: [{answer: \"a got {input}\"}]}\n",
        ),
        (
            "caller",
            "name: caller\nagents: {can_call: [a]}\nmodel: {script: [{answer: hi}]}\n",
        ),
    ] {
        std::fs::create_dir_all(agents.join(name)).unwrap();
        std::fs::write(agents.join(name).join("agent.yaml"), yaml).unwrap();
    }
    agents
}

/// Starts a host on `data`, runs `a` once and stops the host; returns what its load did.
async fn serve_once(agents: &Path, data: &Path) -> consort_config::SnapshotReport {
    let dev = DevHost::start(DevOptions::new(vec![agents.to_path_buf()], data.into()))
        .await
        .unwrap();
    let run = dev.host.start_run("a", "x", Channel::Api).await.unwrap();
    let done = dev
        .host
        .wait(&run.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("a got x"));
    dev.host.stop();
    dev.server.abort();
    // Let the stopped host's actors and stores go before the next one starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    dev.snapshot
}

#[tokio::test]
async fn a_restart_takes_unchanged_agents_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path());
    let data = dir.path().join("data");
    // Files written a moment ago are not kept yet (they could change again under the same
    // stamp); let them settle.
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let first = serve_once(&agents, &data).await;
    assert_eq!((first.from_snapshot, first.parsed), (0, 2), "{first:?}");
    assert_eq!(first.written, Some(2), "{first:?}");
    assert!(data.join(AGENT_SET_SNAPSHOT).is_file());

    let second = serve_once(&agents, &data).await;
    assert_eq!((second.from_snapshot, second.parsed), (2, 0), "{second:?}");
    assert_eq!(second.written, None, "{second:?}");
    assert!(second.discarded.is_none(), "{second:?}");
}

#[tokio::test]
async fn a_snapshot_that_cannot_be_read_or_written_does_not_stop_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path());
    let data = dir.path().join("data");
    // A folder where the snapshot file belongs: it cannot be read as one, nor replaced by one.
    std::fs::create_dir_all(data.join(AGENT_SET_SNAPSHOT).join("in-the-way")).unwrap();
    for _ in 0..2 {
        let report = serve_once(&agents, &data).await;
        assert_eq!((report.from_snapshot, report.parsed), (0, 2), "{report:?}");
        assert!(report.discarded.is_some(), "{report:?}");
        assert!(report.write_failed.is_some(), "{report:?}");
    }
}
