//! The engine end to end inside one process: real actors, real SQLite stores, script models.

use std::path::Path;
use std::time::Duration;

use consort_actors::supervisor::DownReason;
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
    let jobs = host.jobs(None).await.unwrap();
    assert_eq!(jobs.len(), 2);
    let cfo = jobs.iter().find(|r| r.agent == "cfo").unwrap();
    assert_eq!(cfo.channel, Channel::Agent("cmo".into()));
    assert_eq!(cfo.hop_depth, 1);
    assert_eq!(cfo.cost.tool_calls, 1);
    assert_eq!(done.cost.calls_placed, 1);
    let kinds: Vec<String> = host
        .events(&run.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind().to_owned())
        .collect();
    assert!(kinds.contains(&"reply_received".to_string()), "{kinds:?}");
    host.stop();
}

/// A tool registered by an embedding app that panics on its first `panics` uses.
struct Flaky {
    uses: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    panics: usize,
}

impl consort_actors::tools::Tool for Flaky {
    fn spec(&self) -> consort_actors::model::ToolSpec {
        consort_actors::model::ToolSpec {
            name: "flaky".into(),
            description: "panics at first".into(),
            input_schema: serde_json::json!({"type": "object", "required": ["input"]}),
        }
    }

    fn invoke<'a>(
        &'a self,
        _ctx: consort_actors::tools::ToolContext<'a>,
        _input: &'a serde_json::Value,
    ) -> consort_actors::tools::ToolFuture<'a> {
        let n = self.uses.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let panics = self.panics;
        Box::pin(async move {
            if n < panics {
                panic!("flaky tool panics on use {n}");
            }
            Ok(format!("worked on use {n}"))
        })
    }
}

/// An immediate model (run inside the agent's handler) that panics on its first `panics`
/// turns, then plays the agent's script.
struct Panicky {
    script: consort_actors::script::ScriptModel,
    turns: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    panics: usize,
}

impl consort_actors::model::Model for Panicky {
    fn respond<'a>(
        &'a self,
        request: consort_actors::model::ModelRequest<'a>,
    ) -> consort_actors::model::ModelFuture<'a> {
        let n = self.turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < self.panics {
            panic!("model panics on turn {n}");
        }
        self.script.respond(request)
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

type Counter = std::sync::Arc<std::sync::atomic::AtomicUsize>;

