//! The supervisor's side of the peer directory: its requests go to `DirectoryHost` on tasks of
//! their own (so a slow host never holds the supervisor's mailbox), deliveries to this host's
//! agents go to their actors, and other hosts' presence queries are answered from the board.
//! It decides nothing: the rules are consort-core's `directory`.

use consort_core::directory::{Audience, Receipt};
use consort_core::{Refusal, guards};
use consort_net::RunId;
use ractor::{ActorRef, RpcReplyPort};
use tracing::warn;

use super::{HostSpec, HostSupervisor, SupervisorMsg, SupervisorState, answer};
use crate::agent::{AgentMsg, tell};
use crate::data::DataFolder;
use crate::directory::{self, answer_on_task};

impl HostSupervisor {
    /// Handles one directory message (the caller matched it).
    pub(super) fn directory_message(state: &SupervisorState, message: SupervisorMsg) {
        match message {
            SupervisorMsg::Directory {
                audience,
                goal,
                reply,
            } => answer_on_task(reply, state.directory.clone().packet(audience, goal)),
            SupervisorMsg::Observe {
                audience,
                agent,
                run,
                source,
                lines,
                reply,
            } => {
                let full_readers = state
                    .slots
                    .get(&agent)
                    .map(|slot| slot.config.show_runs_to.clone())
                    .unwrap_or_default();
                answer_on_task(
                    reply,
                    state.directory.clone().observe(
                        audience,
                        agent,
                        run,
                        source,
                        lines,
                        full_readers,
                    ),
                );
            }
            SupervisorMsg::WaitRun {
                audience,
                request,
                timeout,
                reply,
            } => {
                let full_readers = state
                    .slots
                    .get(&request.agent)
                    .map(|slot| slot.config.show_runs_to.clone())
                    .unwrap_or_default();
                answer_on_task(
                    reply,
                    state
                        .directory
                        .clone()
                        .wait(audience, request, (timeout, full_readers)),
                );
            }
            SupervisorMsg::Deliver {
                audience,
                request,
                reply,
            } => {
                // The sender's can_call as this host serves it now; an agent it does not serve
                // has none here, so its deliveries are refused on this side.
                let can_call = match &audience {
                    Audience::Agent(agent) => state
                        .slots
                        .get(agent)
                        .map(|slot| slot.config.can_call.clone())
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                answer_on_task(
                    reply,
                    state.directory.clone().deliver(audience, can_call, request),
                );
            }
            SupervisorMsg::DeliveryStatus {
                audience,
                agent,
                run,
                delivery_id,
                reply,
            } => answer_on_task(
                reply,
                state
                    .directory
                    .clone()
                    .delivery_status(audience, agent, run, delivery_id),
            ),
            SupervisorMsg::Attention {
                audience,
                goal,
                reply,
            } => answer_on_task(reply, state.directory.clone().attention(audience, goal)),
            SupervisorMsg::Presence { agents, reply } => {
                let reports =
                    directory::local_reports(&agents, |a| state.board.seat(a), &state.board);
                answer(reply, (crate::run::now_ms(), reports));
            }
            _ => {}
        }
    }

    /// A delivery into one of this host's agents (waking it if it sleeps).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn deliver_here(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        from: String,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
        text: String,
        reply: RpcReplyPort<Receipt>,
    ) {
        // A delivery without a run would start one: a draining host starts none.
        if run.is_none() && state.draining {
            let refusal = Self::draining_refusal_of(state);
            answer(reply, Receipt::rejected(&delivery_id, &refusal));
            return;
        }
        match Self::wake(myself, state, &agent).await {
            Some(actor) => tell(
                state.metrics.mailbox(),
                &actor,
                AgentMsg::Deliver {
                    from,
                    run,
                    delivery_id,
                    text,
                    reply,
                },
            ),
            None => {
                let refusal = if state.slots.contains_key(&agent) {
                    Refusal::agent_down(&agent)
                } else {
                    guards::not_in_fleet(&agent, &Self::fleet_agents(&state.spec))
                };
                answer(reply, Receipt::rejected(&delivery_id, &refusal));
            }
        }
    }
}

/// Writes the directory snapshot a stopped host's data folder is read with; a failure only
/// costs `consort directory --data` for this folder.
pub(super) fn write_snapshot(data: &DataFolder, spec: &HostSpec) {
    let snapshot = spec.directory.snapshot(&spec.host_name);
    let path = data.root().join(directory::SNAPSHOT_FILE);
    let tmp = path.with_extension("json.tmp");
    let written = serde_json::to_vec_pretty(&snapshot)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        warn!(path = %path.display(), error = %e, "directory snapshot not written");
    }
}
