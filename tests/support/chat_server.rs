//! A scripted OpenAI-compatible chat-completions server for the model tests: a real axum HTTP
//! server on loopback whose answers each test writes in advance, per model name.
//!
//! Each request to `POST /v1/chat/completions` takes the next [`Reply`] of the script of the
//! model it names (a model with no script left gets a 500 saying so, which fails the test
//! loudly). Every request is recorded with its body and its `Authorization` header, so a test
//! can count them and read what the adapter sent. With [`ChatServer::require_key`], a request
//! without that bearer key gets a 401 whose message quotes the key it was given, as some
//! hosted APIs do, so a test can check that consort never repeats it.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A text answer.
    Text(String),
    /// Tool calls in one turn: (name, arguments as the JSON text the server sends).
    Tools(Vec<(String, String)>),
    /// The same tool calls, streamed as server-sent events, each argument text cut in pieces.
    StreamedTools(Vec<(String, String)>),
    /// A streamed text answer.
    StreamedText(String),
    /// An error status with a `Retry-After` (seconds) if given, and a JSON error message.
    Status(u16, Option<u32>, String),
    /// The inner reply after a pause.
    Slow(Duration, Box<Self>),
}

impl Reply {
    /// One tool call.
    pub(crate) fn tool(name: &str, arguments: Value) -> Self {
        Self::Tools(vec![(name.into(), arguments.to_string())])
    }

    /// A text answer.
    pub(crate) fn text(t: &str) -> Self {
        Self::Text(t.into())
    }
}

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The JSON body.
    pub(crate) body: Value,
    /// The `Authorization` header, if any.
    pub(crate) authorization: Option<String>,
}

impl Seen {
    /// The model the request named.
    pub(crate) fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or_default()
    }

    /// The request's messages.
    pub(crate) fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The names of the tools offered.
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Script {
    replies: BTreeMap<String, VecDeque<Reply>>,
    forever: BTreeMap<String, Reply>,
    seen: Vec<Seen>,
    key: Option<String>,
}

type Shared = Arc<Mutex<Script>>;

/// The running server; stopped when dropped.
pub(crate) struct ChatServer {
    /// The API root to put in `base_url` (`http://127.0.0.1:PORT/v1`).
    pub(crate) base_url: String,
    script: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ChatServer {
    /// Starts a server on a free loopback port, on its own thread.
    pub(crate) fn start() -> Self {
        let script: Shared = Arc::default();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = script.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send addr");
                let app = Router::new()
                    .route("/v1/chat/completions", post(completions))
                    .with_state(shared);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .expect("serve");
            });
        });
        let addr = addr_rx.recv().expect("server address");
        Self {
            base_url: format!("http://{addr}/v1"),
            script,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Appends replies to the script of `model`.
    pub(crate) fn script(&self, model: &str, replies: impl IntoIterator<Item = Reply>) {
        let mut s = self.script.lock().expect("script");
        s.replies.entry(model.into()).or_default().extend(replies);
    }

    /// Answers every request for `model` with `reply` once its script is used up.
    pub(crate) fn forever(&self, model: &str, reply: Reply) {
        let mut s = self.script.lock().expect("script");
        s.forever.insert(model.into(), reply);
    }

    /// Refuses requests without `Authorization: Bearer <key>`.
    pub(crate) fn require_key(&self, key: &str) {
        self.script.lock().expect("script").key = Some(key.into());
    }

    /// Every request so far, oldest first.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.script.lock().expect("script").seen.clone()
    }

    /// The requests so far for `model`.
    pub(crate) fn seen_for(&self, model: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.model() == model)
            .collect()
    }
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn completions(State(script): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let body: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return error(400, None, &format!("not JSON: {e}")),
    };
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let reply = {
        let mut s = script.lock().expect("script");
        s.seen.push(Seen {
            body: body.clone(),
            authorization: authorization.clone(),
        });
        if let Some(key) = &s.key {
            let given = authorization
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap_or_default();
            if given != key {
                return error(401, None, &format!("Incorrect API key provided: {given}"));
            }
        }
        match s.replies.get_mut(&model).and_then(VecDeque::pop_front) {
            Some(r) => r,
            None => match s.forever.get(&model) {
                Some(r) => r.clone(),
                None => Reply::Status(
                    500,
                    None,
                    format!("the test server has no reply left for model `{model}`"),
                ),
            },
        }
    };
    answer(reply).await
}

fn answer(reply: Reply) -> std::pin::Pin<Box<dyn Future<Output = Response> + Send>> {
    Box::pin(async move {
        match reply {
            Reply::Slow(pause, inner) => {
                tokio::time::sleep(pause).await;
                answer(*inner).await
            }
            Reply::Status(status, retry_after, message) => error(status, retry_after, &message),
            Reply::Text(text) => completion(json!({"role": "assistant", "content": text})),
            Reply::Tools(calls) => completion(json!({
                "role": "assistant",
                "content": null,
                "tool_calls": calls.iter().enumerate().map(|(i, (name, args))| json!({
                    "id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": args},
                })).collect::<Vec<_>>(),
            })),
            Reply::StreamedText(text) => {
                let mut events = Vec::new();
                for piece in text.as_bytes().chunks(3) {
                    let piece = String::from_utf8_lossy(piece);
                    events.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
                }
                sse(events)
            }
            Reply::StreamedTools(calls) => {
                let mut events = vec![
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
                ];
                for (i, (name, args)) in calls.iter().enumerate() {
                    events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": i, "id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}
                    ]}}]}));
                    let chars: Vec<char> = args.chars().collect();
                    for piece in chars.chunks(4) {
                        let piece: String = piece.iter().collect();
                        events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                            {"index": i, "function": {"arguments": piece}}
                        ]}}]}));
                    }
                }
                sse(events)
            }
        }
    })
}

fn completion(message: Value) -> Response {
    let body = json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn sse(mut events: Vec<Value>) -> Response {
    events.push(json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10}}));
    let mut text = String::new();
    for e in events {
        text.push_str(&format!("data: {e}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .expect("response")
}

fn error(status: u16, retry_after: Option<u32>, message: &str) -> Response {
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(after) = retry_after {
        response = response.header(header::RETRY_AFTER, after.to_string());
    }
    response
        .body(Body::from(
            json!({"error": {"message": message, "type": "test"}}).to_string(),
        ))
        .expect("response")
}
