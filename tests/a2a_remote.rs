//! Consort agents calling a remote A2A agent, with the real binary and a real A2A server: the
//! official A2A Python SDK (`a2a-sdk[http-server]` from PyPI, `tests/a2a/remote_agent.py`;
//! `.ci/run` installs it and sets `CONSORT_A2A_TESTS=required`), started on a free loopback
//! port. The remote agent is declared in the caller's agent.yaml (`a2a_agents:`) and called by
//! a script model's `call` step, under the same consent edge and guards as a consort peer.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::{Fleet, ServeFleet, consort, kinds, path_str, stderr};

const TOKEN: &str = "s3cret-forecast";

/// Whether the SDK is importable; `false` skips (locally) or fails (where it is required).
fn sdk_available() -> bool {
    support::python_module(
        "a2a.server.routes, uvicorn",
        "CONSORT_A2A_TESTS",
        "python3 -m pip install 'a2a-sdk[http-server]==1.3.0' uvicorn",
    )
}

/// The SDK's A2A server as a child process; killed when dropped.
struct RemoteAgent {
    child: Child,
    port: u16,
}

impl RemoteAgent {
    fn start() -> Self {
        let port = free_tcp_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/remote_agent.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the A2A server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the A2A server did not start");
        assert!(line.starts_with("listening on"), "{line}");
        Self { child, port }
    }

