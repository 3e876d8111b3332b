//! A consort run seen as an A2A task: the one place the mapping lives.
//!
//! | run                                     | task state                  | status message            |
//! |-----------------------------------------|-----------------------------|---------------------------|
//! | `queued`                                | `TASK_STATE_SUBMITTED`      | —                         |
//! | `running`, `waiting` (on its callees)   | `TASK_STATE_WORKING`        | —                         |
//! | `blocked` on an approval                | `TASK_STATE_INPUT_REQUIRED` | which tool waits, who may decide, how |
//! | `succeeded`                             | `TASK_STATE_COMPLETED`      | the answer (also the `answer` artifact) |
//! | `failed`, canceled                      | `TASK_STATE_CANCELED`       | who canceled it and why   |
//! | `failed`                                | `TASK_STATE_FAILED`         | the run's error           |
//! | refused at the door (never stored)      | `TASK_STATE_REJECTED`       | the refusal, in words     |
//!
//! A task's id and its context id are both the run's id: a consort run is one request and its
//! answer, so every task is its own conversation. Its history is the input (a `ROLE_USER`
//! message) and, once there is one, the agent's status message. Its metadata names the agent,
//! the run's own status word and its hop depth under the key `consort`.
//!
//! Functions over plain data only; the gateway reads the stores and calls these.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use consort_a2a::{
    A2aErrorCode, Artifact, JsonRpcError, Message, Part, Role, Task, TaskState, TaskStatus,
};
use consort_actors::page::RunCursor;
use consort_actors::{RunRecord, RunStatus};
use consort_core::event::ApprovalRequested;

/// The name of the artifact that carries a completed task's answer.
pub(crate) const ANSWER_ARTIFACT: &str = "answer";

/// The error text a canceled run settles with starts with this.
const CANCELED_PREFIX: &str = "canceled by ";

/// The state a run's task is in.
pub(crate) fn task_state(run: &RunRecord) -> TaskState {
    match run.status {
        RunStatus::Queued => TaskState::Submitted,
        RunStatus::Running | RunStatus::Waiting => TaskState::Working,
        RunStatus::Blocked => TaskState::InputRequired,
        RunStatus::Succeeded => TaskState::Completed,
        RunStatus::Failed
            if run
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(CANCELED_PREFIX)) =>
        {
            TaskState::Canceled
        }
        RunStatus::Failed => TaskState::Failed,
    }
}

/// What the agent says about where its run stands, if it says anything: the answer, the
/// error, or what an approval-blocked run waits for (`gate`, the request it waits on).
pub(crate) fn status_text(run: &RunRecord, gate: Option<&ApprovalRequested>) -> Option<String> {
    match task_state(run) {
        TaskState::Completed => Some(run.output.clone().unwrap_or_default()),
        TaskState::Failed | TaskState::Canceled => Some(
            run.error
                .clone()
                .unwrap_or_else(|| "the run failed".to_owned()),
        ),
        TaskState::InputRequired => Some(match gate {
            Some(gate) if gate.in_doubt => format!(
                "{} started the tool `{}` (gate {}) before its host stopped: it may or may not have run. An operator decides: reply `approve` to run it again or `deny` not to, or record what happened through the host's API.",
                run.agent, gate.tool, gate.gate
            ),
            Some(gate) if gate.requester_may_decide => format!(
                "{} waits for approval to use the tool `{}` (gate {}). Reply to this task with `approve` or `deny` (you may decide this one), or ask an operator of the host.",
                run.agent, gate.tool, gate.gate
            ),
            Some(gate) => format!(
                "{} waits for an operator of its host to approve the tool `{}` (gate {}). An operator may reply to this task with `approve` or `deny`; read the task again later.",
                run.agent, gate.tool, gate.gate
            ),
            None => format!(
                "{} waits for an operator's approval of a gated tool; read the task again later.",
                run.agent
            ),
        }),
        _ => None,
    }
}