fn flaky_host(
    tmp: &Path,
    model_panics: usize,
    tool_panics: usize,
    max_restarts: usize,
) -> (HostSpec, Counter, Counter) {
    let agents = tmp.join("agents");
    write(
        &agents,
        "worker",
        "name: worker\nmodel:\n  script:\n    - tool: {name: flaky, input: go}\n    - answer: \"{tool.flaky}\"\n",
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let steps = match &set.get("worker").unwrap().model {
        consort_config::ModelConfig::Script { steps } => steps.clone(),
        other => panic!("a script model: {other:?}"),
    };
    let uses = Counter::default();
    let turns = Counter::default();
    let restart = consort_actors::RestartBudget {
        max_restarts,
        ..Default::default()
    };
    let spec = HostSpec::builder(set, tmp.join("data"))
        .tool(
            "worker",
            std::sync::Arc::new(Flaky {
                uses: uses.clone(),
                panics: tool_panics,
            }),
        )
        .model(
            "worker",
            std::sync::Arc::new(Panicky {
                script: consort_actors::script::ScriptModel::new(steps),
                turns: turns.clone(),
                panics: model_panics,
            }),
        )
        .restart(restart)
        .build();
    (spec, turns, uses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_agent_is_restarted_and_its_run_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, turns, uses) = flaky_host(tmp.path(), 1, 0, 5);
    let (host, _join) = Host::spawn(spec).await.unwrap();
    let run = host.start_run("worker", "x", Channel::Api).await.unwrap();
    let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("worked on use 0"));
    assert_eq!(
        turns.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "panic, tool, answer"
    );
    assert_eq!(uses.load(std::sync::atomic::Ordering::SeqCst), 1);
    let status = host.agent_status().await.unwrap();
    assert_eq!(status[0].restarts, 1);
    assert!(status[0].up);
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_fails_its_use_not_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, _turns, uses) = flaky_host(tmp.path(), 0, 1, 5);
    let (host, _join) = Host::spawn(spec).await.unwrap();
    let run = host.start_run("worker", "x", Channel::Api).await.unwrap();
    let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    let output = done.output.unwrap_or_default();
    assert!(
        output.contains("the tool failed unexpectedly (it panicked)"),
        "{output}"
    );
    assert_eq!(uses.load(std::sync::atomic::Ordering::SeqCst), 1);
    let status = host.agent_status().await.unwrap();
    assert_eq!(status[0].restarts, 0, "the agent itself never failed");
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_restart_budget_an_agent_is_down_and_its_run_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, _turns, _uses) = flaky_host(tmp.path(), usize::MAX, 0, 2);
    let (host, _join) = Host::spawn(spec).await.unwrap();
    let run = host.start_run("worker", "x", Channel::Api).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = host.agent_status().await.unwrap();
        if !status[0].up {
            assert_eq!(status[0].restarts, 2);
            let down = status[0].down.as_ref().expect("a down agent says why");
            assert_eq!(down.reason, DownReason::RestartBudgetSpent, "{down:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never went down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = host.run(&run.id).await.unwrap().unwrap();
    assert!(
        !kept.status.is_settled(),
        "the accepted run is kept for the next start: {kept:?}"
    );
    let refused = host
        .start_run("worker", "y", Channel::Api)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("down"), "{refused}");
    host.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_revives_an_agent_past_its_restart_budget_and_its_run_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    // Three panics against a budget of two: down after the third; the fourth turn plays.
    let (spec, turns, uses) = flaky_host(tmp.path(), 3, 0, 2);
    let (host, _join) = Host::spawn(spec).await.unwrap();
    let run = host.start_run("worker", "x", Channel::Api).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let down = loop {
        let status = host.agent_status().await.unwrap();
        if let Some(down) = status[0].down.clone() {
            break down;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never went down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(down.reason, DownReason::RestartBudgetSpent, "{down:?}");
    assert!(down.detail.contains("model panics on turn 2"), "{down:?}");

    // agent.yaml did not change: the reload only revives.
    let reloaded = host.reload().await.unwrap();
    assert!(reloaded.changed.is_empty(), "{reloaded:?}");
    assert_eq!(reloaded.revived, vec!["worker".to_owned()]);
    let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("worked on use 0"));
    assert_eq!(turns.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(uses.load(std::sync::atomic::Ordering::SeqCst), 1);
    let status = host.agent_status().await.unwrap();
    assert!(status[0].up && status[0].down.is_none(), "{status:?}");
    assert_eq!(status[0].restarts, 3, "two restarts and the revival");

    // Nothing is down now: a reload revives nothing.
    assert!(host.reload().await.unwrap().revived.is_empty());
    host.stop();
}

/// A model that takes its time, like one behind a network: it calls the `fast` peer, then
/// answers with the reply. Every run's first turn waits until the first turns of all four runs
/// are in progress together, which can only happen if the agent does not wait on one turn
/// before asking for the next.
struct Slow {
    together: std::sync::Arc<tokio::sync::Barrier>,
}

impl consort_actors::model::Model for Slow {
    fn respond<'a>(
        &'a self,
        request: consort_actors::model::ModelRequest<'a>,
    ) -> consort_actors::model::ModelFuture<'a> {
        use consort_actors::model::{Message, ModelReply, ModelStep, ToolUse};
        let reply = request.conversation.iter().find_map(|m| match m {
            Message::Reply { text, .. } => Some(text.clone()),
            _ => None,
        });
        let called = request
            .conversation
            .iter()
            .any(|m| matches!(m, Message::Assistant { .. }));
        let step = match (reply, called) {
            (Some(text), _) => ModelStep::Answer(format!("slow got: {text}")),
            (None, true) => ModelStep::Wait,
            (None, false) => ModelStep::ToolUses(vec![ToolUse {
                id: "t1".into(),
                name: "call_agent".into(),
                input: serde_json::json!({"agent": "fast", "input": "ping"}),
            }]),
        };
        let together = self.together.clone();
        Box::pin(async move {
            if !called {
                together.wait().await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(ModelReply::new(step))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_does_not_block_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "slow",
        "name: slow\nagents: {can_call: [fast], accept_from: [fast]}\nmodel: {script: []}\n",
    );
    write(
        &agents,
        "fast",
        "name: fast\nagents: {accept_from: [slow], can_call: [slow]}\nmodel:\n  script:\n    - answer: \"pong to {input}\"\n",
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let spec = HostSpec::builder(set, tmp.path().join("data"))
        .model("slow", std::sync::Arc::new(Slow { together }))
        .build();
    let (host, _join) = Host::spawn(spec).await.unwrap();
    // Several runs of the slow agent at once: their turns overlap instead of queueing.
    let mut runs = Vec::new();
    for i in 0..4 {
        runs.push(
            host.start_run("slow", &format!("r{i}"), Channel::Api)
                .await
                .unwrap(),
        );
    }
    for run in &runs {
        let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
        assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
        assert_eq!(done.output.as_deref(), Some("slow got: pong to ping"));
        assert_eq!(
            done.cost.model_turns, 2,
            "the call, then the answer: {done:?}"
        );
    }
    host.stop();
}

/// Admission counts unsettled runs in memory: a settled run frees its slot at once, and a
/// restarted host counts what its store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_counts_unsettled_runs_and_frees_a_slot_when_one_settles() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "cfo",
        r#"
name: cfo
model:
  script:
    - tool: {name: ledger, input: "SELECT 1"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}
"#,
    );
    ledger(&agents);
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let options = consort_actors::AgentOptions::default().with_admission_limit(2);
    let spec = HostSpec::builder(set.clone(), tmp.path().join("data"))
        .options(options)
        .build();
    let (host, _join) = Host::spawn(spec.clone()).await.unwrap();
    let a = host.start_run("cfo", "a", Channel::Api).await.unwrap();
    let b = host.start_run("cfo", "b", Channel::Api).await.unwrap();
    let third = host.start_run("cfo", "c", Channel::Api).await;
    let refused = third.expect_err("a third run is over the admission limit");
    assert!(
        refused
            .to_string()
            .contains("saturated (2 runs in progress)"),
        "{refused}"
    );
    for id in [&a.id, &b.id] {
        let mut blocked = false;
        for _ in 0..200 {
            if host
                .run(id)
                .await
                .unwrap()
                .is_some_and(|r| r.status == RunStatus::Blocked)
            {
                blocked = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(blocked, "run {id} never blocked");
    }
    host.decide(&a.id, true).await.unwrap();
    let done = host.wait(&a.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    host.start_run("cfo", "d", Channel::Api)
        .await
        .expect("the settled run freed its slot");
    host.stop();
    drop(host);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Restarted on the same data: b and d are still blocked, so the host is full again.
    let (host, _join) = Host::spawn(spec).await.unwrap();
    let again = host.start_run("cfo", "e", Channel::Api).await;
    assert!(again.is_err(), "two blocked runs fill the restarted host");
    host.stop();
}

/// Many runs of one agent at once: the actor steps the others while a commit is out, so the
/// store writer commits their writes together, and every run still reads "placed, accepted,
/// replied" in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_of_one_agent_share_commits_and_all_settle() {
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
    - answer: "cfo says {reply.cfo}"
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
    - answer: "spend for {input}"
"#,
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let (host, _join) = Host::spawn(HostSpec::new(set, tmp.path().join("data")))
        .await
        .unwrap();
    let before = host.store_counts();
    let starts = (0..40).map(|i| {
        let host = host.clone();
        tokio::spawn(async move {
            host.start_run("cmo", &format!("month {i}"), Channel::Api)
                .await
                .unwrap()
        })
    });
    let mut runs = Vec::new();
    for start in starts {
        runs.push(start.await.unwrap());
    }
    for (i, run) in runs.iter().enumerate() {
        let done = host.wait(&run.id, Duration::from_secs(20)).await.unwrap();
        assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
        assert_eq!(
            done.output.as_deref(),
            Some(format!("cfo says spend for month {i}").as_str())
        );
        let kinds: Vec<String> = host
            .events(&run.id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind().to_owned())
            .collect();
        let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
        assert!(at("model_turn") < at("call_placed"), "{kinds:?}");
        assert!(at("call_placed") < at("reply_received"), "{kinds:?}");
    }
    assert_eq!(host.jobs(Some("cfo")).await.unwrap().len(), 40);
    let after = host.store_counts();
    let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
    assert!(writes >= 40 * 4, "{writes} writes");
    assert!(
        commits * 3 < writes * 2,
        "{writes} writes took {commits} commits: the runs did not share them"
    );
}

/// A fan-out whose calls all arrive at once: the callee admits them without waiting for each
/// commit, and still accepts exactly its own cap of children for the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_calls_from_one_parent_stops_exactly_at_the_callees_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "fan",
        r#"
name: fan
agents: {can_call: [sink]}
limits: {max_calls_per_run: 30}
model:
  script:
    - call: [{agent: sink, input: "n{n}", count: 30}]
    - answer: "{replies}"
"#,
    );
    write(
        &agents,
        "sink",
        r#"
name: sink
agents: {accept_from: [fan]}
limits: {max_calls_per_run: 10}
model:
  script:
    - answer: "ok {input}"
"#,
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let (host, _join) = Host::spawn(HostSpec::new(set, tmp.path().join("data")))
        .await
        .unwrap();
    let run = host.start_run("fan", "go", Channel::Api).await.unwrap();
    let done = host.wait(&run.id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(host.jobs(Some("sink")).await.unwrap().len(), 10);
    let refused = host
        .events(&run.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind() == "call_refused")
        .count();
    assert_eq!(refused, 20, "the callee refused every call past its cap");
}

/// A host given no MCP client (an embedding app that set no `tool_servers`): a `kind: mcp`
/// entry's tools are told why they cannot run, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_on_a_host_without_an_mcp_client_is_told_why() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("agents");
    write(
        &agents,
        "clock",
        r#"
name: clock
model:
  script:
    - tool: {name: time__get_current_time, arguments: {timezone: UTC}}
    - answer: "{tool.time__get_current_time}"
tools:
  - {name: time, kind: mcp, command: [python3, -m, mcp_server_time]}
"#,
    );
    let set = AgentSet::load(std::slice::from_ref(&agents)).unwrap();
    let (host, _join) = Host::spawn(HostSpec::new(set, tmp.path().join("data")))
        .await
        .unwrap();
    let run = host.start_run("clock", "now", Channel::Api).await.unwrap();
    let done = host.wait(&run.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(
        done.output.as_deref(),
        Some(
            "the tool server `time` is unavailable: this host reaches no MCP servers (it was \
             started without an MCP client); answer without its tools, or try again later"
        )
    );
}
