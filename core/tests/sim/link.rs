//! The network between hosts and the far side of each message: delivery (with drops and
//! duplicates), a call's acceptance (the machine's reservation, then the store writer's
//! admission job), a call's outcome and a reply reaching the caller's machine, a `check_run`
//! answered from the callee's store, resend requests, an operator's decision or cancel and a
//! peer's delivery reaching their host, and the answers the link gives itself for a host that
//! is down.

use std::convert::Infallible;

use consort_core::directory::payload_digest;
use consort_core::event::Created;
use consort_core::guards;
use consort_core::machine::{CallAdmission, CallAdmitted, CallReservation, InboundGate};
use consort_core::step::{CHECK_RUN, CallOutcome, Input, ReplyIn};
use consort_core::{Channel, Limits, Refusal, RunEvent, RunId, RunStatus};
use rand::Rng;
use serde_json::json;

use super::store::{Accepted, Done, Job, Parent, StoredRun};
use super::trace::{describe_msg, short};
use super::world::{
    ALLOWED_SKEW, Asker, CALL_TTL, CHECK_TIMEOUT, CallMsg, Deadline, Msg, Task, World,
};

impl World {
    pub(crate) fn deliver(&mut self) {
        if self.net.is_empty() {
            return;
        }
        let i = self.rng.gen_range(0..self.net.len());
        let packet = self.net.remove(i);
        if self.faults_on && self.rng.gen_bool(self.faults.drop) {
            self.stats.dropped += 1;
            self.log(format!("DROP m{}", packet.id));
            return;
        }
        if self.faults_on && self.rng.gen_bool(self.faults.duplicate) {
            self.stats.duplicated += 1;
            let at = self.rng.gen_range(0..=self.net.len());
            self.log(format!("DUPLICATE m{}", packet.id));
            self.net.insert(at, packet.clone());
        }
        self.stats.delivered += 1;
        self.log(format!(
            "deliver m{} {}",
            packet.id,
            describe_msg(&packet.msg)
        ));
        let to = packet.to;
        if !self.hosts[to].up {
            if self.hosts[packet.from].up {
                self.link_answers(packet.from, packet.msg);
            }
            return;
        }
        let answer_epoch = match &packet.msg {
            Msg::CallAnswer { epoch, .. } | Msg::CheckAnswer { epoch, .. } => Some(*epoch),
            _ => None,
        };
        if answer_epoch.is_some_and(|e| e != self.hosts[to].epoch) {
            // The request's connection died with the incarnation that sent it.
            self.stats
                .cover("answer for an incarnation that is gone".into());
            self.log("  lost: the incarnation that asked is gone".into());
            return;
        }
        match packet.msg {
            Msg::Call(call) => self.accept(to, call),
            Msg::CallAnswer {
                caller,
                run,
                tool_use_id,
                callee,
                outcome,
                ..
            } => self.call_done(&caller, run, tool_use_id, callee, outcome),
            Msg::Reply { caller, reply } => self.receive_reply(&caller, reply),
            Msg::Resend { callee, child_run } => {
                let settled = self.agents[&callee]
                    .store
                    .runs
                    .get(&child_run)
                    .is_some_and(|r| r.status.is_settled());
                if settled {
                    self.report_settled(to, &callee, &child_run);
                }
            }
            Msg::CheckRun {
                caller,
                run,
                tool_use_id,
                callee,
                child,
                epoch,
            } => {
                // The run summary the supervisor reads from the callee's store.
                let (content, is_error) = match self.agents[&callee].store.runs.get(&child) {
                    Some(r) => (
                        json!({
                            "run_id": child, "agent": callee, "status": r.status,
                            "output": r.output, "error": r.error,
                        })
                        .to_string(),
                        false,
                    ),
                    None => (format!("unknown run: {child}"), true),
                };
                let answer = Msg::CheckAnswer {
                    caller: caller.clone(),
                    run,
                    tool_use_id,
                    content,
                    is_error,
                    epoch,
                };
                self.send(to, &caller, answer);
            }
            Msg::CheckAnswer {
                caller,
                run,
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                self.stats.cover("check_run answered".into());
                let name = CHECK_RUN.to_owned();
                self.tool_done(&caller, run, tool_use_id, name, content, is_error);
            }
            Msg::Decide {
                agent,
                run,
                decision,
                saw,
            } => self.decide(&agent, &run, decision, saw),
            Msg::Cancel { agent, run } => self.cancel(&agent, &run),
            Msg::Deliver {
                from,
                agent,
                run,
                delivery_id,
                text,
            } => self.receive_delivery(&agent, &run, from, delivery_id, text),
        }
    }

