//! Declared tools as the agent actor runs them (`actors/src/agent/tool_use.rs`): a use the
//! agent does not declare is answered at once; a declared one is authorized (the simulated
//! tools have no auth rules) and handed to the machine's approval gate
//! (`Input::ToolAuthorized`), which records it as started, parks the run or refuses it, and
//! lets it run with `Effect::RunTool`. An operator's decision is answered as the actor answers
//! it. Both are checked as they happen against the ledger of tool runs (the outside world's
//! record of side effects, which a crash does not erase) and the committed log.

use consort_core::step::{self, Decision, Input, Verdict};
use consort_core::{RunEvent, RunId, RunStatus, RunView, ToolUse};
use rand::Rng;

use super::trace::short;
use super::world::{Task, World};

/// A gated tool use ran without an approval in its run's log, or after a denial.
pub(crate) const RAN_UNAPPROVED: &str = "gated tool ran without approval";
/// A gated tool use ran before its start (`tool_started`) was committed.
pub(crate) const RAN_UNRECORDED: &str = "gated tool ran before its start was recorded";
/// A tool use ran again while its first run was still out (the same host epoch), or after its
/// result was recorded.
pub(crate) const RAN_TWICE: &str = "tool use ran twice";
/// A gated tool use ran again under the one approval it had: the run it was approved for was
/// lost with a crash, and the resumed run used the tool again without asking.
pub(crate) const GATED_RERUN: &str = "gated tool ran twice under one approval";
/// A decision was answered in a way the committed log contradicts (refused on a gate that
/// waits, decided with no decision in the log, or with another code than the state calls for).
pub(crate) const DECISION_MISTAKEN: &str = "decision on the wrong state";
/// A decision the operator made for one gated tool use decided another one (a duplicate or a
/// retry of a decision that arrived after its gate was decided and the run blocked again).
pub(crate) const STALE_DECISION: &str = "decision applied to a gate it was not made for";

impl World {
    /// `Effect::UseTool`: a tool the agent does not declare gets its error result at once (it
    /// counts as no tool call); a declared one goes to the machine's approval gate.
    pub(crate) fn use_tool(&mut self, agent: &str, run: &RunId, tool_use: &ToolUse) {
        let declared = self
            .spec(agent)
            .tools
            .iter()
            .find(|t| t.name == tool_use.name)
            .cloned();
        let input = match declared {
            None => {
                self.stats.cover("tool not declared".into());
                Input::ToolFinished {
                    tool_use_id: tool_use.id.clone(),
                    name: tool_use.name.clone(),
                    content: format!(
                        "no tool named `{}`; use search_tools to find the tools you can use",
                        tool_use.name
                    ),
                    is_error: true,
                    counts: false,
                }
            }
            Some(tool) => Input::ToolAuthorized {
                run: run.clone(),
                tool_use_id: tool_use.id.clone(),
                result_name: tool.name.clone(),
                tool: tool.name.clone(),
                input: tool_use.input.clone(),
                gated: tool.gated,
                requester_may_decide: false,
                started_here: false,
            },
        };
        self.node(agent).machine.input(run, input, None);
    }

