//! The network between hosts and the callee's side of each message: delivery (with drops and
//! duplicates), a call's acceptance (replay, inbound guards, insert), the answers the link
//! gives itself for a host that is down, and resend requests.

use consort_core::guards::{self, InboundFacts};
use consort_core::step::CallOutcome;
use consort_core::{Channel, Refusal, RunId};
use rand::Rng;

use super::store::Parent;
use super::trace::{describe_msg, short};
use super::world::{ALLOWED_SKEW, CALL_TTL, Msg, Task, World};

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
            // The link of the sending host answers a call to a host that is down.
            if let Msg::Call {
                caller,
                callee,
                parent_run,
                tool_use_id,
                ..
            } = packet.msg
                && self.hosts[packet.from].up
            {
                self.hosts[packet.from].tasks.push(Task::CallDone {
                    agent: caller,
                    run: parent_run,
                    tool_use_id,
                    outcome: CallOutcome::Refused(Refusal::Unreachable {
                        callee: callee.clone(),
                        detail: "sim: host down".into(),
                    }),
                    callee,
                });
            }
            return;
        }
        match packet.msg {
            Msg::Call {
                caller,
                callee,
                parent_run,
                tool_use_id,
                child_run,
                input,
                chain_depth,
                issued_at,
            } => {
                let outcome = self.accept(
                    to,
                    &caller,
                    &callee,
                    Parent {
                        run: parent_run.clone(),
                        agent: caller.clone(),
                        tool_use_id: tool_use_id.clone(),
                    },
                    child_run,
                    input,
                    chain_depth,
                    issued_at,
                );
                if let Some(outcome) = outcome {
                    self.send(
                        to,
                        &caller,
                        Msg::CallAnswer {
                            caller: caller.clone(),
                            run: parent_run,
                            tool_use_id,
                            callee,
                            outcome,
                        },
                    );
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
        }
    }

    /// The callee's side of a call (`accept` in the real engine): the replay check by child
    /// run id, then the inbound guards, then the store. `None` when the host crashed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        &mut self,
        h: usize,
        caller: &str,
        me: &str,
        parent: Parent,
        child: RunId,
        input: String,
        chain_depth: usize,
        issued_at: i64,
    ) -> Option<CallOutcome> {
        if let Err(refusal) = guards::addressed_to(Some(me), me) {
            return Some(CallOutcome::Refused(refusal));
        }
        // The link's expiry check, on the callee's clock with the allowed skew.
        if self.clock(h) > issued_at + CALL_TTL + ALLOWED_SKEW {
            self.stats.cover("envelope expired".into());
            self.log("  refused: envelope expired".into());
            return Some(CallOutcome::Refused(Refusal::BadEnvelope {
                callee: me.to_owned(),
                detail: "the envelope expired".into(),
            }));
        }
        let spec = self.spec(me).clone();
        let store = &self.agents[me].store;
        if store.runs.contains_key(&child) {
            self.stats.cover("replay finds the existing run".into());
            self.log("  replay finds the existing run".into());
            return Some(CallOutcome::Accepted {
                child_run: child,
                existing: true,
            });
        }
        let facts = InboundFacts {
            caller,
            callee: me,
            accept_from: &spec.accept_from,
            chain_depth,
            children_accepted: store.children.get(&parent.run).copied().unwrap_or(0),
            active_runs: store.unsettled,
            admission_limit: spec.admission_limit,
            limits: spec.limits,
        };
        if let Err(refusal) = guards::check_inbound(&facts) {
            self.stats
                .cover(format!("inbound refused {}", refusal.code()));
            self.log(format!("  refused: {}", refusal.code()));
            return Some(CallOutcome::Refused(refusal));
        }
        self.insert_run(
            me,
            child.clone(),
            Some(parent),
            chain_depth as u32,
            Channel::Agent(caller.to_owned()),
            input,
        );
        self.log(format!("  accepted {} on {me}", short(&child)));
        if self.durable(h) {
            return None;
        }
        self.hosts[h].tasks.push(Task::Drive {
            agent: me.to_owned(),
            run: child.clone(),
            input: None,
        });
        Some(CallOutcome::Accepted {
            child_run: child,
            existing: false,
        })
    }
}