    /// A placement's outcome (`AgentActor::call_done`): the machine records it and hands over
    /// a reply it held.
    pub(crate) fn call_done(
        &mut self,
        agent: &str,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    ) {
        self.node(agent)
            .deadlines
            .remove(&(run.clone(), tool_use_id.clone()));
        let input = Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        };
        self.feed(agent, &run, input);
    }

    /// A callee's reply reaches its caller (`AgentActor::receive_reply`), whose link waits to
    /// hear whether it was taken.
    pub(crate) fn receive_reply(&mut self, agent: &str, reply: ReplyIn) {
        let (parent, child) = (reply.parent_run.clone(), reply.child_run.clone());
        let node = self.node(agent);
        let input = node.machine.reply_arrived(reply);
        let asker = node.asker(Asker::Taken);
        node.machine.input(&parent, input, Some(asker));
        self.pump(agent);
        if self.agents[agent].node.machine.holds_reply(&child) {
            self.stats.cover("reply held".into());
            self.log("  reply held until its call is recorded".into());
        }
    }

    /// A tool use's result from its task (a declared tool, a `check_run` answered or timed
    /// out): as the actor's `ToolDone`.
    pub(crate) fn tool_done(
        &mut self,
        agent: &str,
        run: RunId,
        tool_use_id: String,
        name: String,
        content: String,
        is_error: bool,
    ) {
        self.node(agent)
            .deadlines
            .remove(&(run.clone(), tool_use_id.clone()));
        let input = Input::ToolFinished {
            tool_use_id,
            name,
            content,
            is_error,
            counts: true,
        };
        self.feed(agent, &run, input);
    }

    /// An operator's cancel reaches the agent (`AgentActor::on_request`).
    fn cancel(&mut self, agent: &str, run: &RunId) {
        if !self.known_run(agent, run) {
            self.stats.cover("cancel of an unknown run".into());
            return;
        }
        let input = Input::Cancel {
            run: run.clone(),
            by: "operator".into(),
            reason: Some("sim: no longer wanted".into()),
        };
        let asker = self.node(agent).asker(Asker::Cancel);
        self.node(agent).machine.input(run, input, Some(asker));
        self.pump(agent);
    }

    /// A peer's delivery reaches the agent (the runtime checked consent): `Input::Deliver`,
    /// answered with its receipt once committed.
    fn receive_delivery(
        &mut self,
        agent: &str,
        run: &RunId,
        from: String,
        delivery_id: String,
        text: String,
    ) {
        if !self.known_run(agent, run) {
            self.stats.cover("delivery to an unknown run".into());
            return;
        }
        let digest = payload_digest(agent, Some(run), &text);
        let input = Input::Deliver {
            run: run.clone(),
            from: from.clone(),
            delivery_id: delivery_id.clone(),
            digest,
            text,
        };
        let asker = self.node(agent).asker(Asker::Deliver { from, delivery_id });
        self.node(agent).machine.input(run, input, Some(asker));
        self.pump(agent);
    }

    /// What the sending host's link answers for a message to a host that is down: a call or a
    /// `check_run` fails at once; anything else is lost.
    fn link_answers(&mut self, from: usize, msg: Msg) {
        match msg {
            Msg::Call(call) => {
                self.hosts[from].tasks.push(Task::CallDone {
                    agent: call.caller,
                    run: call.parent_run,
                    tool_use_id: call.tool_use_id,
                    outcome: CallOutcome::Refused(Refusal::unreachable(
                        &call.callee,
                        "sim: host down",
                    )),
                    callee: call.callee,
                });
            }
            Msg::CheckRun {
                caller,
                run,
                tool_use_id,
                callee,
                ..
            } => {
                self.stats.cover("check_run to a host that is down".into());
                self.hosts[from].tasks.push(Task::ToolDone {
                    agent: caller,
                    run,
                    tool_use_id,
                    name: CHECK_RUN.to_owned(),
                    content: format!("{callee} did not answer check_run: host down"),
                    is_error: true,
                });
            }
            _ => {}
        }
    }

    /// `check_run` for an `Effect::CheckRun`: the question goes to the callee's host from its
    /// own task, which times out like the supervisor's `call_t`.
    pub(crate) fn check_run(
        &mut self,
        h: usize,
        agent: &str,
        run: &RunId,
        tool_use_id: String,
        child: RunId,
        callee: String,
    ) {
        let epoch = self.hosts[h].epoch;
        let asked = self
            .checks
            .entry((run.clone(), tool_use_id.clone()))
            .or_default();
        if !asked.is_empty() && !asked.contains(&epoch) {
            self.stats
                .cover("check_run asked again after a crash".into());
        }
        asked.push(epoch);
        let at = self.clock(h) + CHECK_TIMEOUT;
        let node = self.node(agent);
        node.machine.task_out(run, &tool_use_id);
        let deadline = Deadline {
            at,
            callee: callee.clone(),
            check: true,
        };
        node.deadlines
            .insert((run.clone(), tool_use_id.clone()), deadline);
        let msg = Msg::CheckRun {
            caller: agent.to_owned(),
            run: run.clone(),
            tool_use_id,
            callee: callee.clone(),
            child,
            epoch: self.hosts[h].epoch,
        };
        self.send(h, &callee, msg);
    }

    /// The callee's side of a call (`AgentActor::accept`): the chain must name this agent
    /// and the envelope must not have expired (the link's check); then the machine reserves
    /// the call's place and one job of the store writer admits it (replay check, guards,
    /// insert), answering the caller once committed.
    pub(crate) fn accept(&mut self, h: usize, call: CallMsg) {
        let me = call.callee.clone();
        let answer_now = |outcome| Msg::CallAnswer {
            caller: call.caller.clone(),
            run: call.parent_run.clone(),
            tool_use_id: call.tool_use_id.clone(),
            callee: me.clone(),
            outcome,
            epoch: call.epoch,
        };
        if let Err(refusal) = guards::addressed_to(Some(&me), &me) {
            let msg = answer_now(CallOutcome::Refused(refusal));
            self.send(h, &call.caller, msg);
            return;
        }
        // The link's expiry check, on the callee's clock with the allowed skew.
        if self.clock(h) > call.issued_at + CALL_TTL + ALLOWED_SKEW {
            self.stats.cover("envelope expired".into());
            self.log("  refused: envelope expired".into());
            let msg = answer_now(CallOutcome::Refused(Refusal::bad_envelope(
                &me,
                "the envelope expired",
            )));
            self.send(h, &call.caller, msg);
            return;
        }
        let spec = self.spec(&me).clone();
        if spec.version > 0 {
            self.stats
                .cover("inbound call decided under a reloaded config".into());
        }
        let now_ms = self.clock_ms(h);
        let machine = &mut self.node(&me).machine;
        let (reservation, gate) = machine.reserve_call(
            (&call.caller, &call.parent_run, &call.child_run),
            call.chain_depth,
            &spec.accept_from,
            spec.limits,
            (call.budget, now_ms),
        );
        let ticket = machine.job_ticket();
        let accepted = (
            spec.accept_from.contains(&call.caller),
            spec.limits,
            spec.version,
        );
        self.node(&me).jobs.push_back(Job::Admit {
            ticket,
            call: Box::new(call),
            gate: Box::new(gate),
            reservation,
            accepted,
        });
    }

    /// The store writer's side of an arriving call ([`InboundGate::admit`]'s order): what its
    /// notice says, and the caller's answer.
    pub(crate) fn admit(
        &mut self,
        me: &str,
        call: CallMsg,
        gate: &InboundGate,
        reservation: CallReservation,
        (listed, limits, version): (bool, Limits, u32),
    ) -> (Done, Option<(String, Msg)>) {
        let store = &self.agents[me].store;
        let exists = store.runs.contains_key(&call.child_run);
        let children = store.children.get(&call.parent_run).copied().unwrap_or(0);
        let decided = gate
            .admit(exists, || Ok::<u64, Infallible>(children))
            .unwrap_or_else(|never| match never {});
        let child = call.child_run.clone();
        let (found, outcome, created) = match decided {
            CallAdmission::Replay => {
                self.stats.cover("replay finds the existing run".into());
                self.log("  replay finds the existing run".into());
                let outcome = CallOutcome::Accepted {
                    child_run: child.clone(),
                    existing: true,
                };
                (CallAdmitted::Replay, outcome, None)
            }
            CallAdmission::Refused { children, refusal } => {
                self.stats
                    .cover(format!("inbound refused {}", refusal.code()));
                self.log(format!("  refused: {}", refusal.code()));
                (
                    CallAdmitted::Refused { children },
                    CallOutcome::Refused(refusal),
                    None,
                )
            }
            CallAdmission::Insert { children_before } => {
                let created = RunEvent::Created(Created {
                    channel: Channel::Agent(call.caller.clone()),
                    input: call.input.clone(),
                    parent_run: Some(call.parent_run.clone()),
                    hop_depth: call.chain_depth as u32,
                    principal: call.caller.clone(),
                    budget: call.budget,
                });
                let parent = Parent {
                    run: call.parent_run.clone(),
                    agent: call.caller.clone(),
                    tool_use_id: call.tool_use_id.clone(),
                    placed: call.placed,
                    accepted: Accepted {
                        listed,
                        limits,
                        version,
                        children_before,
                    },
                };
                self.stats.runs += 1;
                let config_version = self.spec(me).version;
                self.agent(me).store.insert(
                    child.clone(),
                    StoredRun {
                        parent: Some(parent),
                        hop_depth: call.chain_depth as u32,
                        principal: call.caller.clone(),
                        events: vec![created.clone()],
                        status: RunStatus::Queued,
                        output: None,
                        error: None,
                        calls_placed: 0,
                        config_version,
                    },
                );
                self.log(format!("  accepted {} on {me}", short(&child)));
                let outcome = CallOutcome::Accepted {
                    child_run: child.clone(),
                    existing: false,
                };
                (
                    CallAdmitted::Stored { children_before },
                    outcome,
                    Some(vec![created]),
                )
            }
        };
        let answer = Msg::CallAnswer {
            caller: call.caller.clone(),
            run: call.parent_run,
            tool_use_id: call.tool_use_id,
            callee: me.to_owned(),
            outcome,
            epoch: call.epoch,
        };
        let done = Done::Admitted {
            child,
            reservation,
            found,
            created,
        };
        (done, Some((call.caller, answer)))
    }
}
