//! The host's agents as A2A agents (A2A 1.0, JSON-RPC binding).
//!
//! | route                                          | what                                        |
//! |------------------------------------------------|---------------------------------------------|
//! | `GET /.well-known/agent-card.json`             | the host's card: its one agent's card, or a card with one skill per agent whose endpoint is `/a2a` |
//! | `GET /a2a/{agent}/.well-known/agent-card.json` | one agent's card                            |
//! | `POST /a2a/{agent}`                            | JSON-RPC for that agent's tasks             |
//! | `POST /a2a`                                    | JSON-RPC for every agent's tasks; a new message names its agent in `metadata.agent` (needless on a host of one agent) |
//!
//! An A2A task is a consort run ([`task_view`] holds the mapping of states): `SendMessage`
//! starts a root run exactly as `POST /runs` does, acting for the caller's bearer token, so
//! consent, visibility, approval gates and admission apply unchanged. It answers when the run
//! settles or stops to wait for an approval (`TASK_STATE_INPUT_REQUIRED`), at most after
//! [`ANSWER_WAIT`], or at once with `returnImmediately`. A reply of `approve` or `deny` to an
//! `INPUT_REQUIRED` task is the approval decision, taken when the caller may make it (an
//! operator, or the requester where the tool says `approval: requester`).
//! `SendStreamingMessage` and `SubscribeToTask` stream the task's changes as server-sent
//! events (the first event is the task, then status and artifact updates, and the stream ends
//! when the task settles or stops to wait), from the store, woken by the run feed as
//! [`super::follow`]'s streams are. `GetTask` reads one task, `ListTasks` pages through the
//! caller's tasks (an operator's through all) newest first, `CancelTask` cancels the run.
//!
//! Cards are public, as A2A discovery needs: they name the agents, what they say of
//! themselves, and the bearer scheme. Every method needs what the matching HTTP route needs:
//! a request without a usable token on a host that refuses anonymous callers is answered
//! HTTP 401 with `WWW-Authenticate: Bearer`; a task the caller may not see is
//! `TaskNotFoundError`, as one that does not exist. A request must name protocol version 1.0
//! in the `A2A-Version` header (A2A reads a request without it as 0.3, which is not served).
//!
//! This module translates A2A to calls on [`Host`] and decides nothing about runs; who may do
//! what is [`crate::access`]'s decision.

pub(crate) mod task_view;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::{HOST, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, broadcast, mpsc};
use utoipa::ToSchema;

use consort_a2a::{
    A2aErrorCode, AgentCapabilities, AgentCard, AgentInterface, AgentSkill, CancelTaskRequest,
    GetTaskRequest, HttpAuthSecurityScheme, JsonRpcError, JsonRpcId, JsonRpcResponse,
    ListTasksRequest, ListTasksResponse, Method, SecurityRequirement, SecurityScheme,
    SendMessageRequest, SendMessageResponse, StreamResponse, StringList, SubscribeToTaskRequest,
    Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};
use consort_actors::page::{PAGE_MAX, RunCursor};
use consort_actors::visibility::Identity;
use consort_actors::{ActorsError, Channel, Host, RunChange, RunRecord, RunStatus};
use consort_core::event::ApprovalRequested;
use consort_core::step::Decision;
use consort_net::RunId;

use super::follow::{REREAD_EVERY, StreamSlots};
use super::{MAX_INPUT_BYTES, blocking, requester};
use crate::access::{self, Action, Denial, Requester};
use crate::auth::HostAuth;
use task_view::{ListFilter, answer_artifact, task_of, task_state};

/// How long `SendMessage` waits for its run to settle or stop to wait.
pub(crate) const ANSWER_WAIT: Duration = super::mcp::ANSWER_WAIT;
/// Tasks per `ListTasks` page unless `pageSize` says otherwise.
const PAGE_DEFAULT: i32 = 50;
/// The largest `ListTasks` page.
const PAGE_LARGEST: i32 = 100;
/// How many runs `ListTasks` reads at most to count `totalSize` and fill a filtered page.
const SCAN_LIMIT: usize = 100_000;
/// Where an agent's endpoint and card live: `/a2a/{agent}`.
const AGENT_BASE: &str = "/a2a";

/// A JSON-RPC request, as `/openapi.json` describes the body of the A2A endpoints.
#[derive(Serialize, ToSchema)]
#[schema(as = A2aRequest)]
pub(crate) struct A2aRequestDoc {
    /// `"2.0"`.
    jsonrpc: String,
    /// Echoed in the answer.
    id: Value,
    /// `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask` or
    /// `SubscribeToTask`.
    method: String,
    /// The method's params, in A2A 1.0's JSON shape.
    params: Value,
}

