//! The directory tool a model can use: `list_peers`, offered to agents that belong to a goal.
//!
//! The asking run's agent is the audience: the supervisor resolves the goal from that, never
//! from what the model wrote (a `goal` argument only chooses among the agent's own goals). The
//! packet is gathered on its own task (other hosts answer inside the presence deadline), so
//! the agent's mailbox never waits for it; its JSON is the tool result.

use ractor::ActorRef;
use serde_json::{Value, json};
use tracing::{Instrument, warn};

use consort_core::ToolUse;
use consort_core::directory::{Audience, LIST_PEERS};

use super::{AgentMsg, AgentState, tell};
use crate::model::ToolSpec;
use crate::routing::SupervisorMsg;
use crate::run::RunRecord;

/// How long `list_peers` waits for the supervisor's packet (beyond the presence deadline,
/// which the supervisor applies itself).
const LIST_PEERS_TIMEOUT_MS: u64 = 30_000;

/// `list_peers` as the model is told about it, when the agent belongs to a goal.
pub(super) fn specs(goals: &[String]) -> Vec<ToolSpec> {
    if goals.is_empty() {
        return Vec::new();
    }
    vec![ToolSpec {
        name: LIST_PEERS.into(),
        description: format!(
            "List the agents that share your goal ({}): for each, its host, its open runs and its presence (working, blocked, idle, done, unreachable or unknown). Presence is advisory: it is not evidence that work is done. Name `goal` when you belong to several.",
            goals.join(", ")
        ),
        input_schema: json!({"type": "object", "properties": {"goal": {"type": "string"}}}),
    }]
}

/// Starts a `list_peers` use; its result comes back as [`AgentMsg::ToolDone`].
pub(super) fn list_peers(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    record: &RunRecord,
    tool_use: &ToolUse,
) {
    let goal = tool_use
        .input
        .get("goal")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| g.chars().take(200).collect::<String>());
    state.in_flight.insert(&record.id, &tool_use.id);
    let (me, supervisor) = (myself.clone(), state.supervisor.clone());
    let audience = Audience::Agent(state.config.name.clone());
    let (run, tool_use_id) = (record.id.clone(), tool_use.id.clone());
    tokio::spawn(
        async move {
            let asked = ractor::call_t!(
                supervisor,
                |reply| SupervisorMsg::Directory {
                    audience: audience.clone(),
                    goal: goal.clone(),
                    reply
                },
                LIST_PEERS_TIMEOUT_MS
            );
            let (content, is_error) = match asked {
                Ok(packet) => match serde_json::to_string(&packet) {
                    Ok(text) => (text, packet.scope_gap.is_some()),
                    Err(e) => (format!("the directory answer could not be written: {e}"), true),
                },
                Err(e) => {
                    warn!(error = %e, "list_peers: the host supervisor did not answer");
                    (
                        "the directory is unavailable right now (the host did not answer); try again later".to_owned(),
                        true,
                    )
                }
            };
            tell(
                &me,
                AgentMsg::ToolDone {
                    run,
                    tool_use_id,
                    result_name: LIST_PEERS.to_owned(),
                    content,
                    is_error,
                },
            );
        }
        .in_current_span(),
    );
}
