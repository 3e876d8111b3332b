//! Traces across hosts, end to end: real `consort serve` processes on loopback export their
//! spans over OTLP/HTTP to a receiver of this test's own (an axum server decoding
//! `ExportTraceServiceRequest` protobuf), and the spans must form one trace per call tree,
//! one span per run, each called run's span the child of its caller's, each span's resource
//! naming its host.
//!
//! That a host without an endpoint exports nothing and still works is what every other
//! end-to-end test shows: none of them configures one (and this file's hosts would fail their
//! runs if tracing broke a call).

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};

use support::{ServeFleet, consort, eventually, path_str, runs_of, stderr};

const WAIT: Duration = Duration::from_secs(60);

/// One span as the receiver got it, with its resource's host.
#[derive(Clone, Debug)]
struct ReceivedSpan {
    /// The resource's `consort.host`.
    host: String,
    /// The resource's `service.name`.
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: BTreeMap<String, String>,
}

impl ReceivedSpan {
    fn run_id(&self) -> Option<&str> {
        self.attributes.get("run_id").map(String::as_str)
    }
}

/// An OTLP/HTTP receiver on 127.0.0.1: every span posted to `/v1/traces` is kept.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    _runtime: tokio::runtime::Runtime,
}

#[derive(Clone)]
struct Sink {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

async fn export(State(sink): State<Sink>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut spans = sink.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = attributes(
            &resource_spans
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default(),
        );
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(ReceivedSpan {
                    host: resource.get("consort.host").cloned().unwrap_or_default(),
                    service: resource.get("service.name").cloned().unwrap_or_default(),
                    name: span.name,
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent_span_id: span.parent_span_id,
                    attributes: attributes(&span.attributes),
                });
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

impl Receiver {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("receiver runtime");
        let sink = Sink {
            spans: Arc::default(),
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("receiver address");
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(sink.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            spans: sink.spans,
            _runtime: runtime,
        }
    }

    /// The base URL a host is given (`/v1/traces` is appended by the exporter).
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The `run` spans of run `id` received so far.
    fn run_spans(&self, id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == "run" && s.run_id() == Some(id))
            .collect()
    }

    /// Waits (bounded) for the `run` span of each of `ids`.
    fn wait_for_runs(&self, ids: &[&str]) {
        eventually("a run span of every run", WAIT, || {
            ids.iter()
                .all(|id| !self.run_spans(id).is_empty())
                .then_some(())
        });
    }
}

fn write_agent(root: &Path, name: &str, yaml: &str) {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir).expect("agent dir");
    std::fs::write(dir.join("agent.yaml"), yaml).expect("agent.yaml");
}

/// `a -> b -> c -> d`: each agent calls the next and answers with what it heard.
fn write_chain(root: &Path) {
    write_agent(
        root,
        "a",
        "name: a\nagents:\n  can_call: [b]\nmodel:\n  script:\n    - call: [{agent: b, input: go}]\n    - answer: \"a heard: {reply.b}\"\n",
    );
    write_agent(
        root,
        "b",
        "name: b\nagents:\n  accept_from: [a]\n  can_call: [c]\nmodel:\n  script:\n    - call: [{agent: c, input: go}]\n    - answer: \"b heard: {reply.c}\"\n",
    );
    write_agent(
        root,
        "c",
        "name: c\nagents:\n  accept_from: [b]\n  can_call: [d]\nmodel:\n  script:\n    - call: [{agent: d, input: go}]\n    - answer: \"c heard: {reply.d}\"\n",
    );
    write_agent(
        root,
        "d",
        "name: d\nagents:\n  accept_from: [c]\nmodel:\n  script:\n    - answer: d was reached\n",
    );
}

const CHAIN_ANSWER: &str = "a heard: b heard: c heard: d was reached";

/// The one run of `agent` on `host` placed by run `parent`.
fn child_id(fleet: &ServeFleet, host: &str, agent: &str, parent: &str) -> String {
    let jobs = fleet.jobs_of(host);
    let child = runs_of(&jobs, agent)
        .into_iter()
        .find(|r| r["parent_run"] == parent)
        .unwrap_or_else(|| panic!("no {agent} run under {parent} on {host}: {jobs:?}"));
    child["id"].as_str().expect("run id").to_owned()
}