/// An A2A agent card, as `/openapi.json` describes it (the A2A 1.0 `AgentCard`).
#[derive(Serialize, ToSchema)]
#[schema(as = A2aAgentCard)]
pub(crate) struct AgentCardDoc {
    /// The agent's (or host's) name.
    name: String,
    /// What it does.
    description: String,
    /// Where its JSON-RPC endpoint is: `[{url, protocolBinding: "JSONRPC", protocolVersion: "1.0"}]`.
    #[serde(rename = "supportedInterfaces")]
    supported_interfaces: Vec<Value>,
    /// The bearer scheme.
    #[serde(rename = "securitySchemes")]
    security_schemes: Value,
    /// One skill per agent.
    skills: Vec<Value>,
}

/// A request the JSON-RPC layer took apart: its id and who sent it.
struct Call {
    id: JsonRpcId,
    host: Host,
    auth: Arc<HostAuth>,
    streams: StreamSlots,
    headers: HeaderMap,
    identity: Identity,
    who: Requester,
    /// The agent the endpoint serves (`/a2a/{agent}`), `None` at `/a2a`.
    agent: Option<String>,
}

/// Why a method did not answer: the JSON-RPC error and the HTTP status it goes with (200 but
/// for authentication).
struct Failure {
    status: StatusCode,
    error: JsonRpcError,
}

impl Failure {
    fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::OK,
            error: JsonRpcError::new(code, message),
        }
    }

    fn task_not_found(id: &str) -> Self {
        Self::new(
            A2aErrorCode::TaskNotFound,
            format!("no task `{id}` that this caller may see"),
        )
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::warn!("an A2A request failed inside the host: {e}");
        Self::new(A2aErrorCode::InternalError, e.to_string())
    }
}

impl From<Denial> for Failure {
    fn from(denial: Denial) -> Self {
        let api = super::ApiError::from(denial.clone());
        let (status, code) = match denial {
            Denial::Unauthenticated => (StatusCode::UNAUTHORIZED, A2aErrorCode::InvalidRequest),
            Denial::IdentityUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, A2aErrorCode::InternalError)
            }
            Denial::Forbidden(_) => (StatusCode::FORBIDDEN, A2aErrorCode::UnsupportedOperation),
            Denial::NotVisible => (StatusCode::OK, A2aErrorCode::TaskNotFound),
        };
        Self {
            status,
            error: JsonRpcError::new(code, api.message),
        }
    }
}

impl From<super::ApiError> for Failure {
    fn from(e: super::ApiError) -> Self {
        match e.code {
            "unknown_run" => Self::new(A2aErrorCode::TaskNotFound, e.message),
            _ => Self::internal(e.message),
        }
    }
}

/// What a method answers: a result, or a stream it has started.
enum Answer {
    Result(Value),
    Stream(Response),
}

fn respond(id: JsonRpcId, outcome: Result<Answer, Failure>) -> Response {
    match outcome {
        Ok(Answer::Result(result)) => Json(JsonRpcResponse::success(id, result)).into_response(),
        Ok(Answer::Stream(response)) => response,
        Err(failure) => {
            let mut response = (
                failure.status,
                Json(JsonRpcResponse::failure(id, failure.error)),
            )
                .into_response();
            if failure.status == StatusCode::UNAUTHORIZED {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}

fn result_of(value: &impl Serialize) -> Result<Answer, Failure> {
    serde_json::to_value(value)
        .map(Answer::Result)
        .map_err(Failure::internal)
}

// ---- cards ----------------------------------------------------------------------------------

/// `http://<Host header>`: where this request reached the API, so the card's URLs are ones
/// its reader can reach.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

fn bearer_security() -> (
    std::collections::BTreeMap<String, SecurityScheme>,
    Vec<SecurityRequirement>,
) {
    let scheme = SecurityScheme::HttpAuthSecurityScheme(HttpAuthSecurityScheme {
        description: Some(
            "A token of the host's auth file (`Authorization: Bearer <token>`); tasks act for its principal"
                .to_owned(),
        ),
        scheme: "Bearer".to_owned(),
        bearer_format: None,
    });
    (
        [("bearer".to_owned(), scheme)].into(),
        vec![SecurityRequirement {
            schemes: [("bearer".to_owned(), StringList::default())].into(),
        }],
    )
}

fn skill_of(agent: &str, description: &str) -> AgentSkill {
    AgentSkill {
        id: agent.to_owned(),
        name: agent.to_owned(),
        description: if description.trim().is_empty() {
            format!("Ask the consort agent `{agent}`; it answers with its own tools and data.")
        } else {
            description.trim().to_owned()
        },
        tags: vec!["consort".to_owned()],
        ..AgentSkill::default()
    }
}

fn card(name: &str, description: String, url: String, skills: Vec<AgentSkill>) -> AgentCard {
    let (security_schemes, security_requirements) = bearer_security();
    AgentCard {
        name: name.to_owned(),
        description,
        supported_interfaces: vec![AgentInterface {
            url,
            protocol_binding: consort_a2a::JSONRPC_BINDING.to_owned(),
            tenant: None,
            protocol_version: consort_a2a::PROTOCOL_VERSION.to_owned(),
        }],
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extended_agent_card: Some(false),
            extensions: Vec::new(),
        },
        security_schemes,
        security_requirements,
        default_input_modes: vec!["text/plain".to_owned()],
        default_output_modes: vec!["text/plain".to_owned()],
        skills,
        ..AgentCard::default()
    }
}

fn agent_card(host: &Host, headers: &HeaderMap, agent: &str) -> Option<AgentCard> {
    let (name, description) = host.described_agents().find(|(a, _)| *a == agent)?;
    let skill = skill_of(name, description);
    Some(card(
        name,
        skill.description.clone(),
        format!("{}{AGENT_BASE}/{name}", base_url(headers)),
        vec![skill],
    ))
}

fn host_card(host: &Host, headers: &HeaderMap) -> AgentCard {
    if let [only] = host.agents()
        && let Some(card) = agent_card(host, headers, only)
    {
        return card;
    }
    let skills: Vec<AgentSkill> = host
        .described_agents()
        .map(|(agent, description)| skill_of(agent, description))
        .collect();
    let names = host.agents().join(", ");
    card(
        "consort",
        format!(
            "A consort host serving the agents {names}. Each has its own card at {AGENT_BASE}/<agent>/.well-known/agent-card.json; at this endpoint a new message names its agent in metadata.agent."
        ),
        format!("{}{AGENT_BASE}", base_url(headers)),
        skills,
    )
}

#[utoipa::path(
    get, path = "/.well-known/agent-card.json", tag = "a2a",
    summary = "A2A: the host's agent card",
    description = "The card of the host's one agent, or, on a host of several, a card with one skill per agent whose endpoint is `/a2a`. Public, as A2A discovery needs.",
    responses((status = 200, description = "an A2A 1.0 agent card", body = AgentCardDoc)),
)]
pub(crate) async fn host_card_route(State(host): State<Host>, headers: HeaderMap) -> Response {
    Json(host_card(&host, &headers)).into_response()
}

