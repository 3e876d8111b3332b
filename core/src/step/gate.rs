//! The approval gate: a gated tool's use runs only once someone allowed to decide approved it,
//! runs at most once per approval, and a decision decides exactly the gate it names.
//!
//! Both halves live here: [`approval_gate`], which the agent asks before it runs a gated use,
//! and the decision that lets the run move again (`decide`, reached through
//! [`Input::Decide`](super::Input::Decide)). Which tools are gated is the agent's config; who
//! may decide is the host's access rule: this module only reads the flags it is handed.
//!
//! Every gate has an id ([`gate_id`]): its run, its tool use, and, when the same use is asked
//! again, the ask's number. A decision that names a gate decides that gate only; the same
//! decision again (the same kind, and for a recorded result the same result) is answered as
//! already decided and writes nothing, and a decision for a gate
//! that is not the one waiting is refused as stale ([`Refusal::StaleDecision`]), so a client
//! that retries an approval it got no answer for can never approve the next gate.
//!
//! An approved tool is recorded as started (`tool_started`) before it runs. A run resumed
//! after its host stopped finds such a use with no result: the tool may or may not have run,
//! and running it again under the old approval could repeat a side effect (a payment). The
//! gate is then asked again, *in doubt*: the decider runs it again ([`Decision::Approve`]),
//! does not ([`Decision::Deny`]), or records what happened ([`Decision::Record`]), which is the
//! result the model reads. Ungated tools are not recorded and may run again after a crash (at
//! least once).

use serde_json::Value;

use super::effect::{Effect, Step, Verdict};
use super::transition::Transition;
use crate::event::{ApprovalDecided, ApprovalRequested, ToolStarted};
use crate::{GateDecided, GateView, Refusal, RunEvent, RunId, RunStatus, RunView};

/// The id of the `ask`-th gate of a tool use (1-based): `<run>:<tool use>`, and
/// `<run>:<tool use>:<ask>` for a use asked again (a gate in doubt).
pub fn gate_id(run: &RunId, tool_use_id: &str, ask: u32) -> String {
    if ask <= 1 {
        format!("{run}:{tool_use_id}")
    } else {
        format!("{run}:{tool_use_id}:{ask}")
    }
}

/// What the approval gate of a gated tool says about one use.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Run it now (approved and recorded as started by this incarnation, or not gated).
    Proceed,
    /// Approved: record that it starts (write this), and run it once that is durable.
    Start(Transition),
    /// Park the run until someone decides (write this).
    Block(Transition),
    /// The decider denied it: the model reads this result (write this).
    Denied(Transition),
}

/// A decision on a gate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Run the tool (again, for a gate in doubt).
    Approve,
    /// Do not run it: the model reads that it was denied (or, for a gate in doubt, that it was
    /// not run again and may or may not have run).
    Deny,
    /// A gate in doubt only: do not run it again; record this as its result.
    Record {
        /// What the model reads.
        content: String,
        /// It failed.
        is_error: bool,
    },
}

impl From<bool> for Decision {
    /// Approve (`true`) or deny.
    fn from(approve: bool) -> Self {
        if approve { Self::Approve } else { Self::Deny }
    }
}

impl Decision {
    /// Whether this decision is the one a gate was decided with (a decision sent again):
    /// the same kind, and for a recorded result the same result.
    fn is_the_same_as(&self, how: &GateDecided) -> bool {
        match (self, how) {
            (Self::Approve, GateDecided::Approved) | (Self::Deny, GateDecided::Denied) => true,
            (
                Self::Record { content, is_error },
                GateDecided::Recorded {
                    content: recorded,
                    is_error: failed,
                },
            ) => content == recorded && is_error == failed,
            _ => false,
        }
    }

    /// Whether the decision runs the tool.
    pub fn approves(&self) -> bool {
        matches!(self, Self::Approve)
    }
}

/// One use of a tool, as the agent asks the gate about it.
#[derive(Clone, Copy, Debug)]
pub struct GatedUse<'a> {
    /// The run.
    pub run: &'a RunId,
    /// The tool use.
    pub tool_use_id: &'a str,
    /// The name its result is recorded under (`invoke_tool` for a use through it).
    pub result_name: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// Its input.
    pub input: &'a Value,
    /// The tool's `approval:` gates it.
    pub gated: bool,
    /// The tool's `approval: requester`: who may decide is fixed when the run blocks, not when
    /// someone decides.
    pub requester_may_decide: bool,
    /// This incarnation of the agent recorded the use as started (a fact only the running
    /// agent has: a restarted one never started it).
    pub started_here: bool,
}