/// `POST /runs` for `a` on alpha, with a `traceparent` header when given; the run's id.
fn start_root(fleet: &ServeFleet, traceparent: Option<&str>) -> String {
    let mut request = fleet
        .http
        .post(format!("{}/runs", fleet.url("alpha")))
        .json(&json!({"agent": "a", "input": "go"}));
    if let Some(value) = traceparent {
        request = request.header("traceparent", value);
    }
    let run: Value = request
        .send()
        .expect("POST /runs")
        .json()
        .expect("run json");
    run["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {run}"))
        .to_owned()
}

/// The one `run` span of each run (in chain order), checked to be the only one.
fn one_span_each(receiver: &Receiver, ids: &[String]) -> Vec<ReceivedSpan> {
    ids.iter()
        .map(|id| {
            let spans = receiver.run_spans(id);
            assert_eq!(spans.len(), 1, "one span for run {id}: {spans:#?}");
            spans.into_iter().next().expect("one span")
        })
        .collect()
}

/// The chain of runs under root `root`: a on alpha, b on beta, c and d on gamma.
fn chain_ids(fleet: &ServeFleet, root: &str) -> Vec<String> {
    let b = child_id(fleet, "beta", "b", root);
    let c = child_id(fleet, "gamma", "c", &b);
    let d = child_id(fleet, "gamma", "d", &c);
    vec![root.to_owned(), b, c, d]
}

/// One trace; each span's parent is the span of the run before it; the resource names the
/// host that ran it.
fn assert_one_trace_of_parent_and_child(spans: &[ReceivedSpan]) {
    let trace = &spans[0].trace_id;
    assert_eq!(trace.len(), 16);
    for span in spans {
        assert_eq!(&span.trace_id, trace, "one trace id: {spans:#?}");
        assert_eq!(span.span_id.len(), 8);
    }
    for pair in spans.windows(2) {
        assert_eq!(
            pair[1].parent_span_id, pair[0].span_id,
            "the span of {:?} is the child of {:?}'s",
            pair[1].attributes, pair[0].attributes
        );
    }
    let hosts: Vec<(&str, &str, &str)> = spans
        .iter()
        .map(|s| {
            (
                s.attributes.get("agent").map_or("", String::as_str),
                s.host.as_str(),
                s.service.as_str(),
            )
        })
        .collect();
    assert_eq!(
        hosts,
        [
            ("a", "alpha", "consort:alpha"),
            ("b", "beta", "consort:beta"),
            ("c", "gamma", "consort:gamma"),
            ("d", "gamma", "consort:gamma"),
        ]
    );
    let depths: Vec<&str> = spans
        .iter()
        .map(|s| s.attributes.get("hop_depth").map_or("", String::as_str))
        .collect();
    assert_eq!(depths, ["0", "1", "2", "3"]);
}

