//! Tasks and what they carry: [`Task`], its [`TaskState`], the [`Message`]s of its history, the
//! [`Part`]s of a message or an [`Artifact`], and the two stream events.
//!
//! Every type here is plain data in A2A 1.0's JSON shape; what a state means for a consort run
//! is decided by the gateway, not here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::A2aError;

/// A unit of work an agent does for a client, with its status, history and results.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The server-chosen task id.
    pub id: String,
    /// The conversation the task belongs to.
    #[serde(default)]
    pub context_id: String,
    /// Where the task stands.
    #[serde(default)]
    pub status: TaskStatus,
    /// What the task produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages exchanged for the task, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Extra key/values the server attaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A task's state, with the message that explains it and when it was reached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    #[serde(default)]
    pub state: TaskState,
    /// The agent's words about the state (the answer, the refusal, the question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the state was reached, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// The states of a task's life (A2A 1.0 `TaskState`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Not set: never a valid state of a real task.
    #[default]
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    /// Accepted, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Being worked on.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Finished with a result (terminal).
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Finished with an error (terminal).
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Stopped by a cancel (terminal).
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waiting for more input before it can go on (interrupted).
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused by the agent (terminal).
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waiting for the client to authenticate (interrupted).
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// Whether the task can never change state again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Whether the task stopped to wait for its client (a blocking `SendMessage` returns here).
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// The state's wire name (`TASK_STATE_COMPLETED`).
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Unspecified => "TASK_STATE_UNSPECIFIED",
            Self::Submitted => "TASK_STATE_SUBMITTED",
            Self::Working => "TASK_STATE_WORKING",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Failed => "TASK_STATE_FAILED",
            Self::Canceled => "TASK_STATE_CANCELED",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            Self::Rejected => "TASK_STATE_REJECTED",
            Self::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }
}

/// Who wrote a message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Not set.
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// One turn of communication between a client and an agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The sender-chosen message id.
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it continues, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    #[serde(default)]
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// The extension URIs it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Other tasks it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// A message of one text part.
    pub fn text(role: Role, message_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            message_id: message_id.into(),
            role,
            parts: vec![Part::text(text)],
            ..Self::default()
        }
    }

    /// The message's text parts joined by newlines, and whether it holds any other kind of part.
    pub fn joined_text(&self) -> (String, bool) {
        joined_text(&self.parts)
    }
}

/// The text parts of `parts` joined by newlines, and whether any part is not text.
pub fn joined_text(parts: &[Part]) -> (String, bool) {
    let mut texts = Vec::new();
    let mut other = false;
    for part in parts {
        match &part.text {
            Some(text) => texts.push(text.as_str()),
            None => other = true,
        }
    }
    (texts.join("\n"), other)
}

/// A piece of content: text, bytes, a URL or structured data (exactly one of them).
///
/// Protobuf's `oneof content` appears in JSON as whichever one field is set, so the four are
/// optional fields here and [`Part::content`] checks that exactly one is present.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes, base64 (protobuf's JSON mapping of `bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A URL that points at the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Structured data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// A file name for `raw` or `url` content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The content's media type (`text/plain`, `application/json`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