/// The approval gate of one use; see the module docs.
pub fn approval_gate(view: &RunView, used: &GatedUse<'_>) -> Gate {
    if !used.gated {
        return Gate::Proceed;
    }
    let ask = |number: u32, in_doubt: bool| {
        Gate::Block(
            Transition::empty()
                .event(RunEvent::ApprovalRequested(ApprovalRequested {
                    gate: gate_id(used.run, used.tool_use_id, number),
                    tool_use_id: used.tool_use_id.to_owned(),
                    tool: used.tool.to_owned(),
                    input: used.input.clone(),
                    requester_may_decide: used.requester_may_decide,
                    in_doubt,
                }))
                .with_status(RunStatus::Blocked),
        )
    };
    let Some(gate) = view.approvals.get(used.tool_use_id) else {
        return ask(1, false);
    };
    match gate.decision {
        None => Gate::Block(Transition::empty().with_status(RunStatus::Blocked)),
        Some(false) => Gate::Denied(Transition::tool_result(
            used.tool_use_id,
            used.result_name,
            &format!("the operator denied the use of `{}`", used.tool),
            true,
        )),
        Some(true) if !gate.started => Gate::Start(Transition::empty().event(
            RunEvent::ToolStarted(ToolStarted {
                gate: gate_id(used.run, used.tool_use_id, gate.asks),
                tool_use_id: used.tool_use_id.to_owned(),
                tool: used.tool.to_owned(),
            }),
        )),
        Some(true) if used.started_here => Gate::Proceed,
        // Started under this approval by an incarnation that is gone, and no result: it may
        // have run. Never again under the same approval.
        Some(true) => ask(gate.asks + 1, true),
    }
}

/// An authorized use through its gate, as one step: run it now ([`Effect::RunTool`]), block
/// the run on a decision, record it as started first (the use runs once that is durable, on
/// the next pass), or record the denial. A late authorization (the run settled, or the use
/// has its result) writes nothing.
pub(super) fn authorized(view: &RunView, used: &GatedUse<'_>) -> Step {
    if super::settled(view) || view.resolved.contains(used.tool_use_id) {
        return Step::default();
    }
    match approval_gate(view, used) {
        Gate::Proceed => Step::effects(vec![Effect::RunTool {
            tool_use_id: used.tool_use_id.to_owned(),
            tool: used.tool.to_owned(),
            result_name: used.result_name.to_owned(),
            input: used.input.clone(),
        }]),
        Gate::Block(transition) => Step::write(transition, Vec::new()),
        Gate::Denied(transition) | Gate::Start(transition) => {
            Step::write(transition, vec![Effect::Advance])
        }
    }
}

/// A decision, made `by` someone the host checked, on gate `named` (or, when none is named, on
/// the gate the run waits on); see the module docs.
pub(super) fn decide(
    view: &RunView,
    run: &RunId,
    named: Option<&str>,
    decision: Decision,
    by: &str,
) -> Step {
    let status = view.status.unwrap_or(RunStatus::Queued);
    // The gate named, if it waits (a turn that used two gated tools has two waiting at once);
    // without a name, the one asked first.
    let waiting = view
        .waiting_gates()
        .filter(|_| status == RunStatus::Blocked)
        .map(|(tool_use_id, gate)| (tool_use_id, gate, gate_id(run, tool_use_id, gate.asks)))
        .find(|(_, _, id)| named.is_none_or(|n| n == id));
    let Some((tool_use_id, gate, id)) = waiting else {
        return match named {
            None => Step::verdict(Verdict::Refused(Refusal::NotAwaitingApproval {
                run: run.to_string(),
                status: status.to_string(),
            })),
            Some(named) => repeated_or_stale(view, run, named, &decision, status, by),
        };
    };
    if let Some(refusal) = four_eyes(view, gate, &id, by) {
        return Step::verdict(Verdict::Refused(refusal));
    }
    if matches!(decision, Decision::Record { .. }) && !gate.in_doubt {
        return Step::verdict(Verdict::Refused(Refusal::NotInDoubt { gate: id }));
    }
    let decided = |approved: bool, recorded: bool| {
        Transition::empty().event(RunEvent::ApprovalDecided(ApprovalDecided {
            gate: id.clone(),
            tool_use_id: tool_use_id.to_owned(),
            approved,
            by: by.to_owned(),
            recorded,
        }))
    };
    let tool = gate.tool.as_str();
    // What the result is recorded under: the name the model used (`invoke_tool` for a use
    // through it).
    let result_name = view
        .unresolved_tool_uses()
        .into_iter()
        .find(|u| u.id == tool_use_id)
        .map_or_else(|| tool.to_owned(), |u| u.name);
    let mut write = match decision {
        Decision::Approve => decided(true, false),
        Decision::Deny => decided(false, false),
        Decision::Record { .. } => decided(false, true),
    };
    match (decision, gate.in_doubt) {
        (Decision::Approve, _) | (Decision::Deny, false) => {}
        (Decision::Deny, true) => write.merge(Transition::tool_result(
            tool_use_id,
            &result_name,
            &format!(
                "`{tool}` was started before its host stopped and may or may not have run; the operator chose not to run it again"
            ),
            true,
        )),
        (Decision::Record { content, is_error }, _) => write.merge(Transition::tool_result(
            tool_use_id,
            &result_name,
            &content,
            is_error,
        )),
    }
    Step {
        write: Some(write.with_status(RunStatus::Running)),
        effects: vec![Effect::Advance],
        verdict: Verdict::Decided {
            gate: id,
            already: false,
        },
    }
}

