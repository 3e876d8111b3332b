//! What a call to a remote A2A agent tells its caller: the mapping from how the exchange ended
//! (a task in some state, a direct message, or a failure on the way) to the reply's status and
//! text, as plain functions over data.
//!
//! A completed task (or a direct message) is the answer; every other ending is a failed reply
//! whose text says what happened and what the calling model can do about it (call again,
//! rephrase, answer without it, or leave it to an operator). Nothing here does I/O or reads
//! a clock: the client gathers the facts, this module words them.

use consort_a2a::{A2aErrorCode, Message, Task, TaskState};
use consort_actors::a2a::{A2aAnswer, A2aRequest};
use consort_net::ReplyStatus;

/// How the exchange ended, when the agent answered.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The task, settled or stopped to wait for its client.
    Task(Task),
    /// A direct answer without a task.
    Message(Message),
}

/// Why the exchange ended without an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No HTTP answer from `url` (refused, reset, DNS, TLS).
    Unreachable {
        /// What was asked.
        url: String,
        /// What the HTTP client said.
        detail: String,
    },
    /// The host's outbound rules refused the request: an address or port the host never
    /// reaches, or an endpoint or redirect on another origin.
    Blocked {
        /// What was to be asked.
        url: String,
        /// Why not.
        why: String,
    },
    /// The card could not be read: an HTTP error, or a body that is not an agent card.
    Card {
        /// The card's URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The card offers no JSON-RPC interface.
    NoJsonRpc {
        /// The card's URL.
        url: String,
        /// The bindings it offers.
        bindings: Vec<String>,
    },
    /// A JSON-RPC call answered with an HTTP error status.
    Http {
        /// The method.
        method: &'static str,
        /// The status.
        status: u16,
        /// The start of the body, for the model to read.
        excerpt: String,
    },
    /// A JSON-RPC call answered with a JSON-RPC error.
    Rpc {
        /// The method.
        method: &'static str,
        /// The error's code.
        code: i64,
        /// The error's message.
        message: String,
    },
    /// A JSON-RPC call answered with something that is not its result.
    Malformed {
        /// The method.
        method: &'static str,
        /// What could not be read.
        detail: String,
    },
    /// The call's `timeout_ms` ran out.
    Timeout {
        /// The task as last seen (id and state), if one was started.
        last: Option<(String, TaskState)>,
    },
}

/// The reply a call to `request`'s agent ends with.
pub(crate) fn answer_of(request: &A2aRequest, ended: &Result<Outcome, Failure>) -> A2aAnswer {
    let name = &request.agent.name;
    match ended {
        Ok(Outcome::Message(message)) => completed(name, &message.joined_text(), &[]),
        Ok(Outcome::Task(task)) => of_task(name, task),
        Err(failure) => failed(of_failure(request, failure)),
    }
}

fn of_task(name: &str, task: &Task) -> A2aAnswer {
    let said = task
        .status
        .message
        .as_ref()
        .map(Message::joined_text)
        .unwrap_or_default();
    let reason = if said.0.trim().is_empty() {
        "it gave no reason".to_owned()
    } else {
        // The sentence this text is put into ends with its own period.
        said.0.trim().trim_end_matches('.').to_owned()
    };
    match task.status.state {
        TaskState::Completed => {
            let artifacts: Vec<(String, bool)> = task
                .artifacts
                .iter()
                .map(|a| consort_a2a::task::joined_text(&a.parts))
                .collect();
            completed(name, &said, &artifacts)
        }
        TaskState::Rejected => failed(format!(
            "the A2A agent {name} rejected the request: {reason}. Do not send it the same request again: rephrase it, ask another agent, or answer without it."
        )),
        TaskState::Failed => failed(format!(
            "the A2A agent {name} failed the task: {reason}. Calling it again later may work; otherwise answer without it."
        )),
        TaskState::Canceled => failed(format!(
            "the A2A agent {name} canceled the task: {reason}. Call it again if you still need the answer."
        )),
        TaskState::InputRequired => failed(format!(
            "the A2A agent {name} needs more input before it can answer: {reason}. Each call starts a new task, so call it again with a complete request that includes what it asked for."
        )),
        TaskState::AuthRequired => failed(format!(
            "the A2A agent {name} asks for authentication this host cannot give: {reason}. Calling it again will not help; answer without it and say that its operator must set up its credentials."
        )),
        state @ (TaskState::Unspecified | TaskState::Submitted | TaskState::Working) => {
            failed(format!(
                "the A2A agent {name} stopped answering with its task {} still {}; answer without it or call it again later.",
                task.id,
                state.wire_name()
            ))
        }
    }
}

