//! The agent machine: what one agent decides with beside its runs' logs, and the rules over
//! it.
//!
//! [`step`](crate::step()) decides how one run moves, from that run's log. An agent decides
//! more than its runs one at a time: whether a new run may start at all (admission, with its
//! counts and reservations), which tool uses of its runs have something out (busy uses, calls
//! being placed, blocking waits, gated tools this incarnation started), which replies beat
//! their call's acceptance and are held, when a waiting run asks its callees again, and what a
//! settled run's reply says and how long it may be. [`AgentMachine`] holds all of that, in the
//! pattern of `quinn-proto`'s `Connection`: plain state, time as an argument, no I/O. The agent
//! actor (the driver) feeds it what happened and executes what it returns; it keeps no rule of
//! its own.
//!
//! Nothing here is durable: a restarted driver builds a new machine and restores it from the
//! store ([`AgentMachine::restore_unsettled`]); what the machine forgets on a crash (uses out,
//! held replies, timers) is exactly what a restart must not trust.
//!
//! - `drive`: how the machine steps its runs and the [`Command`]s it gives its driver
//!   ([`AgentMachine::poll`]).
//! - `tickets`: which store jobs are durable, and what waits for them.
//! - `admission`: root runs and arriving calls, their counts and reservations, and the order
//!   of a call's admission on the store's side ([`InboundGate`]).
//! - `uses`: tool uses with something out, by run.

mod admission;
mod drive;
mod tickets;
mod uses;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use consort_config::Limits;

use crate::event::ReplyOutcome;
use crate::step::{CallOutcome, CostDelta, Input, ReplyIn, Verdict, cap_output};
use crate::{Refusal, RunId, RunStatus, RunView, TreeBudget};

use admission::Admission;
pub use admission::{AdmissionLimits, CallAdmission, CallAdmitted, CallReservation, InboundGate};
use drive::Drive;
pub use drive::{Answer, AskerId, Command};
use tickets::Tickets;
use uses::UsesOut;

/// How long a run waits on its calls before it asks its callees again for their replies.
pub const REASK_AFTER: Duration = Duration::from_secs(10);
/// The longest the backoff between two asks grows.
pub const REASK_MAX: Duration = Duration::from_secs(300);
/// The most refused calls remembered (see [`AgentMachine::reserve_call`]): a copy arrives
/// within seconds of the first, so forgetting them all when full costs nothing real.
const REFUSALS_KEPT: usize = 10_000;

/// Everything one agent decides with beside its runs' logs. See the module docs.
#[derive(Debug)]
pub struct AgentMachine {
    agent: String,
    reply_cap: usize,
    admission: Admission,
    /// Tool uses whose outcome a task is fetching (a tool, a call being placed, `check_run`,
    /// a directory tool, a use waiting for its MCP server's listing).
    in_flight: UsesOut,
    /// Gated tool uses this incarnation recorded as started (`tool_started`): only these may
    /// run under their approval. A new machine has none, so a use started before a restart is
    /// in doubt.
    started: UsesOut,
    /// Blocking calls (`wait_s`) whose tool use stays open until the reply or the timeout.
    awaiting: UsesOut,
    /// Runs whose model turn is being answered.
    thinking: HashSet<RunId>,
    /// Replies that arrived before the acceptance of their call was recorded, by child run.
    held: HashMap<RunId, ReplyIn>,
    /// Calls being admitted, by child run: the gate of the first copy, and how many copies are
    /// out (see [`AgentMachine::reserve_call`]).
    admitting: HashMap<RunId, (InboundGate, u32)>,
    /// Calls this incarnation refused, by child run, so a copy is refused the same.
    refused: HashMap<RunId, Refusal>,
    /// When each waiting run next asks its callees again, and the backoff after that.
    reask: HashMap<RunId, (Instant, Duration)>,
    /// Views of the unsettled runs touched since start, each updated with the events the
    /// machine appends: a step reads its run's view, never the whole log again.
    views: HashMap<RunId, RunView>,
    /// The runs' drives: inputs to step, effects to hand out.
    drives: HashMap<RunId, Drive>,
    /// The store jobs out, and what waits for their commits.
    tickets: Tickets,
    /// Runs whose drive can move, in the order [`AgentMachine::poll`] takes them.
    ready: VecDeque<RunId>,
    /// Commands ready to hand out.
    out: VecDeque<Command>,
}