/// Four eyes: the run's own requester (the principal it acts for) may decide its gate only
/// when the gate allows it (`approval: requester`, recorded when the run blocked). Who
/// decides comes from the host, which checked the decider's token; everyone else it lets
/// decide (an operator, the host's local operator) may.
fn four_eyes(view: &RunView, gate: &GateView, id: &str, by: &str) -> Option<Refusal> {
    (by == view.principal && !gate.requester_may_decide).then(|| Refusal::FourEyes {
        gate: id.to_owned(),
    })
}

/// A decision naming a gate that does not wait: the same decision it already had is answered
/// as already decided; anything else is stale. Nothing is written either way.
fn repeated_or_stale(
    view: &RunView,
    run: &RunId,
    named: &str,
    decision: &Decision,
    status: RunStatus,
    by: &str,
) -> Step {
    let earlier = view.approvals.iter().find_map(|(tool_use_id, gate)| {
        gate.decided
            .iter()
            .find(|(ask, _)| gate_id(run, tool_use_id, **ask) == named)
            .map(|(_, how)| (gate, how))
    });
    // The requester is told it may not decide even a gate someone else has decided since.
    if let Some(refusal) = earlier.and_then(|(gate, _)| four_eyes(view, gate, named, by)) {
        return Step::verdict(Verdict::Refused(refusal));
    }
    if earlier.is_some_and(|(_, how)| decision.is_the_same_as(how)) {
        return Step::verdict(Verdict::Decided {
            gate: named.to_owned(),
            already: true,
        });
    }
    let waiting = view
        .waiting_gate()
        .filter(|_| status == RunStatus::Blocked)
        .map(|(tool_use_id, gate)| gate_id(run, tool_use_id, gate.asks));
    Step::verdict(Verdict::Refused(Refusal::StaleDecision {
        gate: named.chars().take(200).collect(),
        waiting: waiting.unwrap_or_else(|| "none".to_owned()),
    }))
}

/// The request of the gate a run's log waits on, if any: of the `approval_requested` events no
/// decision followed, the first (as [`RunView::waiting_gate`] and a decision without a gate
/// take it), with its gate id (derived for events written before gates had ids). What the API,
/// the approvals lists and the A2A gateway show of a blocked run.
pub fn waiting_request<'a>(
    run: &RunId,
    events: impl IntoIterator<Item = &'a RunEvent>,
) -> Option<ApprovalRequested> {
    let mut asks: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    // Undecided requests in the order they were asked.
    let mut pending: Vec<ApprovalRequested> = Vec::new();
    for event in events {
        match event {
            RunEvent::ApprovalRequested(asked) => {
                let ask = asks.entry(&asked.tool_use_id).or_default();
                *ask += 1;
                let mut asked = asked.clone();
                if asked.gate.is_empty() {
                    asked.gate = gate_id(run, &asked.tool_use_id, *ask);
                }
                pending.retain(|p| p.tool_use_id != asked.tool_use_id);
                pending.push(asked);
            }
            RunEvent::ApprovalDecided(decided) => {
                pending.retain(|p| p.tool_use_id != decided.tool_use_id);
            }
            // A settled run waits on nothing.
            RunEvent::Canceled(_) | RunEvent::Answer(_) | RunEvent::Failed(_) => pending.clear(),
            _ => {}
        }
    }
    pending.into_iter().next()
}