#[utoipa::path(
    get, path = "/a2a/{agent}/.well-known/agent-card.json", tag = "a2a",
    summary = "A2A: one agent's card",
    params(("agent" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, description = "an A2A 1.0 agent card", body = AgentCardDoc),
        (status = 404, description = "no such agent here", body = super::openapi::ErrorDoc),
    ),
)]
pub(crate) async fn agent_card_route(
    State(host): State<Host>,
    headers: HeaderMap,
    Path(agent): Path<String>,
) -> Response {
    match agent_card(&host, &headers, &agent) {
        Some(card) => Json(card).into_response(),
        None => super::ApiError::from(ActorsError::UnknownAgent(agent)).into_response(),
    }
}

// ---- JSON-RPC -------------------------------------------------------------------------------

#[utoipa::path(
    post, path = "/a2a", tag = "a2a",
    summary = "A2A: JSON-RPC for every agent's tasks",
    description = "A2A 1.0 JSON-RPC (`SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`); a new message names its agent in `metadata.agent` unless the host serves one. Send `A2A-Version: 1.0`.",
    request_body = A2aRequestDoc,
    responses(
        (status = 200, description = "the JSON-RPC answer (JSON, or server-sent events for the streaming methods)"),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers"),
    ),
    security((), ("bearer" = []))
)]
pub(crate) async fn host_rpc(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(streams): State<StreamSlots>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    rpc(host, auth, streams, headers, None, &body).await
}

