//! The supervisor's side of calls to remote A2A agents: recognising one (the callee is an A2A
//! agent the caller's own agent.yaml declares), placing it on a task of its own through the
//! [`A2aCalls`] seam, and handing its outcome to the caller as the call's reply, through the
//! same `OfferReply` path a reply from another host takes.
//!
//! The call is acknowledged as accepted at once (its child run id names it) and answered
//! later, so the caller's log reads "placed, then replied" as for any peer. [`A2aBook`] keeps
//! what each call became, so that a replayed placement is not sent twice and a caller asking
//! again for a reply (a restart, a lost reply) gets the one kept or, when the host no longer
//! knows the call (it restarted while the call was out), a failed reply that says so.
//!
//! Nothing here decides whether a call is allowed (the caller's step did, in consort-core) or
//! speaks HTTP (the seam's implementation does).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use ractor::{ActorRef, RpcReplyPort};
use tracing::{Instrument, debug, info, info_span, warn};

use consort_config::A2aAgentConfig;
use consort_core::Refusal;
use consort_core::step::{CallOutcome, CostDelta};
use consort_net::{CallEnvelope, ENVELOPE_VERSION, ReplyEnvelope, ReplyStatus, RunId};

use super::{HostSupervisor, SupervisorMsg, SupervisorState, answer};
use crate::a2a::{A2aCallRef, A2aCalls, A2aRequest};

/// How many finished calls the book keeps for replays and re-asks.
const DONE_KEPT: usize = 4096;

/// What the host knows of the calls to A2A agents it placed since it started.
#[derive(Debug, Default)]
pub(crate) struct A2aBook {
    calls: HashMap<RunId, Entry>,
    /// Finished calls, oldest first, so the book stays bounded.
    done: VecDeque<RunId>,
}

#[derive(Clone, Debug)]
enum Entry {
    Out,
    Done(Box<ReplyEnvelope>),
}

/// What to do with a placement of a call, by what the book holds for its child run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// A new call: send it.
    Send,
    /// A replay of a call still out: its reply comes when it ends.
    AlreadyOut,
    /// A replay of a call that ended: answer with its reply again.
    Answered(Box<ReplyEnvelope>),
}

/// What to answer a caller asking again for a call's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Still out: its reply comes when it ends.
    Pending,
    /// It ended: send its reply again.
    Resend(Box<ReplyEnvelope>),
    /// The host does not know it (it restarted while the call was out): the answer is lost.
    Lost,
}

impl A2aBook {
    /// Records a placement of the call `child` and says what to do with it.
    pub(crate) fn place(&mut self, child: &RunId) -> Placement {
        match self.calls.get(child) {
            None => {
                self.calls.insert(child.clone(), Entry::Out);
                Placement::Send
            }
            Some(Entry::Out) => Placement::AlreadyOut,
            Some(Entry::Done(reply)) => Placement::Answered(reply.clone()),
        }
    }

    /// Records the reply a call ended with; the oldest finished calls are forgotten past
    /// [`DONE_KEPT`].
    pub(crate) fn finish(&mut self, reply: &ReplyEnvelope) {
        let child = reply.child_run.clone();
        if !matches!(self.calls.get(&child), Some(Entry::Done(_))) {
            self.done.push_back(child.clone());
        }
        self.calls
            .insert(child, Entry::Done(Box::new(reply.clone())));
        while self.done.len() > DONE_KEPT {
            if let Some(old) = self.done.pop_front() {
                self.calls.remove(&old);
            }
        }
    }

    /// What to answer a caller asking again for the reply of `child`.
    pub(crate) fn ask(&self, child: &RunId) -> Asked {
        match self.calls.get(child) {
            None => Asked::Lost,
            Some(Entry::Out) => Asked::Pending,
            Some(Entry::Done(reply)) => Asked::Resend(reply.clone()),
        }
    }
}

/// The reply of a call whose answer the host lost.
pub(crate) fn lost_reply(call: &A2aCallRef) -> ReplyEnvelope {
    reply_for(
        call.caller.clone(),
        call.callee.clone(),
        call.parent_run.clone(),
        call.child_run.clone(),
        call.tool_use_id.clone(),
        ReplyStatus::Failed,
        format!(
            "the call to the A2A agent {} was out when this host restarted, and its answer was lost; call it again if you still need it",
            call.callee
        ),
    )
}

fn reply_for(
    caller: String,
    callee: String,
    parent_run: RunId,
    child_run: RunId,
    tool_use_id: String,
    status: ReplyStatus,
    output: String,
) -> ReplyEnvelope {
    ReplyEnvelope {
        version: ENVELOPE_VERSION,
        caller,
        callee,
        parent_run,
        child_run,
        tool_use_id,
        status,
        output,
        // The remote agent's own cost is not known to this host.
        tree_cost: CostDelta::default(),
        tree_spent: None,
        signature: None,
    }
}

