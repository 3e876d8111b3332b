//! The directory tools a model can use, offered to agents that belong to a goal:
//! `list_peers`, `observe_peer`, `wait_peer` and `needs_attention`.
//!
//! The asking run's agent is the audience: the supervisor decides what it may see from that,
//! never from what the model wrote (a `goal` argument only chooses among the agent's own
//! goals; an `agent` outside them is a scope gap). Each answer is gathered on its own task
//! (other hosts answer inside their deadlines), so the agent's mailbox never waits for it; its
//! JSON is the tool result. The agent actor only starts the task: [`parse`] reads the use,
//! [`answer`] asks the supervisor.

use std::time::Duration;

use ractor::ActorRef;
use serde_json::{Value, json};
use tracing::warn;

use consort_core::directory::{
    Audience, DELIVER, DeliveryOutcome, ExcerptSource, LIST_PEERS, NEEDS_ATTENTION, OBSERVE_PEER,
    WAIT_PEER, WaitUntil,
};
use consort_core::{RunId, ToolUse};

use crate::directory::{DeliveryRequest, WaitRequest};
use crate::model::ToolSpec;
use crate::routing::SupervisorMsg;

/// How long a directory tool waits for the supervisor beyond its own bound.
const ANSWER_MARGIN: Duration = Duration::from_secs(30);
/// The longest `wait_peer` a model may ask for, in seconds.
const MAX_WAIT_PEER_S: u64 = 60;

/// True for the directory tools' names.
pub(crate) fn is_directory_tool(name: &str) -> bool {
    matches!(
        name,
        LIST_PEERS | OBSERVE_PEER | WAIT_PEER | NEEDS_ATTENTION | DELIVER
    )
}

/// The directory tools as the model is told about them, when the agent belongs to a goal.
pub(crate) fn specs(goals: &[String]) -> Vec<ToolSpec> {
    if goals.is_empty() {
        return Vec::new();
    }
    let goals = goals.join(", ");
    vec![
        ToolSpec {
            name: LIST_PEERS.into(),
            description: format!(
                "List the agents that share your goal ({goals}): for each, its host, its open runs and its presence (working, blocked, idle, done, unreachable or unknown). Presence is advisory: it is not evidence that work is done. Name `goal` when you belong to several."
            ),
            input_schema: json!({"type": "object", "properties": {"goal": {"type": "string"}}}),
        },
        ToolSpec {
            name: OBSERVE_PEER.into(),
            description: "What you may see of a peer of your goal: its work state and, for a run you placed, the run's state and a short advisory excerpt of its log (source `events`) or output (`output`). Read a durable answer rather than treating an excerpt as evidence.".into(),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "run": {"type": "string"}, "source": {"type": "string", "enum": ["events", "output"]}, "lines": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["agent"]}),
        },
        ToolSpec {
            name: WAIT_PEER.into(),
            description: format!(
                "Wait (at most `timeout_s`, up to {MAX_WAIT_PEER_S}) for a run you placed on a peer to settle (`until`: settled, blocked or changed) after the state-change `after_seq` you already saw. The answer is matched, timeout, replaced (the peer restarted or was reloaded: look again), not_running, unknown_run or unreachable; a timeout never resends anything."
            ),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "run": {"type": "string"}, "until": {"type": "string", "enum": ["settled", "blocked", "changed"]}, "after_seq": {"type": "integer", "minimum": 0}, "incarnation": {"type": "string"}, "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_PEER_S}}, "required": ["agent", "run"]}),
        },
        ToolSpec {
            name: DELIVER.into(),
            description: "Hand a peer you may call a message: into a run you placed (`run`), which its model reads as `[message from <you>] ...` on its next turn, or as a new run of the peer. The answer is active (the run moved on), stalled (enqueued, nothing followed yet: read the run before sending again), rejected (why) or timeout (no receipt in time: it may have arrived; nothing is resent). Sending again with the same `delivery_id` never delivers twice.".into(),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "message": {"type": "string"}, "run": {"type": "string"}, "delivery_id": {"type": "string"}}, "required": ["agent", "message"]}),
        },
        ToolSpec {
            name: NEEDS_ATTENTION.into(),
            description: format!(
                "What in your goal ({goals}) needs a decision now, from typed facts only (runs blocked on an approval, failures with nothing after them, work that has not moved): routing for attention, not an assignment."
            ),
            input_schema: json!({"type": "object", "properties": {"goal": {"type": "string"}}}),
        },
    ]
}