#[utoipa::path(
    post, path = "/a2a/{agent}", tag = "a2a",
    summary = "A2A: JSON-RPC for one agent's tasks",
    description = "A2A 1.0 JSON-RPC (`SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`) for the tasks of one agent. Send `A2A-Version: 1.0`.",
    params(("agent" = String, Path, description = "The agent's name")),
    request_body = A2aRequestDoc,
    responses(
        (status = 200, description = "the JSON-RPC answer (JSON, or server-sent events for the streaming methods)"),
        (status = 401, description = "no known bearer token, on a host that refuses anonymous callers"),
        (status = 404, description = "no such agent here", body = super::openapi::ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(crate) async fn agent_rpc(
    State(host): State<Host>,
    State(auth): State<Arc<HostAuth>>,
    State(streams): State<StreamSlots>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    body: Bytes,
) -> Response {
    if !host.agents().iter().any(|a| a == &agent) {
        return super::ApiError::from(ActorsError::UnknownAgent(agent)).into_response();
    }
    rpc(host, auth, streams, headers, Some(agent), &body).await
}

/// Takes one JSON-RPC request apart and answers it.
async fn rpc(
    host: Host,
    auth: Arc<HostAuth>,
    streams: StreamSlots,
    headers: HeaderMap,
    agent: Option<String>,
    body: &[u8],
) -> Response {
    let request: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return respond(
                Value::Null,
                Err(Failure::new(
                    A2aErrorCode::ParseError,
                    format!("the body is not JSON: {e}"),
                )),
            );
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let (method, params) = match envelope(&request) {
        Ok(parts) => parts,
        Err(failure) => return respond(id, Err(failure)),
    };
    if let Err(failure) = protocol_version(&headers) {
        return respond(id, Err(failure));
    }
    let (identity, who) = requester(&auth, &headers).await;
    if let Err(denial) = access::identified(&who, auth.anonymous()) {
        return respond(id, Err(denial.into()));
    }
    let call = Call {
        id: id.clone(),
        host,
        auth,
        streams,
        headers,
        identity,
        who,
        agent,
    };
    let span = tracing::info_span!(
        "a2a_request",
        method = method.as_str(),
        agent = call.agent.as_deref().unwrap_or("")
    );
    let outcome = tracing::Instrument::instrument(call.dispatch(method, params), span).await;
    respond(id, outcome)
}

/// The method and params of a JSON-RPC 2.0 request, or why it is not one.
fn envelope(request: &Value) -> Result<(Method, Value), Failure> {
    let Some(object) = request.as_object() else {
        return Err(Failure::new(
            A2aErrorCode::InvalidRequest,
            "the body must be one JSON-RPC 2.0 request object (batches are not served)",
        ));
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Failure::new(
            A2aErrorCode::InvalidRequest,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    let Some(name) = object.get("method").and_then(Value::as_str) else {
        return Err(Failure::new(
            A2aErrorCode::InvalidRequest,
            "`method` must be a string",
        ));
    };
    let Some(method) = Method::parse(name) else {
        return Err(Failure::new(
            A2aErrorCode::MethodNotFound,
            format!(
                "no method `{name}`: this endpoint speaks A2A 1.0 (SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask)"
            ),
        ));
    };
    Ok((method, object.get("params").cloned().unwrap_or(json!({}))))
}

/// Refuses a request that does not speak version 1.0 (a missing header means 0.3).
fn protocol_version(headers: &HeaderMap) -> Result<(), Failure> {
    let asked = headers
        .get(consort_a2a::VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("0.3");
    let major_minor: Vec<&str> = asked.split('.').take(2).collect();
    if major_minor == ["1", "0"] || asked == "1" {
        Ok(())
    } else {
        Err(Failure::new(
            A2aErrorCode::VersionNotSupported,
            format!(
                "A2A version {asked} is not served here; send `A2A-Version: 1.0` (a request without the header is read as 0.3)"
            ),
        ))
    }
}

fn params_of<T: DeserializeOwned>(params: Value) -> Result<T, Failure> {
    serde_json::from_value(params)
        .map_err(|e| Failure::new(A2aErrorCode::InvalidParams, format!("params: {e}")))
}

impl Call {
    async fn dispatch(self, method: Method, params: Value) -> Result<Answer, Failure> {
        match method {
            Method::SendMessage => self.send_message(params_of(params)?, false).await,
            Method::SendStreamingMessage => self.send_message(params_of(params)?, true).await,
            Method::GetTask => self.get_task(params_of(params)?).await,
            Method::ListTasks => self.list_tasks(params_of(params)?).await,
            Method::CancelTask => self.cancel_task(params_of(params)?).await,
            Method::SubscribeToTask => self.subscribe(params_of(params)?).await,
            Method::CreateTaskPushNotificationConfig
            | Method::GetTaskPushNotificationConfig
            | Method::ListTaskPushNotificationConfigs
            | Method::DeleteTaskPushNotificationConfig => Err(Failure::new(
                A2aErrorCode::PushNotificationNotSupported,
                "this host sends no push notifications: follow a task with SubscribeToTask or read it with GetTask",
            )),
            Method::GetExtendedAgentCard => Err(Failure::new(
                A2aErrorCode::ExtendedAgentCardNotConfigured,
                "this host has no extended card: its public card is all there is",
            )),
        }
    }

    fn authorize(&self, action: Action<'_>) -> Result<(), Failure> {
        access::authorize(&self.who, self.auth.anonymous(), action).map_err(Failure::from)
    }

    /// The run of task `id`, if the caller may see it at this endpoint.
    async fn visible_run(&self, id: &str) -> Result<RunRecord, Failure> {
        let run_id = RunId::parse(id).map_err(|_| Failure::task_not_found(id))?;
        let run = blocking(&self.host, move |h| h.run(&run_id))
            .await?
            .ok_or_else(|| Failure::task_not_found(id))?;
        if self.agent.as_ref().is_some_and(|a| a != &run.agent) {
            return Err(Failure::task_not_found(id));
        }
        self.authorize(Action::ReadRun {
            owner: &run.principal,
        })?;
        Ok(run)
    }

    /// The approval request a blocked run waits on.
    async fn gate(&self, run: &RunRecord) -> Result<Option<ApprovalRequested>, Failure> {
        gate_of(&self.host, run).await
    }

    async fn task(&self, run: &RunRecord, history_length: Option<i32>) -> Result<Task, Failure> {
        let gate = self.gate(run).await?;
        Ok(task_of(run, gate.as_ref(), history_length, true))
    }

    /// The agent a new message asks: the endpoint's, the one `metadata.agent` names, or the
    /// host's only one.
    fn agent_for(&self, params: &SendMessageRequest) -> Result<String, Failure> {
        if let Some(agent) = &self.agent {
            return Ok(agent.clone());
        }
        let named = [params.message.metadata.as_ref(), params.metadata.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|m| m.get("agent").and_then(Value::as_str));
        let agents = self.host.agents();
        match (named, agents) {
            (Some(name), _) if agents.iter().any(|a| a == name) => Ok(name.to_owned()),
            (Some(name), _) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!(
                    "no agent named `{name}` here (agents: {})",
                    agents.join(", ")
                ),
            )),
            (None, [only]) => Ok(only.clone()),
            (None, _) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!(
                    "this host serves several agents: name one in the message's metadata (`{{\"agent\": \"…\"}}`) or send to {AGENT_BASE}/<agent> (agents: {})",
                    agents.join(", ")
                ),
            )),
        }
    }

    async fn send_message(
        self,
        params: SendMessageRequest,
        streaming: bool,
    ) -> Result<Answer, Failure> {
        let config = params.configuration.clone().unwrap_or_default();
        let run = match params.message.task_id.as_deref() {
            Some(task) => self.continue_task(task, &params).await?,
            None => match self.start(&params).await? {
                Ok(run) => run,
                Err(rejected) => {
                    return if streaming {
                        let slot = self
                            .streams
                            .take()
                            .map_err(|e| Failure::internal(e.message))?;
                        Ok(Answer::Stream(stream_rejected(self.id, rejected, slot)))
                    } else {
                        result_of(&SendMessageResponse::Task(rejected))
                    };
                }
            },
        };
        if streaming {
            let slot = self
                .streams
                .take()
                .map_err(|e| Failure::internal(e.message))?;
            return Ok(Answer::Stream(stream_task(
                self.host.clone(),
                run.id,
                self.id,
                config.history_length,
                false,
                slot,
            )));
        }
        let run = if config.return_immediately {
            run
        } else {
            until_paused(&self.host, &run.id, ANSWER_WAIT).await?
        };
        let task = self.task(&run, config.history_length).await?;
        result_of(&SendMessageResponse::Task(task))
    }

    /// Starts the run a new message asks for: the stored run, or the `REJECTED` task of a
    /// request the host refused.
    async fn start(&self, params: &SendMessageRequest) -> Result<Result<RunRecord, Task>, Failure> {
        self.authorize(Action::StartRun)?;
        let agent = self.agent_for(params)?;
        let input =
            task_view::input_of(&params.message, MAX_INPUT_BYTES).map_err(|error| Failure {
                status: StatusCode::OK,
                error,
            })?;
        let trace = crate::trace_header::incoming_trace(&self.headers);
        let started = self
            .host
            .start_run_traced(&agent, &input, Channel::Api, self.identity.clone(), trace)
            .await;
        match started {
            Ok(run) => {
                tracing::info!(run_id = %run.id, agent, principal = %run.principal, hop_depth = run.hop_depth, "run started through A2A");
                Ok(Ok(run))
            }
            Err(ActorsError::Refused(refusal)) => {
                let why = format!("{refusal} ({})", refusal.code());
                let now = task_view::now_ms();
                Ok(Err(task_view::rejected_task(
                    RunId::random().to_string(),
                    &agent,
                    &why,
                    now,
                )))
            }
            Err(ActorsError::UnknownAgent(name)) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!("no agent named `{name}` here"),
            )),
            Err(e) => Err(Failure::internal(e)),
        }
    }

    /// A message to an existing task: the approval decision an `INPUT_REQUIRED` task waits on.
    async fn continue_task(
        &self,
        task: &str,
        params: &SendMessageRequest,
    ) -> Result<RunRecord, Failure> {
        let run = self.visible_run(task).await?;
        let state = task_state(&run);
        if state != TaskState::InputRequired {
            return Err(Failure::new(
                A2aErrorCode::UnsupportedOperation,
                format!(
                    "task {task} is {}: a consort task takes one request and, while it waits for an approval, `approve` or `deny`; send a new message without taskId to ask again",
                    state.wire_name()
                ),
            ));
        }
        let text = params.message.joined_text().0;
        let Some(approve) = task_view::decision_of(&text) else {
            return Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!("task {task} waits for an approval: reply `approve` or `deny`"),
            ));
        };
        let gate = self.gate(&run).await?;
        self.authorize(Action::Decide {
            owner: &run.principal,
            self_approval: gate.as_ref().is_some_and(|g| g.requester_may_decide),
        })?;
        // The reply decides the gate the task showed as waiting, and only that one.
        let decision = Decision::from(approve);
        self.host
            .decide_as(
                &run.id,
                gate.as_ref().map(|g| g.gate.as_str()),
                decision,
                self.who.decider(),
            )
            .await
            .map(|decided| decided.run)
            .map_err(|e| match e {
                ActorsError::Refused(refusal) => {
                    Failure::new(A2aErrorCode::UnsupportedOperation, refusal.to_string())
                }
                other => Failure::internal(other),
            })
    }

    async fn get_task(self, params: GetTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let task = self.task(&run, params.history_length).await?;
        result_of(&task)
    }

    async fn subscribe(self, params: SubscribeToTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let state = task_state(&run);
        if state.is_terminal() {
            return Err(Failure::new(
                A2aErrorCode::UnsupportedOperation,
                format!(
                    "task {} is already {}: read it with GetTask",
                    params.id,
                    state.wire_name()
                ),
            ));
        }
        let slot = self
            .streams
            .take()
            .map_err(|e| Failure::internal(e.message))?;
        Ok(Answer::Stream(stream_task(
            self.host.clone(),
            run.id,
            self.id,
            None,
            true,
            slot,
        )))
    }

    async fn cancel_task(self, params: CancelTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let state = task_state(&run);
        if state.is_terminal() {
            return Err(Failure::new(
                A2aErrorCode::TaskNotCancelable,
                format!("task {} is already {}", params.id, state.wire_name()),
            ));
        }
        self.authorize(Action::Cancel {
            owner: &run.principal,
        })?;
        let reason = params
            .metadata
            .as_ref()
            .and_then(|m| m.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let canceled = self
            .host
            .cancel_as(&run.id, self.who.decider(), reason)
            .await
            .map_err(|e| match e {
                ActorsError::Refused(refusal) => {
                    Failure::new(A2aErrorCode::TaskNotCancelable, refusal.to_string())
                }
                other => Failure::internal(other),
            })?;
        let task = self.task(&canceled, None).await?;
        result_of(&task)
    }

    async fn list_tasks(self, params: ListTasksRequest) -> Result<Answer, Failure> {
        self.authorize(Action::ListRuns)?;
        let page_size = match params.page_size {
            None | Some(0) => PAGE_DEFAULT,
            Some(n) if (1..=PAGE_LARGEST).contains(&n) => n,
            Some(n) => {
                return Err(Failure::new(
                    A2aErrorCode::InvalidParams,
                    format!("pageSize {n} is not between 1 and {PAGE_LARGEST}"),
                ));
            }
        };
        let token = match params.page_token.as_deref() {
            None | Some("") => None,
            Some(text) => Some(RunCursor::parse(text).ok_or_else(|| {
                Failure::new(
                    A2aErrorCode::InvalidParams,
                    "pageToken is not one this host gave out: pass the nextPageToken of the previous page",
                )
            })?),
        };
        let changed_after_ms = match params.status_timestamp_after.as_deref() {
            None => None,
            Some(text) => Some(task_view::parse_rfc3339_ms(text).ok_or_else(|| {
                Failure::new(
                    A2aErrorCode::InvalidParams,
                    format!("statusTimestampAfter `{text}` is not an RFC 3339 time"),
                )
            })?),
        };
        let filter = ListFilter {
            context_id: params.context_id.clone(),
            state: params.status.filter(|s| *s != TaskState::Unspecified),
            changed_after_ms,
        };
        let scope = access::listing_scope(&self.who);
        let agent = self.agent.clone();
        let size = usize::try_from(page_size).unwrap_or(50);
        let scanned = blocking(&self.host, move |h| {
            scan(
                h,
                agent.as_deref(),
                scope.owner(),
                &filter,
                token.as_ref(),
                size,
            )
        })
        .await?;
        let with_artifacts = params.include_artifacts.unwrap_or(false);
        let tasks = scanned
            .page
            .iter()
            .map(|run| task_of(run, None, params.history_length, with_artifacts))
            .collect();
        result_of(&ListTasksResponse {
            tasks,
            next_page_token: scanned.next.map(|c| c.to_string()).unwrap_or_default(),
            page_size,
            total_size: i32::try_from(scanned.total).unwrap_or(i32::MAX),
        })
    }
}

