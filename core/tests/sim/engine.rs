//! The executor, mirroring the agent actor's engine (`actors/src/agent/engine.rs`): step a run,
//! append the transition, execute the effects; a call's outcome and a callee's reply as they
//! reach the caller.

use consort_core::event::ReplyOutcome;
use consort_core::step::{self, CALL_AGENT, CallOutcome, Effect, Input, Policy, ReplyIn, Verdict};
use consort_core::{ModelStep, RunEvent, RunId, RunStatus, RunView, Transition};

use super::store::Placed;
use super::trace::{describe_event, short};
use super::world::{CALL_TIMEOUT, CallMsg, Deadline, Msg, REPLY_CAP, Task, World};

/// The class of a kept view that no longer equals its log folded from scratch.
pub(crate) const VIEW_DIFFERS: &str = "kept view differs from the log";

/// The class of a call placed (an `Effect::PlaceCall`) that the caller's config in force did
/// not allow.
pub(crate) const PLACED_BEYOND_CONFIG: &str = "call placed beyond the caller's config";

/// The class of a run whose model answers while its log still says `queued`: the ask was not
/// written with the `Effect::AskModel` that made it.
pub(crate) const QUEUED_WHILE_ASKED: &str = "queued while its model is asked";

/// What a failed model turn's error starts with.
pub(crate) const MODEL_ERROR: &str = "sim: the model failed";

impl World {
    pub(crate) fn advance_input(&self, agent: &str, run: &RunId) -> Input {
        let vol = &self.agents[agent].vol;
        Input::Advance {
            busy: vol
                .in_flight
                .iter()
                .filter(|(r, _)| r == run)
                .map(|(_, tu)| tu.clone())
                .collect(),
            thinking: vol.thinking.contains(run),
        }
    }

    /// One step of one run: `step`, append the transition, execute the effects. An
    /// `Effect::Advance` queues the next step as a task (so a crash can fall between any two
    /// appends). Returns the verdict, or `None` when the host crashed at the append.
    pub(crate) fn drive(&mut self, agent_name: &str, id: &RunId, input: Input) -> Option<Verdict> {
        let h = self.fleet.host_of(agent_name);
        let spec = self.fleet.spec(agent_name).clone();
        let agent = self
            .agents
            .get_mut(agent_name)
            .unwrap_or_else(|| panic!("unknown agent {agent_name}"));
        let Some(stored) = agent.store.runs.get(id) else {
            return Some(Verdict::Dropped("no such run"));
        };
        let view = agent
            .vol
            .views
            .entry(id.clone())
            .or_insert_with(|| RunView::from_events(&stored.events));
        let policy = Policy {
            agent: &spec.name,
            can_call: &spec.can_call,
            fleet_agents: &self.fleet.names,
            limits: spec.limits,
            reply_cap: REPLY_CAP,
            immediate_model: spec.immediate_model,
            now_ms: 0,
        };
        let step = step::step(view, input, &policy);
        let hop_depth = stored.hop_depth;
        if let Some(transition) = step.write {
            self.write(agent_name, id, transition);
            if self.durable(h) {
                return None;
            }
        }
        if !self.execute(h, agent_name, id, hop_depth, step.effects) {
            return None;
        }
        // As the real engine's `forget_if_settled`: nothing steps a settled run again but a
        // late message, which reads it back.
        let agent = self.agent(agent_name);
        if agent.store.runs[id].status.is_settled() {
            agent.vol.views.remove(id);
        }
        Some(step.verdict)
    }

    /// Executes a step's effects in order; false when the host crashed at an append one of
    /// them made (a gate's block, a tool's result recorded at once).
    fn execute(
        &mut self,
        h: usize,
        agent_name: &str,
        id: &RunId,
        hop_depth: u32,
        effects: Vec<Effect>,
    ) -> bool {
        let mut again = false;
        for effect in effects {
            match effect {
                Effect::Advance => again = true,
                Effect::AskModel(asked) => {
                    let agent = self.agent(agent_name);
                    agent.vol.thinking.insert(id.clone());
                    let conversation = agent
                        .vol
                        .views
                        .get(id)
                        .map(|v| v.conversation.clone())
                        .unwrap_or_default();
                    self.hosts[h].tasks.push(Task::Model {
                        agent: agent_name.to_owned(),
                        run: id.clone(),
                        asked,
                        conversation,
                    });
                }
                Effect::PlaceCall {
                    tool_use_id,
                    callee,
                    input,
                    allowance: _,
                } => {
                    let placed = self.placed_under(agent_name, id, &tool_use_id, &callee);
                    let clock = self.clock(h);
                    let agent = self.agent(agent_name);
                    let key = (id.clone(), tool_use_id.clone());
                    agent.vol.in_flight.insert(key.clone());
                    let deadline = Deadline {
                        at: clock + CALL_TIMEOUT,
                        callee: callee.clone(),
                        check: false,
                    };
                    agent.vol.deadlines.insert(key, deadline);
                    let msg = Msg::Call(CallMsg {
                        caller: agent_name.to_owned(),
                        callee: callee.clone(),
                        parent_run: id.clone(),
                        child_run: RunId::child_of(id, &tool_use_id),
                        tool_use_id,
                        input,
                        chain_depth: hop_depth as usize + 1,
                        issued_at: clock,
                        placed,
                    });
                    self.send(h, &callee, msg);
                }
                Effect::CheckRun {
                    tool_use_id,
                    child,
                    callee,
                } => self.check_run(h, agent_name, id, tool_use_id, child, callee),
                Effect::UseTool(tool_use) => match self.use_tool(h, agent_name, id, &tool_use) {
                    None => return false,
                    Some(recorded) => again |= recorded,
                },
                Effect::AskReplies(calls) => {
                    for (callee, child_run) in calls {
                        let msg = Msg::Resend {
                            callee: callee.clone(),
                            child_run,
                        };
                        self.send(h, &callee, msg);
                    }
                }
                Effect::Settled => self.report_settled(h, agent_name, id),
                // The simulated models never place blocking calls (`wait_s`), and the simulated
                // agent runs its tools through the gate itself (`tools.rs`), never handing the
                // machine an `Input::ToolAuthorized`.
                Effect::AwaitReply { .. } | Effect::RunTool { .. } => {}
            }
        }
        if again {
            self.hosts[h].tasks.push(Task::Drive {
                agent: agent_name.to_owned(),
                run: id.clone(),
                input: None,
            });
        }
        true
    }

