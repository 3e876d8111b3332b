//! Hosts on the PostgreSQL run store, against a real server the test starts (skipped, with a
//! message, where no PostgreSQL binary is found; see `test_server`).
//!
//! Failover: a host accepts runs whose calls are held in the callee's first model turn, stops,
//! and a new host on the same database but with a data folder of its own (another machine, as
//! far as local disk goes) resumes them: every run settles, with exactly one child per call.
//! The CLI: `consort dev --store-url-env VAR` serves from the database, `consort jobs list
//! --data DIR --store-url-env VAR` lists what it stored, and a missing variable is a clear error
//! at start.

mod support;

#[path = "../actors/src/store/postgres/test_server.rs"]
mod test_server;

use std::path::Path;
use std::time::{Duration, Instant};

use consort_actors::store::PostgresUrl;
use consort_actors::store::StoreBackend;
use consort_actors::{Channel, RunRecord, RunStatus};
use consort_fleet::dev::{DevHost, DevOptions};
use serde_json::Value;
use support::{Fleet, path_str, stderr};
use test_server::TestServer;

const PARENT: &str = r#"
name: parent
description: asks the worker
agents: {can_call: [worker]}
model:
  script:
    - call: [{agent: worker, input: "{input}"}]
    - answer: "parent heard: {replies}"
"#;

/// One turn, held until the file `go` exists in the agent's folder.
const HELD_WORKER: &str = "name: worker\ndescription: works\nagents: {accept_from: [parent]}\nmodel: {kind: command, argv: [sh, model.sh], timeout_s: 120}\n";
const HELD_MODEL: &str = r#"while IFS= read -r line; do
  while [ ! -e go ]; do sleep 0.05; done
  printf '%s\n' '{"answer": "worked"}'
done
"#;

const QUICK_WORKER: &str = r#"
name: worker
description: works
agents: {accept_from: [parent]}
model:
  script:
    - answer: "worked on {input}"
"#;

const RUNS: usize = 3;
const BOUND: Duration = Duration::from_secs(60);

fn dev_options(fleet: &Fleet, data: &Path, url: &str) -> DevOptions {
    DevOptions {
        store: StoreBackend::Postgres(PostgresUrl::new(url)),
        ..DevOptions::new(vec![fleet.agents()], data.to_path_buf())
    }
}

/// Every run of `host` (the handle reads them on a blocking thread).
async fn all_runs(host: &consort_actors::Host) -> Vec<RunRecord> {
    host.jobs(None).await.expect("runs read")
}

#[test]
fn a_new_host_on_the_same_database_resumes_and_settles_the_runs() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database("failover");
    let fleet = Fleet::new();
    fleet.agent("parent", PARENT);
    let worker = fleet.agent("worker", HELD_WORKER);
    let worker_dir = worker.parent().expect("agent folder").to_path_buf();
    std::fs::write(worker_dir.join("model.sh"), HELD_MODEL).expect("model program");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // The first host accepts the runs; each parent calls the worker, whose turn is held.
        let first = DevHost::start(dev_options(&fleet, &fleet.dir.path().join("a"), &url))
            .await
            .expect("first host");
        let mut parents = Vec::new();
        for i in 0..RUNS {
            let run = first
                .host
                .start_run("parent", &format!("job {i}"), Channel::Api)
                .await
                .expect("run started");
            parents.push(run.id);
        }
        let deadline = Instant::now() + BOUND;
        loop {
            let runs = all_runs(&first.host).await;
            let held = runs
                .iter()
                .filter(|r| r.agent == "worker" && !r.status.is_settled())
                .count();
            if held == RUNS {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the calls were not placed: {runs:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The first host goes away with every run unsettled.
        first.host.stop();
        first.server.abort();
        let deadline = Instant::now() + BOUND;
        while first.host.supervisor().get_status() != ractor::ActorStatus::Stopped {
            assert!(Instant::now() < deadline, "the first host did not stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let unsettled = all_runs(&first.host)
            .await
            .iter()
            .filter(|r| !r.status.is_settled())
            .count();
        assert_eq!(unsettled, 2 * RUNS, "every run was left unsettled");

        // A new host, with a data folder of its own, on the same database.
        std::fs::write(worker_dir.join("go"), "").expect("go");
        let second = DevHost::start(dev_options(&fleet, &fleet.dir.path().join("b"), &url))
            .await
            .expect("second host");
        for id in &parents {
            let run = second.host.wait(id, BOUND).await.expect("run read");
            assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
            assert_eq!(run.output.as_deref(), Some("parent heard: worker: worked"));
        }
        let runs = all_runs(&second.host).await;
        for id in &parents {
            let children = runs
                .iter()
                .filter(|r| r.parent_run.as_ref() == Some(id))
                .count();
            assert_eq!(children, 1, "one child per call: {runs:?}");
        }
        assert_eq!(runs.len(), 2 * RUNS);
        assert!(runs.iter().all(|r| r.status == RunStatus::Succeeded));
        second.host.stop();
    });
}

#[test]
fn consort_dev_and_jobs_list_read_the_url_from_the_named_variable() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database("cli");
    let fleet = Fleet::new();
    fleet.agent("parent", PARENT);
    fleet.agent("worker", QUICK_WORKER);
    let data = fleet.data();
    let with_url = |args: &[&str]| {
        std::process::Command::new(support::BIN)
            .args(args)
            .env("CONSORT_TEST_PG_URL", &url)
            .env_remove("CONSORT_AT")
            .env_remove("CONSORT_FAULT")
            .output()
            .expect("consort ran")
    };
    let agents = fleet.agents();
    let asked = with_url(&[
        "dev",
        path_str(&agents),
        "--data",
        path_str(&data),
        "--store-url-env",
        "CONSORT_TEST_PG_URL",
        "--ask",
        "parent",
        "go",
        "--json",
    ]);
    assert!(asked.status.success(), "dev --ask: {}", stderr(&asked));
    let answer: Value = serde_json::from_slice(&asked.stdout).expect("json");
    assert_eq!(answer["answer"], "parent heard: worker: worked on go");
    // Nothing of the runs is in the data folder: they are in the database.
    assert!(!data.join("agents").join("parent").join("runs.db").exists());

    let listed = with_url(&[
        "jobs",
        "list",
        "--data",
        path_str(&data),
        "--store-url-env",
        "CONSORT_TEST_PG_URL",
        "--json",
    ]);
    assert!(listed.status.success(), "jobs list: {}", stderr(&listed));
    let page: Value = serde_json::from_slice(&listed.stdout).expect("json");
    let agents: Vec<&str> = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["agent"].as_str())
        .collect();
    assert_eq!(agents.len(), 2, "{page}");
    assert!(agents.contains(&"parent") && agents.contains(&"worker"));

    // A variable that is not set stops the start with an error that names it.
    let missing = support::consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&data),
        "--store-url-env",
        "CONSORT_TEST_PG_URL_NOT_SET",
        "--ask",
        "parent",
        "go",
    ]);
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("CONSORT_TEST_PG_URL_NOT_SET"),
        "{}",
        stderr(&missing)
    );
}