/// A page of `ListTasks`, and how many tasks match in all.
struct Scanned {
    page: Vec<RunRecord>,
    next: Option<RunCursor>,
    total: usize,
}

/// Reads the caller's runs newest first (at most [`SCAN_LIMIT`]), counting those `filter`
/// keeps and taking `size` of them from after `token`.
fn scan(
    host: &Host,
    agent: Option<&str>,
    owner: Option<&str>,
    filter: &ListFilter,
    token: Option<&RunCursor>,
    size: usize,
) -> Result<Scanned, ActorsError> {
    let mut out = Scanned {
        page: Vec::new(),
        next: None,
        total: 0,
    };
    let mut cursor: Option<RunCursor> = None;
    let mut read = 0;
    loop {
        let page = host.jobs_page(agent, cursor.as_ref(), owner, PAGE_MAX)?;
        for run in &page.runs {
            read += 1;
            if !filter.keeps(run) {
                continue;
            }
            out.total += 1;
            if !token.is_none_or(|t| task_view::is_after(run, t)) {
                continue;
            }
            if out.page.len() < size {
                out.page.push(run.clone());
            } else if out.next.is_none() {
                out.next = out.page.last().map(RunCursor::after);
            }
        }
        cursor = match page.next.as_deref().and_then(RunCursor::parse) {
            Some(next) if read < SCAN_LIMIT => Some(next),
            _ => break,
        };
    }
    Ok(out)
}