/// Which content a [`Part`] holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PartContent<'a> {
    /// Text.
    Text(&'a str),
    /// Base64 bytes.
    Raw(&'a str),
    /// A URL.
    Url(&'a str),
    /// Structured data.
    Data(&'a Value),
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// The one content the part holds, or why it is malformed.
    pub fn content(&self) -> Result<PartContent<'_>, A2aError> {
        let set = [
            self.text.is_some(),
            self.raw.is_some(),
            self.url.is_some(),
            self.data.is_some(),
        ]
        .into_iter()
        .filter(|s| *s)
        .count();
        match (&self.text, &self.raw, &self.url, &self.data) {
            (Some(text), None, None, None) => Ok(PartContent::Text(text)),
            (None, Some(raw), None, None) => Ok(PartContent::Raw(raw)),
            (None, None, Some(url), None) => Ok(PartContent::Url(url)),
            (None, None, None, Some(data)) => Ok(PartContent::Data(data)),
            _ => Err(A2aError::PartContent { set }),
        }
    }
}

/// Something a task produced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// The artifact's id, unique within its task.
    pub artifact_id: String,
    /// A human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// The extension URIs it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// A stream event: the task's status changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The new status.
    #[serde(default)]
    pub status: TaskStatus,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A stream event: an artifact was produced or extended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The artifact, or the chunk of it.
    pub artifact: Artifact,
    /// Whether the parts extend an artifact sent before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Whether this is the artifact's last chunk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
    /// Extra key/values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_reads_and_writes_the_protobuf_json_shape() {
        let wire = json!({
            "id": "t1",
            "contextId": "c1",
            "status": {
                "state": "TASK_STATE_COMPLETED",
                "message": {"messageId": "m2", "role": "ROLE_AGENT", "parts": [{"text": "48250.00 USD"}]},
                "timestamp": "2026-12-04T10:00:00.000Z"
            },
            "artifacts": [{"artifactId": "answer", "parts": [{"text": "48250.00 USD"}]}],
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "2026-08"}]}]
        });
        let task: Task = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.history[0].role, Role::User);
        assert_eq!(serde_json::to_value(&task).unwrap(), wire);
    }

    #[test]
    fn defaults_are_left_out_and_unknown_fields_are_read_past() {
        let task: Task = serde_json::from_value(json!({"id": "t", "newField": 1})).unwrap();
        assert_eq!(task.status.state, TaskState::Unspecified);
        assert_eq!(
            serde_json::to_value(&task).unwrap(),
            json!({"id": "t", "contextId": "", "status": {"state": "TASK_STATE_UNSPECIFIED"}})
        );
    }

    #[test]
    fn every_state_has_its_wire_name_and_class() {
        let all = [
            TaskState::Unspecified,
            TaskState::Submitted,
            TaskState::Working,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::InputRequired,
            TaskState::Rejected,
            TaskState::AuthRequired,
        ];
        for state in all {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                json!(state.wire_name())
            );
            let terminal = matches!(
                state,
                TaskState::Completed
                    | TaskState::Failed
                    | TaskState::Canceled
                    | TaskState::Rejected
            );
            assert_eq!(state.is_terminal(), terminal, "{state:?}");
            assert!(
                !(state.is_terminal() && state.is_interrupted()),
                "{state:?}"
            );
        }
        assert!(TaskState::InputRequired.is_interrupted());
        assert!(TaskState::AuthRequired.is_interrupted());
        assert!(serde_json::from_value::<TaskState>(json!("completed")).is_err());
    }

    #[test]
    fn a_part_holds_exactly_one_content() {
        let text: Part = serde_json::from_value(json!({"text": "hi"})).unwrap();
        assert_eq!(text.content(), Ok(PartContent::Text("hi")));
        let data: Part = serde_json::from_value(json!({"data": {"a": 1}})).unwrap();
        assert!(matches!(data.content(), Ok(PartContent::Data(_))));
        let url: Part = serde_json::from_value(json!({"url": "https://x"})).unwrap();
        assert_eq!(url.content(), Ok(PartContent::Url("https://x")));
        let raw: Part = serde_json::from_value(json!({"raw": "aGk="})).unwrap();
        assert_eq!(raw.content(), Ok(PartContent::Raw("aGk=")));
        let none: Part = serde_json::from_value(json!({"mediaType": "text/plain"})).unwrap();
        assert_eq!(none.content(), Err(A2aError::PartContent { set: 0 }));
        let two: Part = serde_json::from_value(json!({"text": "a", "url": "b"})).unwrap();
        assert_eq!(two.content(), Err(A2aError::PartContent { set: 2 }));
    }

    #[test]
    fn joined_text_keeps_text_and_flags_the_rest() {
        let mut message = Message::text(Role::User, "m", "first");
        message.parts.push(Part::text("second"));
        assert_eq!(message.joined_text(), ("first\nsecond".to_owned(), false));
        message.parts.push(Part {
            data: Some(json!(1)),
            ..Part::default()
        });
        assert_eq!(message.joined_text(), ("first\nsecond".to_owned(), true));
    }
}
