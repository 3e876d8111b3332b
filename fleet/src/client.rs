//! The Rust client SDK for a host's HTTP API.
//!
//! [`Client`] mirrors the routes of [`crate::api`] with typed requests and answers; an API
//! error comes back as [`FleetError::Api`] with the host's code and message. The client holds
//! no state beyond the base URL and a connection pool. [`Client::follow_events`] reads a live
//! stream (`sse`) and reopens it where it broke.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use consort_actors::directory::{WaitAnswer, WaitRequest};
use consort_actors::page::{EventPage, PAGE_MAX, RunPage};
use consort_actors::supervisor::{AgentStatus, Reloaded};
use consort_actors::{Decided, EventRecord, RunRecord};
use consort_core::TreeLimits;
use consort_core::directory::{
    AttentionRollup, DeliveryOutcome, DirectoryPacket, Observation, Receipt,
};
use consort_core::step::Decision;

use crate::FleetError;
use sse::{SseEvent, SseParser};

mod sse;

/// How long [`Client::follow_events`] keeps reopening a stream that broke before giving up.
const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// How one opening of a live stream of events ended.
enum FollowEnd {
    /// The run settled: the stream's last event.
    Settled(Box<RunRecord>),
    /// The connection ended before the run settled.
    Broken(String),
}

/// A client of one host's API.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    /// Bearer token sent with every request: runs started act for its principal, and the
    /// host decides by it what the client may read and do.
    token: Option<String>,
}

