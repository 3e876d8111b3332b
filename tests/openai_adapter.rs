//! The OpenAI-compatible adapter against a scripted chat-completions server (a real HTTP
//! server on loopback, `support/chat_server.rs`): tool calls, several in one turn, streamed,
//! retries on 429 and 5xx, timeouts, malformed tool calls and their repair, a wrong key, an
//! unknown model. Each test asks the adapter for turns as the engine would and checks what the
//! server saw.

#[path = "support/chat_server.rs"]
mod chat_server;

use std::time::{Duration, Instant};

use chat_server::{ChatServer, Reply};
use consort_config::{OpenAiModel, ToolChoice};
use consort_models::openai::OpenAiAdapter;
use consort_models::{Message, Model, ModelError, ModelRequest, ModelStep, ToolSpec, ToolUse};
use serde_json::json;

fn config(server: &ChatServer, model: &str) -> OpenAiModel {
    OpenAiModel {
        base_url: server.base_url.clone(),
        model: model.into(),
        api_key_env: None,
        temperature: None,
        max_tokens: None,
        timeout_s: 10,
        max_retries: 2,
        repair_attempts: 2,
        stream: false,
        headers: vec![],
        system: None,
        tool_choice: ToolChoice::Auto,
    }
}

fn ledger() -> ToolSpec {
    ToolSpec {
        name: "ledger".into(),
        description: "Read-only SQL over the ledger".into(),
        input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    }
}

fn call_agent() -> ToolSpec {
    ToolSpec {
        name: "call_agent".into(),
        description: "Ask a peer".into(),
        input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "input": {"type": "string"}}}),
    }
}

async fn ask(
    adapter: &OpenAiAdapter,
    conversation: &[Message],
    tools: &[ToolSpec],
    pending: usize,
) -> Result<consort_models::ModelReply, ModelError> {
    adapter
        .respond(ModelRequest {
            agent: "cfo",
            conversation,
            pending_calls: pending,
            tools,
        })
        .await
}

fn question() -> Vec<Message> {
    vec![Message::User("What did we spend in August 2026?".into())]
}

#[tokio::test]
async fn one_tool_call_then_the_answer_with_usage_and_the_result_sent_back() {
    let server = ChatServer::start();
    let query = "SELECT sum(amount) FROM spend WHERE month = '2026-08'";
    server.script(
        "m",
        [
            Reply::tool("ledger", json!({"query": query})),
            Reply::text("48250.00 USD"),
        ],
    );
    let adapter =
        OpenAiAdapter::new(config(&server, "m"), "Answers spend questions.".into()).unwrap();
    let tools = [ledger()];

    let first = ask(&adapter, &question(), &tools, 0).await.unwrap();
    assert_eq!(
        first.step,
        ModelStep::ToolUses(vec![ToolUse {
            id: "tu_0_0".into(),
            name: "ledger".into(),
            input: json!({"query": query}),
        }])
    );
    assert_eq!((first.input_tokens, first.output_tokens), (100, 10));

    let mut conversation = question();
    conversation.push(Message::Assistant {
        tool_uses: match first.step {
            ModelStep::ToolUses(u) => u,
            other => panic!("{other:?}"),
        },
    });
    conversation.push(Message::ToolResult {
        tool_use_id: "tu_0_0".into(),
        name: "ledger".into(),
        content: "48250.0".into(),
        is_error: false,
    });
    let second = ask(&adapter, &conversation, &tools, 0).await.unwrap();
    assert_eq!(second.step, ModelStep::Answer("48250.00 USD".into()));

    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let system = seen[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("You are the agent `cfo`. Answers spend questions."),
        "{system}"
    );
    assert_eq!(seen[0].tool_names(), ["ledger"]);
    assert_eq!(seen[0].authorization, None);
    let m = seen[1].messages();
    assert_eq!(m[2]["tool_calls"][0]["id"], "tu_0_0");
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "tu_0_0", "content": "48250.0"})
    );
}