/// A settled run as its reply needs it.
#[derive(Clone, Copy, Debug)]
pub struct SettledRun<'a> {
    /// The run.
    pub id: &'a RunId,
    /// Its agent (the callee of the call that made it).
    pub agent: &'a str,
    /// How it settled.
    pub status: RunStatus,
    /// The call that made it: the parent run, the calling agent and the `call_agent` tool
    /// use. `None` for a root run, which replies to nobody.
    pub call: Option<(&'a RunId, &'a str, &'a str)>,
    /// Its answer, if it succeeded.
    pub output: Option<&'a str>,
    /// Its error, if it failed.
    pub error: Option<&'a str>,
    /// Its tree cost: its own and its descendants'.
    pub tree_cost: CostDelta,
}

/// A settled run's reply, ready to send: capped, addressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingReply {
    /// The calling agent.
    pub caller: String,
    /// The reply as it reaches the caller.
    pub reply: ReplyIn,
}

impl AgentMachine {
    /// A machine for agent `agent`, which caps what it sends back at `reply_cap` bytes.
    pub fn new(agent: &str, reply_cap: usize, limits: AdmissionLimits) -> Self {
        Self {
            agent: agent.to_owned(),
            reply_cap,
            admission: Admission::new(limits),
            in_flight: UsesOut::default(),
            started: UsesOut::default(),
            awaiting: UsesOut::default(),
            thinking: HashSet::new(),
            held: HashMap::new(),
            admitting: HashMap::new(),
            refused: HashMap::new(),
            reask: HashMap::new(),
            views: HashMap::new(),
            drives: HashMap::new(),
            tickets: Tickets::default(),
            ready: VecDeque::new(),
            out: VecDeque::new(),
        }
    }

    // --- admission ------------------------------------------------------------------------

    /// Counts an unsettled run found in the store at start; `root_principal` is the principal
    /// a root run acts for (a called run counts toward no principal's share).
    pub fn restore_unsettled(&mut self, run: RunId, root_principal: Option<String>) {
        self.admission.restore(run, root_principal);
    }

    /// The runs of this agent that have not settled, reserved ones included.
    pub fn unsettled(&self) -> usize {
        self.admission.unsettled()
    }

    /// Admits a root run acting for `principal` and reserves its place, or refuses it.
    pub fn admit_root(&mut self, run: &RunId, input: &str, principal: &str) -> Result<(), Refusal> {
        let agent = self.agent.clone();
        self.admission.admit_root(&agent, run, input, principal)
    }

    /// Reserves the place of a call from `caller` for `parent` that would start run `child`,
    /// whose chain is `chain_depth` hops deep; returns the reservation (given back with
    /// [`AgentMachine::call_admitted`]) and the gate the store job admits it with.
    /// `accept_from` and `limits` are the agent's current config; `budget` is the allowance of
    /// the tree budget the call's hop carries, checked at `now_ms`.
    ///
    /// A call is decided once. A copy of a call arriving while the first is admitted (a link
    /// resends a call whose answer it missed) is admitted with the first one's gate, and a
    /// copy of a call this machine refused is refused the same: otherwise a copy decided under
    /// a config reloaded meanwhile could start a run for a call its caller recorded as
    /// refused. A restarted machine remembers no refusal, and needs none: a copy in flight to
    /// a host is lost with the host's connections when it stops.
    pub fn reserve_call(
        &mut self,
        (caller, parent, child): (&str, &RunId, &RunId),
        chain_depth: usize,
        accept_from: &[String],
        limits: Limits,
        (budget, now_ms): (Option<TreeBudget>, u64),
    ) -> (CallReservation, InboundGate) {
        let admission_limit = self.admission.limits().admission_limit;
        let (reservation, active) = self.admission.reserve_call(parent);
        if let Some((gate, copies)) = self.admitting.get_mut(child) {
            *copies += 1;
            return (reservation, gate.clone());
        }
        let mut gate = InboundGate::new(
            (caller, &self.agent),
            accept_from,
            chain_depth,
            (&reservation, active),
            (admission_limit, limits),
        )
        .with_budget(budget, now_ms);
        if let Some(refusal) = self.refused.get(child) {
            gate = gate.refusing(refusal.clone());
        }
        self.admitting.insert(child.clone(), (gate.clone(), 1));
        (reservation, gate)
    }

