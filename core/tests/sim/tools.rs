//! Declared tools and their approval gate, mirroring `actors/src/agent/tool_use.rs`; an
//! operator's decision on a blocked run, as `AgentActor::decide` takes it; and the invariants
//! both must keep, checked as they happen against the ledger of tool runs (the outside world's
//! record of side effects, which a crash does not erase).

use consort_core::step::{self, Gate, Input, Transition, Verdict};
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
        let gate = {
            let stored = &self.agents[agent].store.runs[run];
            let view = self.agents[agent]
                .vol
                .views
                .get(run)
                .cloned()
                .unwrap_or_else(|| RunView::from_events(&stored.events));
            step::approval_gate(
                &view,
                &tool_use.id,
                &tool.name,
                &tool.name,
                &tool_use.input,
                tool.gated,
                false,
            )
        };
        match gate {
            Gate::Block(transition) => {
                let epoch = self.hosts[h].epoch;
                self.blocked_in.insert(run.clone(), epoch);
                self.write(agent, run, transition);
                (!self.durable(h)).then_some(false)
            }
            Gate::Denied(transition) => {
                self.stats.cover("gated tool denied".into());
                self.write(agent, run, transition);
                (!self.durable(h)).then_some(true)
            }
            Gate::Proceed => {
                self.invoke(h, agent, run, tool_use, tool.gated);
                Some(false)
            }
        }
    }

    /// The tool's handler starts: a side effect in the world. Checked against the run's log
    /// and the ledger of earlier runs of the same use.
    fn invoke(&mut self, h: usize, agent: &str, run: &RunId, tool_use: &ToolUse, gated: bool) {
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
        let same_epoch = earlier.contains(&epoch);
        let rerun = !earlier.is_empty();
        earlier.push(epoch);
        let what = format!("{agent} {} {} {}", short(run), tool_use.id, tool_use.name);
        if gated && decided != Some(true) {
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
            if gated {
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
    /// error of the API; otherwise `Input::Decide`. A run blocked on a gated tool use takes it
    /// (that use, and only it, is decided); any other run refuses it with a code and keeps its
    /// log as it was.
    pub(crate) fn decide(&mut self, agent: &str, run: &RunId, approve: bool, saw: Option<String>) {
        self.stats.decisions += 1;
        let Some(stored) = self.agents[agent].store.runs.get(run) else {
            return;
        };
        let before = stored.events.len();
        let view = RunView::from_events(&stored.events);
        let awaiting = view
            .approvals
            .iter()
            .find(|(_, d)| d.is_none())
            .map(|(tu, _)| tu.clone())
            .filter(|_| view.status == Some(RunStatus::Blocked));
        let input = Input::Decide {
            run: run.clone(),
            approve,
            by: "operator".into(),
        };
        let Some(verdict) = self.drive(agent, run, input) else {
            return;
        };
        let events = &self.agents[agent].store.runs[run].events;
        let what = format!("decision {approve} on {agent} {}", short(run));
        match (awaiting, verdict) {
            (None, Verdict::Refused(refusal)) => {
                self.stats
                    .cover(format!("decision refused {}", refusal.code()));
                if events.len() != before || refusal.code() != "not_awaiting_approval" {
                    let detail = format!(
                        "{what} refused as {} but the log went from {before} to {} events",
                        refusal.code(),
                        events.len()
                    );
                    self.violation(DECISION_MISTAKEN, detail);
                }
            }
            (None, verdict) => {
                let detail = format!("{what}: not awaiting approval, yet {verdict:?}");
                self.violation(DECISION_MISTAKEN, detail);
            }
            (Some(tu), Verdict::Refused(refusal)) => {
                let detail = format!("{what}: blocked on {tu}, yet refused {}", refusal.code());
                self.violation(DECISION_MISTAKEN, detail);
            }
            (Some(tu), _) => {
                let decided: Vec<(&str, bool)> = events[before..]
                    .iter()
                    .filter_map(|e| match e {
                        RunEvent::ApprovalDecided(d) => Some((d.tool_use_id.as_str(), d.approved)),
                        _ => None,
                    })
                    .collect();
                if decided != [(tu.as_str(), approve)] {
                    let detail = format!("{what}: blocked on {tu}, but decided {decided:?}");
                    self.violation(DECISION_MISTAKEN, detail);
                }
                let h = self.fleet.host_of(agent);
                if self.blocked_in.get(run) != Some(&self.hosts[h].epoch) {
                    self.stats
                        .cover("decision on a run blocked before a crash".into());
                }
                if let Some(saw) = saw.filter(|saw| *saw != tu) {
                    let detail = format!("{what}: made for {saw}, decided {tu}");
                    self.violation(STALE_DECISION, detail);
                }
            }
        }
    }
}