impl HostSupervisor {
    /// The A2A agent the envelope's caller declares under the callee's name, with the token
    /// its env holds for it; `None` when the callee is none of the caller's A2A agents.
    pub(super) fn a2a_callee(
        state: &SupervisorState,
        envelope: &CallEnvelope,
    ) -> Option<(A2aAgentConfig, Option<String>)> {
        let hop = envelope.last_hop()?;
        let config = &state.slots.get(&hop.caller)?.config;
        let agent = config.a2a_agent(&hop.callee)?.clone();
        let token = agent
            .token_env
            .as_ref()
            .and_then(|key| config.env.get(key))
            .filter(|value| !value.trim().is_empty())
            .map(|value| value.trim().to_owned());
        Some((agent, token))
    }

    /// Places a call to a remote A2A agent: acknowledged at once, sent on a task of its own,
    /// its outcome offered to the caller as the call's reply.
    pub(super) fn place_a2a_call(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        envelope: CallEnvelope,
        agent: A2aAgentConfig,
        token: Option<String>,
        reply: RpcReplyPort<CallOutcome>,
    ) {
        let Some(hop) = envelope.last_hop().cloned() else {
            answer(
                reply,
                CallOutcome::Refused(consort_core::guards::empty_chain(&agent.name)),
            );
            return;
        };
        let Some(client) = state.spec.a2a.clone() else {
            answer(
                reply,
                CallOutcome::Refused(Refusal::unreachable(
                    &agent.name,
                    "this host was started without a client for A2A agents",
                )),
            );
            return;
        };
        let placement = lock(&state.a2a_book).place(&hop.child_run);
        let existing = placement != Placement::Send;
        answer(
            reply,
            CallOutcome::Accepted {
                child_run: hop.child_run.clone(),
                existing,
            },
        );
        match placement {
            Placement::AlreadyOut => {}
            Placement::Answered(reply) => offer(myself, *reply),
            Placement::Send => {
                let request = A2aRequest {
                    token,
                    input: envelope.input,
                    child_run: hop.child_run,
                    caller: hop.caller,
                    parent_run: hop.parent_run,
                    hop_depth: envelope.hops.len(),
                    agent,
                };
                send(
                    myself.clone(),
                    client,
                    state.a2a_book.clone(),
                    hop.tool_use_id,
                    state.spec.options.reply_cap,
                    request,
                );
            }
        }
    }

    /// A caller asks again for the reply of a call to an A2A agent.
    pub(super) fn ask_a2a_reply(
        myself: &ActorRef<SupervisorMsg>,
        state: &SupervisorState,
        call: &A2aCallRef,
    ) {
        // The guard is dropped before the match: the `Lost` arm takes the lock again.
        let asked = lock(&state.a2a_book).ask(&call.child_run);
        match asked {
            Asked::Pending => {}
            Asked::Resend(reply) => offer(myself, *reply),
            Asked::Lost => {
                warn!(run_id = %call.parent_run, agent = %call.caller, callee = %call.callee, child = %call.child_run, "a call to an A2A agent was out when the host restarted; its caller is told the answer is lost");
                let reply = lost_reply(call);
                lock(&state.a2a_book).finish(&reply);
                offer(myself, reply);
            }
        }
    }
}

impl HostSupervisor {
    /// What `check_run` tells `caller` about its call `run` to `agent`, when that is one of
    /// its A2A agents: a remote agent's task is no run of this host.
    pub(super) fn a2a_run_summary(
        state: &SupervisorState,
        caller: &str,
        agent: &str,
        run: &RunId,
    ) -> Option<String> {
        state.slots.get(caller)?.config.a2a_agent(agent)?;
        let asked = lock(&state.a2a_book).ask(run);
        Some(match asked {
            Asked::Pending => format!(
                "{agent} is a remote A2A agent and the call {run} is still out; its answer will arrive as a [reply from {agent}] message"
            ),
            Asked::Resend(reply) => format!(
                "{agent} is a remote A2A agent; the call {run} ended ({}) and its answer was delivered as a [reply from {agent}] message: {}",
                match reply.status {
                    ReplyStatus::Succeeded => "succeeded",
                    ReplyStatus::Failed => "failed",
                },
                reply.output
            ),
            Asked::Lost => format!(
                "{agent} is a remote A2A agent and this host has no record of the call {run}; call it again if you still need its answer"
            ),
        })
    }
}