    /// What the store found for a reserved call of run `child`: a run that was not stored
    /// gives its place back, and a refusal is remembered (see [`AgentMachine::reserve_call`]).
    pub fn call_admitted(
        &mut self,
        child: &RunId,
        reservation: &CallReservation,
        found: &CallAdmitted,
    ) {
        self.admission.call_admitted(reservation, found);
        let Some((gate, copies)) = self.admitting.get_mut(child) else {
            return;
        };
        if let CallAdmitted::Refused { children } = found
            && let Ok(CallAdmission::Refused { refusal, .. }) =
                gate.admit(false, || Ok::<u64, std::convert::Infallible>(*children))
        {
            if self.refused.len() >= REFUSALS_KEPT {
                self.refused.clear();
            }
            self.refused.insert(child.clone(), refusal);
        }
        *copies -= 1;
        if *copies == 0 {
            self.admitting.remove(child);
        }
    }

    /// Run `run` settled: it no longer counts, and nothing of it is out any more.
    pub fn run_settled(&mut self, run: &RunId) {
        self.admission.settled(run);
        self.reask.remove(run);
    }

    /// Forgets what this incarnation kept of a settled run's uses.
    pub fn forget_run(&mut self, run: &RunId) {
        self.started.forget(run);
    }

    // --- tool uses --------------------------------------------------------------------------

    /// A task is out for a tool use (a tool, a call being placed, a `check_run`, a directory
    /// tool, a use waiting for a listing): the use is busy.
    pub fn task_out(&mut self, run: &RunId, tool_use: &str) {
        self.in_flight.insert(run, tool_use);
    }

    /// A use's task is back; whether it was out.
    pub fn task_back(&mut self, run: &RunId, tool_use: &str) -> bool {
        self.in_flight.remove(run, tool_use)
    }

    /// A blocking call's wait started.
    pub fn wait_started(&mut self, run: &RunId, tool_use: &str) {
        self.awaiting.insert(run, tool_use);
    }

    /// A blocking call's wait is over; whether it still waited (its reply may have come
    /// first).
    pub fn wait_over(&mut self, run: &RunId, tool_use: &str) -> bool {
        self.awaiting.remove(run, tool_use)
    }

    /// A gated use was recorded as started by this incarnation: it may run under its
    /// approval.
    pub fn gate_started(&mut self, run: &RunId, tool_use: &str) {
        self.started.insert(run, tool_use);
    }

    /// Whether this incarnation started the gated use (else a `tool_started` in its log is in
    /// doubt).
    pub fn started_here(&self, run: &RunId, tool_use: &str) -> bool {
        self.started.contains(run, tool_use)
    }

    /// The gated use runs now: its start is spent.
    pub fn gate_ran(&mut self, run: &RunId, tool_use: &str) {
        self.started.remove(run, tool_use);
    }

    /// A model turn of `run` is being asked.
    pub fn thinking(&mut self, run: &RunId) {
        self.thinking.insert(run.clone());
    }

    /// `run`'s model answered (or its ask was dropped).
    pub fn answered(&mut self, run: &RunId) {
        self.thinking.remove(run);
    }

    /// The tool uses of `run` with something out.
    pub fn busy(&self, run: &RunId) -> BTreeSet<String> {
        self.in_flight
            .of(run)
            .chain(self.awaiting.of(run))
            .cloned()
            .collect()
    }

    /// The input that moves `run` forward now.
    pub fn advance_input(&self, run: &RunId) -> Input {
        Input::Advance {
            busy: self.busy(run),
            thinking: self.thinking.contains(run),
        }
    }

    // --- calls and replies ------------------------------------------------------------------

    /// A callee's reply arrived: the input that offers it to its run. A blocking call's wait
    /// ends with it. Whether the call's acceptance is still being placed is decided when the
    /// input is stepped (see `drive`), not now: inputs queued behind a suspended drive must
    /// read what is true when their turn comes.
    pub fn reply_arrived(&mut self, reply: ReplyIn) -> Input {
        self.awaiting.remove(&reply.parent_run, &reply.tool_use_id);
        Input::Reply {
            reply,
            placing: false,
        }
    }

    /// Before a reply is stepped: whether its call's placement is still out (its acceptance
    /// may not be recorded yet).
    pub(crate) fn placing(&self, reply: &ReplyIn) -> bool {
        self.in_flight
            .contains(&reply.parent_run, &reply.tool_use_id)
    }

    /// Before a call's end is stepped: the use is no longer busy.
    pub(crate) fn call_ending(&mut self, run: &RunId, tool_use_id: &str) {
        self.in_flight.remove(run, tool_use_id);
    }

