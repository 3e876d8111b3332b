//! `consort-bench models`: what the chat-completions adapter costs per turn, and whether a slow
//! model holds up an agent.
//!
//! A stub chat-completions server runs in this process (plain HTTP/1.1 on a tokio listener,
//! keep-alive, one canned answer, an optional pause per request), so the rows time consort's
//! side only:
//!
//! - the adapter's own work per turn without the network: build the request body from a
//!   six-message conversation with eight tools, read a tool-call answer, check it;
//! - one turn through the adapter over loopback, beside a bare `reqwest` POST of the same body
//!   to the same server (the difference is the adapter's overhead);
//! - a run of one model turn through a host, on the adapter and on the script model;
//! - one run against a server that takes 200 ms per turn, then 100 runs started at once on the
//!   same agent: a slow model must not serialise them behind the agent's mailbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use consort_actors::model::openai::OpenAiAdapter;
use consort_actors::model::openai::wire::{self, Sampling};
use consort_actors::model::{Message, Model, ModelRequest, ToolSpec, ToolUse, repair};
use consort_actors::{Channel, Host, HostSpec, RunStatus};
use consort_config::{AgentSet, OpenAiModel, ToolChoice};

use super::{Stats, percentile, print_rows, write_agent};

/// A tool-call answer, as a server sends it.
const TOOL_ANSWER: &str = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"ledger","arguments":"{\"query\":\"SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = '2026-08'\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":812,"completion_tokens":31}}"#;
/// A text answer.
const TEXT_ANSWER: &str = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"48250.00 USD"},"finish_reason":"stop"}],"usage":{"prompt_tokens":812,"completion_tokens":5}}"#;

/// Starts the stub server; each request is answered with `body` after `pause`.
async fn stub_server(body: &'static str, pause: Duration) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, body, pause));
        }
    });
    Ok(format!("http://{addr}/v1"))
}

async fn serve_connection(mut stream: TcpStream, body: &'static str, pause: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(16 << 10);
    loop {
        // Read the head, then as many body bytes as Content-Length says.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + length);
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn adapter_config(base_url: &str) -> OpenAiModel {
    OpenAiModel {
        base_url: base_url.into(),
        model: "bench".into(),
        api_key_env: None,
        temperature: Some(0.0),
        max_tokens: Some(512),
        timeout_s: 60,
        max_retries: 0,
        repair_attempts: 0,
        stream: false,
        headers: vec![],
        system: None,
        tool_choice: ToolChoice::Auto,
    }
}

/// A conversation of a run three turns in, and eight tools.
fn turn_input() -> (Vec<Message>, Vec<ToolSpec>) {
    let tools: Vec<ToolSpec> = (0..8)
        .map(|i| ToolSpec {
            name: format!("tool_{i}"),
            description: "Runs one read-only SQLite query over the finance ledger and returns the rows.".into(),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        })
        .chain([ToolSpec {
            name: "ledger".into(),
            description: "ledger".into(),
            input_schema: json!({"type": "object"}),
        }])
        .collect();
    let mut conversation = vec![Message::User(
        "What did we spend in August 2026, by category?".into(),
    )];
    for turn in 0..2 {
        let id = format!("tu_{turn}_0");
        conversation.push(Message::Assistant {
            tool_uses: vec![ToolUse {
                id: id.clone(),
                name: "ledger".into(),
                input: json!({"query": "SELECT category, sum(amount) FROM spend WHERE month = '2026-08' GROUP BY category"}),
            }],
        });
        conversation.push(Message::ToolResult {
            tool_use_id: id,
            name: "ledger".into(),
            content: "ads|33750.0\nevents|11000.0\ntools|2400.0\ncontent|1100.0".into(),
            is_error: false,
        });
    }
    conversation.push(Message::User("[reply from cmo] thanks".into()));
    (conversation, tools)
}

fn row(name: &str, mut lat: Vec<Duration>, per_sec: f64) -> Stats {
    lat.sort();
    Stats {
        name: name.into(),
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
        per_sec,
    }
}

/// Times `n` one-at-a-time runs of `op`; throughput is the inverse of the mean.
async fn timed<F, Fut>(name: &str, n: usize, op: F) -> Result<Stats>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    for _ in 0..(n / 10).max(5) {
        op().await?;
    }
    let mut lat = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        op().await?;
        lat.push(t.elapsed());
    }
    let per_sec = n as f64 / started.elapsed().as_secs_f64();
    Ok(row(name, lat, per_sec))
}

