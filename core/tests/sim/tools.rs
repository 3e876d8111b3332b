//! Declared tools and their approval gate, mirroring `actors/src/agent/tool_use.rs`; an
//! operator's decision on a blocked run, as `AgentActor::decide` takes it; and the invariants
//! both must keep, checked as they happen against the ledger of tool runs (the outside world's
//! record of side effects, which a crash does not erase).

use consort_core::step::{self, Decision, Gate, GatedUse, Input, Transition, Verdict};
use consort_core::{RunEvent, RunId, RunStatus, RunView, ToolUse};
use rand::Rng;

use super::trace::short;
use super::world::{Task, World};

/// A gated tool use ran without an approval in its run's log, or after a denial.
pub(crate) const RAN_UNAPPROVED: &str = "gated tool ran without approval";
/// A tool use ran again while its first run was still out (the same host epoch), or after its
/// result was recorded.
pub(crate) const RAN_TWICE: &str = "tool use ran twice";
/// A gated tool use ran again under the one approval it had: the run it was approved for was
/// lost with a crash, and the resumed run used the tool again without asking.
pub(crate) const GATED_RERUN: &str = "gated tool ran twice under one approval";
/// A decision changed a run that was not awaiting approval, or was refused on one that was.
pub(crate) const DECISION_MISTAKEN: &str = "decision on the wrong state";
/// A decision the operator made for one gated tool use decided another one (a duplicate or a
/// retry of a decision that arrived after its gate was decided and the run blocked again).
pub(crate) const STALE_DECISION: &str = "decision applied to a gate it was not made for";

impl World {
    /// `use_tool` for an `Effect::UseTool`: a tool the agent does not declare gets its error
    /// result at once; a declared one goes through the approval gate, then runs on its own task.
    /// (The simulated tools have no auth rules: the real authorization is not modelled.)
    /// Returns whether the result was recorded at once (the run can move on), or `None` when
    /// the host crashed at the append.
    pub(crate) fn use_tool(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        tool_use: &ToolUse,
    ) -> Option<bool> {
        let declared = self
            .spec(agent)
            .tools
            .iter()
            .find(|t| t.name == tool_use.name)
            .cloned();
        let Some(tool) = declared else {
            self.stats.cover("tool not declared".into());
            let text = format!(
                "no tool named `{}`; use search_tools to find the tools you can use",
                tool_use.name
            );
            let result = Transition::tool_result(&tool_use.id, &tool_use.name, &text, true);
            self.write(agent, run, result);
            return (!self.durable(h)).then_some(true);
        };
        let view = {
            let stored = &self.agents[agent].store.runs[run];
            self.agents[agent]
                .vol
                .views
                .get(run)
                .cloned()
                .unwrap_or_else(|| RunView::from_events(&stored.events))
        };
        let key = (run.clone(), tool_use.id.clone());
        let used = GatedUse {
            run,
            tool_use_id: &tool_use.id,
            result_name: &tool.name,
            tool: &tool.name,
            input: &tool_use.input,
            gated: tool.gated,
            requester_may_decide: false,
            started_here: self.agents[agent].vol.started.contains(&key),
        };
        match step::approval_gate(&view, &used) {
            Gate::Block(transition) => {
                let epoch = self.hosts[h].epoch;
                self.blocked_in.insert(run.clone(), epoch);
                if transition
                    .events
                    .iter()
                    .any(|e| matches!(e, RunEvent::ApprovalRequested(a) if a.in_doubt))
                {
                    self.stats.cover("gate in doubt after a crash".into());
                }
                self.write(agent, run, transition);
                (!self.durable(h)).then_some(false)
            }
            Gate::Denied(transition) => {
                self.stats.cover("gated tool denied".into());
                self.write(agent, run, transition);
                (!self.durable(h)).then_some(true)
            }
            Gate::Start(transition) => {
                // Recorded as started by this incarnation: the engine steps again, and the
                // use runs once this append is durable (the sim's appends are at once).
                self.write(agent, run, transition);
                self.agent(agent).vol.started.insert(key);
                (!self.durable(h)).then_some(true)
            }
            Gate::Proceed => {
                let ask = view.approvals.get(&tool_use.id).map_or(0, |g| g.asks);
                self.invoke(h, agent, run, tool_use, tool.gated.then_some(ask));
                Some(false)
            }
        }
    }

