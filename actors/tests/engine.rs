//! The engine end to end inside one process: real actors, real SQLite stores, script models.

use std::path::Path;
use std::time::Duration;

use consort_actors::{Channel, Host, HostSpec, RunStatus};
use consort_config::AgentSet;

fn write(dir: &Path, name: &str, yaml: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("agent.yaml"), yaml).unwrap();
}

fn ledger(dir: &Path) {
    let conn = rusqlite::Connection::open(dir.join("cfo/ledger.db")).unwrap();
    conn.execute_batch(
        "CREATE TABLE spend (month TEXT, amount REAL);
         INSERT INTO spend VALUES ('2026-08', 40000), ('2026-08', 8250), ('2026-07', 1);",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cmo_asks_cfo_who_answers_from_its_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "cmo",
        r#"
name: cmo
agents: {can_call: [cfo]}
model:
  script:
    - call: [{agent: cfo, input: "{input}"}]
    - answer: "August spend per the CFO: {reply.cfo}"
"#,
    );
    write(
        &agents,
        "cfo",
        r#"
name: cfo
agents: {accept_from: [cmo]}
model:
  script:
    - tool: {name: ledger, input: "SELECT sum(amount) FROM spend WHERE month = '2026-08'"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger}
"#,
    );
    std::fs::write(agents.join("cfo/ledger.db"), b"").unwrap();
    std::fs::remove_file(agents.join("cfo/ledger.db")).unwrap();
    ledger(&agents);
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let (host, _join) = Host::spawn(HostSpec::new(set, tmp.path().join("data")))
        .await
        .unwrap();
    let run = host.start_run("cmo", "August", Channel::Api).await.unwrap();
    let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(
        done.output.as_deref(),
        Some("August spend per the CFO: 48250")
    );
    let jobs = host.jobs(None).unwrap();
    assert_eq!(jobs.len(), 2);
    let cfo = jobs.iter().find(|r| r.agent == "cfo").unwrap();
    assert_eq!(cfo.channel, Channel::Agent("cmo".into()));
    assert_eq!(cfo.hop_depth, 1);
    assert_eq!(cfo.cost.tool_calls, 1);
    assert_eq!(done.cost.calls_placed, 1);
    let kinds: Vec<String> = host
        .events(&run.id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&"reply_received".to_string()), "{kinds:?}");
    host.stop();
}
