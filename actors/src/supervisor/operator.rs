//! The supervisor's side of an operator's fleet commands: draining (no new root runs) and
//! restarting one agent's actor.
//!
//! Draining closes admission of *root* runs only: `SupervisorMsg::Start` (the HTTP API, the
//! CLI) and deliveries that would start a run are refused with `Refusal::Draining`, while the
//! runs already accepted go on, and calls placed by runs already underway (from this host or
//! another) are still accepted: such a call is part of a run some host admitted, and refusing
//! it would fail that work instead of letting it finish. The flag lives in memory: a restarted
//! host admits again.
//!
//! A restart stops the agent's actor and starts a new one, which resumes every unsettled run
//! from the store exactly as after a crash; it counts as a restart of the agent, and, like a
//! reload that revives an agent that is down, gives it a fresh restart budget (an operator
//! asked for it). An agent that does not start is left down, as after any failed start. Nothing here decides anything about
//! a run.

use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use tracing::{info, warn};

use consort_core::Refusal;

use super::{AgentStatus, HostSupervisor, SupervisorMsg, SupervisorState, answer};
use crate::ActorsError;

/// How long an agent's actor may take to stop (its current message, then its store's close)
/// before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

impl HostSupervisor {
    /// The refusal of a root run on a draining host.
    pub(super) fn draining_refusal_of(state: &SupervisorState) -> Refusal {
        Refusal::draining(&state.spec.host_name)
    }

    /// [`HostSupervisor::draining_refusal_of`] as the error a starter gets.
    pub(super) fn draining_refusal(state: &SupervisorState) -> ActorsError {
        ActorsError::Refused(Self::draining_refusal_of(state))
    }

    /// Sets (or only reports) whether the host is draining.
    pub(super) fn set_draining(
        state: &mut SupervisorState,
        draining: Option<bool>,
        reply: RpcReplyPort<bool>,
    ) {
        if let Some(draining) = draining
            && draining != state.draining
        {
            state.draining = draining;
            if draining {
                info!("draining: no new root runs; accepted runs go on");
            } else {
                info!("admitting new root runs again");
            }
        }
        answer(reply, state.draining);
    }

    /// Stops `agent`'s actor (if it is up) and starts a new one.
    pub(super) async fn restart_agent(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        agent: &str,
    ) -> Result<AgentStatus, ActorsError> {
        let Some(slot) = state.slots.get_mut(agent) else {
            return Err(ActorsError::UnknownAgent(agent.to_owned()));
        };
        // Taken out of the slot first, so that its end is not read as a failure to recover
        // from: the supervision event finds no slot holding it. An agent that was down comes
        // back with a fresh budget, and a store probe made while it was down is stale.
        let old = slot.actor.take();
        slot.total_restarts += 1;
        slot.restarts.clear();
        slot.down_period += 1;
        state.publish_seat(agent);
        if let Some(old) = old {
            let stopped = old
                .stop_and_wait(Some("restarted by an operator".into()), Some(STOP_TIMEOUT))
                .await;
            if let Err(error) = stopped {
                warn!(%agent, %error, "the agent did not stop in time; killing it");
                if let Err(error) = old.kill_and_wait(Some(STOP_TIMEOUT)).await {
                    warn!(%agent, %error, "the agent did not die in time; starting anew anyway");
                }
            }
        }
        if let Err(error) = Self::spawn_agent(myself, state, agent).await {
            warn!(%agent, %error, "the agent restarted by an operator did not start");
            let answer = ActorsError::Actor(format!("agent {agent} did not start: {error}"));
            Self::down_after_start_failure(myself, state, agent, error);
            return Err(answer);
        }
        info!(%agent, "agent actor restarted by an operator (its runs resume from the store)");
        state
            .slots
            .get(agent)
            .map(|slot| AgentStatus {
                name: agent.to_owned(),
                up: slot.down.is_none(),
                awake: slot.actor.is_some(),
                restarts: slot.total_restarts,
                down: slot.down.clone(),
            })
            .ok_or_else(|| ActorsError::UnknownAgent(agent.to_owned()))
    }
}