    /// After a call's end was stepped: a reply that beat the acceptance (taken right after the
    /// call is recorded, before the run would move to waiting). A reply held for a call that
    /// ended refused answers nothing the run waits on, and goes.
    pub(crate) fn held_for(
        &mut self,
        run: &RunId,
        tool_use_id: &str,
        outcome: &CallOutcome,
    ) -> Option<Input> {
        match outcome {
            CallOutcome::Accepted { child_run, .. } => {
                self.held.remove(child_run).map(|reply| Input::Reply {
                    reply,
                    placing: false,
                })
            }
            CallOutcome::Refused(_) => {
                self.held.remove(&RunId::child_of(run, tool_use_id));
                None
            }
        }
    }

    /// What the run's step said of a reply: whether it was taken (a duplicate of one taken
    /// counts), holding it when it beat its call's acceptance (the log then reads "placed,
    /// then replied").
    pub fn reply_stepped(&mut self, reply: ReplyIn, verdict: &Verdict) -> bool {
        match verdict {
            Verdict::Taken => true,
            Verdict::Hold => {
                self.held.insert(reply.child_run.clone(), reply);
                true
            }
            Verdict::None
            | Verdict::Dropped(_)
            | Verdict::Refused(_)
            | Verdict::Decided { .. }
            | Verdict::Delivered { .. } => false,
        }
    }

    /// Whether a reply from child run `child` is held until its call's acceptance is recorded.
    pub fn holds_reply(&self, child: &RunId) -> bool {
        self.held.contains_key(child)
    }

    /// The reply a settled run sends its caller, capped at the agent's reply cap; `None` for
    /// a root run.
    pub fn reply_of(&self, run: &SettledRun<'_>) -> Option<OutgoingReply> {
        let (parent, caller, tool_use_id) = run.call?;
        let (outcome, text) = match run.status {
            RunStatus::Succeeded => (ReplyOutcome::Succeeded, run.output.unwrap_or_default()),
            _ => (ReplyOutcome::Failed, run.error.unwrap_or_default()),
        };
        Some(OutgoingReply {
            caller: caller.to_owned(),
            reply: ReplyIn {
                parent_run: parent.clone(),
                child_run: run.id.clone(),
                callee: run.agent.to_owned(),
                tool_use_id: tool_use_id.to_owned(),
                outcome,
                output: self.capped(text),
                tree_cost: run.tree_cost,
                // What the run's tree committed of its budget, its open calls' holds included,
                // read from the view kept until the run's drive ends (a reply sent again after
                // a restart carries none).
                tree_spent: self.views.get(run.id).and_then(crate::budget::tree_spent),
            },
        })
    }

    /// `text` within the agent's reply cap (what a caller may read of a run: a reply, a
    /// `check_run`).
    pub fn capped(&self, text: &str) -> String {
        cap_output(text, self.reply_cap)
    }

    // --- timers -----------------------------------------------------------------------------

    /// The runs among `waiting` (runs waiting on calls) whose time to ask their callees again
    /// for lost replies has come, at `now`. A reply can be lost on the way (a callee host that
    /// crashed right after its run settled, a link that dropped it); asking is idempotent, and
    /// the backoff doubles up to [`REASK_MAX`]. A run that no longer waits loses its timer.
    pub fn reask_due(&mut self, now: Instant, waiting: &[RunId]) -> Vec<RunId> {
        self.reask.retain(|id, _| waiting.contains(id));
        let mut due = Vec::new();
        for id in waiting {
            let (at, backoff) = *self
                .reask
                .entry(id.clone())
                .or_insert((now + REASK_AFTER, REASK_AFTER));
            if now < at {
                continue;
            }
            let next = (backoff * 2).min(REASK_MAX);
            self.reask.insert(id.clone(), (now + next, next));
            due.push(id.clone());
        }
        due
    }

    /// The next deadline the machine has (a re-ask), if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.reask.values().map(|(at, _)| *at).min()
    }

    /// Whether `view`'s run waits on calls (what the re-ask timer watches).
    pub fn waits_on_calls(view: &RunView) -> bool {
        view.status == Some(RunStatus::Waiting) && view.pending_calls() > 0
    }

    // --- the whole ---------------------------------------------------------------------------

    /// Whether the machine holds nothing a retirement would lose: no unsettled run, no use
    /// out, no held reply, no store job counting.
    pub fn is_quiet(&self) -> bool {
        self.admission.unsettled() == 0
            && self.admission.is_quiet()
            && self.in_flight.is_empty()
            && self.awaiting.is_empty()
            && self.thinking.is_empty()
            && self.held.is_empty()
            && self.admitting.is_empty()
            && self.drives_quiet()
    }
}

#[cfg(test)]
mod tests;
