//! The JSON-RPC 2.0 binding: the envelope ([`JsonRpcRequest`], [`JsonRpcResponse`]), the
//! methods A2A 1.0 names ([`Method`]), each method's params and result, and the error codes
//! ([`A2aErrorCode`]).
//!
//! The envelope keeps `params` and `result` as raw JSON so that a server can answer a request
//! whose params do not parse with the right code (`-32602`) and the request's own id.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::task::{Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent};

/// A request's id: a string, a number or null, echoed in the response.
pub type JsonRpcId = Value;

/// A JSON-RPC 2.0 request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcRequest {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The id to echo; absent for a notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<JsonRpcId>,
    /// The method's name (`SendMessage`).
    pub method: String,
    /// The method's params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl JsonRpcRequest {
    /// A request for `method` with `params` under `id`.
    pub fn new(id: impl Into<JsonRpcId>, method: Method, params: Value) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id: Some(id.into()),
            method: method.as_str().to_owned(),
            params: Some(params),
        }
    }
}

/// A JSON-RPC 2.0 response: exactly one of `result` and `error` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcResponse {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request's id (null when the request's could not be read).
    #[serde(default)]
    pub id: JsonRpcId,
    /// The method's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the method failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
}

impl JsonRpcResponse {
    /// A success carrying `result`.
    pub fn success(id: JsonRpcId, result: Value) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id,
            result: Some(result),
            error: None,
        }
    }

    /// A failure carrying `error`.
    pub fn failure(id: JsonRpcId, error: JsonRpcError) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id,
            result: None,
            error: Some(error),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    /// The code ([`A2aErrorCode::code`]).
    pub code: i64,
    /// What went wrong, in words.
    #[serde(default)]
    pub message: String,
    /// Details: A2A puts a `google.rpc.ErrorInfo` here, in a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl JsonRpcError {
    /// An error of `code` saying `message`, with the `ErrorInfo` detail A2A clients read
    /// (`reason` is the code's name, `metadata` any key/values that help the caller).
    pub fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.code(),
            message: message.into(),
            data: Some(json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": code.reason(),
                "domain": "a2a-protocol.org",
            }])),
        }
    }

    /// The A2A error this is, if its code is one A2A names.
    pub fn kind(&self) -> Option<A2aErrorCode> {
        A2aErrorCode::from_code(self.code)
    }
}

/// The error codes of JSON-RPC and of A2A 1.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum A2aErrorCode {
    /// The body is not JSON.
    ParseError,
    /// The body is not a JSON-RPC request.
    InvalidRequest,
    /// No such method.
    MethodNotFound,
    /// The params do not fit the method.
    InvalidParams,
    /// The server failed.
    InternalError,
    /// No task of that id (or none the caller may see).
    TaskNotFound,
    /// The task cannot be canceled (it has settled).
    TaskNotCancelable,
    /// Push notifications are not supported.
    PushNotificationNotSupported,
    /// The operation is not supported.
    UnsupportedOperation,
    /// A part's media type is not accepted.
    ContentTypeNotSupported,
    /// The agent's response is not valid.
    InvalidAgentResponse,
    /// No extended agent card is configured.
    ExtendedAgentCardNotConfigured,
    /// A required extension is not supported by the client.
    ExtensionSupportRequired,
    /// The protocol version the client asked for is not served.
    VersionNotSupported,
}

impl A2aErrorCode {
    const ALL: [Self; 14] = [
        Self::ParseError,
        Self::InvalidRequest,
        Self::MethodNotFound,
        Self::InvalidParams,
        Self::InternalError,
        Self::TaskNotFound,
        Self::TaskNotCancelable,
        Self::PushNotificationNotSupported,
        Self::UnsupportedOperation,
        Self::ContentTypeNotSupported,
        Self::InvalidAgentResponse,
        Self::ExtendedAgentCardNotConfigured,
        Self::ExtensionSupportRequired,
        Self::VersionNotSupported,
    ];