/// The run as a task. `history_length` bounds the history (the newest messages are kept; 0
/// leaves it out, `None` keeps all); `with_artifacts` includes the answer artifact.
pub(crate) fn task_of(
    run: &RunRecord,
    gate: Option<&ApprovalRequested>,
    history_length: Option<i32>,
    with_artifacts: bool,
) -> Task {
    let id = run.id.to_string();
    let status_message = status_text(run, gate).map(|text| {
        let mut message = Message::text(Role::Agent, format!("{id}-status"), text);
        message.task_id = Some(id.clone());
        message.context_id = Some(id.clone());
        message
    });
    let mut input = Message::text(Role::User, format!("{id}-input"), run.input.clone());
    input.task_id = Some(id.clone());
    input.context_id = Some(id.clone());
    let mut history = vec![input];
    history.extend(status_message.clone());
    if let Some(keep) = history_length {
        let keep = usize::try_from(keep.max(0)).unwrap_or(0);
        history.drain(..history.len().saturating_sub(keep));
    }
    let artifacts = match (&run.status, with_artifacts) {
        (RunStatus::Succeeded, true) => vec![answer_artifact(run)],
        _ => Vec::new(),
    };
    let mut consort = Map::new();
    consort.insert("agent".into(), json!(run.agent));
    consort.insert("status".into(), json!(run.status.as_str()));
    consort.insert("hop_depth".into(), json!(run.hop_depth));
    Task {
        id: id.clone(),
        context_id: id,
        status: TaskStatus {
            state: task_state(run),
            message: status_message,
            timestamp: Some(rfc3339(run.settled_at_ms.unwrap_or(run.created_at_ms))),
        },
        artifacts,
        history,
        metadata: Some(Map::from_iter([(
            "consort".to_owned(),
            Value::Object(consort),
        )])),
    }
}

/// The artifact that carries a succeeded run's answer.
pub(crate) fn answer_artifact(run: &RunRecord) -> Artifact {
    Artifact {
        artifact_id: ANSWER_ARTIFACT.to_owned(),
        name: Some(ANSWER_ARTIFACT.to_owned()),
        parts: vec![Part::text(run.output.clone().unwrap_or_default())],
        ..Artifact::default()
    }
}

/// A task for a request the host refused before storing a run (draining, saturated, the
/// agent down): `REJECTED`, with the refusal in words. It is never stored, so `GetTask`
/// does not find it.
pub(crate) fn rejected_task(id: String, agent: &str, why: &str, now_ms: u64) -> Task {
    let text = format!("{agent} did not take the request: {why}");
    let mut message = Message::text(Role::Agent, format!("{id}-status"), text);
    message.task_id = Some(id.clone());
    message.context_id = Some(id.clone());
    Task {
        context_id: id.clone(),
        id,
        status: TaskStatus {
            state: TaskState::Rejected,
            message: Some(message),
            timestamp: Some(rfc3339(now_ms)),
        },
        ..Task::default()
    }
}

/// The run input a message carries: its text parts, joined by newlines. A message with a part
/// of another kind, or with no text, is refused with what to send instead.
pub(crate) fn input_of(message: &Message, max_bytes: usize) -> Result<String, JsonRpcError> {
    for part in &message.parts {
        if let Err(e) = part.content() {
            return Err(JsonRpcError::new(
                A2aErrorCode::InvalidParams,
                e.to_string(),
            ));
        }
    }
    let (text, other) = message.joined_text();
    if other {
        return Err(JsonRpcError::new(
            A2aErrorCode::ContentTypeNotSupported,
            "consort agents take text: send the request as text parts (no raw, url or data parts)",
        ));
    }
    if text.trim().is_empty() {
        return Err(JsonRpcError::new(
            A2aErrorCode::InvalidParams,
            "the message has no text: say what to ask the agent in a text part",
        ));
    }
    if text.len() > max_bytes {
        return Err(JsonRpcError::new(
            A2aErrorCode::InvalidParams,
            format!(
                "the message is {} bytes of text; the limit is {max_bytes}",
                text.len()
            ),
        ));
    }
    Ok(text)
}