    /// `Effect::RunTool`: the tool's handler starts, a side effect in the world, on its own
    /// task. Checked against the run's committed log and the ledger of earlier runs of the
    /// same use.
    pub(crate) fn run_tool(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        tool_use_id: &str,
        tool: &str,
    ) {
        self.stats.tool_runs += 1;
        let gated = self
            .spec(agent)
            .tools
            .iter()
            .find(|t| t.name == tool)
            .is_some_and(|t| t.gated);
        let epoch = self.hosts[h].epoch;
        let events = &self.agents[agent].store.runs[run].events;
        let view = RunView::from_events(events.iter());
        let decided = events.iter().rev().find_map(|e| match e {
            RunEvent::ApprovalDecided(d) if d.tool_use_id == tool_use_id => Some(d.approved),
            _ => None,
        });
        let started = events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolStarted(s) if s.tool_use_id == tool_use_id));
        let recorded = events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolResult(r) if r.tool_use_id == tool_use_id));
        let ask = view.approvals.get(tool_use_id).map_or(0, |g| g.asks);
        let key = (run.clone(), tool_use_id.to_owned());
        let earlier = self.tool_runs.entry(key).or_default();
        let same_epoch = earlier.iter().any(|(e, _)| *e == epoch);
        let rerun = !earlier.is_empty();
        let same_approval = gated && earlier.iter().any(|(_, a)| *a == ask);
        earlier.push((epoch, if gated { ask } else { 0 }));
        let what = format!("{agent} {} {tool_use_id} {tool}", short(run));
        if gated && decided != Some(true) {
            let detail = format!("{what} ran with decision {decided:?}");
            self.violation(RAN_UNAPPROVED, detail);
        }
        if gated && !started {
            let detail = format!("{what} ran with no tool_started committed");
            self.violation(RAN_UNRECORDED, detail);
        }
        if same_epoch || recorded {
            let detail = format!("{what} ran again (result recorded: {recorded})");
            self.violation(RAN_TWICE, detail);
        }
        if rerun {
            self.stats.cover("tool run again after a crash".into());
            if gated {
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
            format!("sim: {tool} failed")
        } else {
            format!("sim: {tool} done")
        };
        self.node(agent).machine.task_out(run, tool_use_id);
        self.hosts[h].tasks.push(Task::ToolDone {
            agent: agent.to_owned(),
            run: run.clone(),
            tool_use_id: tool_use_id.to_owned(),
            name: tool.to_owned(),
            content,
            is_error: failed,
        });
    }

    /// An operator's decision reaches the agent (`AgentActor::decide`): an unknown run is an
    /// error of the API; otherwise `Input::Decide`, naming the gate the operator saw, answered
    /// once what it wrote is committed.
    pub(crate) fn decide(
        &mut self,
        agent: &str,
        run: &RunId,
        decision: Decision,
        saw: Option<String>,
    ) {
        self.stats.decisions += 1;
        if !self.known_run(agent, run) {
            self.stats.cover("decision on an unknown run".into());
            return;
        }
        let input = Input::Decide {
            run: run.clone(),
            gate: saw.clone(),
            decision: decision.clone(),
            by: "operator".into(),
        };
        let asker = self
            .node(agent)
            .asker(super::world::Asker::Decide { decision, saw });
        self.node(agent).machine.input(run, input, Some(asker));
        self.pump(agent);
    }

    /// Whether the agent's store has run `run`, committed or queued (a read through the
    /// writer).
    pub(crate) fn known_run(&self, agent: &str, run: &RunId) -> bool {
        let a = &self.agents[agent];
        a.store.read_through(run, a.node.jobs.iter()).is_some()
    }

    /// The gates of run `run` decided in its committed log: (gate id, approved, recorded).
    fn decided_gates(&self, agent: &str, run: &RunId) -> Vec<(String, bool, bool)> {
        let Some(stored) = self.agents[agent].store.runs.get(run) else {
            return Vec::new();
        };
        let mut asks: std::collections::BTreeMap<&str, u32> = Default::default();
        let mut out = Vec::new();
        for event in &stored.events {
            match event {
                RunEvent::ApprovalRequested(a) => *asks.entry(&a.tool_use_id).or_default() += 1,
                RunEvent::ApprovalDecided(d) => {
                    let ask = asks.get(d.tool_use_id.as_str()).copied().unwrap_or(0);
                    out.push((
                        step::gate_id(run, &d.tool_use_id, ask),
                        d.approved,
                        d.recorded,
                    ));
                }
                _ => {}
            }
        }
        out
    }

    /// A decision's answer: what it says must be what the committed log shows.
    pub(crate) fn decision_answered(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        decision: Decision,
        saw: Option<String>,
        verdict: Verdict,
    ) {
        let what = format!("{decision:?} on {agent} {} (gate {saw:?})", short(run));
        let decided = self.decided_gates(agent, run);
        let recorded = matches!(decision, Decision::Record { .. });
        match verdict {
            Verdict::Decided { gate, already } => {
                if saw.as_ref().is_some_and(|s| *s != gate) {
                    let detail = format!("{what}: decided {gate} instead");
                    self.violation(STALE_DECISION, detail);
                }
                let logged = decided.iter().find(|(g, _, _)| *g == gate);
                if logged.is_none_or(|(_, a, r)| *a != decision.approves() || *r != recorded) {
                    let detail = format!(
                        "{what}: answered decided {gate} (already: {already}), the log has {logged:?}"
                    );
                    self.violation(DECISION_MISTAKEN, detail);
                }
                if already {
                    self.stats.cover("decision already made".into());
                } else {
                    if recorded {
                        self.stats.cover("gate in doubt recorded".into());
                    }
                    if self.blocked_in.get(run) != Some(&self.hosts[h].epoch) {
                        self.stats
                            .cover("decision on a run blocked before a crash".into());
                    }
                }
            }
            Verdict::Refused(refusal) => {
                let code = refusal.code();
                self.stats.cover(format!("decision refused {code}"));
                let expected = if saw.is_some() {
                    "stale_decision"
                } else {
                    "not_awaiting_approval"
                };
                // The gate the request names was seen committed: if it still waits, undecided,
                // nothing could have made it stale.
                let stored = &self.agents[agent].store.runs[run];
                let view = RunView::from_events(stored.events.iter());
                let waiting = view
                    .waiting_gate()
                    .filter(|_| view.status == Some(RunStatus::Blocked))
                    .map(|(tu, g)| step::gate_id(run, tu, g.asks));
                let still_waits = saw.is_some() && waiting == saw;
                if code != expected || still_waits {
                    let detail =
                        format!("{what}: refused {code} while the run waits on {waiting:?}");
                    self.violation(DECISION_MISTAKEN, detail);
                }
            }
            other => {
                let detail = format!("{what}: answered {other:?}");
                self.violation(DECISION_MISTAKEN, detail);
            }
        }
    }
}