/// A completed answer: the artifacts' text parts, then the status message's.
fn completed(name: &str, status: &(String, bool), artifacts: &[(String, bool)]) -> A2aAnswer {
    let mut texts: Vec<&str> = artifacts
        .iter()
        .map(|(text, _)| text.trim())
        .filter(|t| !t.is_empty())
        .collect();
    if !status.0.trim().is_empty() {
        texts.push(status.0.trim());
    }
    let other = status.1 || artifacts.iter().any(|(_, other)| *other);
    if texts.is_empty() {
        let what = if other {
            "only with parts that are not text (files or data), which this host does not pass on"
        } else {
            "without any text"
        };
        return A2aAnswer {
            status: ReplyStatus::Succeeded,
            text: format!("the A2A agent {name} completed the task, but answered {what}."),
        };
    }
    let mut text = texts.join("\n");
    if other {
        text.push_str("\n[parts that are not text (files or data) were left out]");
    }
    A2aAnswer {
        status: ReplyStatus::Succeeded,
        text,
    }
}

fn failed(text: String) -> A2aAnswer {
    A2aAnswer {
        status: ReplyStatus::Failed,
        text,
    }
}

fn of_failure(request: &A2aRequest, failure: &Failure) -> String {
    let name = &request.agent.name;
    match failure {
        Failure::Unreachable { url, detail } => format!(
            "the A2A agent {name} could not be reached at {url} ({detail}). Try again later or answer without it."
        ),
        Failure::Blocked { url, why } => format!(
            "the A2A agent {name} was not called: this host does not reach {url} ({why}). Calling it again will not help; an operator may allow it in agent.yaml (allow_networks, endpoint_origins) if it is meant. Answer without it."
        ),
        Failure::Card { url, detail } => format!(
            "the agent card of the A2A agent {name} could not be read at {url} ({detail}). Calling it again will not help until an operator fixes its card URL in agent.yaml; answer without it."
        ),
        Failure::NoJsonRpc { url, bindings } => format!(
            "the A2A agent {name} offers no JSON-RPC interface in its card at {url} (it offers: {}); this host calls A2A agents over JSON-RPC only. Answer without it.",
            if bindings.is_empty() {
                "nothing".to_owned()
            } else {
                bindings.join(", ")
            }
        ),
        Failure::Http {
            method,
            status: status @ (401 | 403),
            ..
        } => {
            let token = match (&request.agent.token_env, &request.token) {
                (None, _) => "this host sent no token: agent.yaml gives it no token_env".to_owned(),
                (Some(key), None) => format!(
                    "this host sent no token: the env key `{key}` named by token_env is empty"
                ),
                (Some(key), Some(_)) => {
                    format!("the token from the env key `{key}` was not accepted")
                }
            };
            format!(
                "the A2A agent {name} refused this host's credentials (HTTP {status} to {method}): {token}. Calling it again will not help; answer without it and say that an operator must fix its token."
            )
        }
        Failure::Http {
            method,
            status,
            excerpt,
        } => format!(
            "the A2A agent {name} answered {method} with HTTP {status}{}. Try again later or answer without it.",
            if excerpt.is_empty() {
                String::new()
            } else {
                format!(" ({excerpt})")
            }
        ),
        Failure::Rpc {
            method,
            code,
            message,
        } => {
            let kind = A2aErrorCode::from_code(*code)
                .map(|k| format!(" {}", k.reason()))
                .unwrap_or_default();
            let advice = match A2aErrorCode::from_code(*code) {
                Some(A2aErrorCode::VersionNotSupported) => {
                    "it does not speak A2A 1.0; answer without it"
                }
                Some(A2aErrorCode::InternalError) => "calling it again later may work",
                _ => "calling it again with the same request will fail the same way",
            };
            format!(
                "the A2A agent {name} answered {method} with the error {code}{kind}: {message}; {advice}."
            )
        }
        Failure::Malformed { method, detail } => format!(
            "the A2A agent {name} answered {method} with something that is not an A2A 1.0 answer ({detail}); answer without it."
        ),
        Failure::Timeout { last } => {
            let seen = match last {
                Some((id, state)) => format!("; its task {id} was still {}", state.wire_name()),
                None => String::new(),
            };
            format!(
                "the A2A agent {name} did not answer within {} ms (its timeout_ms in agent.yaml){seen}. It may still be working: try again later or answer without it.",
                request.agent.timeout_ms
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use consort_a2a::{Artifact, Part, Role, TaskStatus};
    use consort_config::A2aAgentConfig;
    use consort_net::RunId;

    fn request(token_env: Option<&str>, token: Option<&str>) -> A2aRequest {
        let parent = RunId::parse(&format!("run_{:032x}", 7)).unwrap();
        A2aRequest {
            agent: A2aAgentConfig {
                name: "forecaster".into(),
                card: "http://127.0.0.1:9/.well-known/agent-card.json".into(),
                token_env: token_env.map(str::to_owned),
                timeout_ms: 1500,
                allow_networks: Default::default(),
                endpoint_origins: Vec::new(),
            },
            token: token.map(str::to_owned),
            input: "paris".into(),
            child_run: RunId::child_of(&parent, "tu_1_0"),
            caller: "planner".into(),
            parent_run: parent,
            hop_depth: 1,
        }
    }

    fn task(state: TaskState, said: Option<&str>, artifacts: &[&[Part]]) -> Task {
        Task {
            id: "t-1".into(),
            context_id: "c-1".into(),
            status: TaskStatus {
                state,
                message: said.map(|s| Message::text(Role::Agent, "m-1", s)),
                timestamp: None,
            },
            artifacts: artifacts
                .iter()
                .enumerate()
                .map(|(i, parts)| Artifact {
                    artifact_id: format!("a-{i}"),
                    parts: parts.to_vec(),
                    ..Artifact::default()
                })
                .collect(),
            ..Task::default()
        }
    }

    fn of(ended: Result<Outcome, Failure>) -> A2aAnswer {
        answer_of(&request(Some("TOKEN"), Some("t")), &ended)
    }

    fn data_part() -> Part {
        Part {
            data: Some(serde_json::json!({"x": 1})),
            ..Part::default()
        }
    }

    #[test]
    fn a_completed_task_answers_with_its_artifacts_then_its_status_message() {
        let a = of(Ok(Outcome::Task(task(
            TaskState::Completed,
            Some("done"),
            &[
                &[Part::text("forecast for paris: sunny")],
                &[Part::text("  ")],
            ],
        ))));
        assert_eq!(a.status, ReplyStatus::Succeeded);
        assert_eq!(a.text, "forecast for paris: sunny\ndone");

        let a = of(Ok(Outcome::Task(task(
            TaskState::Completed,
            None,
            &[&[Part::text("a"), data_part()]],
        ))));
        assert_eq!(a.status, ReplyStatus::Succeeded);
        assert!(
            a.text.starts_with("a\n[parts that are not text"),
            "{}",
            a.text
        );

        let a = of(Ok(Outcome::Task(task(
            TaskState::Completed,
            None,
            &[&[data_part()]],
        ))));
        assert_eq!(a.status, ReplyStatus::Succeeded);
        assert!(
            a.text.contains("only with parts that are not text"),
            "{}",
            a.text
        );

        let a = of(Ok(Outcome::Task(task(TaskState::Completed, None, &[]))));
        assert!(a.text.contains("without any text"), "{}", a.text);
    }

    #[test]
    fn a_direct_message_is_the_answer() {
        let a = of(Ok(Outcome::Message(Message::text(
            Role::Agent,
            "m",
            "rain",
        ))));
        assert_eq!(
            a,
            A2aAnswer {
                status: ReplyStatus::Succeeded,
                text: "rain".into()
            }
        );
    }

    #[test]
    fn every_other_task_state_fails_and_says_what_to_do() {
        for (state, says, advice) in [
            (
                TaskState::Rejected,
                "rejected the request: no",
                "rephrase it",
            ),
            (
                TaskState::Failed,
                "failed the task: no",
                "Calling it again later",
            ),
            (
                TaskState::Canceled,
                "canceled the task: no",
                "Call it again",
            ),
            (
                TaskState::InputRequired,
                "needs more input",
                "complete request",
            ),
            (
                TaskState::AuthRequired,
                "asks for authentication",
                "will not help",
            ),
            (TaskState::Working, "still TASK_STATE_WORKING", "later"),
            (TaskState::Submitted, "still TASK_STATE_SUBMITTED", "later"),
            (
                TaskState::Unspecified,
                "still TASK_STATE_UNSPECIFIED",
                "later",
            ),
        ] {
            let a = of(Ok(Outcome::Task(task(
                state,
                Some("no"),
                &[&[Part::text("x")]],
            ))));
            assert_eq!(a.status, ReplyStatus::Failed, "{state:?}");
            assert!(a.text.contains("forecaster"), "{}", a.text);
            assert!(a.text.contains(says), "{state:?}: {}", a.text);
            assert!(a.text.contains(advice), "{state:?}: {}", a.text);
        }
        let a = of(Ok(Outcome::Task(task(TaskState::Rejected, None, &[]))));
        assert!(a.text.contains("it gave no reason"), "{}", a.text);
        let a = of(Ok(Outcome::Task(task(
            TaskState::Failed,
            Some("It broke."),
            &[],
        ))));
        assert!(
            a.text.contains("failed the task: It broke. Calling"),
            "{}",
            a.text
        );
    }

    #[test]
    fn failures_say_what_happened() {
        let cases: Vec<(Failure, &str)> = vec![
            (
                Failure::Unreachable {
                    url: "http://127.0.0.1:9/card".into(),
                    detail: "connection refused".into(),
                },
                "could not be reached at http://127.0.0.1:9/card (connection refused)",
            ),
            (
                Failure::Card {
                    url: "u".into(),
                    detail: "HTTP 404".into(),
                },
                "agent card of the A2A agent forecaster could not be read at u (HTTP 404)",
            ),
            (
                Failure::NoJsonRpc {
                    url: "u".into(),
                    bindings: vec!["GRPC".into(), "HTTP+JSON".into()],
                },
                "(it offers: GRPC, HTTP+JSON)",
            ),
            (
                Failure::NoJsonRpc {
                    url: "u".into(),
                    bindings: vec![],
                },
                "(it offers: nothing)",
            ),
            (
                Failure::Http {
                    method: "SendMessage",
                    status: 502,
                    excerpt: "bad gateway".into(),
                },
                "answered SendMessage with HTTP 502 (bad gateway)",
            ),
            (
                Failure::Http {
                    method: "GetTask",
                    status: 500,
                    excerpt: String::new(),
                },
                "answered GetTask with HTTP 500. Try",
            ),
            (
                Failure::Rpc {
                    method: "SendMessage",
                    code: -32009,
                    message: "1.0?".into(),
                },
                "the error -32009 VERSION_NOT_SUPPORTED: 1.0?; it does not speak A2A 1.0",
            ),
            (
                Failure::Rpc {
                    method: "SendMessage",
                    code: -32603,
                    message: "boom".into(),
                },
                "INTERNAL_ERROR: boom; calling it again later may work",
            ),
            (
                Failure::Rpc {
                    method: "SendMessage",
                    code: 7,
                    message: "odd".into(),
                },
                "the error 7: odd; calling it again with the same request will fail",
            ),
            (
                Failure::Malformed {
                    method: "GetTask",
                    detail: "not JSON".into(),
                },
                "answered GetTask with something that is not an A2A 1.0 answer (not JSON)",
            ),
            (
                Failure::Timeout { last: None },
                "did not answer within 1500 ms (its timeout_ms in agent.yaml). It may",
            ),
            (
                Failure::Timeout {
                    last: Some(("t-9".into(), TaskState::Working)),
                },
                "; its task t-9 was still TASK_STATE_WORKING",
            ),
        ];
        for (failure, says) in cases {
            let a = of(Err(failure.clone()));
            assert_eq!(a.status, ReplyStatus::Failed);
            assert!(a.text.contains(says), "{failure:?}: {}", a.text);
        }
    }

    #[test]
    fn refused_credentials_say_which_token_was_sent() {
        let refused = Err(Failure::Http {
            method: "SendMessage",
            status: 401,
            excerpt: "no".into(),
        });
        let a = answer_of(&request(Some("FORECASTER_TOKEN"), Some("t")), &refused);
        assert_eq!(a.status, ReplyStatus::Failed);
        assert!(
            a.text
                .contains("refused this host's credentials (HTTP 401 to SendMessage)")
        );
        assert!(
            a.text
                .contains("the token from the env key `FORECASTER_TOKEN` was not accepted")
        );
        assert!(
            a.text.contains("an operator must fix its token"),
            "{}",
            a.text
        );
        let a = answer_of(&request(None, None), &refused);
        assert!(
            a.text.contains("agent.yaml gives it no token_env"),
            "{}",
            a.text
        );
        let a = answer_of(&request(Some("K"), None), &refused);
        assert!(
            a.text.contains("`K` named by token_env is empty"),
            "{}",
            a.text
        );
        let forbidden = Err(Failure::Http {
            method: "GetTask",
            status: 403,
            excerpt: String::new(),
        });
        let a = answer_of(&request(None, None), &forbidden);
        assert!(a.text.contains("HTTP 403 to GetTask"), "{}", a.text);
    }
}