    /// The numeric code on the wire.
    pub fn code(self) -> i64 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::InternalError => -32603,
            Self::TaskNotFound => -32001,
            Self::TaskNotCancelable => -32002,
            Self::PushNotificationNotSupported => -32003,
            Self::UnsupportedOperation => -32004,
            Self::ContentTypeNotSupported => -32005,
            Self::InvalidAgentResponse => -32006,
            Self::ExtendedAgentCardNotConfigured => -32007,
            Self::ExtensionSupportRequired => -32008,
            Self::VersionNotSupported => -32009,
        }
    }

    /// The code of `code`, if A2A or JSON-RPC names it.
    pub fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// The `ErrorInfo` reason (`TASK_NOT_FOUND`).
    pub fn reason(self) -> &'static str {
        match self {
            Self::ParseError => "PARSE_ERROR",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::MethodNotFound => "METHOD_NOT_FOUND",
            Self::InvalidParams => "INVALID_PARAMS",
            Self::InternalError => "INTERNAL_ERROR",
            Self::TaskNotFound => "TASK_NOT_FOUND",
            Self::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Self::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Self::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            Self::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::InvalidAgentResponse => "INVALID_AGENT_RESPONSE",
            Self::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Self::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            Self::VersionNotSupported => "VERSION_NOT_SUPPORTED",
        }
    }
}

/// The methods of A2A 1.0's JSON-RPC binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Send a message; answers with a task or a message.
    SendMessage,
    /// Send a message; answers with a stream of events.
    SendStreamingMessage,
    /// Read one task.
    GetTask,
    /// List tasks, a page at a time.
    ListTasks,
    /// Cancel a task.
    CancelTask,
    /// Follow a task's events.
    SubscribeToTask,
    /// Set a push notification config.
    CreateTaskPushNotificationConfig,
    /// Read a push notification config.
    GetTaskPushNotificationConfig,
    /// List push notification configs.
    ListTaskPushNotificationConfigs,
    /// Delete a push notification config.
    DeleteTaskPushNotificationConfig,
    /// Read the extended agent card.
    GetExtendedAgentCard,
}

impl Method {
    const ALL: [Self; 11] = [
        Self::SendMessage,
        Self::SendStreamingMessage,
        Self::GetTask,
        Self::ListTasks,
        Self::CancelTask,
        Self::SubscribeToTask,
        Self::CreateTaskPushNotificationConfig,
        Self::GetTaskPushNotificationConfig,
        Self::ListTaskPushNotificationConfigs,
        Self::DeleteTaskPushNotificationConfig,
        Self::GetExtendedAgentCard,
    ];

    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendMessage => "SendMessage",
            Self::SendStreamingMessage => "SendStreamingMessage",
            Self::GetTask => "GetTask",
            Self::ListTasks => "ListTasks",
            Self::CancelTask => "CancelTask",
            Self::SubscribeToTask => "SubscribeToTask",
            Self::CreateTaskPushNotificationConfig => "CreateTaskPushNotificationConfig",
            Self::GetTaskPushNotificationConfig => "GetTaskPushNotificationConfig",
            Self::ListTaskPushNotificationConfigs => "ListTaskPushNotificationConfigs",
            Self::DeleteTaskPushNotificationConfig => "DeleteTaskPushNotificationConfig",
            Self::GetExtendedAgentCard => "GetExtendedAgentCard",
        }
    }

    /// The method named `name`, if A2A 1.0 has one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether the method answers with a server-sent event stream.
    pub fn streams(self) -> bool {
        matches!(self, Self::SendStreamingMessage | Self::SubscribeToTask)
    }
}

/// `SendMessage` / `SendStreamingMessage` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The tenant, where the server hosts several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// How a server answers a `SendMessage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client accepts in the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// A push notification config, kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_push_notification_config: Option<Value>,
    /// How many history messages to include in a returned task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Answer at once with the task as it stands, instead of when it settles or stops to wait.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub return_immediately: bool,
}

/// `SendMessage`'s result: a task, or a message when the agent answered without one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    /// The task the message started or continued.
    Task(Task),
    /// A direct answer.
    Message(Message),
}

/// One event of a `SendStreamingMessage` or `SubscribeToTask` stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as it stands (the first event).
    Task(Task),
    /// A direct answer.
    Message(Message),
    /// The task's status changed.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact was produced.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// `GetTask` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The task's id.
    pub id: String,
    /// How many history messages to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
}

