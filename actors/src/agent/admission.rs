//! New runs: a root run started through the API, and a call accepted from a peer.
//!
//! Both are decided by consort-core's agent machine (`AgentMachine::admit_root`,
//! `AgentMachine::reserve_call` and the `InboundGate` the store job admits a call with) and
//! stored by one job of the store writer, whose answer goes to the asker straight from the
//! writer thread once the run is committed: the acknowledgement of a call never reports a run
//! that a crash could take back. The actor does not wait for that commit; the machine reserves
//! the run's place meanwhile, and the job's outcome settles the reservation
//! (`AgentMachine::call_admitted`, from the actor's commits).

use consort_core::guards;
use consort_core::step::CallOutcome;
use consort_core::{Refusal, TreeBudget, TreeLimits};
use consort_net::{CallEnvelope, RunId, TraceContext};
use ractor::{ActorRef, RpcReplyPort};
use tracing::{info, info_span, warn};

use super::commits::{Committed, Done, NotStored};
use super::{AgentActor, AgentMsg, AgentState, refused, tell};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::run::{Channel, RunRecord, now_ms};
use crate::run_span;
use crate::store::{Admission, Inserted, NewRun, admit_call};
use crate::visibility::{Identity, Origin};

impl AgentActor {
    /// Starts a root run: admission first, then the store. The run takes its first steps at
    /// once, behind its insert in the writer's queue (nothing it does leaves the host before
    /// the insert commits); the starter gets the run once it is committed.
    pub(super) async fn start(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        input: String,
        channel: Channel,
        (identity, trace, budget): (Identity, Option<TraceContext>, Option<TreeLimits>),
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    ) -> Result<(), ActorsError> {
        // A root run started the call tree: it is its own origin.
        let origin = Origin::of(&identity);
        self.start_as(
            myself,
            state,
            RunId::random(),
            input,
            channel,
            (identity, origin),
            (trace, budget),
            reply,
        )
        .await
    }