#[tokio::test]
async fn several_tool_calls_in_one_turn_and_streamed_calls_read_the_same() {
    let server = ChatServer::start();
    let calls = vec![
        (
            "call_agent".to_owned(),
            json!({"agent": "cfo", "input": "August 2026 spend, by category?"}).to_string(),
        ),
        (
            "ledger".to_owned(),
            json!({"query": "SELECT 1"}).to_string(),
        ),
    ];
    server.script("plain", [Reply::Tools(calls.clone())]);
    server.script("streamed", [Reply::StreamedTools(calls)]);
    let tools = [call_agent(), ledger()];
    let plain = OpenAiAdapter::new(config(&server, "plain"), String::new()).unwrap();
    let streamed = OpenAiAdapter::new(
        OpenAiModel {
            stream: true,
            ..config(&server, "streamed")
        },
        String::new(),
    )
    .unwrap();
    let a = ask(&plain, &question(), &tools, 0).await.unwrap();
    let b = ask(&streamed, &question(), &tools, 0).await.unwrap();
    let ModelStep::ToolUses(uses) = &a.step else {
        panic!("{:?}", a.step)
    };
    assert_eq!(uses.len(), 2);
    assert_eq!(uses[0].input["input"], "August 2026 spend, by category?");
    assert_eq!(uses[1].id, "tu_0_1");
    assert_eq!(
        a, b,
        "a streamed turn reads as the same turn, usage included"
    );
    let seen = server.seen_for("streamed");
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(seen[0].body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn a_streamed_text_answer() {
    let server = ChatServer::start();
    server.script(
        "m",
        [Reply::StreamedText(
            "August: 48250.00 USD, über alles".into(),
        )],
    );
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            stream: true,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let reply = ask(&adapter, &question(), &[], 0).await.unwrap();
    assert_eq!(
        reply.step,
        ModelStep::Answer("August: 48250.00 USD, über alles".into())
    );
    // A server that ignores `stream: true` and sends one JSON body is read all the same.
    server.script("m", [Reply::text("not streamed")]);
    let reply = ask(&adapter, &question(), &[], 0).await.unwrap();
    assert_eq!(reply.step, ModelStep::Answer("not streamed".into()));
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_and_then_succeeds() {
    let server = ChatServer::start();
    server.script(
        "m",
        [
            Reply::Status(429, Some(1), "slow down".into()),
            Reply::text("ok"),
        ],
    );
    let adapter = OpenAiAdapter::new(config(&server, "m"), String::new()).unwrap();
    let started = Instant::now();
    let reply = ask(&adapter, &question(), &[], 0).await.unwrap();
    assert_eq!(reply.step, ModelStep::Answer("ok".into()));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_500_forever_fails_after_the_retries_with_the_servers_words() {
    let server = ChatServer::start();
    server.forever("m", Reply::Status(500, None, "the GPU caught fire".into()));
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            max_retries: 2,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Unavailable { attempts: 3, last } if last.contains("HTTP 500: the GPU caught fire")),
        "{err}"
    );
    assert_eq!(server.seen().len(), 3, "one request and two retries");
}

#[tokio::test]
async fn a_slow_server_times_out_per_request() {
    let server = ChatServer::start();
    server.forever(
        "m",
        Reply::Slow(Duration::from_secs(5), Box::new(Reply::text("late"))),
    );
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            timeout_s: 1,
            max_retries: 1,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let started = Instant::now();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Unavailable { attempts: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn malformed_arguments_and_unknown_tools_are_told_to_the_model_then_repaired() {
    let server = ChatServer::start();
    server.script(
        "m",
        [
            Reply::Tools(vec![("ledger".into(), "{\"query\": \"SELECT".into())]),
            Reply::tool("payroll", json!({})),
            Reply::tool("ledger", json!({"query": "SELECT 1"})),
        ],
    );
    let adapter = OpenAiAdapter::new(config(&server, "m"), String::new()).unwrap();
    let reply = ask(&adapter, &question(), &[ledger()], 0).await.unwrap();
    assert!(
        matches!(&reply.step, ModelStep::ToolUses(u) if u[0].id == "tu_0_0" && u[0].input["query"] == "SELECT 1")
    );
    assert_eq!(
        reply.input_tokens, 300,
        "the usage of every request of the turn is counted"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    let told = seen[1].messages();
    let last = told.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("not a JSON object"),
        "{last}"
    );
    let told = seen[2].messages();
    assert!(
        told.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("no tool named `payroll`; the tools you can call are: ledger")
    );
}

#[tokio::test]
async fn a_model_that_keeps_sending_malformed_calls_fails_the_turn_with_the_reason() {
    let server = ChatServer::start();
    server.forever(
        "m",
        Reply::Tools(vec![("ledger".into(), "not json".into())]),
    );
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            repair_attempts: 1,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let err = ask(&adapter, &question(), &[ledger()], 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::MalformedToolCalls { attempts: 2, problem } if problem.contains("not a JSON object")),
        "{err}"
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn waiting_is_offered_while_calls_are_out() {
    let server = ChatServer::start();
    server.script("m", [Reply::tool("wait_for_replies", json!({}))]);
    let adapter = OpenAiAdapter::new(config(&server, "m"), String::new()).unwrap();
    let reply = ask(&adapter, &question(), &[call_agent()], 1)
        .await
        .unwrap();
    assert_eq!(reply.step, ModelStep::Wait);
    let seen = server.seen();
    assert_eq!(seen[0].tool_names(), ["call_agent", "wait_for_replies"]);
    let system = seen[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("1 call(s) you placed have not replied yet"),
        "{system}"
    );
}

#[tokio::test]
async fn the_key_is_read_at_request_time_sent_as_bearer_and_never_repeated() {
    let server = ChatServer::start();
    server.script("m", [Reply::text("ok")]);
    let with_key = |var: &str| {
        OpenAiAdapter::new(
            OpenAiModel {
                api_key_env: Some(var.into()),
                ..config(&server, "m")
            },
            String::new(),
        )
        .unwrap()
    };
    let err = ask(&with_key("CONSORT_TEST_NEVER_SET_KEY"), &question(), &[], 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Config(m) if m.contains("CONSORT_TEST_NEVER_SET_KEY")),
        "{err}"
    );
    assert!(server.seen().is_empty(), "no request without the key");

    // The tests cannot set variables in their own process (no unsafe code here), so the key
    // is one cargo sets for every test process: CARGO_PKG_NAME, "consort". The end-to-end
    // test in tests/models.rs sets a real-looking key on the host process instead.
    let key = std::env::var("CARGO_PKG_NAME").unwrap();
    server.require_key("sk-something-else");
    let adapter = with_key("CARGO_PKG_NAME");
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.ends_with("Incorrect API key provided: [redacted]"),
        "{text}"
    );
    assert_eq!(server.seen().len(), 1, "a 401 is not retried");
    assert_eq!(
        server.seen()[0].authorization,
        Some(format!("Bearer {key}"))
    );

    server.require_key(&key);
    let reply = ask(&adapter, &question(), &[], 0).await.unwrap();
    assert_eq!(reply.step, ModelStep::Answer("ok".into()));
}

#[tokio::test]
async fn an_unknown_model_and_a_wrong_base_url_are_named() {
    let server = ChatServer::start();
    server.script(
        "nope",
        [Reply::Status(
            404,
            None,
            "The model `nope` does not exist.".into(),
        )],
    );
    let adapter = OpenAiAdapter::new(config(&server, "nope"), String::new()).unwrap();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::UnknownModel { model, .. } if model == "nope"),
        "{err}"
    );

    // A base_url without the /v1 root: the server has no such route.
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            base_url: server.base_url.trim_end_matches("/v1").to_owned(),
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Rejected { status: 404, detail } if detail.contains("is base_url")),
        "{err}"
    );

    // Nothing listens: a connection error, retried, then named.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            max_retries: 1,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Unavailable { attempts: 2, last } if last.contains("onnect")),
        "{err}"
    );
}

#[tokio::test]
async fn a_body_that_is_not_the_api_is_a_protocol_error() {
    let server = ChatServer::start();
    server.script("m", [Reply::Status(200, None, "x".into())]);
    let adapter = OpenAiAdapter::new(config(&server, "m"), String::new()).unwrap();
    let err = ask(&adapter, &question(), &[], 0).await.unwrap_err();
    assert!(matches!(&err, ModelError::Protocol(_)), "{err}");
}

#[tokio::test]
async fn with_tool_choice_required_the_answer_is_a_final_answer_call() {
    let server = ChatServer::start();
    server.script(
        "m",
        [Reply::tool("final_answer", json!({"text": "48250.00 USD"}))],
    );
    let adapter = OpenAiAdapter::new(
        OpenAiModel {
            tool_choice: ToolChoice::Required,
            ..config(&server, "m")
        },
        String::new(),
    )
    .unwrap();
    let reply = ask(&adapter, &question(), &[ledger()], 0).await.unwrap();
    assert_eq!(reply.step, ModelStep::Answer("48250.00 USD".into()));
    let seen = server.seen();
    assert_eq!(seen[0].body["tool_choice"], "required");
    assert_eq!(seen[0].tool_names(), ["ledger", "final_answer"]);
}