/// An approval decision a reply to an `INPUT_REQUIRED` task carries: `approve` or `deny`
/// (a few plain synonyms too), case and surrounding space ignored.
pub(crate) fn decision_of(text: &str) -> Option<bool> {
    match text
        .trim()
        .trim_end_matches(['.', '!'])
        .to_ascii_lowercase()
        .as_str()
    {
        "approve" | "approved" | "yes" | "allow" => Some(true),
        "deny" | "denied" | "no" | "reject" => Some(false),
        _ => None,
    }
}

/// Which tasks a `ListTasks` keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ListFilter {
    /// Only the task of this context (a task's context is its own id).
    pub(crate) context_id: Option<String>,
    /// Only tasks in this state.
    pub(crate) state: Option<TaskState>,
    /// Only tasks whose status changed after this time (unix milliseconds).
    pub(crate) changed_after_ms: Option<u64>,
}

impl ListFilter {
    /// Whether the filter keeps the task of `run`.
    pub(crate) fn keeps(&self, run: &RunRecord) -> bool {
        self.context_id
            .as_deref()
            .is_none_or(|c| c == run.id.as_str())
            && self.state.is_none_or(|s| s == task_state(run))
            && self
                .changed_after_ms
                .is_none_or(|after| run.settled_at_ms.unwrap_or(run.created_at_ms) > after)
    }
}

/// Whether `run` comes after `cursor` in a listing newest first (ties broken by id, as the
/// stores order them).
pub(crate) fn is_after(run: &RunRecord, cursor: &RunCursor) -> bool {
    run.created_at_ms < cursor.created_at_ms
        || (run.created_at_ms == cursor.created_at_ms && run.id.as_str() > cursor.id.as_str())
}

/// Now, in unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An RFC 3339 time as unix milliseconds.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let at = humantime::parse_rfc3339_weak(text.trim()).ok()?;
    let since = at.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