    fn card(&self) -> String {
        card_at(self.port)
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn card_at(port: u16) -> String {
    format!("http://127.0.0.1:{port}/.well-known/agent-card.json")
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// An agent `name` that may call the A2A agent `forecaster` at `card` (with `extra` lines
/// added to agent.yaml) and answers with its reply.
fn planner(name: &str, card: &str, token: Option<&str>, extra: &str) -> String {
    let (token_env, env) = match token {
        Some(t) => (
            "\n    token_env: FORECASTER_TOKEN",
            format!("env:\n  FORECASTER_TOKEN: \"{t}\"\n"),
        ),
        None => ("", String::new()),
    };
    format!(
        "name: {name}
description: plans around the weather
agents:
  can_call: [forecaster]
a2a_agents:
  - name: forecaster
    card: {card}{token_env}
    timeout_ms: 20000
    allow_networks: [loopback]   # the test's A2A server is on this machine
{env}model:
  script:
    - call: [{{agent: forecaster, input: \"{{input}}\"}}]
    - answer: \"{name} says: {{reply.forecaster}}\"
{extra}"
    )
}

fn events_of(served: &support::Served, run: &Value) -> Vec<Value> {
    let id = run["id"].as_str().expect("run id");
    served.show(id).expect("runs show")["events"]
        .as_array()
        .expect("events")
        .clone()
}

fn output(run: &Value) -> &str {
    run["output"].as_str().unwrap_or_default()
}

#[test]
fn a_script_agent_calls_a_remote_a2a_agent_and_answers_with_its_reply() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    fleet.agent(
        "planner",
        &planner("planner", &remote.card(), Some(TOKEN), ""),
    );
    fleet.agent(
        "checker",
        &planner("checker", &remote.card(), Some(TOKEN), "").replace(
            "    - answer: \"checker says: {reply.forecaster}\"",
            "    - check: \"{call.forecaster}\"\n    - answer: \"{tool.check_run}\"",
        ),
    );
    fleet.agent(
        "blocking",
        &planner("blocking", &remote.card(), Some(TOKEN), "")
            .replace("input: \"{input}\"}]", "input: \"{input}\", wait_s: 30}]")
            .replace("{reply.forecaster}", "{tool.call_agent}"),
    );
    let mut served = fleet.serve(&[]);

    let run = served.run_wait("planner", "paris");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(output(&run), "planner says: forecast for paris: sunny");
    assert_eq!(run["cost"]["calls_placed"], 1);

    // The caller's log shows the call and its reply, as for a consort peer.
    let events = events_of(&served, &run);
    let k = kinds(&events);
    for expected in ["call_placed", "reply_received", "answer"] {
        assert!(k.contains(&expected.to_string()), "{expected} in {k:?}");
    }
    let placed = events
        .iter()
        .find(|e| e["kind"] == "call_placed")
        .expect("call_placed");
    assert_eq!(placed["data"]["agent"], "forecaster", "{placed}");
    let replied = events
        .iter()
        .find(|e| e["kind"] == "reply_received")
        .expect("reply_received");
    assert_eq!(replied["data"]["agent"], "forecaster", "{replied}");
    assert_eq!(replied["data"]["status"], "succeeded", "{replied}");
    assert_eq!(replied["data"]["output"], "forecast for paris: sunny");
    // Only the caller's run is stored: the remote agent is no agent of this host.
    assert_eq!(support::runs_of(&fleet.jobs(), "forecaster").len(), 0);

    // A task the server answers while it is still working is polled until it completes.
    let run = served.run_wait("planner", "later lyon");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(output(&run), "planner says: forecast for later lyon: rain");

    // A blocking call (`wait_s`) gets the answer as the tool's result.
    let run = served.run_wait("blocking", "oslo");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(output(&run), "blocking says: forecast for oslo: sunny");

    // check_run on the call says what became of it.
    let run = served.run_wait("checker", "nice");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        output(&run).contains("forecaster is a remote A2A agent; the call run_")
            && output(&run).contains("ended (succeeded)")
            && output(&run).contains("forecast for nice: sunny"),
        "{}",
        output(&run)
    );

    // The call hop has its span: run id, agent and hop depth.
    let lines = served.stderr_lines(Duration::from_millis(300));
    assert!(
        lines.iter().any(|l| l.contains("a2a_call{")
            && l.contains("agent=planner")
            && l.contains("hop_depth=1")),
        "no a2a_call span in the host's log: {lines:#?}"
    );
}

#[test]
fn rejected_failed_and_interrupted_tasks_become_clear_failed_replies() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    fleet.agent(
        "planner",
        &planner("planner", &remote.card(), Some(TOKEN), ""),
    );
    let served = fleet.serve(&[]);
    for (input, says) in [
        (
            "please reject this",
            "the A2A agent forecaster rejected the request: I only forecast the weather; I will not take this. Do not send it the same request again",
        ),
        (
            "fail now",
            "the A2A agent forecaster failed the task: the forecast model crashed. Calling it again later may work",
        ),
        (
            "a question",
            "the A2A agent forecaster needs more input before it can answer: Which city do you mean?",
        ),
        (
            "crash now",
            "the A2A agent forecaster answered SendMessage with the error -32603 INTERNAL_ERROR: the forecaster crashed; calling it again later may work",
        ),
    ] {
        let run = served.run_wait("planner", input);
        assert_eq!(run["status"], "succeeded", "{run}");
        assert!(output(&run).contains(says), "{input}: {}", output(&run));
        let events = events_of(&served, &run);
        let replied = events
            .iter()
            .find(|e| e["kind"] == "reply_received")
            .expect("reply_received");
        assert_eq!(replied["data"]["status"], "failed", "{input}: {replied}");
        assert_eq!(replied["data"]["agent"], "forecaster", "{input}: {replied}");
    }
}

#[test]
fn a_wrong_or_missing_token_is_a_clear_failed_reply() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    fleet.agent(
        "wrong",
        &planner("wrong", &remote.card(), Some("not-the-token"), ""),
    );
    fleet.agent("none", &planner("none", &remote.card(), None, ""));
    let served = fleet.serve(&[]);

    let run = served.run_wait("wrong", "paris");
    assert_eq!(run["status"], "succeeded", "{run}");
    let said = output(&run);
    assert!(
        said.contains(
            "the A2A agent forecaster refused this host's credentials (HTTP 401 to SendMessage)"
        ),
        "{said}"
    );
    assert!(
        said.contains("the token from the env key `FORECASTER_TOKEN` was not accepted"),
        "{said}"
    );
    assert!(
        !said.contains("not-the-token"),
        "the token is never shown: {said}"
    );

    let run = served.run_wait("none", "paris");
    let said = output(&run);
    assert!(said.contains("HTTP 401 to SendMessage"), "{said}");
    assert!(said.contains("agent.yaml gives it no token_env"), "{said}");
}

#[test]
fn without_the_can_call_edge_the_call_is_refused_with_its_reason() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    fleet.agent(
        "planner",
        &planner("planner", &remote.card(), Some(TOKEN), "")
            .replace("  can_call: [forecaster]", "  can_call: []"),
    );
    let served = fleet.serve(&[]);
    let run = served.run_wait("planner", "paris");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        output(&run).contains("planner may not call forecaster: it is not in your agents.can_call"),
        "{}",
        output(&run)
    );
    let events = events_of(&served, &run);
    let refused = events
        .iter()
        .find(|e| e["kind"] == "call_refused")
        .expect("call_refused");
    assert_eq!(refused["data"]["code"], "not_in_can_call", "{refused}");
    assert!(!kinds(&events).contains(&"call_placed".to_string()));
}

