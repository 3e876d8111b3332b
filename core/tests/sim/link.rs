//! The network between hosts and the far side of each message: delivery (with drops and
//! duplicates), a call's acceptance (replay, inbound guards, insert), a `check_run` answered
//! from the callee's store, resend requests, an operator's decision reaching its host, and the
//! answers the link gives itself for a host that is down.

use consort_core::guards::{self, InboundFacts};
use consort_core::step::{CHECK_RUN, CallOutcome};
use consort_core::{Channel, Refusal, RunId};
use rand::Rng;
use serde_json::json;

use super::store::{Accepted, Parent};
use super::trace::{describe_msg, short};
use super::world::{ALLOWED_SKEW, CALL_TTL, CHECK_TIMEOUT, CallMsg, Deadline, Msg, Task, World};

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
        match packet.msg {
            Msg::Call(call) => {
                let (caller, callee) = (call.caller.clone(), call.callee.clone());
                let (run, tool_use_id) = (call.parent_run.clone(), call.tool_use_id.clone());
                if let Some(outcome) = self.accept(to, call) {
                    let answer = Msg::CallAnswer {
                        caller: caller.clone(),
                        run,
                        tool_use_id,
                        callee,
                        outcome,
                    };
                    self.send(to, &caller, answer);
                }
            }
            Msg::CallAnswer {
                caller,
                run,
                tool_use_id,
                callee,
                outcome,
            } => self.call_done(&caller, run, tool_use_id, callee, outcome),
            Msg::Reply { caller, reply } => {
                self.receive_reply(&caller, reply);
            }
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
                };
                self.send(to, &caller, answer);
            }
            Msg::CheckAnswer {
                caller,
                run,
                tool_use_id,
                content,
                is_error,
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
        }
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
                    outcome: CallOutcome::Refused(Refusal::Unreachable {
                        callee: call.callee.clone(),
                        detail: "sim: host down".into(),
                    }),
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
        let vol = &mut self.agent(agent).vol;
        let key = (run.clone(), tool_use_id.clone());
        vol.in_flight.insert(key.clone());
        let deadline = Deadline {
            at,
            callee: callee.clone(),
            check: true,
        };
        vol.deadlines.insert(key, deadline);
        let msg = Msg::CheckRun {
            caller: agent.to_owned(),
            run: run.clone(),
            tool_use_id,
            callee: callee.clone(),
            child,
        };
        self.send(h, &callee, msg);
    }

    /// The callee's side of a call (`accept` in the real engine): the replay check by child
    /// run id, then the inbound guards, then the store. `None` when the host crashed.
    pub(crate) fn accept(&mut self, h: usize, call: CallMsg) -> Option<CallOutcome> {
        let CallMsg {
            caller,
            callee: me,
            parent_run,
            tool_use_id,
            child_run: child,
            input,
            chain_depth,
            issued_at,
            placed,
        } = call;
        if let Err(refusal) = guards::addressed_to(Some(&me), &me) {
            return Some(CallOutcome::Refused(refusal));
        }
        // The link's expiry check, on the callee's clock with the allowed skew.
        if self.clock(h) > issued_at + CALL_TTL + ALLOWED_SKEW {
            self.stats.cover("envelope expired".into());
            self.log("  refused: envelope expired".into());
            return Some(CallOutcome::Refused(Refusal::BadEnvelope {
                callee: me,
                detail: "the envelope expired".into(),
            }));
        }
        let spec = self.spec(&me).clone();
        let store = &self.agents[&me].store;
        if store.runs.contains_key(&child) {
            self.stats.cover("replay finds the existing run".into());
            self.log("  replay finds the existing run".into());
            return Some(CallOutcome::Accepted {
                child_run: child,
                existing: true,
            });
        }
        let children_before = store.children.get(&parent_run).copied().unwrap_or(0);
        let facts = InboundFacts {
            caller: &caller,
            callee: &me,
            accept_from: &spec.accept_from,
            chain_depth,
            children_accepted: children_before,
            active_runs: store.unsettled,
            admission_limit: spec.admission_limit,
            limits: spec.limits,
            budget: None,
            now_ms: 0,
        };
        if spec.version > 0 {
            self.stats
                .cover("inbound call decided under a reloaded config".into());
        }
        if let Err(refusal) = guards::check_inbound(&facts) {
            self.stats
                .cover(format!("inbound refused {}", refusal.code()));
            self.log(format!("  refused: {}", refusal.code()));
            return Some(CallOutcome::Refused(refusal));
        }
        let parent = Parent {
            run: parent_run,
            agent: caller.clone(),
            tool_use_id,
            placed,
            accepted: Accepted {
                listed: spec.accept_from.contains(&caller),
                limits: spec.limits,
                version: spec.version,
                children_before,
            },
        };
        self.insert_run(
            &me,
            child.clone(),
            Some(parent),
            chain_depth as u32,
            Channel::Agent(caller),
            input,
        );
        self.log(format!("  accepted {} on {me}", short(&child)));
        if self.durable(h) {
            return None;
        }
        self.hosts[h].tasks.push(Task::Drive {
            agent: me,
            run: child.clone(),
            input: None,
        });
        Some(CallOutcome::Accepted {
            child_run: child,
            existing: false,
        })
    }
}
