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
use tracing::{info_span, warn};

use super::{AgentActor, AgentMsg, AgentState, refused};
use crate::ActorsError;
use crate::asker::Asker;
use crate::run::{Channel, now_ms};
use crate::run_span;
use crate::store::NewRun;
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
        starter: Asker,
    ) -> Result<(), ActorsError> {
        // A root run started the call tree: it is its own origin.
        let origin = Origin::of(&identity);
        let new = (RunId::random(), input, channel);
        let who = (identity, origin);
        self.start_as(myself, state, new, who, (trace, budget), starter)
            .await
    }

    /// [`AgentActor::start`] with the run id and origin given (a delivery's run id is derived
    /// from its sender and delivery id, so a repeated delivery finds its run; its origin is not
    /// its own). The run is the root of its call tree: its tree budget is the agent's
    /// `limits.tree` narrowed by the request's `budget`.
    pub(super) async fn start_as(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        (id, input, channel): (RunId, String, Channel),
        (identity, origin): (Identity, Origin),
        (trace, budget): (Option<TraceContext>, Option<TreeLimits>),
        starter: Asker,
    ) -> Result<(), ActorsError> {
        let principal = crate::run::identity_text(&identity).0;
        if let Err(refusal) = state.machine.admit_root(&id, &input, &principal) {
            if matches!(refusal, Refusal::PrincipalSaturated { .. }) {
                warn!(agent = %state.config.name, %principal, "a principal's share of the agent is full");
            }
            starter.fail(refused(refusal));
            return Ok(());
        }
        let budget = TreeBudget::for_root(state.config.limits.tree, budget, now_ms());
        let new = NewRun::root(
            (id.clone(), &state.config.name),
            channel,
            input,
            (identity, origin),
            budget,
        );
        state.chains.insert(id.clone(), Vec::new());
        let record = new.record(now_ms());
        // A root run's span: the starter's trace's child, or the start of a trace.
        state
            .run_spans
            .insert(id.clone(), run_span::open(&record, trace));
        state.keep_new(record, &[new.created_event()]);
        let ticket = state.machine.insert_ticket(&id);
        // Counted once stored: a run whose insert failed never started.
        let started = state.metrics.started(&new.channel);
        let notice = state.commit_notice(myself);
        let on_stored = move || started.increment(1);
        state
            .store
            .insert_root_job((new, ticket), starter, on_stored, notice)?;
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
        let last = envelope.last_hop().cloned();
        let checked = guards::addressed_to(last.as_ref().map(|h| h.callee.as_str()), &me)
            .and_then(|()| last.ok_or_else(|| guards::empty_chain(&me)));
        let hop = match checked {
            Ok(hop) => hop,
            Err(refusal) => {
                if reply.send(CallOutcome::Refused(refusal)).is_err() {
                    warn!("a caller stopped waiting for a refused call's answer");
                }
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
        // Its roles are what this agent grants the caller, as far as the origin the chain's
        // first hop carries holds them.
        let grants = &state.options.host_grants;
        let identity = state
            .tools
            .catalog
            .peer_identity(&hop.caller, &origin, grants);
        state
            .chains
            .insert(hop.child_run.clone(), envelope.hops.clone());
        let parent = hop.parent_run.clone();
        let new = NewRun::call(
            (&me, hop),
            (envelope.hops, envelope.input),
            identity,
            origin,
        );
        let ticket = state.machine.job_ticket();
        let notice = state.commit_notice(myself);
        let job = (gate, parent, new, ticket);
        state.store.admit_job(job, reservation, reply, span, notice)
    }
}