impl Client {
    /// A client of the host at `base` (such as `http://127.0.0.1:7400`).
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            token: None,
        }
    }

    /// Sends `token` as `Authorization: Bearer` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// The host's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Starts a run; `channel` is `api` or `cli`.
    pub async fn start_run(
        &self,
        agent: &str,
        input: &str,
        channel: &str,
    ) -> Result<RunRecord, FleetError> {
        let body = json!({"agent": agent, "input": input, "channel": channel});
        let request = self.http.post(self.url("/runs")).json(&body);
        self.send(request).await
    }

    /// Starts a run whose whole call tree is bounded by `budget` (runs, tokens, seconds; each
    /// field set between 1 and its bound, see [`TreeLimits::check`]). It narrows the agent's
    /// own `limits.tree` field by field, never widens it. `GET /runs/{id}` shows the tree's
    /// spend against it.
    pub async fn start_run_with_budget(
        &self,
        agent: &str,
        input: &str,
        channel: &str,
        budget: &TreeLimits,
    ) -> Result<RunRecord, FleetError> {
        let body = json!({"agent": agent, "input": input, "channel": channel, "budget": budget});
        let request = self.http.post(self.url("/runs")).json(&body);
        self.send(request).await
    }

    /// The peer directory of `goal` (or of the one goal this client's token may see).
    pub async fn directory(&self, goal: Option<&str>) -> Result<DirectoryPacket, FleetError> {
        let mut request = self.http.get(self.url("/directory"));
        if let Some(goal) = goal {
            request = request.query(&[("goal", goal)]);
        }
        self.send(request).await
    }

    /// What this client may see of `agent` (and one of its runs): typed state, and an excerpt
    /// of at most `lines` lines from `source` (`events` or `output`) where it may read one.
    pub async fn observe(
        &self,
        agent: &str,
        run: Option<&str>,
        source: &str,
        lines: usize,
    ) -> Result<Observation, FleetError> {
        let mut query = vec![
            ("agent", agent.to_owned()),
            ("source", source.to_owned()),
            ("lines", lines.to_string()),
        ];
        if let Some(run) = run {
            query.push(("run", run.to_owned()));
        }
        self.send(self.http.get(self.url("/directory/observe")).query(&query))
            .await
    }

    /// Waits, pinned, on a run of `agent` (see `GET /directory/wait`).
    pub async fn wait_peer(
        &self,
        request: &WaitRequest,
        timeout: Duration,
    ) -> Result<WaitAnswer, FleetError> {
        let mut query = vec![
            ("agent", request.agent.clone()),
            ("run", request.run.to_string()),
            ("until", request.until.as_str().to_owned()),
            ("after_seq", request.after_seq.to_string()),
            ("timeout_ms", timeout.as_millis().to_string()),
        ];
        if let Some(incarnation) = &request.incarnation {
            query.push(("incarnation", incarnation.clone()));
        }
        let get = self
            .http
            .get(self.url("/directory/wait"))
            .query(&query)
            .timeout(timeout + Duration::from_secs(30));
        self.send(get).await
    }

    /// Delivers `message` to `agent` (into `run`, or a new run) with the idempotency key
    /// `delivery_id` (see `POST /directory/deliver`).
    pub async fn deliver(
        &self,
        agent: &str,
        run: Option<&str>,
        message: &str,
        delivery_id: &str,
        timeout: Duration,
        window: Option<Duration>,
    ) -> Result<DeliveryOutcome, FleetError> {
        let body = json!({
            "agent": agent,
            "run": run,
            "message": message,
            "delivery_id": delivery_id,
            "timeout_ms": timeout.as_millis() as u64,
            "window_ms": window.map(|w| w.as_millis() as u64),
        });
        let post = self
            .http
            .post(self.url("/directory/deliver"))
            .json(&body)
            .timeout(
                timeout + window.unwrap_or(Duration::from_secs(600)) + Duration::from_secs(30),
            );
        self.send(post).await
    }

    /// The receipt of this client's earlier delivery `delivery_id` to `agent`: `unreachable`
    /// (not `unknown_delivery`) when the host asked could not reach the host that holds it.
    pub async fn delivery_status(
        &self,
        agent: &str,
        run: Option<&str>,
        delivery_id: &str,
    ) -> Result<Receipt, FleetError> {
        let mut query = vec![("agent", agent), ("id", delivery_id)];
        if let Some(run) = run {
            query.push(("run", run));
        }
        let get = self.http.get(self.url("/directory/delivery")).query(&query);
        self.send(get).await
    }

    /// The attention rollup of `goal` (or of the one goal this client may see).
    pub async fn attention(&self, goal: Option<&str>) -> Result<AttentionRollup, FleetError> {
        let mut request = self.http.get(self.url("/directory/attention"));
        if let Some(goal) = goal {
            request = request.query(&[("goal", goal)]);
        }
        self.send(request).await
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The run with this id.
    pub async fn run(&self, id: &str) -> Result<RunRecord, FleetError> {
        self.send(self.http.get(self.url(&format!("/runs/{id}"))))
            .await
    }

    /// The gate run `id` waits on, if it is blocked on one.
    pub async fn waiting_gate(&self, id: &str) -> Result<Option<crate::WaitingGate>, FleetError> {
        let run: Value = self
            .send(self.http.get(self.url(&format!("/runs/{id}"))))
            .await?;
        match run.get("gate") {
            None | Some(Value::Null) => Ok(None),
            Some(gate) => serde_json::from_value(gate.clone()).map(Some).map_err(|e| {
                FleetError::BadResponse {
                    url: self.url(&format!("/runs/{id}")),
                    detail: format!("a gate the client cannot read: {e}"),
                }
            }),
        }
    }

    /// Waits up to `timeout` for the run to settle and returns it as it then stands.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<RunRecord, FleetError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let slice = left.min(Duration::from_secs(60)).as_millis().max(1) as u64;
            let url = self.url(&format!("/runs/{id}?wait_ms={slice}"));
            let run: RunRecord = self
                .send(
                    self.http
                        .get(url)
                        .timeout(Duration::from_millis(slice + 10_000)),
                )
                .await?;
            if run.status.is_settled() || tokio::time::Instant::now() >= deadline {
                return Ok(run);
            }
        }
    }

    /// One page of the run's event log, oldest first: events after sequence number `after`,
    /// at most `limit` (the host's default when `None`).
    pub async fn events_page(
        &self,
        id: &str,
        after: u64,
        limit: Option<usize>,
    ) -> Result<EventPage, FleetError> {
        let mut query = vec![("after", after.to_string())];
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        let req = self
            .http
            .get(self.url(&format!("/runs/{id}/events")))
            .query(&query);
        self.send(req).await
    }

    /// The run's whole event log, oldest first, page by page.
    pub async fn events(&self, id: &str) -> Result<Vec<EventRecord>, FleetError> {
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = self.events_page(id, after, Some(PAGE_MAX)).await?;
            events.extend(page.events);
            match page.next_after {
                Some(next) if next > after => after = next,
                _ => return Ok(events),
            }
        }
    }

    /// Follows the run's event log live: calls `on_event` with each event stored after
    /// `after` (a sequence number; 0 for the whole log), in order, and returns the run once it
    /// has settled. A stream that breaks (the host restarted, the network dropped) is opened
    /// again from the last event seen, for up to a minute without an answer, so no event is
    /// missed and none is given twice.
    pub async fn follow_events(
        &self,
        id: &str,
        after: u64,
        mut on_event: impl FnMut(EventRecord),
    ) -> Result<RunRecord, FleetError> {
        let mut after = after;
        let mut broken_since: Option<tokio::time::Instant> = None;
        let mut pause = Duration::from_millis(200);
        loop {
            let seen = after;
            let detail = match self.follow_once(id, &mut after, &mut on_event).await {
                Ok(FollowEnd::Settled(run)) => return Ok(*run),
                Ok(FollowEnd::Broken(detail)) => detail,
                Err(FleetError::Unreachable { detail, .. }) => detail,
                Err(other) => return Err(other),
            };
            if after > seen {
                broken_since = None;
                pause = Duration::from_millis(200);
            }
            let since = *broken_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= RECONNECT_FOR {
                return Err(FleetError::Unreachable {
                    url: self.base.clone(),
                    detail: format!(
                        "the live stream of run {id} broke and could not be reopened: {detail}"
                    ),
                });
            }
            tracing::debug!(
                run_id = id,
                after,
                "live stream broke ({detail}); reopening"
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Opens the stream once and reads it until the run settles or the connection ends.
    async fn follow_once(
        &self,
        id: &str,
        after: &mut u64,
        on_event: &mut impl FnMut(EventRecord),
    ) -> Result<FollowEnd, FleetError> {
        let req = self
            .http
            .get(self.url(&format!("/runs/{id}/events")))
            .query(&[("follow", "1".to_owned()), ("after", after.to_string())])
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let mut resp = self
            .authorized(req)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
            return Err(api_error(status.as_u16(), text));
        }
        let mut parser = SseParser::default();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(FollowEnd::Broken("the host closed the stream".into())),
                Err(e) => return Ok(FollowEnd::Broken(e.to_string())),
            };
            let events = parser.push(&chunk).map_err(|_| FleetError::BadResponse {
                url: self.base.clone(),
                detail: "the live stream sent a line longer than 16 MiB".into(),
            })?;
            for event in events {
                match event.kind.as_str() {
                    "event" => {
                        let record: EventRecord = self.decode(&event)?;
                        if record.seq > *after {
                            *after = record.seq;
                            on_event(record);
                        }
                    }
                    "end" => return Ok(FollowEnd::Settled(Box::new(self.decode(&event)?))),
                    "error" => {
                        let error: Value = self.decode(&event)?;
                        return Err(FleetError::Api {
                            status: 500,
                            code: error["code"].as_str().unwrap_or("unknown").to_owned(),
                            message: error["message"].as_str().unwrap_or("").to_owned(),
                        });
                    }
                    // Kinds a newer host may add are not this client's to act on.
                    _ => {}
                }
            }
        }
    }

    fn decode<T: DeserializeOwned>(&self, event: &SseEvent) -> Result<T, FleetError> {
        serde_json::from_str(&event.data).map_err(|e| FleetError::BadResponse {
            url: self.base.clone(),
            detail: format!("a live `{}` event: {e}", event.kind),
        })
    }

    fn unreachable(&self, e: &reqwest::Error) -> FleetError {
        FleetError::Unreachable {
            url: self.base.clone(),
            detail: e.to_string(),
        }
    }

    /// One page of runs, newest first, of one agent or of all: those after `cursor` (the
    /// `next` of the previous page), at most `limit` (the host's default when `None`). The
    /// host lists every run for an operator and a principal's own runs for anyone else.
    pub async fn jobs_page(
        &self,
        agent: Option<&str>,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<RunPage, FleetError> {
        let mut query = Vec::new();
        if let Some(agent) = agent {
            query.push(("agent", agent.to_owned()));
        }
        if let Some(cursor) = cursor {
            query.push(("cursor", cursor.to_owned()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        self.send(self.http.get(self.url("/jobs")).query(&query))
            .await
    }

    /// Approves (`true`) or denies the gate a blocked run waits on; the answer names the gate
    /// decided.
    pub async fn decide(&self, id: &str, approve: bool) -> Result<Decided, FleetError> {
        self.decide_gate(id, None, &Decision::from(approve)).await
    }

    /// Decides gate `gate` of run `id` (`None`: the one it waits on). Naming the gate makes a
    /// retry safe: the same decision again is answered `already_decided`, and a gate that no
    /// longer waits is refused with code `stale_decision`, never applied to the next gate.
    pub async fn decide_gate(
        &self,
        id: &str,
        gate: Option<&str>,
        decision: &Decision,
    ) -> Result<Decided, FleetError> {
        let mut body = match decision {
            Decision::Approve => json!({"approve": true}),
            Decision::Deny => json!({"approve": false}),
            Decision::Record { content, is_error } => {
                let key = if *is_error { "error" } else { "result" };
                json!({"record": {key: content}})
            }
            _ => json!({}),
        };
        if let Some(gate) = gate {
            body["gate"] = json!(gate);
        }
        let req = self
            .http
            .post(self.url(&format!("/runs/{id}/approve")))
            .json(&body);
        self.send(req).await
    }

    /// Cancels a run that has not settled, with an optional reason; returns the run, now
    /// `failed`. A settled run is refused with code `already_settled`.
    pub async fn cancel(&self, id: &str, reason: Option<&str>) -> Result<RunRecord, FleetError> {
        let body = match reason {
            Some(reason) => json!({"reason": reason}),
            None => json!({}),
        };
        let req = self
            .http
            .post(self.url(&format!("/runs/{id}/cancel")))
            .json(&body);
        self.send(req).await
    }

    /// Re-reads every agent.yaml and starts again the agents that are down; returns the agents
    /// whose config changed and the agents revived.
    pub async fn reload(&self) -> Result<Reloaded, FleetError> {
        self.send(self.http.post(self.url("/reload")).json(&json!({})))
            .await
    }

    /// The host's agents, whether each is up, and why one is down.
    pub async fn agents(&self) -> Result<Vec<AgentStatus>, FleetError> {
        self.send(self.http.get(self.url("/agents"))).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, FleetError> {
        let resp = self
            .authorized(req)
            .send()
            .await
            .map_err(|e| FleetError::Unreachable {
                url: self.base.clone(),
                detail: e.to_string(),
            })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| FleetError::Unreachable {
            url: self.base.clone(),
            detail: e.to_string(),
        })?;
        if !status.is_success() {
            return Err(api_error(status.as_u16(), text));
        }
        serde_json::from_str(&text).map_err(|e| FleetError::BadResponse {
            url: self.base.clone(),
            detail: e.to_string(),
        })
    }
}

/// The typed error for an answer with a failing status: the host's code and message when the
/// body is the API's error JSON, the body itself otherwise.
fn api_error(status: u16, text: String) -> FleetError {
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    FleetError::Api {
        status,
        code: error
            .and_then(|e| e["code"].as_str())
            .unwrap_or("unknown")
            .to_owned(),
        message: error
            .and_then(|e| e["message"].as_str())
            .map(str::to_owned)
            .unwrap_or(text),
    }
}
