//! New runs: a root run started through the API, and a call accepted from a peer.
//!
//! Both are decided by consort-core (`guards::admit`, `guards::addressed_to`,
//! `guards::check_inbound`) and stored by one job of the store writer, whose answer goes to the
//! asker straight from the writer thread once the run is committed: the acknowledgement of a
//! call never reports a run that a crash could take back. The actor does not wait for that
//! commit. Admission counts runs that are not stored yet, so it *reserves*: the unsettled count
//! (and the parent's children count, when the actor knows it) goes up when the job is sent and
//! back down if the job finds a replay or a refusal. A reserved count can only make admission
//! stricter for a moment, never let a run past a limit.

use consort_core::guards::{self, InboundFacts};
use consort_core::step::CallOutcome;
use consort_core::{Refusal, TreeBudget, TreeLimits};
use consort_net::{CallEnvelope, RunId, TraceContext};
use ractor::{ActorRef, RpcReplyPort};
use tracing::{info, info_span, warn};

use super::commits::{Admission, Committed, Done, NotStored};
use super::{AgentActor, AgentMsg, AgentState, refused, tell};
use crate::ActorsError;
use crate::fault::{self, Point};
use crate::run::{Channel, RunRecord, now_ms};
use crate::run_span;
use crate::store::{Inserted, NewRun, RunLog};
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
        if let Err(refusal) = guards::admit(
            &state.config.name,
            &input,
            state.unsettled,
            state.options.admission_limit,
        ) {
            if reply.send(Err(refused(refusal))).is_err() {
                warn!(agent = %state.config.name, "a refused run's starter stopped waiting");
            }
            return Ok(());
        }
        let principal = crate::run::identity_text(&identity).0;
        if let Err(refusal) = guards::admit_for(
            &state.config.name,
            &principal,
            state.shares.active(&principal),
            state.options.per_principal_limit,
        ) {
            warn!(agent = %state.config.name, %principal, "a principal's share of the agent is full");
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
        state.unsettled += 1;
        state.shares.add(id.clone(), principal);
        state.chains.insert(id.clone(), Vec::new());
        let record = new.record(now_ms());
        // A root run's span: the starter's trace's child, or the start of a trace.
        state
            .run_spans
            .insert(id.clone(), run_span::open(&record, trace));
        state.keep_new(record, &[new.created_event()]);
        let ticket = state.commits.issue();
        state.commits.written(&id, ticket);
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
        let input = state.advance_input(&id);
        self.drive(myself, state, &id, input).await?;
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
        // The kept count is exact only when no job that counts in the store is out for this
        // parent: such a job's insert is not in the kept count yet.
        let known_children = if state.children_counting.contains_key(&hop.parent_run) {
            None
        } else {
            state.children.get(&hop.parent_run).copied()
        };
        let gate = InboundGate {
            caller: hop.caller.clone(),
            callee: me.clone(),
            accept_from: state.config.accept_from.clone(),
            chain_depth: envelope.depth(),
            active_runs: state.unsettled,
            admission_limit: state.options.admission_limit,
            limits: state.config.limits,
            budget: hop.budget,
            now_ms: now_ms(),
        };
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
            identity: state
                .catalog
                .peer_identity(&hop.caller, &origin, &state.options.host_grants),
            origin,
            // The child's budget is the allowance its call's hop carries.
            budget: hop.budget,
        };
        // Reserved now, settled when the job's answer comes back (see the module doc).
        state.unsettled += 1;
        match known_children {
            Some(_) => {
                if let Some(n) = state.children.get_mut(&hop.parent_run) {
                    *n += 1;
                }
            }
            // Counted in the store, behind every insert sent before it.
            None => {
                *state
                    .children_counting
                    .entry(hop.parent_run.clone())
                    .or_insert(0) += 1;
            }
        }
        state.chains.insert(hop.child_run.clone(), envelope.hops);
        let ticket = state.commits.issue();
        let (me_ref, parent_run) = (myself.clone(), hop.parent_run.clone());
        let depth = state.metrics.host().mailbox().clone();
        let (parent, child) = (hop.parent_run, hop.child_run);
        state.store.write_then(
            move |store| admit(store, &gate, known_children, &parent_run, new),
            move |result: Result<(Admission, Option<Refusal>), ActorsError>| {
                let _in_span = span.enter();
                let (outcome, admission) = match result {
                    Ok((Admission::Replay, _)) => {
                        info!("replayed call finds the existing run");
                        let outcome = CallOutcome::Accepted {
                            child_run: child.clone(),
                            existing: true,
                        };
                        (outcome, Ok(Admission::Replay))
                    }
                    Ok((admission @ Admission::Refused { .. }, refusal)) => {
                        let refusal =
                            refusal.unwrap_or_else(|| Refusal::AgentDown { callee: me.clone() });
                        warn!(reason = refusal.code(), "call refused: {refusal}");
                        (CallOutcome::Refused(refusal), Ok(admission))
                    }
                    Ok((admission @ Admission::Stored { .. }, _)) => {
                        fault::crash_at(Point::ChildStored, &child);
                        info!("call accepted");
                        let outcome = CallOutcome::Accepted {
                            child_run: child.clone(),
                            existing: false,
                        };
                        (outcome, Ok(admission))
                    }
                    Err(e) => {
                        let outcome = CallOutcome::Refused(Refusal::AgentDown { callee: me });
                        (outcome, Err(e.to_string()))
                    }
                };
                answer_call(reply, outcome);
                let done = Done::Admitted {
                    parent,
                    child,
                    reserved_child: known_children.is_some(),
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

/// The writer thread's side of an arriving call: replay check, inbound guards, insert.
fn admit(
    store: &mut dyn RunLog,
    gate: &InboundGate,
    known_children: Option<u64>,
    parent: &RunId,
    new: NewRun,
) -> Result<(Admission, Option<Refusal>), ActorsError> {
    if store.has_run(&new.id)? {
        return Ok((Admission::Replay, None));
    }
    let children = match known_children {
        Some(n) => n,
        None => store.count_children(parent)?,
    };
    if let Err(refusal) = gate.check(children) {
        return Ok((Admission::Refused { children }, Some(refusal)));
    }
    // The log the insert starts, so the actor's first step of the run reads nothing back.
    let created = new.created_event();
    let inserted = store.insert_run(new)?;
    let Inserted::Created(record) = inserted else {
        return Ok((Admission::Replay, None));
    };
    Ok((
        Admission::Stored {
            children_before: children,
            record: Box::new(record),
            created,
        },
        None,
    ))
}

fn answer_call(reply: RpcReplyPort<CallOutcome>, outcome: CallOutcome) {
    if reply.send(outcome).is_err() {
        warn!("a caller stopped waiting for a call's answer; a replay will find the run");
    }
}

/// The facts of the inbound guards, owned, for the store writer's job: the children of the
/// parent run are counted there when this actor does not know them yet.
struct InboundGate {
    caller: String,
    callee: String,
    accept_from: Vec<String>,
    chain_depth: usize,
    active_runs: usize,
    admission_limit: usize,
    limits: consort_config::Limits,
    budget: Option<TreeBudget>,
    now_ms: u64,
}

impl InboundGate {
    fn check(&self, children_accepted: u64) -> Result<(), Refusal> {
        guards::check_inbound(&InboundFacts {
            caller: &self.caller,
            callee: &self.callee,
            accept_from: &self.accept_from,
            chain_depth: self.chain_depth,
            children_accepted,
            active_runs: self.active_runs,
            admission_limit: self.admission_limit,
            limits: self.limits,
            budget: self.budget,
            now_ms: self.now_ms,
        })
    }
}