/// `consort serve` of a host whose fleet.yaml says `store: {kind: postgres, url_env: VAR}`:
/// it serves from the database (the HTTP API's reads too), and a server that cannot be reached
/// stops the start with an error naming the store.
#[test]
fn consort_serve_keeps_runs_where_fleet_yaml_says() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database("serve");
    let fleet = Fleet::new();
    fleet.agent("parent", PARENT);
    fleet.agent("worker", QUICK_WORKER);
    let keys = fleet.dir.path().join("keys");
    let keygen = support::consort(&["keygen", "--out", path_str(&keys), "--name", "alpha"]);
    assert!(keygen.status.success(), "keygen: {}", stderr(&keygen));
    let public = String::from_utf8_lossy(&keygen.stdout).trim().to_owned();
    let link_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free port")
        .port();
    let fleet_file = fleet.dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet_file,
        format!(
            "hosts:\n  - name: alpha\n    address: 127.0.0.1:{link_port}\n    public_key: \"{public}\"\n    agents: [agents]\n    store: {{kind: postgres, url_env: CONSORT_TEST_PG_URL}}\n"
        ),
    )
    .expect("fleet.yaml");
    let data = fleet.dir.path().join("alpha");
    let serve = |pg_url: &str, log: &Path| {
        std::process::Command::new(support::BIN)
            .args(["serve", "--fleet", path_str(&fleet_file), "--host", "alpha"])
            .args(["--data", path_str(&data)])
            .env("CONSORT_TEST_PG_URL", pg_url)
            .env("RUST_LOG", "info")
            .env_remove("CONSORT_FAULT")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("consort serve")
    };

    // Nothing listens on port 1: the start fails, and says which store.
    let log = fleet.dir.path().join("unreachable.log");
    let mut refused = serve("host=127.0.0.1 port=1 user=consort connect_timeout=2", &log);
    let status = support::eventually("serve to give up", BOUND, || {
        refused.try_wait().expect("wait")
    });
    assert!(!status.success());
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(said.contains("PostgreSQL run store (connect)"), "{said}");

    let log = fleet.dir.path().join("serve.log");
    let mut host = serve(&url, &log);
    let base = support::eventually("serve.json", BOUND, || {
        let note: Value =
            serde_json::from_str(&std::fs::read_to_string(data.join("serve.json")).ok()?).ok()?;
        note["url"].as_str().map(str::to_owned)
    });
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http");
    let started: Value = http
        .post(format!("{base}/runs"))
        .json(&serde_json::json!({"agent": "parent", "input": "q3"}))
        .send()
        .and_then(|r| r.json())
        .expect("run started");
    let id = started["id"].as_str().expect("run id").to_owned();
    let settled = support::eventually("the run to settle", BOUND, || {
        let run: Value = http
            .get(format!("{base}/runs/{id}?wait_ms=1000"))
            .send()
            .ok()?
            .json()
            .ok()?;
        (run["status"] == "succeeded").then_some(run)
    });
    assert_eq!(settled["output"], "parent heard: worker: worked on q3");
    let events: Value = http
        .get(format!("{base}/runs/{id}/events"))
        .send()
        .and_then(|r| r.json())
        .expect("events");
    assert!(
        events["events"].as_array().is_some_and(|e| e.len() >= 3),
        "{events}"
    );
    let _ = host.kill();
    let _ = host.wait();
    assert!(!data.join("agents").join("parent").join("runs.db").exists());
}
