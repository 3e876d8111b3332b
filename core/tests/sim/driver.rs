//! The driver of each simulated agent's [`AgentMachine`], as the agent actor drives it
//! (`actors/src/agent/drive.rs`): feed it what happened, execute the commands it gives until
//! it has none. Appends go to the store writer's queue and are durable only when a commit takes
//! them ([`World::commit`]: batched, and late); a commit's notice comes back to the agent as a
//! task of its own, in the writer's order. Nothing here decides what a run does: every rule is
//! the machine's. What the driver adds is the simulation's own eyes: each command is checked
//! against the store, the config in force and the outside world's record as it happens.

use consort_core::event::ReplyOutcome;
use consort_core::machine::{Answer, Command, SettledRun};
use consort_core::step::{self, CALL_AGENT, Effect, Input, ModelAnswer, Policy, TurnAsked};
use consort_core::{ModelStep, RunEvent, RunId, RunStatus, RunView};
use rand::Rng;

use super::model;
use super::store::{Job, Placed};
use super::trace::{describe_event, short};
use super::world::{Asker, CALL_TIMEOUT, CallMsg, Deadline, Msg, REPLY_CAP, Task, World};

/// The class of a kept view that no longer equals its log folded from scratch.
pub(crate) const VIEW_DIFFERS: &str = "kept view differs from the log";

/// The class of a call placed (an `Effect::PlaceCall`) that the caller's config in force when
/// its turn was recorded did not allow.
pub(crate) const PLACED_BEYOND_CONFIG: &str = "call placed beyond the caller's config";

/// The class of a run whose model is asked while its log (as the writer will commit it) still
/// says `queued`: the ask was not written with the `Effect::AskModel` that made it.
pub(crate) const QUEUED_WHILE_ASKED: &str = "queued while its model is asked";

/// The class of an effect that lets something out of a run (a call, a tool, a reply) handed
/// out before the run's writes before it were committed.
pub(crate) const OUT_BEFORE_COMMIT: &str = "effect let out before its run's writes committed";

/// The class of a drive that stepped its bound without settling.
pub(crate) const STALLED: &str = "drive stalled";

/// The class of an answer (a cancel's, a delivery's) that says what the committed log does not.
pub(crate) const ANSWER_DIFFERS: &str = "answer differs from the committed log";

/// What a failed model turn's error starts with.
pub(crate) const MODEL_ERROR: &str = "sim: the model failed";

impl World {
    /// Executes agent `agent`'s machine commands until it has none.
    pub(crate) fn pump(&mut self, agent: &str) {
        let h = self.fleet.host_of(agent);
        if !self.hosts[h].up {
            return;
        }
        loop {
            let now_ms = self.clock_ms(h);
            let spec = self.fleet.spec(agent);
            let policy = Policy {
                agent: &spec.name,
                can_call: &spec.can_call,
                fleet_agents: &self.fleet.names,
                limits: spec.limits,
                reply_cap: REPLY_CAP,
                immediate_model: spec.immediate_model,
                now_ms,
            };
            let node = &mut self
                .agents
                .get_mut(agent)
                .unwrap_or_else(|| panic!("unknown agent {agent}"))
                .node;
            let Some(command) = node.machine.poll(&policy) else {
                return;
            };
            self.command(h, agent, command);
        }
    }

    /// Feeds `input` to run `run` of agent `agent`, and executes what follows.
    pub(crate) fn feed(&mut self, agent: &str, run: &RunId, input: Input) {
        self.node(agent).machine.input(run, input, None);
        self.pump(agent);
    }

    fn command(&mut self, h: usize, agent: &str, command: Command) {
        match command {
            Command::Load(run) => {
                let node = &self.agents[agent].node;
                let log = self.agents[agent]
                    .store
                    .read_through(&run, node.jobs.iter());
                let view = log.map(|events| RunView::from_events(events.iter()));
                self.node(agent).machine.loaded(&run, view);
            }
            Command::Append {
                run,
                ticket,
                transition,
                expected_seq,
            } => self.append(agent, run, ticket, transition, expected_seq),
            Command::Execute { run, effect } => self.execute(h, agent, &run, effect),
            Command::Answer(answer) => self.answered(h, agent, answer),
            Command::Done { .. } | Command::Barrier { .. } => {}
            Command::Stalled(run) => {
                let detail = format!("{agent} {} stepped its bound", short(&run));
                self.violation(STALLED, detail);
            }
            other => panic!("a machine command the simulation does not know: {other:?}"),
        }
    }