#[test]
fn a_call_chain_across_three_hosts_is_one_trace_with_one_span_per_hop() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().expect("temp dir");
    write_chain(dir.path());
    let mut fleet = ServeFleet::new(
        dir,
        &[("alpha", &["a"]), ("beta", &["b"]), ("gamma", &["c", "d"])],
    );
    let endpoint = receiver.url();
    for host in ["alpha", "beta", "gamma"] {
        fleet.start_with_args(host, &[], &["--otlp-endpoint", &endpoint]);
    }

    // A root run with no trace of its own starts one.
    let fresh = start_root(&fleet, None);
    // A root run started inside a caller's trace continues it.
    let header_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let header_span = "00f067aa0ba902b7";
    let adopted = start_root(&fleet, Some(&format!("00-{header_trace}-{header_span}-01")));
    // A starter that does not record its trace (flags 00): no host records the tree.
    let unsampled = start_root(&fleet, Some(&format!("00-{header_trace}-{header_span}-00")));
    for root in [&fresh, &adopted, &unsampled] {
        let run = fleet.wait_settled("alpha", root, WAIT);
        assert_eq!(run["output"], CHAIN_ANSWER, "{run}");
    }
    let fresh_ids = chain_ids(&fleet, &fresh);
    let adopted_ids = chain_ids(&fleet, &adopted);
    let unsampled_ids = chain_ids(&fleet, &unsampled);
    let all: Vec<&str> = fresh_ids
        .iter()
        .chain(&adopted_ids)
        .map(String::as_str)
        .collect();
    receiver.wait_for_runs(&all);
    // SIGTERM flushes what is left: after it, every span a host made has been received.
    for host in ["alpha", "beta", "gamma"] {
        fleet.terminate(host);
    }

    let fresh_spans = one_span_each(&receiver, &fresh_ids);
    assert_one_trace_of_parent_and_child(&fresh_spans);
    assert!(
        fresh_spans[0].parent_span_id.is_empty(),
        "a root run without a traceparent starts a trace: {:?}",
        fresh_spans[0]
    );

    let adopted_spans = one_span_each(&receiver, &adopted_ids);
    assert_one_trace_of_parent_and_child(&adopted_spans);
    assert_eq!(hex(&adopted_spans[0].trace_id), header_trace);
    assert_eq!(hex(&adopted_spans[0].parent_span_id), header_span);
    assert_ne!(fresh_spans[0].trace_id, adopted_spans[0].trace_id);

    // The decision not to record travels with the calls: on no host did any run of that tree
    // start a trace of its own.
    for id in &unsampled_ids {
        assert_eq!(
            receiver.run_spans(id).len(),
            0,
            "run {id} was not to be recorded"
        );
    }
}

#[test]
fn consort_dev_exports_to_the_standard_endpoint_variable_and_flushes_on_exit() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().expect("temp dir");
    write_chain(dir.path());
    let data = dir.path().join("data");
    let out = std::process::Command::new(support::BIN)
        .arg("dev")
        .arg(dir.path().join("agents"))
        .arg("--data")
        .arg(&data)
        .args(["--ask", "a", "go"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url())
        .env_remove("RUST_LOG")
        .output()
        .expect("run consort dev --ask");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(CHAIN_ANSWER),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The process has exited: its spans were flushed before it did, nothing is waited for.
    let runs: Vec<ReceivedSpan> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.name == "run")
        .collect();
    let by_agent = |agent: &str| -> ReceivedSpan {
        let of: Vec<&ReceivedSpan> = runs
            .iter()
            .filter(|s| s.attributes.get("agent").map(String::as_str) == Some(agent))
            .collect();
        assert_eq!(of.len(), 1, "one span of {agent}'s run: {runs:#?}");
        of[0].clone()
    };
    let spans: Vec<ReceivedSpan> = ["a", "b", "c", "d"].map(by_agent).to_vec();
    // Calls inside one host: the same parentage as across hosts.
    for pair in spans.windows(2) {
        assert_eq!(pair[1].trace_id, pair[0].trace_id);
        assert_eq!(pair[1].parent_span_id, pair[0].span_id);
    }
    assert!(
        spans
            .iter()
            .all(|s| s.host == "dev" && s.service == "consort:dev")
    );
    // The run ids the spans name are the runs the data folder holds.
    let listed = consort(&["jobs", "list", "--data", path_str(&data), "--json"]);
    let jobs: Value = serde_json::from_slice(&listed.stdout).expect("jobs json");
    let stored = jobs.to_string();
    for span in &spans {
        assert!(stored.contains(span.run_id().expect("run_id")), "{span:?}");
    }
}

#[test]
fn an_unreachable_collector_costs_the_runs_nothing() {
    // A port nothing listens on: exports fail, runs do not.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("temp dir");
    write_chain(dir.path());
    let out = std::process::Command::new(support::BIN)
        .arg("dev")
        .arg(dir.path().join("agents"))
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--ask", "a", "go"])
        .args(["--otlp-endpoint", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("run consort dev --ask");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(CHAIN_ANSWER));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
