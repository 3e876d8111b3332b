//! The A2A endpoints, `POST /a2a` and `POST /a2a/{agent}`, and the JSON-RPC 2.0 layer in
//! front of the methods.
//!
//! A request is one JSON-RPC request object (batches are not served). Before any method runs,
//! its `jsonrpc` and `method` are checked, the `A2A-Version` header must say 1.0, and the
//! caller is established from its bearer token; [`Call::dispatch`] then hands the params to
//! the method, read into the method's own type. Each way a request can be malformed answers
//! its own JSON-RPC error code (parse error, invalid request, method not found, invalid params,
//! version not supported), so a client's SDK reports it as the protocol says.
//!
//! Authentication is checked here, once for every method: a request without a usable token on
//! a host that refuses anonymous callers never reaches one. What a caller may do with a
//! particular task is the methods' own check ([`super::tasks`]). This module knows nothing of
//! runs.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use utoipa::ToSchema;

use consort_a2a::{A2aErrorCode, Method};
use consort_actors::{ActorsError, Host};

use super::{Answer, Call, Failure, respond};
use crate::access;
use crate::api::follow::StreamSlots;
use crate::api::openapi::ErrorDoc;
use crate::api::{ApiError, requester};
use crate::auth::HostAuth;

/// A JSON-RPC request, as `/openapi.json` describes the body of the A2A endpoints.
#[derive(Serialize, ToSchema)]
#[schema(as = A2aRequest)]
struct A2aRequestDoc {
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
        (status = 404, description = "no such agent here", body = ErrorDoc),
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
        return ApiError::from(ActorsError::UnknownAgent(agent)).into_response();
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
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use consort_a2a::GetTaskRequest;

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
}