    /// [`AgentActor::start`] with the run id and origin given (a delivery's run id is derived
    /// from its sender and delivery id, so a repeated delivery finds its run; its origin is not
    /// its own). The run is the root of its call tree: its tree budget is the agent's
    /// `limits.tree` narrowed by the request's `budget`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_as(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        id: RunId,
        input: String,
        channel: Channel,
        (identity, origin): (Identity, Origin),
        (trace, budget): (Option<TraceContext>, Option<TreeLimits>),
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    ) -> Result<(), ActorsError> {
        let principal = crate::run::identity_text(&identity).0;
        if let Err(refusal) = state.machine.admit_root(&id, &input, &principal) {
            if matches!(refusal, Refusal::PrincipalSaturated { .. }) {
                warn!(agent = %state.config.name, %principal, "a principal's share of the agent is full");
            }
            if reply.send(Err(refused(refusal))).is_err() {
                warn!(agent = %state.config.name, "a refused run's starter stopped waiting");
            }
            return Ok(());
        }
        let new = NewRun {
            id: id.clone(),
            agent: state.config.name.clone(),
            channel,
            parent_run: None,
            parent_agent: None,
            tool_use_id: None,
            chain: Vec::new(),
            input,
            identity,
            origin,
            budget: TreeBudget::for_root(state.config.limits.tree, budget, now_ms()),
        };
        state.chains.insert(id.clone(), Vec::new());
        let record = new.record(now_ms());
        // A root run's span: the starter's trace's child, or the start of a trace.
        state
            .run_spans
            .insert(id.clone(), run_span::open(&record, trace));
        state.keep_new(record, &[new.created_event()]);
        let ticket = state.machine.insert_ticket(&id);
        let (me, run) = (myself.clone(), id.clone());
        let depth = state.metrics.host().mailbox().clone();
        let started = state.metrics.started(&new.channel);
        state.store.write_then(
            move |store| store.insert_run(new),
            move |result: Result<Inserted, ActorsError>| {
                let stored = match result {
                    Ok(inserted) => {
                        // Counted once stored: a run whose insert failed never started.
                        started.increment(1);
                        let record = inserted.record();
                        fault::crash_at(Point::RootStored, &record.id);
                        info!(run_id = %record.id, agent = %record.agent, hop_depth = 0, origin = %record.origin, "run started");
                        if reply.send(Ok(record.clone())).is_err() {
                            warn!(run_id = %record.id, "a run's starter stopped waiting; the run goes on");
                        }
                        Ok(())
                    }
                    Err(e) => {
                        let failure = NotStored {
                            detail: e.to_string(),
                            not_writable: e.is_store_not_writable(),
                        };
                        if reply.send(Err(e)).is_err() {
                            warn!(error = %failure.detail, "a run's starter stopped waiting");
                        }
                        Err(failure)
                    }
                };
                let done = Done::Started { run, stored };
                tell(&depth, &me, AgentMsg::Committed(Box::new(Committed { ticket, done })));
            },
        )?;
        self.advance(myself, state, &id).await?;
        Ok(())
    }

    /// The callee's side of a call: the chain's last hop must name this agent; then one job
    /// of the store writer does the replay check, the inbound guards and the insert, and
    /// answers the caller once committed.
    pub(super) fn accept(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
    ) -> Result<(), ActorsError> {
        let me = state.config.name.clone();
        let hop = match (
            envelope.last_hop().cloned(),
            guards::addressed_to(envelope.last_hop().map(|h| h.callee.as_str()), &me),
        ) {
            (Some(hop), Ok(())) => hop,
            (_, Err(refusal)) => {
                answer_call(reply, CallOutcome::Refused(refusal));
                return Ok(());
            }
            (None, Ok(())) => {
                answer_call(reply, CallOutcome::Refused(guards::empty_chain(&me)));
                return Ok(());
            }
        };
        // A chain without an origin (stored before origins existed) acts for nobody known.
        let origin = envelope.origin().cloned().unwrap_or(Origin::Unknown);
        let span = info_span!("accept", run_id = %hop.child_run, agent = %me, caller = %hop.caller, hop_depth = envelope.depth(), %origin);
        // Reserved now, settled when the job's answer comes back (see the module doc).
        let (reservation, gate) = state.machine.reserve_call(
            (&hop.caller, &hop.parent_run, &hop.child_run),
            envelope.depth(),
            &state.config.accept_from,
            state.config.limits,
            (hop.budget, now_ms()),
        );
        let new = NewRun {
            id: hop.child_run.clone(),
            agent: me.clone(),
            channel: Channel::Agent(hop.caller.clone()),
            parent_run: Some(hop.parent_run.clone()),
            parent_agent: Some(hop.caller.clone()),
            tool_use_id: Some(hop.tool_use_id.clone()),
            chain: envelope.hops.clone(),
            input: envelope.input,
            // The principal is the caller the verified chain names, never a field of the
            // input; its roles are what this agent grants it, as far as the origin the chain's
            // first hop carries holds them.
            identity: state.tools.catalog.peer_identity(
                &hop.caller,
                &origin,
                &state.options.host_grants,
            ),
            origin,
            // The child's budget is the allowance its call's hop carries.
            budget: hop.budget,
        };
        state.chains.insert(hop.child_run.clone(), envelope.hops);
        let ticket = state.machine.job_ticket();
        let me_ref = myself.clone();
        let depth = state.metrics.host().mailbox().clone();
        let (parent, child) = (hop.parent_run, hop.child_run);
        state.store.write_then(
            move |store| admit_call(store, &gate, &parent, new),
            move |result: Result<Admission, ActorsError>| {
                let _in_span = span.enter();
                let (outcome, admission) = match result {
                    Ok(Admission::Replay) => {
                        info!("replayed call finds the existing run");
                        let outcome = CallOutcome::Accepted {
                            child_run: child.clone(),
                            existing: true,
                        };
                        (outcome, Ok(Admission::Replay))
                    }
                    Ok(Admission::Refused { children, refusal }) => {
                        warn!(reason = refusal.code(), "call refused: {refusal}");
                        let admission = Admission::Refused {
                            children,
                            refusal: refusal.clone(),
                        };
                        (CallOutcome::Refused(refusal), Ok(admission))
                    }
                    Ok(admission @ Admission::Stored { .. }) => {
                        fault::crash_at(Point::ChildStored, &child);
                        info!("call accepted");
                        let outcome = CallOutcome::Accepted {
                            child_run: child.clone(),
                            existing: false,
                        };
                        (outcome, Ok(admission))
                    }
                    Err(e) => {
                        let outcome = CallOutcome::Refused(Refusal::agent_down(&me));
                        (outcome, Err(e.to_string()))
                    }
                };
                answer_call(reply, outcome);
                let done = Done::Admitted {
                    child,
                    reservation,
                    outcome: admission,
                };
                tell(
                    &depth,
                    &me_ref,
                    AgentMsg::Committed(Box::new(Committed { ticket, done })),
                );
            },
        )
    }
}

fn answer_call(reply: RpcReplyPort<CallOutcome>, outcome: CallOutcome) {
    if reply.send(outcome).is_err() {
        warn!("a caller stopped waiting for a call's answer; a replay will find the run");
    }
}