    /// `Command::Append`: the writer's queue takes the transition; the machine's kept view must
    /// equal the log as the writer will commit it, folded from scratch.
    fn append(
        &mut self,
        agent: &str,
        run: RunId,
        ticket: u64,
        transition: consort_core::Transition,
        expected_seq: u64,
    ) {
        self.stats.appends += 1;
        self.note_decided_calls(agent, &run, &transition);
        let line = format!(
            "  append #{ticket} {agent} {}: {}",
            short(&run),
            transition
                .events()
                .iter()
                .map(describe_event)
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.log(line);
        let node = self.node(agent);
        node.jobs.push_back(Job::Append {
            run: run.clone(),
            ticket,
            transition,
            expected_seq,
        });
        let node = &self.agents[agent].node;
        let Some(kept) = node.machine.view(&run) else {
            return;
        };
        let log = self.agents[agent]
            .store
            .read_through(&run, node.jobs.iter());
        let fresh = log.map(|events| RunView::from_events(events.iter()));
        if fresh.as_ref() != Some(kept) {
            let detail =
                format!("kept view of {agent} {run} differs from its log folded from scratch");
            self.violation(VIEW_DIFFERS, detail);
        }
    }

    /// A model turn with calls is being recorded: what the caller's config says now is what
    /// its calls are decided under (the simulation's record, see [`Placed`]).
    fn note_decided_calls(
        &mut self,
        agent: &str,
        run: &RunId,
        transition: &consort_core::Transition,
    ) {
        let spec = self.spec(agent).clone();
        for event in transition.events() {
            let RunEvent::ModelTurn(turn) = event else {
                continue;
            };
            let ModelStep::ToolUses(uses) = &turn.step else {
                continue;
            };
            for tool_use in uses.iter().filter(|u| u.name == CALL_AGENT) {
                let callee = tool_use
                    .input
                    .get("agent")
                    .and_then(|a| a.as_str())
                    .unwrap_or_default();
                let placed = Placed {
                    listed: spec.can_call.iter().any(|n| n == callee),
                    limits: spec.limits,
                    version: spec.version,
                };
                self.decided_under
                    .insert((run.clone(), tool_use.id.clone()), placed);
            }
        }
    }

    /// Whether run `run` of agent `agent` has writes the writer has not committed.
    fn uncommitted(&self, agent: &str, run: &RunId) -> bool {
        // An admission job queued for the same child run is a replayed call: it writes
        // nothing of the run.
        self.agents[agent].node.jobs.iter().any(|job| match job {
            Job::Append { run: r, .. } | Job::Insert { run: r, .. } => r == run,
            Job::Admit { .. } => false,
        })
    }

    /// `Command::Execute`: one effect of a run.
    fn execute(&mut self, h: usize, agent: &str, run: &RunId, effect: Effect) {
        let lets_out = matches!(
            effect,
            Effect::PlaceCall { .. }
                | Effect::CheckRun { .. }
                | Effect::UseTool(_)
                | Effect::RunTool { .. }
                | Effect::Settled
        );
        if lets_out && self.uncommitted(agent, run) {
            let detail = format!("{agent} {} handed out {effect:?}", short(run));
            self.violation(OUT_BEFORE_COMMIT, detail);
        }
        match effect {
            Effect::Advance => self.node(agent).machine.again(run),
            Effect::AskModel(asked) => self.ask_model(h, agent, run, asked),
            Effect::PlaceCall {
                tool_use_id,
                callee,
                input,
                allowance,
            } => {
                let placed = self.placed_under(agent, run, &tool_use_id, &callee);
                let clock = self.clock(h);
                let hop_depth = self.agents[agent].store.runs[run].hop_depth;
                let node = self.node(agent);
                node.machine.task_out(run, &tool_use_id);
                let deadline = Deadline {
                    at: clock + CALL_TIMEOUT,
                    callee: callee.clone(),
                    check: false,
                };
                node.deadlines
                    .insert((run.clone(), tool_use_id.clone()), deadline);
                let msg = Msg::Call(CallMsg {
                    caller: agent.to_owned(),
                    callee: callee.clone(),
                    parent_run: run.clone(),
                    child_run: RunId::child_of(run, &tool_use_id),
                    tool_use_id,
                    input,
                    chain_depth: hop_depth as usize + 1,
                    issued_at: clock,
                    budget: allowance,
                    placed,
                    epoch: self.hosts[h].epoch,
                });
                self.send(h, &callee, msg);
            }
            Effect::CheckRun {
                tool_use_id,
                child,
                callee,
            } => self.check_run(h, agent, run, tool_use_id, child, callee),
            Effect::UseTool(tool_use) => self.use_tool(agent, run, &tool_use),
            Effect::RunTool {
                tool_use_id, tool, ..
            } => self.run_tool(h, agent, run, &tool_use_id, &tool),
            Effect::AskReplies(calls) => {
                for (callee, child_run) in calls {
                    self.send(h, &callee.clone(), Msg::Resend { callee, child_run });
                }
            }
            Effect::Settled => self.report_settled(h, agent, run),
            // The simulated models never place blocking calls (`wait_s`).
            Effect::AwaitReply { .. } => {}
        }
    }

    /// `Effect::AskModel`: an immediate model answers here, as the script model does in the
    /// actor (`input_first`); any other answers on its own task.
    fn ask_model(&mut self, h: usize, agent: &str, run: &RunId, asked: TurnAsked) {
        let node = &self.agents[agent].node;
        let status = self.agents[agent]
            .store
            .read_through(run, node.jobs.iter())
            .map(|log| RunView::from_events(log.iter()).status);
        if status == Some(None) || status == Some(Some(RunStatus::Queued)) {
            let detail = format!(
                "{agent}'s run {} is queued while its model is asked",
                short(run)
            );
            self.violation(QUEUED_WHILE_ASKED, detail);
        }
        let conversation = self.agents[agent]
            .node
            .machine
            .view(run)
            .map(|v| v.conversation.clone())
            .unwrap_or_default();
        if self.spec(agent).immediate_model {
            let answer = self.model_answer(agent, &conversation);
            let input = Input::ModelAnswered { asked, answer };
            self.node(agent).machine.input_first(run, input);
            return;
        }
        self.node(agent).machine.thinking(run);
        self.hosts[h].tasks.push(Task::Model {
            agent: agent.to_owned(),
            run: run.clone(),
            asked,
            conversation,
        });
    }

    /// What the scripted model answers (or, now and then in the fault phase, its failure).
    pub(crate) fn model_answer(
        &mut self,
        agent: &str,
        conversation: &[consort_core::Message],
    ) -> Result<ModelAnswer, String> {
        if self.faults_on && self.rng.gen_bool(self.faults.model_error) {
            self.stats.cover("model turn failed".into());
            return Err(format!("{MODEL_ERROR}: the provider answered 529"));
        }
        let step = model::answer(self.spec(agent), &self.fleet, conversation);
        Ok(ModelAnswer {
            step,
            input_tokens: model::INPUT_TOKENS * conversation.len() as u64,
            output_tokens: model::OUTPUT_TOKENS,
        })
    }

    /// What the caller's config said when the turn naming a call was recorded, checked against
    /// the call now placed: the callee listed, the depth within the limit, and the calls the
    /// run counts (recorded, ended unreachable, being placed), this one excepted, below the cap.
    fn placed_under(
        &mut self,
        agent: &str,
        run: &RunId,
        tool_use_id: &str,
        callee: &str,
    ) -> Placed {
        let Some(placed) = self
            .decided_under
            .get(&(run.clone(), tool_use_id.to_owned()))
            .copied()
        else {
            let detail = format!(
                "{agent} {} placed {tool_use_id}, which no recorded turn names",
                short(run)
            );
            self.violation(PLACED_BEYOND_CONFIG, detail);
            return Placed {
                listed: false,
                limits: self.spec(agent).limits,
                version: self.spec(agent).version,
            };
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
            .node
            .machine
            .busy(run)
            .iter()
            .filter(|tu| *tu != tool_use_id && calls.contains(&tu.as_str()) && !recorded(tu))
            .count() as u64;
        let depth = stored.hop_depth + 1;
        if !placed.listed
            || depth > placed.limits.max_depth
            || counted >= u64::from(placed.limits.max_calls_per_run)
        {
            let detail = format!(
                "{agent} {} placed {tool_use_id} to {callee} at depth {depth} with {counted} calls counted, decided under config v{} (can_call lists it: {}, {:?})",
                short(run),
                placed.version,
                placed.listed,
                placed.limits
            );
            self.violation(PLACED_BEYOND_CONFIG, detail);
        }
        placed
    }

    /// `Effect::Settled`: a delegated run's reply, as the machine builds it, goes to its caller.
    pub(crate) fn report_settled(&mut self, h: usize, agent: &str, id: &RunId) {
        let Some(run) = self.agents[agent].store.runs.get(id) else {
            return;
        };
        let Some(parent) = run.parent.clone() else {
            return;
        };
        let settled = SettledRun {
            id,
            agent,
            status: run.status,
            call: Some((&parent.run, &parent.agent, &parent.tool_use_id)),
            output: run.output.as_deref(),
            error: run.error.as_deref(),
            tree_cost: Default::default(),
        };
        let Some(out) = self.agents[agent].node.machine.reply_of(&settled) else {
            return;
        };
        if out.reply.outcome == ReplyOutcome::Failed {
            self.stats.cover("reply sent (failed)".into());
        }
        let caller = out.caller.clone();
        self.send(
            h,
            &caller,
            Msg::Reply {
                caller: out.caller,
                reply: out.reply,
            },
        );
    }

    /// `Command::Answer`: an asker's verdict, now durable.
    fn answered(&mut self, h: usize, agent: &str, answer: Answer) {
        let Answer {
            asker,
            run,
            verdict,
        } = answer;
        let asker = asker.and_then(|id| self.node(agent).askers.remove(&id));
        match asker {
            None => {
                if let step::Verdict::Dropped(why) = verdict {
                    self.stats.cover(format!("reply dropped: {why}"));
                }
            }
            Some(Asker::Taken) => match verdict {
                step::Verdict::Dropped(why) => {
                    self.stats.cover(format!("reply dropped: {why}"));
                    self.log(format!("  reply dropped: {why}"));
                }
                step::Verdict::Taken => self.stats.cover("reply taken".into()),
                _ => {}
            },
            Some(Asker::Decide { decision, saw }) => {
                self.decision_answered(h, agent, &run, decision, saw, verdict);
            }
            Some(Asker::Cancel) => self.cancel_answered(agent, &run, verdict),
            Some(Asker::Deliver { from, delivery_id }) => {
                self.delivery_answered(agent, &run, (from, delivery_id), verdict);
            }
        }
    }

    fn cancel_answered(&mut self, agent: &str, run: &RunId, verdict: step::Verdict) {
        let stored = self.agents[agent].store.runs.get(run);
        let status = stored.map(|r| r.status);
        let canceled =
            stored.is_some_and(|r| r.events.iter().any(|e| matches!(e, RunEvent::Canceled(_))));
        match verdict {
            step::Verdict::Refused(refusal) => {
                self.stats
                    .cover(format!("cancel refused {}", refusal.code()));
                if !status.is_some_and(RunStatus::is_settled) {
                    let detail = format!(
                        "cancel of {agent} {} refused {} but it is {status:?}",
                        short(run),
                        refusal.code()
                    );
                    self.violation(ANSWER_DIFFERS, detail);
                }
            }
            step::Verdict::Dropped(_) => self.stats.cover("cancel of an unknown run".into()),
            _ => {
                self.stats.cover("run canceled".into());
                if status != Some(RunStatus::Failed) || !canceled {
                    let detail = format!(
                        "cancel of {agent} {} answered but the run is {status:?} (canceled event: {canceled})",
                        short(run)
                    );
                    self.violation(ANSWER_DIFFERS, detail);
                }
            }
        }
    }

    fn delivery_answered(
        &mut self,
        agent: &str,
        run: &RunId,
        (from, delivery_id): (String, String),
        verdict: step::Verdict,
    ) {
        match verdict {
            step::Verdict::Delivered { seq, existing } => {
                self.stats.cover(if existing {
                    "delivery repeated".into()
                } else {
                    "delivery taken".into()
                });
                let landed = self.agents[agent].store.runs.get(run).and_then(|r| {
                    r.events
                        .get(seq.saturating_sub(1) as usize)
                        .and_then(|e| match e {
                            RunEvent::MessageReceived(m) => {
                                Some(m.from == from && m.delivery_id == delivery_id)
                            }
                            _ => None,
                        })
                });
                let key = (run.clone(), from.clone(), delivery_id.clone());
                let first = *self.delivered_at.entry(key).or_insert(seq);
                if landed != Some(true) || first != seq {
                    let detail = format!(
                        "delivery {delivery_id} from {from} into {agent} {} answered at seq {seq} (first answered {first}), but the log there: {landed:?}",
                        short(run)
                    );
                    self.violation(ANSWER_DIFFERS, detail);
                }
            }
            step::Verdict::Refused(refusal) => {
                self.stats
                    .cover(format!("delivery refused {}", refusal.code()));
            }
            step::Verdict::Dropped(_) => self.stats.cover("delivery to an unknown run".into()),
            other => {
                let detail = format!(
                    "delivery {delivery_id} into {agent} {} answered {other:?}",
                    short(run)
                );
                self.violation(ANSWER_DIFFERS, detail);
            }
        }
    }
}