/// Unix milliseconds as RFC 3339 (UTC, milliseconds).
pub(crate) fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: RunStatus) -> RunRecord {
        let mut run: RunRecord = serde_json::from_value(json!({
            "id": "run_0123456789abcdef0123456789abcdef", "agent": "cfo", "status": "queued",
            "channel": "api", "parent_run": null, "parent_agent": null, "tool_use_id": null,
            "hop_depth": 0, "input": "2026-08", "output": null, "error": null,
            "created_at_ms": 1_764_842_400_000_u64, "settled_at_ms": null,
            "cost": {"model_turns": 0, "tool_calls": 0, "calls_placed": 0, "input_tokens": 0, "output_tokens": 0, "wall_ms": 0}
        }))
        .unwrap();
        run.status = status;
        run
    }

    fn gate(requester_may_decide: bool) -> ApprovalRequested {
        ApprovalRequested {
            gate: "run_0123456789abcdef0123456789abcdef:t1".into(),
            tool_use_id: "t1".into(),
            tool: "payroll".into(),
            input: json!({}),
            requester_may_decide,
            in_doubt: false,
        }
    }

    #[test]
    fn every_run_status_has_its_task_state() {
        let cases = [
            (RunStatus::Queued, None, TaskState::Submitted),
            (RunStatus::Running, None, TaskState::Working),
            (RunStatus::Waiting, None, TaskState::Working),
            (RunStatus::Blocked, None, TaskState::InputRequired),
            (RunStatus::Succeeded, None, TaskState::Completed),
            (
                RunStatus::Failed,
                Some("the ledger is locked"),
                TaskState::Failed,
            ),
            (RunStatus::Failed, None, TaskState::Failed),
            (
                RunStatus::Failed,
                Some("canceled by api:alice"),
                TaskState::Canceled,
            ),
            (
                RunStatus::Failed,
                Some("canceled by operator: not needed"),
                TaskState::Canceled,
            ),
            (
                RunStatus::Failed,
                Some("a tool canceled by the model"),
                TaskState::Failed,
            ),
        ];
        for (status, error, state) in cases {
            let mut r = run(status);
            r.error = error.map(str::to_owned);
            assert_eq!(task_state(&r), state, "{status:?} {error:?}");
            assert_eq!(
                task_state(&r).is_terminal(),
                status.is_settled(),
                "{status:?}"
            );
        }
    }

    #[test]
    fn a_completed_task_carries_the_answer_as_status_history_and_artifact() {
        let mut r = run(RunStatus::Succeeded);
        r.output = Some("48250.00 USD".into());
        r.settled_at_ms = Some(1_764_842_401_500);
        let task = task_of(&r, None, None, true);
        assert_eq!(task.id, r.id.to_string());
        assert_eq!(task.context_id, task.id);
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(
            task.status.timestamp.as_deref(),
            Some("2025-12-04T10:00:01.500Z")
        );
        let answer = task.status.message.as_ref().map(Message::joined_text);
        assert_eq!(answer, Some(("48250.00 USD".to_owned(), false)));
        assert_eq!(task.history.len(), 2);
        assert_eq!(task.history[0].role, Role::User);
        assert_eq!(task.history[0].joined_text().0, "2026-08");
        assert_eq!(task.history[1].role, Role::Agent);
        assert_eq!(task.artifacts.len(), 1);
        assert_eq!(
            task.artifacts[0].parts[0].text.as_deref(),
            Some("48250.00 USD")
        );
        let consort = &task.metadata.as_ref().unwrap()["consort"];
        assert_eq!(consort["agent"], "cfo");
        assert_eq!(consort["status"], "succeeded");

        assert!(task_of(&r, None, None, false).artifacts.is_empty());
        assert!(task_of(&r, None, Some(0), true).history.is_empty());
        let last = task_of(&r, None, Some(1), true);
        assert_eq!(last.history.len(), 1);
        assert_eq!(last.history[0].role, Role::Agent);
        assert_eq!(task_of(&r, None, Some(-3), true).history.len(), 0);
        assert_eq!(task_of(&r, None, Some(50), true).history.len(), 2);
    }

    #[test]
    fn an_open_task_has_no_status_message_and_only_the_input() {
        for status in [RunStatus::Queued, RunStatus::Running, RunStatus::Waiting] {
            let task = task_of(&run(status), None, None, true);
            assert!(task.status.message.is_none(), "{status:?}");
            assert_eq!(task.history.len(), 1);
            assert!(task.artifacts.is_empty());
            assert_eq!(
                task.status.timestamp.as_deref(),
                Some("2025-12-04T10:00:00.000Z")
            );
        }
    }

    #[test]
    fn a_blocked_task_says_who_may_decide_and_how() {
        let r = run(RunStatus::Blocked);
        let mine = status_text(&r, Some(&gate(true))).unwrap();
        assert!(
            mine.contains("`payroll`")
                && mine.contains("approve")
                && mine.contains("you may decide")
        );
        let operators = status_text(&r, Some(&gate(false))).unwrap();
        assert!(operators.contains("operator") && !operators.contains("you may decide"));
        assert!(status_text(&r, None).unwrap().contains("approval"));
        // The gate is named, so the reply can be matched to what the caller saw.
        assert!(mine.contains("gate run_0123456789abcdef0123456789abcdef:t1"));
        let doubt = ApprovalRequested {
            in_doubt: true,
            ..gate(false)
        };
        let doubt = status_text(&r, Some(&doubt)).unwrap();
        assert!(doubt.contains("may or may not have run") && doubt.contains("approve"));
    }

    #[test]
    fn a_failed_task_says_why() {
        let mut r = run(RunStatus::Failed);
        r.error = Some("the model is unreachable".into());
        let task = task_of(&r, None, None, true);
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(
            task.status.message.map(|m| m.joined_text().0).as_deref(),
            Some("the model is unreachable")
        );
        assert!(task.artifacts.is_empty());
    }

    #[test]
    fn a_rejected_task_names_the_agent_and_the_refusal() {
        let task = rejected_task("x1".into(), "cfo", "this host is draining", 0);
        assert_eq!(task.status.state, TaskState::Rejected);
        let text = task.status.message.unwrap().joined_text().0;
        assert!(text.contains("cfo") && text.contains("draining"));
        assert_eq!(
            task.status.timestamp.as_deref(),
            Some("1970-01-01T00:00:00.000Z")
        );
    }

    #[test]
    fn input_is_the_text_parts_and_nothing_else() {
        let mut m = Message::text(Role::User, "m1", "2026-08");
        assert_eq!(input_of(&m, 100).ok().as_deref(), Some("2026-08"));
        m.parts.push(Part::text("and July"));
        assert_eq!(input_of(&m, 100).ok().as_deref(), Some("2026-08\nand July"));
        assert_eq!(input_of(&m, 5).err().map(|e| e.code), Some(-32602));
        m.parts.push(Part {
            data: Some(json!({"month": 8})),
            ..Part::default()
        });
        assert_eq!(input_of(&m, 100).err().map(|e| e.code), Some(-32005));
        let empty = Message::text(Role::User, "m2", "  ");
        assert_eq!(input_of(&empty, 100).err().map(|e| e.code), Some(-32602));
        let malformed = Message {
            parts: vec![Part::default()],
            ..Message::default()
        };
        assert_eq!(
            input_of(&malformed, 100).err().map(|e| e.code),
            Some(-32602)
        );
        let no_parts = Message::default();
        assert_eq!(input_of(&no_parts, 100).err().map(|e| e.code), Some(-32602));
    }

    #[test]
    fn decisions_are_plain_words() {
        for yes in ["approve", " Approve ", "APPROVED.", "yes", "allow!"] {
            assert_eq!(decision_of(yes), Some(true), "{yes}");
        }
        for no in ["deny", "Denied", "no", "reject"] {
            assert_eq!(decision_of(no), Some(false), "{no}");
        }
        for neither in ["", "maybe", "approve it", "2026-08"] {
            assert_eq!(decision_of(neither), None, "{neither}");
        }
    }

    #[test]
    fn a_list_filter_keeps_by_context_state_and_change_time() {
        let mut done = run(RunStatus::Succeeded);
        done.settled_at_ms = Some(2_000);
        done.created_at_ms = 1_000;
        let all = ListFilter::default();
        assert!(all.keeps(&done));
        let same_context = ListFilter {
            context_id: Some(done.id.to_string()),
            ..ListFilter::default()
        };
        assert!(same_context.keeps(&done));
        let other_context = ListFilter {
            context_id: Some("ctx".into()),
            ..ListFilter::default()
        };
        assert!(!other_context.keeps(&done));
        let completed = ListFilter {
            state: Some(TaskState::Completed),
            ..ListFilter::default()
        };
        assert!(completed.keeps(&done));
        assert!(!completed.keeps(&run(RunStatus::Running)));
        let after = |ms| ListFilter {
            changed_after_ms: Some(ms),
            ..ListFilter::default()
        };
        assert!(after(1_500).keeps(&done), "settled after: kept");
        assert!(
            !after(2_000).keeps(&done),
            "settled exactly then: not after"
        );
        let mut open = run(RunStatus::Running);
        open.created_at_ms = 1_000;
        assert!(
            !after(1_500).keeps(&open),
            "an open run changed when it was created"
        );
    }

    #[test]
    fn after_a_cursor_means_older_or_the_same_time_and_a_later_id() {
        let mut r = run(RunStatus::Queued);
        r.created_at_ms = 10;
        let at = |ms, id: &str| RunCursor {
            created_at_ms: ms,
            id: consort_net::RunId::parse(id).unwrap(),
        };
        assert!(is_after(
            &r,
            &at(11, "run_ffffffffffffffffffffffffffffffff")
        ));
        assert!(!is_after(
            &r,
            &at(9, "run_00000000000000000000000000000000")
        ));
        assert!(is_after(
            &r,
            &at(10, "run_00000000000000000000000000000000")
        ));
        assert!(!is_after(&r, &at(10, r.id.as_str())), "not after itself");
        assert!(!is_after(
            &r,
            &at(10, "run_ffffffffffffffffffffffffffffffff")
        ));
    }

    #[test]
    fn times_read_back_as_written() {
        assert_eq!(
            parse_rfc3339_ms(&rfc3339(1_764_842_401_500)),
            Some(1_764_842_401_500)
        );
        assert_eq!(
            parse_rfc3339_ms("2025-12-04T10:00:00Z"),
            Some(1_764_842_400_000)
        );
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert!(now_ms() > 1_764_842_400_000);
    }
}