fn text(input: &Value, key: &str) -> Option<String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| v.chars().take(200).collect())
}

/// Reads a use of a directory tool by run `asking_run`: what to ask the supervisor, or the
/// text the model reads for a use it got wrong.
pub(crate) fn parse(asking_run: &RunId, tool_use: &ToolUse) -> Result<DirectoryToolUse, String> {
    let input = &tool_use.input;
    match tool_use.name.as_str() {
        LIST_PEERS => Ok(DirectoryToolUse::List(text(input, "goal"))),
        NEEDS_ATTENTION => Ok(DirectoryToolUse::Attention(text(input, "goal"))),
        DELIVER => match (
            text(input, "agent"),
            input.get("message").and_then(Value::as_str),
        ) {
            // The sender's half of consent (its can_call) is decided by the host, so the model
            // reads its refusal as the same typed outcome as any other.
            (Some(agent), Some(message)) => {
                match text(input, "run").map(|r| RunId::parse(&r)).transpose() {
                    Err(e) => Err(format!("deliver: {e}")),
                    Ok(run) => Ok(DirectoryToolUse::Deliver(DeliveryRequest {
                        agent,
                        run,
                        // The same tool use names the same delivery across a replay, so a
                        // crash never delivers twice.
                        delivery_id: text(input, "delivery_id")
                            .unwrap_or_else(|| format!("{asking_run}.{}", tool_use.id)),
                        text: message.to_owned(),
                        timeout: Duration::from_secs(10),
                        window: None,
                    })),
                }
            }
            _ => Err("deliver expects {\"agent\": \"<name>\", \"message\": \"<text>\"}".to_owned()),
        },
        OBSERVE_PEER => match text(input, "agent") {
            None => Err("observe_peer expects {\"agent\": \"<name>\"}".to_owned()),
            Some(agent) => {
                let run = text(input, "run").map(|r| RunId::parse(&r));
                match run.transpose() {
                    Err(e) => Err(format!("observe_peer: {e}")),
                    Ok(run) => Ok(DirectoryToolUse::Observe {
                        agent,
                        run,
                        source: if text(input, "source").as_deref() == Some("output") {
                            ExcerptSource::Output
                        } else {
                            ExcerptSource::Events
                        },
                        lines: input
                            .get("lines")
                            .and_then(Value::as_u64)
                            .map_or(20, |n| usize::try_from(n).unwrap_or(usize::MAX)),
                    }),
                }
            }
        },
        _ => match (text(input, "agent"), text(input, "run")) {
            (Some(agent), Some(run)) => match RunId::parse(&run) {
                Err(e) => Err(format!("wait_peer: {e}")),
                Ok(run) => Ok(DirectoryToolUse::Wait(
                    WaitRequest {
                        agent,
                        run,
                        until: text(input, "until")
                            .and_then(|u| WaitUntil::parse(&u))
                            .unwrap_or(WaitUntil::Settled),
                        after_seq: input.get("after_seq").and_then(Value::as_u64).unwrap_or(0),
                        incarnation: text(input, "incarnation"),
                    },
                    Duration::from_secs(
                        input
                            .get("timeout_s")
                            .and_then(Value::as_u64)
                            .unwrap_or(30)
                            .clamp(1, MAX_WAIT_PEER_S),
                    ),
                )),
            },
            _ => Err("wait_peer expects {\"agent\": \"<name>\", \"run\": \"<run id>\"}".to_owned()),
        },
    }
}

/// A parsed directory tool use.
pub(crate) enum DirectoryToolUse {
    List(Option<String>),
    Attention(Option<String>),
    Observe {
        agent: String,
        run: Option<RunId>,
        source: ExcerptSource,
        lines: usize,
    },
    Wait(WaitRequest, Duration),
    Deliver(DeliveryRequest),
}

