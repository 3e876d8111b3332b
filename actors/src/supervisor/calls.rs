//! The supervisor's routing of what crosses agents: a call to its callee, a reply to its
//! caller, a request for a reply again, and a `check_run` read of a callee's run.
//!
//! Each is routed the same way, in the same order: to an agent of this host, then to an agent
//! another host serves ([`RemoteCalls`](crate::routing::RemoteCalls)), then, for a call or a
//! run read, to a remote A2A agent the caller declares (`supervisor/a2a.rs`). An agent of this
//! host is woken if it sleeps (`supervisor/sleep.rs`), but for a run read, which reads its
//! store without waking it. A call to an agent of this host that is down is refused as
//! `AgentDown`, which its caller can tell from an agent the fleet does not have
//! (`UnknownAgent`).
//!
//! What arrives is handed on, never judged: whether a call is allowed is the caller's and the
//! callee's agent actors' decision, through consort-core's run state machine, and a reply is
//! taken or not by the caller's actor. Work that waits on another host runs on a task of its
//! own, so a slow host never holds the supervisor's mailbox.

use ractor::{ActorRef, RpcReplyPort};
use tracing::warn;

use consort_core::step::CallOutcome;
use consort_core::{Refusal, guards};
use consort_net::{CallEnvelope, ReplyEnvelope, RunId};

use super::{HostSupervisor, SupervisorMsg, SupervisorState, answer};
use crate::ActorsError;
use crate::agent::{AgentMsg, tell};
use crate::run::RunRecord;

impl HostSupervisor {
    /// Routes a call to its callee: this host's agent, another host's, or a remote A2A agent
    /// the caller declares; an agent of none of these is refused as unknown.
    pub(super) async fn place_call(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
    ) {
        let callee = envelope
            .last_hop()
            .map(|h| h.callee.clone())
            .unwrap_or_default();
        if let Some(actor) = Self::wake(myself, state, &callee).await {
            tell(
                state.metrics.mailbox(),
                &actor,
                AgentMsg::Accept { envelope, reply },
            );
        } else if state.slots.contains_key(&callee) {
            answer(reply, CallOutcome::Refused(Refusal::agent_down(&callee)));
        } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&callee)) {
            tokio::spawn(async move {
                let outcome = remote.place_call(envelope).await;
                answer(reply, outcome);
            });
        } else if let Some((agent, token)) = Self::a2a_callee(state, &envelope) {
            Self::place_a2a_call(myself, state, envelope, agent, token, reply);
        } else {
            let refusal = guards::not_in_fleet(&callee, &Self::fleet_agents(&state.spec));
            answer(reply, CallOutcome::Refused(refusal));
        }
    }

    /// Offers a reply that came from outside this host (another host, a remote A2A agent) to
    /// its caller's agent; `taken` says whether the agent took it.
    pub(super) async fn offer_reply(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        reply: ReplyEnvelope,
        taken: RpcReplyPort<bool>,
    ) {
        match Self::wake(myself, state, &reply.caller).await {
            Some(actor) => {
                tell(
                    state.metrics.mailbox(),
                    &actor,
                    AgentMsg::OfferReply { reply, taken },
                );
            }
            None => {
                answer(taken, false);
            }
        }
    }

    /// Asks the callee of a settled child run, here or on another host, to send its reply again.
    pub(super) async fn resend_reply(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        callee: String,
        child_run: RunId,
    ) {
        if let Some(actor) = Self::wake(myself, state, &callee).await {
            tell(
                state.metrics.mailbox(),
                &actor,
                AgentMsg::ResendReply(child_run),
            );
        } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&callee)) {
            tokio::spawn(async move { remote.resend_reply(callee, child_run).await });
        }
    }

    /// Reads `run` of `agent` for a `check_run` of `caller`'s run `parent_run`: from the
    /// agent's store here, from the host that serves it, or, for a remote A2A agent, what the
    /// host can say of it.
    pub(super) fn run_summary(
        state: &SupervisorState,
        caller: String,
        parent_run: RunId,
        agent: String,
        run: RunId,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    ) {
        if state.slots.contains_key(&agent) {
            let (writer, path) = (state.writer.clone(), state.data.store_path(&agent));
            tokio::spawn(async move {
                let key = run.clone();
                let found = writer
                    .read(&path, move |store| store.run(&key))
                    .await
                    .and_then(|r| r.ok_or_else(|| ActorsError::UnknownRun(run.to_string())));
                answer(reply, found);
            });
        } else if let Some(remote) = state.spec.remote.clone().filter(|r| r.serves(&agent)) {
            tokio::spawn(async move {
                let summary = remote.run_summary(caller, parent_run, agent, run).await;
                answer(reply, summary);
            });
        } else if let Some(said) = Self::a2a_run_summary(state, &caller, &agent, &run) {
            answer(reply, Err(ActorsError::Remote(said)));
        } else {
            answer(reply, Err(ActorsError::UnknownAgent(agent)));
        }
    }

    /// Hands a settled run's reply to its caller's agent, here or on the host that serves it.
    pub(super) async fn route_reply(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        reply: ReplyEnvelope,
    ) {
        if let Some(actor) = Self::wake(myself, state, &reply.caller).await {
            tell(state.metrics.mailbox(), &actor, AgentMsg::Reply(reply));
        } else if let Some(remote) = state
            .spec
            .remote
            .clone()
            .filter(|r| r.serves(&reply.caller))
        {
            tokio::spawn(async move { remote.send_reply(reply).await });
        } else {
            warn!(caller = %reply.caller, child = %reply.child_run, "reply for an agent that is not reachable; it will be re-sent when the caller resumes");
        }
    }
}