#[test]
fn a_server_that_is_down_or_too_slow_is_a_clear_reply_without_a_hang() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    // Nothing listens on this port.
    fleet.agent(
        "down",
        &planner("down", &card_at(free_tcp_port()), None, ""),
    );
    fleet.agent(
        "hasty",
        &planner("hasty", &remote.card(), Some(TOKEN), "")
            .replace("timeout_ms: 20000", "timeout_ms: 1500"),
    );
    fleet.agent(
        "lost",
        &planner(
            "lost",
            &format!(
                "http://127.0.0.1:{}/.well-known/no-such-card.json",
                remote.port
            ),
            None,
            "",
        ),
    );
    let served = fleet.serve(&[]);

    let started = Instant::now();
    let run = served.run_wait("down", "paris");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        output(&run).contains("the A2A agent forecaster could not be reached at http://127.0.0.1:"),
        "{}",
        output(&run)
    );
    assert!(output(&run).contains("Try again later or answer without it"));

    let run = served.run_wait("lost", "paris");
    assert!(
        output(&run).contains(&format!(
            "the agent card of the A2A agent forecaster could not be read at http://127.0.0.1:{}/.well-known/no-such-card.json (HTTP 404)",
            remote.port
        )),
        "{}",
        output(&run)
    );

    let started = Instant::now();
    let run = served.run_wait("hasty", "hang on");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        output(&run).contains("the A2A agent forecaster did not answer within 1500 ms"),
        "{}",
        output(&run)
    );
}

#[test]
fn the_call_cap_and_the_depth_limit_apply_to_a2a_calls() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    // A run at its cap of one call cannot place a second.
    fleet.agent(
        "capped",
        &planner(
            "capped",
            &remote.card(),
            Some(TOKEN),
            "limits: {max_calls_per_run: 1}\n",
        )
        .replace(
            "[{agent: forecaster, input: \"{input}\"}]",
            "[{agent: forecaster, input: \"{input}\", count: 2}]",
        )
        .replace("{reply.forecaster}", "{replies}"),
    );
    // A called run at depth 1 whose limit is one hop cannot go one hop further.
    fleet.agent(
        "boss",
        "name: boss\nagents: {can_call: [deep]}\nmodel:\n  script:\n    - call: [{agent: deep, input: \"{input}\"}]\n    - answer: \"boss: {reply.deep}\"\n",
    );
    fleet.agent(
        "deep",
        &planner(
            "deep",
            &remote.card(),
            Some(TOKEN),
            "limits: {max_depth: 1}\n",
        )
        .replace(
            "  can_call: [forecaster]",
            "  can_call: [forecaster]\n  accept_from: [boss]",
        ),
    );
    let served = fleet.serve(&[]);

    let run = served.run_wait("capped", "paris");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["cost"]["calls_placed"], 1, "{run}");
    assert!(
        output(&run).contains("forecast for paris: sunny"),
        "{}",
        output(&run)
    );
    let events = events_of(&served, &run);
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "call_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert_eq!(refused[0]["data"]["code"], "call_cap");

    let run = served.run_wait("boss", "paris");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        output(&run).contains("call chain depth limit (1) reached"),
        "{}",
        output(&run)
    );
    assert!(!output(&run).contains("sunny"), "{}", output(&run));
}