/// Asks the supervisor for the answer to a directory tool use; the answer's JSON and whether
/// it is an error for the model.
pub(crate) async fn answer(
    supervisor: &ActorRef<SupervisorMsg>,
    audience: Audience,
    asked: DirectoryToolUse,
) -> (String, bool) {
    let margin = u64::try_from(ANSWER_MARGIN.as_millis()).unwrap_or(u64::MAX);
    let answered = match asked {
        DirectoryToolUse::List(goal) => ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::Directory {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            margin
        )
        .map(|p| (serde_json::to_string(&p), p.scope_gap.is_some())),
        DirectoryToolUse::Attention(goal) => ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::Attention {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            margin
        )
        .map(|r| (serde_json::to_string(&r), r.scope_gap.is_some())),
        DirectoryToolUse::Observe {
            agent,
            run,
            source,
            lines,
        } => ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::Observe {
                audience: audience.clone(),
                agent: agent.clone(),
                run: run.clone(),
                source,
                lines,
                reply
            },
            margin
        )
        .map(|o| (serde_json::to_string(&o), o.scope_gap.is_some())),
        DirectoryToolUse::Deliver(request) => {
            let bound = request.timeout + request.window.unwrap_or(crate::directory::MAX_WAIT);
            ractor::call_t!(
                supervisor,
                |reply| SupervisorMsg::Deliver {
                    audience: audience.clone(),
                    request: request.clone(),
                    reply
                },
                margin + u64::try_from(bound.as_millis()).unwrap_or(u64::MAX)
            )
            .map(|outcome| {
                let is_error = matches!(outcome, DeliveryOutcome::Rejected { .. });
                (serde_json::to_string(&outcome), is_error)
            })
        }
        DirectoryToolUse::Wait(request, timeout) => ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::WaitRun {
                audience: audience.clone(),
                request: request.clone(),
                timeout,
                reply
            },
            margin + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
        )
        .map(|answer| match answer {
            Ok(answer) => (serde_json::to_string(&answer), false),
            Err(gap) => (Ok(gap.to_string()), true),
        }),
    };
    match answered {
        Ok((Ok(text), is_error)) => (text, is_error),
        Ok((Err(e), _)) => (
            format!("the directory answer could not be written: {e}"),
            true,
        ),
        Err(e) => {
            warn!(error = %e, "a directory tool: the host supervisor did not answer");
            (
                "the directory is unavailable right now (the host did not answer); try again later"
                    .to_owned(),
                true,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn use_of(name: &str, input: Value) -> ToolUse {
        ToolUse {
            id: "tu_9".into(),
            name: name.into(),
            input,
        }
    }

    #[test]
    fn a_deliver_without_an_id_is_named_by_its_run_and_tool_use() {
        let run = RunId::random();
        let asked = parse(
            &run,
            &use_of(DELIVER, json!({"agent": "b3", "message": "hi"})),
        );
        let Ok(DirectoryToolUse::Deliver(request)) = asked else {
            panic!("a deliver request");
        };
        assert_eq!(request.delivery_id, format!("{run}.tu_9"));
        assert_eq!((request.agent.as_str(), request.run), ("b3", None));
        let named = json!({"agent": "b3", "message": "hi", "delivery_id": "d-1"});
        let Ok(DirectoryToolUse::Deliver(request)) = parse(&run, &use_of(DELIVER, named)) else {
            panic!("a deliver request");
        };
        assert_eq!(request.delivery_id, "d-1");
    }

    #[test]
    fn a_wait_is_bounded_and_defaults_to_settled() {
        let run = RunId::random();
        let target = RunId::random();
        let input = json!({"agent": "cfo", "run": target.to_string(), "timeout_s": 100_000});
        let Ok(DirectoryToolUse::Wait(request, timeout)) = parse(&run, &use_of(WAIT_PEER, input))
        else {
            panic!("a wait request");
        };
        assert_eq!(timeout, Duration::from_secs(MAX_WAIT_PEER_S));
        assert_eq!(request.until, WaitUntil::Settled);
        assert_eq!(request.run, target);
    }

    #[test]
    fn a_use_the_model_got_wrong_reads_what_was_expected() {
        let run = RunId::random();
        for (name, input, expected) in [
            (DELIVER, json!({"agent": "b3"}), "deliver expects"),
            (WAIT_PEER, json!({"agent": "cfo"}), "wait_peer expects"),
            (OBSERVE_PEER, json!({}), "observe_peer expects"),
            (
                OBSERVE_PEER,
                json!({"agent": "cfo", "run": "nope"}),
                "observe_peer:",
            ),
        ] {
            match parse(&run, &use_of(name, input)) {
                Err(text) => assert!(text.starts_with(expected), "{name}: {text}"),
                Ok(_) => panic!("{name}: a bad use was read as a request"),
            }
        }
    }
}