    /// The tool's handler starts: a side effect in the world. Checked against the run's log
    /// and the ledger of earlier runs of the same use.
    /// `gated` is the ask of the gate it runs under, for a gated tool.
    fn invoke(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        tool_use: &ToolUse,
        gated: Option<u32>,
    ) {
        self.stats.tool_runs += 1;
        let epoch = self.hosts[h].epoch;
        let events = &self.agents[agent].store.runs[run].events;
        let decided = events.iter().rev().find_map(|e| match e {
            RunEvent::ApprovalDecided(d) if d.tool_use_id == tool_use.id => Some(d.approved),
            _ => None,
        });
        let recorded = events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolResult(r) if r.tool_use_id == tool_use.id));
        let key = (run.clone(), tool_use.id.clone());
        let earlier = self.tool_runs.entry(key).or_default();
        let same_epoch = earlier.iter().any(|(e, _)| *e == epoch);
        let rerun = !earlier.is_empty();
        let same_approval = gated.is_some_and(|ask| earlier.iter().any(|(_, a)| *a == ask));
        earlier.push((epoch, gated.unwrap_or(0)));
        let what = format!("{agent} {} {} {}", short(run), tool_use.id, tool_use.name);
        if gated.is_some() && decided != Some(true) {
            self.violation(
                RAN_UNAPPROVED,
                format!("{what} ran with decision {decided:?}"),
            );
        }
        if same_epoch || recorded {
            let detail = format!("{what} ran again (result recorded: {recorded})");
            self.violation(RAN_TWICE, detail);
        }
        if rerun {
            self.stats.cover("tool run again after a crash".into());
            if gated.is_some() {
                self.stats
                    .cover("gated tool run again under a new approval".into());
            }
            if same_approval {
                let detail = format!("{what} ran again after a crash, under its one approval");
                self.violation(GATED_RERUN, detail);
            }
        }
        self.log(format!("  tool starts: {what} (host epoch {epoch})"));
        let failed = self.faults_on && self.rng.gen_bool(self.faults.tool_error);
        let content = if failed {
            format!("sim: {} failed", tool_use.name)
        } else {
            format!("sim: {} done", tool_use.name)
        };
        self.agent(agent)
            .vol
            .in_flight
            .insert((run.clone(), tool_use.id.clone()));
        self.hosts[h].tasks.push(Task::ToolDone {
            agent: agent.to_owned(),
            run: run.clone(),
            tool_use_id: tool_use.id.clone(),
            name: tool_use.name.clone(),
            content,
            is_error: failed,
        });
    }

    /// An operator's decision reaches the agent (`AgentActor::decide`): an unknown run is an
    /// error of the API; otherwise `Input::Decide`, naming the gate the operator saw. A run
    /// blocked on that gate (or, when none is named, on any) takes it, and exactly that gate is
    /// decided; the same decision on a gate decided before is answered as already decided and
    /// writes nothing; anything else is refused with a code and keeps the log as it was.
    pub(crate) fn decide(
        &mut self,
        agent: &str,
        run: &RunId,
        decision: Decision,
        saw: Option<String>,
    ) {
        self.stats.decisions += 1;
        let Some(stored) = self.agents[agent].store.runs.get(run) else {
            return;
        };
        let before = stored.events.len();
        let view = RunView::from_events(&stored.events);
        let awaiting = view
            .waiting_gate()
            .filter(|_| view.status == Some(RunStatus::Blocked))
            .map(|(tu, gate)| (tu.to_owned(), step::gate_id(run, tu, gate.asks)));
        let input = Input::Decide {
            run: run.clone(),
            gate: saw.clone(),
            decision: decision.clone(),
            by: "operator".into(),
        };
        let Some(verdict) = self.drive(agent, run, input) else {
            return;
        };
        let events = &self.agents[agent].store.runs[run].events;
        let wrote = events.len() != before;
        let what = format!("{decision:?} on {agent} {} (gate {saw:?})", short(run));
        // The gate this request may decide: the one it names, else the one waiting.
        let decides = awaiting
            .as_ref()
            .filter(|(_, id)| saw.as_ref().is_none_or(|s| s == id));
        match (decides, verdict) {
            (None, Verdict::Refused(refusal)) => {
                self.stats
                    .cover(format!("decision refused {}", refusal.code()));
                let expected = if saw.is_some() {
                    "stale_decision"
                } else {
                    "not_awaiting_approval"
                };
                if wrote || refusal.code() != expected {
                    let detail = format!(
                        "{what} refused as {} but the log went from {before} to {} events",
                        refusal.code(),
                        events.len()
                    );
                    self.violation(DECISION_MISTAKEN, detail);
                }
            }
            (
                None,
                Verdict::Decided {
                    gate,
                    already: true,
                },
            ) => {
                self.stats.cover("decision already made".into());
                if wrote || saw.as_ref() != Some(&gate) {
                    let detail = format!("{what}: answered as a repeat on {gate}, wrote {wrote}");
                    self.violation(DECISION_MISTAKEN, detail);
                }
            }
            (None, verdict) => {
                let detail = format!("{what}: no gate for it waits, yet {verdict:?}");
                self.violation(STALE_DECISION, detail);
            }
            (Some((_, gate)), Verdict::Refused(refusal)) => {
                let detail = format!("{what}: blocked on {gate}, yet refused {}", refusal.code());
                self.violation(DECISION_MISTAKEN, detail);
            }
            (Some((tu, gate)), verdict) => {
                let decided: Vec<(&str, bool, bool)> = events[before..]
                    .iter()
                    .filter_map(|e| match e {
                        RunEvent::ApprovalDecided(d) => {
                            Some((d.tool_use_id.as_str(), d.approved, d.recorded))
                        }
                        _ => None,
                    })
                    .collect();
                let recorded = matches!(decision, Decision::Record { .. });
                if decided != [(tu.as_str(), decision.approves(), recorded)]
                    || verdict
                        != (Verdict::Decided {
                            gate: gate.clone(),
                            already: false,
                        })
                {
                    let detail = format!("{what}: blocked on {gate}, but decided {decided:?}");
                    self.violation(DECISION_MISTAKEN, detail);
                }
                if recorded {
                    self.stats.cover("gate in doubt recorded".into());
                }
                let h = self.fleet.host_of(agent);
                if self.blocked_in.get(run) != Some(&self.hosts[h].epoch) {
                    self.stats
                        .cover("decision on a run blocked before a crash".into());
                }
            }
        }
    }
}