/// `ListTasks` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only tasks of this conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// Only tasks in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskState>,
    /// How many tasks per page (the server bounds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i32>,
    /// Where the page starts: the previous page's `nextPageToken`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
    /// How many history messages to include per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Only tasks whose status changed after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_timestamp_after: Option<String>,
    /// Whether to include artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_artifacts: Option<bool>,
}

/// `ListTasks` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page's tasks, newest first.
    #[serde(default)]
    pub tasks: Vec<Task>,
    /// The token for the next page; empty on the last page.
    #[serde(default)]
    pub next_page_token: String,
    /// The page size used.
    #[serde(default)]
    pub page_size: i32,
    /// How many tasks match in all.
    #[serde(default)]
    pub total_size: i32,
}

/// `CancelTask` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The task's id.
    pub id: String,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `SubscribeToTask` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The task's id.
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Role, TaskStatus};

    #[test]
    fn methods_round_trip_their_names() {
        for method in Method::ALL {
            assert_eq!(Method::parse(method.as_str()), Some(method));
        }
        assert_eq!(Method::parse("message/send"), None);
        assert!(Method::SubscribeToTask.streams());
        assert!(!Method::GetTask.streams());
    }

    #[test]
    fn error_codes_round_trip_and_carry_error_info() {
        for code in A2aErrorCode::ALL {
            assert_eq!(A2aErrorCode::from_code(code.code()), Some(code));
        }
        assert_eq!(A2aErrorCode::from_code(-1), None);
        let error = JsonRpcError::new(A2aErrorCode::TaskNotFound, "no task t1");
        let wire = serde_json::to_value(&error).unwrap();
        assert_eq!(wire["code"], -32001);
        assert_eq!(wire["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(error.kind(), Some(A2aErrorCode::TaskNotFound));
    }

    #[test]
    fn a_response_sets_result_or_error() {
        let ok = serde_json::to_value(JsonRpcResponse::success(json!("1"), json!({}))).unwrap();
        assert_eq!(ok, json!({"jsonrpc": "2.0", "id": "1", "result": {}}));
        let failed = JsonRpcResponse::failure(
            Value::Null,
            JsonRpcError::new(A2aErrorCode::ParseError, "not JSON"),
        );
        let wire = serde_json::to_value(failed).unwrap();
        assert_eq!(wire["id"], Value::Null);
        assert!(wire.get("result").is_none());
    }

    #[test]
    fn send_message_params_and_results_have_the_protobuf_json_shape() {
        let params: SendMessageRequest = serde_json::from_value(json!({
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "2026-08"}]},
            "configuration": {"acceptedOutputModes": ["text/plain"], "returnImmediately": true}
        }))
        .unwrap();
        assert_eq!(params.message.role, Role::User);
        assert!(
            params
                .configuration
                .as_ref()
                .is_some_and(|c| c.return_immediately)
        );

        let task = Task {
            id: "t1".into(),
            status: TaskStatus {
                state: TaskState::Working,
                ..TaskStatus::default()
            },
            ..Task::default()
        };
        let wire = serde_json::to_value(SendMessageResponse::Task(task.clone())).unwrap();
        assert_eq!(wire["task"]["status"]["state"], "TASK_STATE_WORKING");
        let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t1".into(),
            ..TaskStatusUpdateEvent::default()
        });
        let wire = serde_json::to_value(&event).unwrap();
        assert_eq!(wire["statusUpdate"]["taskId"], "t1");
        assert_eq!(
            serde_json::from_value::<StreamResponse>(wire).unwrap(),
            event
        );
        let back: SendMessageResponse = serde_json::from_value(
            json!({"task": {"id": "t1", "status": {"state": "TASK_STATE_WORKING"}}}),
        )
        .unwrap();
        assert_eq!(back, SendMessageResponse::Task(task));
    }

    #[test]
    fn list_tasks_params_read_the_filter_and_page() {
        let params: ListTasksRequest = serde_json::from_value(json!({
            "status": "TASK_STATE_COMPLETED", "pageSize": 2, "pageToken": "abc"
        }))
        .unwrap();
        assert_eq!(params.status, Some(TaskState::Completed));
        assert_eq!(params.page_size, Some(2));
        assert_eq!(params.page_token.as_deref(), Some("abc"));
    }
}