    /// What the caller's config in force says of a placement its step just decided, checked
    /// against the log: the callee listed, the depth within the limit, and the calls the run
    /// counts (recorded, ended unreachable, being placed), this one excepted, below the cap.
    fn placed_under(
        &mut self,
        agent: &str,
        run: &RunId,
        tool_use_id: &str,
        callee: &str,
    ) -> Placed {
        let spec = self.spec(agent);
        let placed = Placed {
            listed: spec.can_call.iter().any(|n| n == callee),
            limits: spec.limits,
            version: spec.version,
        };
        if self.agents[agent].store.runs[run].config_version != placed.version {
            self.stats
                .cover("call placed under a reloaded config".into());
        }
        let stored = &self.agents[agent].store.runs[run];
        let mut calls: Vec<&str> = Vec::new();
        let mut counted = 0u64;
        for event in &stored.events {
            match event {
                RunEvent::ModelTurn(turn) => {
                    if let ModelStep::ToolUses(uses) = &turn.step {
                        calls.extend(
                            uses.iter()
                                .filter(|u| u.name == CALL_AGENT)
                                .map(|u| u.id.as_str()),
                        );
                    }
                }
                RunEvent::CallPlaced(_) => counted += 1,
                RunEvent::CallRefused(r) if r.code == "unreachable" => counted += 1,
                _ => {}
            }
        }
        let recorded = |tu: &str| {
            stored.events.iter().any(|e| {
                matches!(e, RunEvent::CallPlaced(c) if c.tool_use_id == tu)
                    || matches!(e, RunEvent::CallRefused(c) if c.tool_use_id == tu)
            })
        };
        counted += self.agents[agent]
            .vol
            .in_flight
            .iter()
            .filter(|(r, tu)| {
                r == run && tu != tool_use_id && calls.contains(&tu.as_str()) && !recorded(tu)
            })
            .count() as u64;
        let depth = stored.hop_depth + 1;
        if !placed.listed
            || depth > placed.limits.max_depth
            || counted >= u64::from(placed.limits.max_calls_per_run)
        {
            let detail = format!(
                "{agent} {} placed {tool_use_id} to {callee} at depth {depth} with {counted} calls counted under config v{} (can_call lists it: {}, {:?})",
                short(run),
                placed.version,
                placed.listed,
                placed.limits
            );
            self.violation(PLACED_BEYOND_CONFIG, detail);
        }
        placed
    }