// ---- waiting and streaming ------------------------------------------------------------------

/// Reads a run off the async workers; one that is gone is `TaskNotFoundError`.
async fn read_run(host: &Host, id: &RunId) -> Result<RunRecord, Failure> {
    Ok(super::stored_run(host, id).await?)
}

/// Whether a task in `state` has stopped, for now or for good.
fn paused(state: TaskState) -> bool {
    state.is_terminal() || state.is_interrupted()
}

/// Waits until run `id` settles or stops to wait for an approval, or `wait` is over, and
/// returns it as it then stands.
async fn until_paused(host: &Host, id: &RunId, wait: Duration) -> Result<RunRecord, Failure> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut changes = host.feed().subscribe();
    loop {
        let run = read_run(host, id).await?;
        if paused(task_state(&run)) || tokio::time::Instant::now() >= deadline {
            return Ok(run);
        }
        next_change(&mut changes, id, deadline).await;
    }
}

/// Waits for a notice about `id`, a lag, the re-read interval or `deadline`.
async fn next_change(
    changes: &mut broadcast::Receiver<RunChange>,
    id: &RunId,
    deadline: tokio::time::Instant,
) {
    let reread = (tokio::time::Instant::now() + REREAD_EVERY).min(deadline);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(reread) => return,
            notice = changes.recv() => match notice {
                Ok(change) if change.id() == id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                // The host stopped: the next read says what is left.
                Err(broadcast::error::RecvError::Closed) => {
                    tokio::time::sleep_until(reread).await;
                    return;
                }
            },
        }
    }
}