pub(crate) async fn models_bench(root: &std::path::Path) -> Result<()> {
    let mut rows = Vec::new();

    // The adapter's own work, no network.
    let (conversation, tools) = turn_input();
    let request = ModelRequest {
        agent: "cfo",
        conversation: &conversation,
        pending_calls: 0,
        tools: &tools,
    };
    let sampling = Sampling {
        model: "bench",
        temperature: Some(0.0),
        max_tokens: Some(512),
        stream: false,
        tool_choice_required: false,
    };
    let system = consort_actors::model::prompt::system_prompt(
        &request,
        "Answers spend questions.",
        None,
        false,
    );
    let mut lat = Vec::with_capacity(20_000);
    let started = Instant::now();
    for _ in 0..20_000 {
        let t = Instant::now();
        let body = wire::request_body(sampling, &system, &conversation, &tools).to_string();
        let (draft, _) =
            wire::parse_response(TOOL_ANSWER.as_bytes()).map_err(anyhow::Error::msg)?;
        let step = repair::check_turn(&draft, &request, &tools, false);
        anyhow::ensure!(step.is_ok() && body.len() > 1000, "unexpected turn");
        lat.push(t.elapsed());
    }
    let per_sec = 20_000.0 / started.elapsed().as_secs_f64();
    rows.push(row(
        "adapter CPU per turn: build, parse, check",
        lat,
        per_sec,
    ));

    // One turn over loopback HTTP, and the bare POST floor, alternated in blocks.
    let fast = stub_server(TOOL_ANSWER, Duration::ZERO).await?;
    let adapter = Arc::new(OpenAiAdapter::new(
        adapter_config(&fast),
        "Answers spend questions.".into(),
    )?);
    let body = wire::request_body(sampling, &system, &conversation, &tools).to_string();
    let http = reqwest::Client::new();
    let url = format!("{fast}/chat/completions");
    let turn = || {
        let adapter = adapter.clone();
        let (conversation, tools) = (&conversation, &tools);
        async move {
            let reply = adapter
                .respond(ModelRequest {
                    agent: "cfo",
                    conversation,
                    pending_calls: 0,
                    tools,
                })
                .await?;
            anyhow::ensure!(reply.input_tokens == 812, "unexpected {reply:?}");
            Ok(())
        }
    };
    let post = || {
        let (http, url, body) = (&http, &url, &body);
        async move {
            let bytes = http
                .post(url.as_str())
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await?
                .bytes()
                .await?;
            anyhow::ensure!(bytes.len() == TOOL_ANSWER.len(), "short answer");
            Ok(())
        }
    };
    let floor = timed("floor: reqwest POST, same body and server", 2000, post).await?;
    let over_http = timed("adapter turn over loopback HTTP", 2000, turn).await?;
    let overhead_us = over_http.p50_us - floor.p50_us;
    rows.push(floor);
    rows.push(over_http);

    // A run of one model turn through a host: the adapter beside the script model.
    std::fs::create_dir_all(root)?;
    write_agent(
        root,
        "script",
        "name: script\nmodel:\n  script:\n    - answer: \"48250.00 USD\"\n",
    )?;
    let text_server = stub_server(TEXT_ANSWER, Duration::ZERO).await?;
    write_agent(
        root,
        "adapter",
        &format!(
            "name: adapter\nmodel: {{kind: openai, base_url: \"{text_server}\", model: bench}}\n"
        ),
    )?;
    let slow_server = stub_server(TEXT_ANSWER, Duration::from_millis(200)).await?;
    write_agent(
        root,
        "slow",
        &format!(
            "name: slow\nmodel: {{kind: openai, base_url: \"{slow_server}\", model: bench}}\n"
        ),
    )?;
    let set = AgentSet::load(&[root.join("agents")]).context("loading the bench agents")?;
    let options = consort_actors::AgentOptions::default().with_admission_limit(100_000);
    let spec = HostSpec::builder(set, root.join("data"))
        .options(options)
        .build();
    let (host, _join) = Host::spawn(spec).await?;
    let one_run = |agent: &'static str| {
        let host = host.clone();
        move || {
            let host = host.clone();
            async move {
                let run = host.start_run(agent, "August?", Channel::Api).await?;
                let done = host.wait(&run.id, Duration::from_secs(60)).await?;
                anyhow::ensure!(done.status == RunStatus::Succeeded, "unexpected {done:?}");
                Ok(())
            }
        }
    };
    rows.push(timed("run of one turn: script model", 500, one_run("script")).await?);
    rows.push(timed("run of one turn: openai adapter", 500, one_run("adapter")).await?);

    // A slow model: one run, then 100 at once on the same agent (and, for scale, 100 at once
    // on the script model: what the host itself takes to start and settle them).
    let burst = |name: &'static str, agent: &'static str| {
        let one_run = &one_run;
        async move {
            let started = Instant::now();
            let mut runs = JoinSet::new();
            for _ in 0..100 {
                runs.spawn(one_run(agent)());
            }
            let mut each = Vec::new();
            while let Some(done) = runs.join_next().await {
                done??;
                each.push(started.elapsed());
            }
            let all = started.elapsed();
            Ok::<_, anyhow::Error>((row(name, each, 100.0 / all.as_secs_f64()), all))
        }
    };
    let (script_burst, _) = burst("100 runs at once, script model", "script").await?;
    let single = timed("one run, model takes 200 ms", 5, one_run("slow")).await?;
    let (slow_burst, all) = burst("100 runs at once, model takes 200 ms", "slow").await?;
    let ratio = all.as_secs_f64() * 1e6 / single.p50_us;
    rows.push(script_burst);
    rows.push(single);
    rows.push(slow_burst);
    host.stop();

    print_rows(&rows);
    println!();
    println!(
        "adapter overhead per turn over HTTP (p50, adapter turn - bare POST): {overhead_us:.0} µs"
    );
    println!("100 concurrent slow runs, all settled / one run's p50: {ratio:.2}x (target <= 1.5x)");
    Ok(())
}