    /// Appends a transition and folds what was written into the kept view; the view must then
    /// equal the log folded from scratch.
    pub(crate) fn write(&mut self, agent_name: &str, id: &RunId, transition: Transition) {
        let version = self.spec(agent_name).version;
        let agent = self.agent(agent_name);
        let reloaded = agent.store.runs[id].config_version != version;
        let events = agent.store.append(id, transition);
        for event in &events {
            if let RunEvent::CallRefused(c) = event
                && reloaded
                && ["not_in_can_call", "depth_limit", "call_cap"].contains(&c.code.as_str())
            {
                let what = format!("call refused {} under a reloaded config", c.code);
                self.stats.cover(what);
            }
            let what = match event {
                RunEvent::CallRefused(c) => format!("call refused {}", c.code),
                RunEvent::CallPlaced(c) if c.existing => "call placed (existing)".into(),
                RunEvent::ReplyReceived(r) if r.status == ReplyOutcome::Failed => {
                    "reply received (failed)".into()
                }
                RunEvent::ReplyReceived(_) => "reply received".into(),
                RunEvent::Status(s) if s.to.is_settled() => format!("run {}", s.to),
                RunEvent::Status(s) if s.to == RunStatus::Blocked => "run blocked".into(),
                RunEvent::ApprovalDecided(d) if d.approved => "approval approved".into(),
                RunEvent::ApprovalDecided(_) => "approval denied".into(),
                RunEvent::ToolResult(r) if r.name == step::CHECK_RUN && r.is_error => {
                    "check_run result (error)".into()
                }
                RunEvent::ToolResult(r) if r.name == step::CHECK_RUN => "check_run result".into(),
                RunEvent::Failed(f) if f.error.starts_with(MODEL_ERROR) => {
                    "run failed by its model".into()
                }
                _ => continue,
            };
            self.stats.cover(what);
        }
        let agent = self.agent(agent_name);
        let run = &agent.store.runs[id];
        let line = format!(
            "  append {} {}: {}",
            agent_name,
            short(id),
            events
                .iter()
                .map(describe_event)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if run.status.is_settled() {
            agent.vol.views.remove(id);
        } else if let Some(view) = agent.vol.views.get_mut(id) {
            for event in &events {
                view.apply(event);
            }
            let fresh = RunView::from_events(&run.events);
            if *view != fresh {
                let msg = format!(
                    "kept view of {agent_name} {id} differs from its log folded from scratch"
                );
                self.violation(VIEW_DIFFERS, msg);
            }
        }
        self.log(line);
    }

    /// A settled run: a delegated run's reply goes to its caller.
    pub(crate) fn report_settled(&mut self, h: usize, agent: &str, id: &RunId) {
        let run = &self.agents[agent].store.runs[id];
        let Some(parent) = run.parent.clone() else {
            return;
        };
        let (outcome, text) = match run.status {
            RunStatus::Succeeded => (ReplyOutcome::Succeeded, run.output.clone()),
            _ => (ReplyOutcome::Failed, run.error.clone()),
        };
        let reply = ReplyIn {
            parent_run: parent.run,
            child_run: id.clone(),
            callee: agent.to_owned(),
            tool_use_id: parent.tool_use_id,
            outcome,
            output: step::cap_output(&text.unwrap_or_default(), REPLY_CAP),
            tree_cost: Default::default(),
            tree_spent: None,
        };
        self.send(
            h,
            &parent.agent,
            Msg::Reply {
                caller: parent.agent.clone(),
                reply,
            },
        );
    }

    /// A placement's outcome (`call_done`): record it, then hand over a reply that beat it.
    pub(crate) fn call_done(
        &mut self,
        agent: &str,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    ) {
        let vol = &mut self.agent(agent).vol;
        let key = (run.clone(), tool_use_id.clone());
        vol.in_flight.remove(&key);
        vol.deadlines.remove(&key);
        let accepted = matches!(outcome, CallOutcome::Accepted { .. });
        let early = vol
            .early_replies
            .remove(&RunId::child_of(&run, &tool_use_id));
        let input = Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        };
        if self.drive(agent, &run, input).is_none() {
            return;
        }
        if accepted && let Some(early) = early {
            self.receive_reply(agent, early);
        }
    }

    pub(crate) fn receive_reply(&mut self, agent: &str, reply: ReplyIn) {
        let parent = reply.parent_run.clone();
        if !self.agents[agent].store.runs.contains_key(&parent) {
            return;
        }
        let placing = self.agents[agent]
            .vol
            .in_flight
            .contains(&(parent.clone(), reply.tool_use_id.clone()));
        let input = Input::Reply {
            reply: reply.clone(),
            placing,
        };
        match self.drive(agent, &parent, input) {
            Some(Verdict::Hold) => {
                self.stats.cover("reply held".into());
                self.log("  reply held until its call is recorded".into());
                self.agent(agent)
                    .vol
                    .early_replies
                    .insert(reply.child_run.clone(), reply);
            }
            Some(Verdict::Dropped(why)) => {
                self.stats.cover(format!("reply dropped: {why}"));
                self.log(format!("  reply dropped: {why}"));
            }
            _ => {}
        }
    }

    /// A tool use's result from its task (a declared tool, a `check_run` answered or timed
    /// out): as the real `ToolDone`.
    pub(crate) fn tool_done(
        &mut self,
        agent: &str,
        run: RunId,
        tool_use_id: String,
        name: String,
        content: String,
        is_error: bool,
    ) {
        let vol = &mut self.agent(agent).vol;
        let key = (run.clone(), tool_use_id.clone());
        vol.in_flight.remove(&key);
        vol.deadlines.remove(&key);
        let input = Input::ToolFinished {
            tool_use_id,
            name,
            content,
            is_error,
            counts: true,
        };
        self.drive(agent, &run, input);
    }

    /// Every kept view equals its run's log folded from scratch.
    pub(crate) fn check_views(&mut self) {
        let mut bad = Vec::new();
        for (name, agent) in &self.agents {
            for (id, view) in &agent.vol.views {
                match agent.store.runs.get(id) {
                    Some(run) if *view == RunView::from_events(&run.events) => {}
                    Some(_) => bad.push(format!(
                        "kept view of {name} {id} differs from its log folded from scratch"
                    )),
                    None => bad.push(format!("kept view of {name} {id} has no run in the store")),
                }
            }
        }
        for detail in bad {
            self.violation(VIEW_DIFFERS, detail);
        }
    }
}