fn stream_event(id: &JsonRpcId, event: &StreamResponse) -> Event {
    let response = match serde_json::to_value(event) {
        Ok(result) => JsonRpcResponse::success(id.clone(), result),
        Err(e) => JsonRpcResponse::failure(
            id.clone(),
            JsonRpcError::new(A2aErrorCode::InternalError, e.to_string()),
        ),
    };
    Event::default().json_data(&response).unwrap_or_else(|e| {
        Event::default().data(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32603,\"message\":\"{e}\"}}}}"
        ))
    })
}

fn stream_rejected(id: JsonRpcId, task: Task, slot: OwnedSemaphorePermit) -> Response {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let _slot = slot;
        let _ = tx
            .send(stream_event(&id, &StreamResponse::Task(task)))
            .await;
    });
    super::follow::stream_response(rx)
}

/// Streams task `run`: the task as it stands, then each change of its state, until it settles
/// or stops to wait.
fn stream_task(
    host: Host,
    run: RunId,
    id: JsonRpcId,
    history_length: Option<i32>,
    subscribed: bool,
    slot: OwnedSemaphorePermit,
) -> Response {
    let (tx, rx) = mpsc::channel(16);
    let span = tracing::info_span!("a2a_stream", run_id = %run);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let _slot = slot;
            if let Err(failure) =
                follow_task(&host, &run, &id, history_length, subscribed, &tx).await
            {
                let response = JsonRpcResponse::failure(id.clone(), failure.error);
                let event = Event::default()
                    .json_data(&response)
                    .unwrap_or_else(|_| Event::default().data("{}"));
                let _ = tx.send(event).await;
            }
        },
        span,
    ));
    super::follow::stream_response(rx)
}