#[test]
fn a_malformed_a2a_agents_entry_names_file_line_and_key() {
    let fleet = Fleet::new();
    let file = fleet.agent(
        "planner",
        &planner(
            "planner",
            "http://127.0.0.1:9/.well-known/agent-card.json",
            Some(TOKEN),
            "",
        )
        .replace("timeout_ms: 20000", "timeout_ms: 20000\n    retries: 3"),
    );
    let out = consort(&["edges", path_str(&fleet.agents())]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains(&file.display().to_string()), "{said}");
    assert!(said.contains(":10:"), "line 10 in {said}");
    assert!(said.contains("a2a_agents[0].retries"), "{said}");

    fleet.agent(
        "planner",
        &planner("planner", "ftp://127.0.0.1:9/card", Some(TOKEN), ""),
    );
    let said = stderr(&consort(&["edges", path_str(&fleet.agents())]));
    assert!(said.contains(":7:"), "line 7 in {said}");
    assert!(said.contains("a2a_agents[0].card"), "{said}");
    assert!(said.contains("not an http:// or https:// URL"), "{said}");

    // A name that is an agent of the fleet is refused, naming the A2A entry.
    fleet.agent(
        "planner",
        &planner("planner", "http://127.0.0.1:9/card", None, ""),
    );
    fleet.agent(
        "forecaster",
        "name: forecaster\nmodel: {script: [{answer: hi}]}\n",
    );
    let said = stderr(&consort(&["edges", path_str(&fleet.agents())]));
    assert!(said.contains("a2a_agents[0].name"), "{said}");
    assert!(
        said.contains("`forecaster` is already an agent of the fleet"),
        "{said}"
    );
}

#[test]
fn an_agent_of_a_serve_fleet_calls_a_remote_a2a_agent_beside_its_peer() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let card = remote.card();
    let mut fleet = ServeFleet::example(|dir: &Path| {
        let cmo = dir.join("agents/cmo/agent.yaml");
        std::fs::write(
            &cmo,
            format!(
                "name: cmo
agents:
  can_call: [cfo, forecaster]
a2a_agents:
  - name: forecaster
    card: {card}
    token_env: FORECASTER_TOKEN
    allow_networks: [loopback]
env:
  FORECASTER_TOKEN: {TOKEN}
model:
  script:
    - call: [{{agent: cfo, input: \"2026-08\"}}, {{agent: forecaster, input: \"{{input}}\"}}]
    - answer: \"spend {{reply.cfo}}; weather {{reply.forecaster}}\"
"
            ),
        )
        .expect("write cmo");
    });
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "the launch day");
    let run = fleet.wait_settled("alpha", &id, Duration::from_secs(60));
    assert_eq!(run["status"], "succeeded", "{run}");
    let said = run["output"].as_str().unwrap_or_default();
    assert!(
        said.contains("forecast for the launch day: sunny"),
        "{said}"
    );
    assert!(said.starts_with("spend 48250.00"), "{said}");
    let events = fleet.events_of("alpha", &id);
    let replies: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "reply_received")
        .collect();
    assert_eq!(replies.len(), 2, "{events:#?}");
    assert!(replies.iter().any(|e| e["data"]["agent"] == "forecaster"));
}

#[test]
fn a_call_out_when_its_host_restarts_ends_with_a_reply_that_says_its_answer_was_lost() {
    if !sdk_available() {
        return;
    }
    let remote = RemoteAgent::start();
    let fleet = Fleet::new();
    fleet.agent(
        "planner",
        &planner("planner", &remote.card(), Some(TOKEN), ""),
    );
    let served = fleet.serve(&[]);
    // The remote agent works for a minute on this one: the call is out.
    let out = served.cli(&["run", "planner", "hang on", "--json"]);
    let started: Value = serde_json::from_slice(&out.stdout).expect("run json");
    let id = started["id"].as_str().expect("run id").to_owned();
    support::eventually("the call to be out", Duration::from_secs(30), || {
        let shown = served.show(&id)?;
        let events = shown["events"].as_array()?.clone();
        kinds(&events)
            .contains(&"call_placed".to_string())
            .then_some(())
    });
    served.kill();

    let served = fleet.serve(&[]);
    let shown = served.wait_status(&id, "succeeded");
    let said = shown["run"]["output"].as_str().unwrap_or_default();
    assert!(
        said.contains("the call to the A2A agent forecaster was out when this host restarted, and its answer was lost; call it again"),
        "{said}"
    );
}

#[test]
fn consort_edges_shows_an_edge_to_an_a2a_agent() {
    let fleet = Fleet::new();
    fleet.agent(
        "planner",
        &planner("planner", "http://127.0.0.1:9/card", None, ""),
    );
    let out = consort(&["edges", path_str(&fleet.agents()), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let edges: Value = serde_json::from_slice(&out.stdout).expect("edges json");
    assert_eq!(
        edges,
        serde_json::json!([{"caller": "planner", "callee": "forecaster", "status": "a2a"}])
    );
}
