//! The executor, mirroring the agent actor's engine (`actors/src/agent/engine.rs`): step a run,
//! append the transition, execute the effects; a call's outcome and a callee's reply as they
//! reach the caller.

use consort_core::event::ReplyOutcome;
use consort_core::step::{self, CallOutcome, Effect, Input, Policy, ReplyIn, Verdict};
use consort_core::{RunEvent, RunId, RunStatus, RunView, Transition};

use super::trace::{describe_event, short};
use super::world::{CALL_TIMEOUT, MAX_MODEL_TURNS, Msg, REPLY_CAP, Task, World};

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
            max_model_turns: MAX_MODEL_TURNS,
            reply_cap: REPLY_CAP,
        };
        let step = step::step(view, input, &policy);
        let hop_depth = stored.hop_depth;
        if let Some(transition) = step.write {
            self.write(agent_name, id, transition);
            if self.durable(h) {
                return None;
            }
        }
        let mut again = false;
        for effect in step.effects {
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
                } => {
                    let clock = self.clock(h);
                    let agent = self.agent(agent_name);
                    let key = (id.clone(), tool_use_id.clone());
                    agent.vol.in_flight.insert(key.clone());
                    agent.vol.deadlines.insert(key, clock + CALL_TIMEOUT);
                    let msg = Msg::Call {
                        caller: agent_name.to_owned(),
                        callee: callee.clone(),
                        parent_run: id.clone(),
                        child_run: RunId::child_of(id, &tool_use_id),
                        tool_use_id,
                        input,
                        chain_depth: hop_depth as usize + 1,
                        issued_at: clock,
                    };
                    self.send(h, &callee, msg);
                }
                Effect::CheckRun { tool_use_id, .. } => {
                    self.tool_out(h, agent_name, id, tool_use_id, step::CHECK_RUN.into());
                }
                Effect::UseTool(tool_use) => {
                    self.tool_out(h, agent_name, id, tool_use.id, tool_use.name);
                }
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
                // The simulated models never place blocking calls (`wait_s`).
                Effect::AwaitReply { .. } => {}
            }
        }
        if again {
            self.hosts[h].tasks.push(Task::Drive {
                agent: agent_name.to_owned(),
                run: id.clone(),
                input: None,
            });
        }
        Some(step.verdict)
    }

    pub(crate) fn tool_out(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        tool_use_id: String,
        name: String,
    ) {
        self.agent(agent)
            .vol
            .in_flight
            .insert((run.clone(), tool_use_id.clone()));
        self.hosts[h].tasks.push(Task::Tool {
            agent: agent.to_owned(),
            run: run.clone(),
            tool_use_id,
            name,
        });
    }

    /// Appends a transition and folds what was written into the kept view; the view must then
    /// equal the log folded from scratch.
    pub(crate) fn write(&mut self, agent_name: &str, id: &RunId, transition: Transition) {
        let agent = self.agent(agent_name);
        let events = agent.store.append(id, transition);
        for event in &events {
            let what = match event {
                RunEvent::CallRefused(c) => format!("call refused {}", c.code),
                RunEvent::CallPlaced(c) if c.existing => "call placed (existing)".into(),
                RunEvent::ReplyReceived(_) => "reply received".into(),
                RunEvent::Status(s) if s.to.is_settled() => format!("run {}", s.to),
                _ => continue,
            };
            *self.stats.coverage.entry(what).or_default() += 1;
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
                self.violations.push(msg);
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
        self.violations.extend(bad);
    }
}