/// Sends one call through the seam and offers its outcome to the caller.
fn send(
    myself: ActorRef<SupervisorMsg>,
    client: Arc<dyn A2aCalls>,
    book: Arc<Mutex<A2aBook>>,
    tool_use_id: String,
    reply_cap: usize,
    request: A2aRequest,
) {
    let span = info_span!(
        "a2a_call",
        run_id = %request.parent_run,
        agent = %request.caller,
        callee = %request.agent.name,
        hop_depth = request.hop_depth,
        child_run = %request.child_run,
    );
    tokio::spawn(
        async move {
            let (caller, callee) = (request.caller.clone(), request.agent.name.clone());
            let (parent_run, child_run) = (request.parent_run.clone(), request.child_run.clone());
            let outcome = client.call(request).await;
            info!(status = ?outcome.status, "the A2A agent's call ended");
            let reply = reply_for(
                caller,
                callee,
                parent_run,
                child_run,
                tool_use_id,
                outcome.status,
                consort_core::step::cap_output(&outcome.text, reply_cap),
            );
            lock(&book).finish(&reply);
            offer(&myself, reply);
        }
        .instrument(span),
    );
}

/// Offers a reply to its caller's agent, as a reply from another host is offered.
fn offer(myself: &ActorRef<SupervisorMsg>, reply: ReplyEnvelope) {
    let (taken, _answer) = tokio::sync::oneshot::channel();
    if let Err(e) = myself.cast(SupervisorMsg::OfferReply {
        reply,
        taken: RpcReplyPort::from(taken),
    }) {
        // The host is stopping: the caller asks again when it resumes.
        debug!("the supervisor is gone; an A2A agent's reply was not offered: {e}");
    }
}

/// The book, even after a task panicked holding it (what it holds stays consistent: every
/// change is one insert or remove).
fn lock(book: &Mutex<A2aBook>) -> std::sync::MutexGuard<'_, A2aBook> {
    book.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(n: u8) -> RunId {
        RunId::child_of(&RunId::parse(&format!("run_{n:032x}")).unwrap(), "tu_1_0")
    }

    fn call(n: u8) -> A2aCallRef {
        let parent = RunId::parse(&format!("run_{n:032x}")).unwrap();
        A2aCallRef {
            caller: "planner".into(),
            child_run: RunId::child_of(&parent, "tu_1_0"),
            parent_run: parent,
            tool_use_id: "tu_1_0".into(),
            callee: "forecaster".into(),
        }
    }

    #[test]
    fn a_call_is_sent_once_and_its_replays_are_answered_from_the_book() {
        let mut book = A2aBook::default();
        assert_eq!(book.place(&child(1)), Placement::Send);
        assert_eq!(book.place(&child(1)), Placement::AlreadyOut);
        assert_eq!(book.ask(&child(1)), Asked::Pending);
        let mut reply = lost_reply(&call(1));
        reply.status = ReplyStatus::Succeeded;
        reply.output = "sunny".into();
        book.finish(&reply);
        assert_eq!(
            book.place(&child(1)),
            Placement::Answered(Box::new(reply.clone()))
        );
        assert_eq!(book.ask(&child(1)), Asked::Resend(Box::new(reply)));
        // Another call is its own.
        assert_eq!(book.place(&child(2)), Placement::Send);
    }

    #[test]
    fn an_unknown_call_is_lost_and_says_so() {
        let book = A2aBook::default();
        assert_eq!(book.ask(&child(3)), Asked::Lost);
        let reply = lost_reply(&call(3));
        assert_eq!(reply.status, ReplyStatus::Failed);
        assert_eq!(reply.child_run, child(3));
        assert_eq!(reply.callee, "forecaster");
        assert_eq!(reply.caller, "planner");
        assert!(reply.output.contains("answer was lost"), "{}", reply.output);
        assert!(reply.output.contains("call it again"), "{}", reply.output);
    }

    #[test]
    fn the_book_keeps_a_bounded_number_of_finished_calls() {
        let mut book = A2aBook::default();
        let first = call(0);
        book.place(&first.child_run);
        book.finish(&lost_reply(&first));
        // Finishing the same call twice counts it once.
        book.finish(&lost_reply(&first));
        for n in 0..DONE_KEPT {
            let parent = RunId::parse(&format!("run_{:032x}", n + 1000)).unwrap();
            let mut c = call(0);
            c.child_run = RunId::child_of(&parent, "tu_1_0");
            c.parent_run = parent;
            book.finish(&lost_reply(&c));
        }
        assert_eq!(book.done.len(), DONE_KEPT);
        assert_eq!(book.calls.len(), DONE_KEPT);
        assert_eq!(book.ask(&first.child_run), Asked::Lost);
    }
}