async fn follow_task(
    host: &Host,
    id: &RunId,
    rpc: &JsonRpcId,
    history_length: Option<i32>,
    subscribed: bool,
    tx: &mpsc::Sender<Event>,
) -> Result<(), Failure> {
    // Subscribe before the first read: a change between the two is not missed.
    let mut changes = host.feed().subscribe();
    let run = read_run(host, id).await?;
    let gate = gate_of(host, &run).await?;
    let mut last = task_state(&run);
    let first = StreamResponse::Task(task_of(&run, gate.as_ref(), history_length, true));
    // A subscriber to a task that already waits is followed on: it wants to see the task move
    // on. A task that comes to wait while followed ends the stream, as A2A streams end.
    let stop = if subscribed {
        last.is_terminal()
    } else {
        paused(last)
    };
    if tx.send(stream_event(rpc, &first)).await.is_err() || stop {
        return Ok(());
    }
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            () = tx.closed() => return Ok(()),
            () = next_change(&mut changes, id, far) => {}
        }
        let run = read_run(host, id).await?;
        let state = task_state(&run);
        if state == last {
            continue;
        }
        last = state;
        let gate = gate_of(host, &run).await?;
        let task = task_of(&run, gate.as_ref(), Some(0), true);
        if state == TaskState::Completed {
            let artifact = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: answer_artifact(&run),
                append: false,
                last_chunk: true,
                metadata: None,
            });
            if tx.send(stream_event(rpc, &artifact)).await.is_err() {
                return Ok(());
            }
        }
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task.id,
            context_id: task.context_id,
            status: task.status,
            metadata: None,
        });
        if tx.send(stream_event(rpc, &update)).await.is_err() || paused(state) {
            return Ok(());
        }
    }
}

async fn gate_of(host: &Host, run: &RunRecord) -> Result<Option<ApprovalRequested>, Failure> {
    if run.status != RunStatus::Blocked {
        return Ok(None);
    }
    let asked = run.clone();
    Ok(blocking(host, move |h| h.pending_gate(&asked)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(v) = version {
            headers.insert(
                consort_a2a::VERSION_HEADER,
                HeaderValue::from_str(v).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn only_version_one_is_served() {
        assert!(protocol_version(&headers(Some("1.0"))).is_ok());
        assert!(protocol_version(&headers(Some("1.0.3"))).is_ok());
        assert!(protocol_version(&headers(Some("1"))).is_ok());
        for refused in [None, Some("0.3"), Some("2.0"), Some(""), Some("1.1")] {
            let failure = protocol_version(&headers(refused)).err();
            assert_eq!(failure.map(|f| f.error.code), Some(-32009), "{refused:?}");
        }
    }

    #[test]
    fn a_request_must_be_one_json_rpc_object_naming_a_known_method() {
        let ok = envelope(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}),
        );
        assert!(matches!(ok, Ok((Method::GetTask, _))));
        let no_params = envelope(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}));
        assert!(matches!(no_params, Ok((Method::ListTasks, p)) if p == json!({})));
        let code = |v: Value| envelope(&v).err().map(|f| f.error.code);
        assert_eq!(code(json!([{"jsonrpc": "2.0"}])), Some(-32600));
        assert_eq!(
            code(json!({"jsonrpc": "1.0", "method": "GetTask"})),
            Some(-32600)
        );
        assert_eq!(code(json!({"jsonrpc": "2.0", "method": 7})), Some(-32600));
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "method": "message/send"})),
            Some(-32601)
        );
    }

    #[test]
    fn params_that_do_not_fit_are_invalid_params() {
        let bad: Result<GetTaskRequest, _> = params_of(json!({"historyLength": 2}));
        assert_eq!(bad.err().map(|f| f.error.code), Some(-32602));
        let good: Result<GetTaskRequest, _> = params_of(json!({"id": "t"}));
        assert!(good.is_ok());
    }

    #[test]
    fn denials_keep_their_http_meaning() {
        let f = Failure::from(Denial::Unauthenticated);
        assert_eq!(f.status, StatusCode::UNAUTHORIZED);
        let f = Failure::from(Denial::NotVisible);
        assert_eq!((f.status, f.error.code), (StatusCode::OK, -32001));
        let f = Failure::from(Denial::Forbidden("not yours"));
        assert_eq!(f.status, StatusCode::FORBIDDEN);
        assert!(f.error.message.contains("not yours"));
        let response = respond(json!(1), Err(Failure::from(Denial::Unauthenticated)));
        assert_eq!(
            response
                .headers()
                .get(WWW_AUTHENTICATE)
                .map(HeaderValue::as_bytes),
            Some(&b"Bearer"[..])
        );
    }

    #[test]
    fn a_card_names_its_endpoint_and_the_bearer_scheme() {
        let card = card(
            "cfo",
            "ledger".into(),
            "http://h:1/a2a/cfo".into(),
            vec![skill_of("cfo", "")],
        );
        assert_eq!(card.interface_url("JSONRPC"), Some("http://h:1/a2a/cfo"));
        assert!(card.security_schemes.contains_key("bearer"));
        assert_eq!(card.capabilities.streaming, Some(true));
        assert!(card.skills[0].description.contains("`cfo`"));
        assert_eq!(
            skill_of("cfo", " Answers spend questions. ").description,
            "Answers spend questions."
        );
    }
}
