//! The world outside the fleet: root runs started through the API, operators deciding on
//! blocked runs (and on runs that are not) and canceling runs, peers delivering messages into
//! runs, and edits of agent.yaml picked up by a reload.

use consort_core::event::Created;
use consort_core::step::{self, Decision};
use consort_core::{Channel, RunEvent, RunId, RunStatus, RunView, TreeBudget};
use rand::Rng;

use super::model;
use super::store::{Job, StoredRun};
use super::trace::short;
use super::world::{Msg, World};

impl World {
    /// A root run started through the API on a random agent: the machine admits it, the
    /// store writer's queue takes its insert, and it takes its first steps at once (nothing
    /// it does leaves the host before the insert commits).
    pub(crate) fn start_root(&mut self) {
        if self.roots_left == 0 {
            return;
        }
        self.roots_left -= 1;
        let name = self.fleet.names[self.rng.gen_range(0..self.fleet.names.len())].clone();
        let h = self.fleet.host_of(&name);
        let input = model::root_task(&mut self.rng);
        let id = RunId::parse(&format!("run_{:032x}", self.rng.r#gen::<u128>())).expect("id");
        if !self.hosts[h].up {
            self.log(format!("root on {name}: host h{h} down, not started"));
            return;
        }
        let principal = "anonymous";
        if let Err(refusal) = self.node(&name).machine.admit_root(&id, &input, principal) {
            self.stats.cover(format!("root refused {}", refusal.code()));
            self.log(format!("root on {name} refused: {}", refusal.code()));
            return;
        }
        self.stats.roots += 1;
        self.log(format!("root {} on {name}: {input}", short(&id)));
        let spec = self.spec(&name).clone();
        let budget = TreeBudget::for_root(spec.limits.tree, None, self.clock_ms(h));
        if budget.is_some() {
            self.stats.cover("root with a tree budget".into());
        }
        let created = RunEvent::Created(Created {
            channel: Channel::Api,
            input,
            parent_run: None,
            hop_depth: 0,
            principal: principal.to_owned(),
            budget,
        });
        let stored = StoredRun {
            parent: None,
            hop_depth: 0,
            principal: principal.to_owned(),
            events: vec![created.clone()],
            status: RunStatus::Queued,
            output: None,
            error: None,
            calls_placed: 0,
            config_version: spec.version,
        };
        let machine = &mut self.node(&name).machine;
        machine.created(&id, std::slice::from_ref(&created));
        let ticket = machine.insert_ticket(&id);
        machine.again(&id);
        self.node(&name).jobs.push_back(Job::Insert {
            run: id,
            ticket,
            stored: Box::new(stored),
        });
        self.pump(&name);
    }

    /// A peer delivers a message into a run it saw (any stored run, settled or not), or sends
    /// one of its deliveries again (a sender whose receipt was lost); one time in ten it reuses
    /// an id for another message.
    pub(crate) fn peer_delivers(&mut self) {
        if !self.deliveries_sent.is_empty() && self.rng.gen_bool(0.3) {
            let i = self.rng.gen_range(0..self.deliveries_sent.len());
            let (from, agent, run, id, mut text) = self.deliveries_sent[i].clone();
            if self.rng.gen_bool(0.1) {
                text.push_str(" (edited)");
            }
            self.stats.cover("delivery sent again".into());
            self.send_delivery(from, agent, run, id, text);
            return;
        }
        // Mostly into a run that is still going, now and then into any.
        let live = self.rng.gen_bool(0.8);
        let runs: Vec<(String, RunId)> = self
            .agents
            .iter()
            .flat_map(|(n, a)| {
                a.store
                    .runs
                    .iter()
                    .filter(move |(_, r)| !live || !r.status.is_settled())
                    .map(move |(id, _)| (n.clone(), id.clone()))
            })
            .collect();
        if runs.is_empty() {
            return;
        }
        let (agent, run) = runs[self.rng.gen_range(0..runs.len())].clone();
        let from = self.fleet.names[self.rng.gen_range(0..self.fleet.names.len())].clone();
        self.next_delivery += 1;
        let id = format!("d{}", self.next_delivery);
        let text = format!("sim: news {} from {from}", self.next_delivery);
        if self.deliveries_sent.len() >= 16 {
            self.deliveries_sent.remove(0);
        }
        let sent = (
            from.clone(),
            agent.clone(),
            run.clone(),
            id.clone(),
            text.clone(),
        );
        self.deliveries_sent.push(sent);
        self.send_delivery(from, agent, run, id, text);
    }

    fn send_delivery(
        &mut self,
        from: String,
        agent: String,
        run: RunId,
        delivery_id: String,
        text: String,
    ) {
        let h = self.fleet.host_of(&from);
        let msg = Msg::Deliver {
            from,
            agent: agent.clone(),
            run,
            delivery_id,
            text,
        };
        self.send(h, &agent, msg);
    }

    /// Now and then, an operator cancels a run (any stored run: unsettled mostly, now and then
    /// one that has settled).
    pub(crate) fn operator_cancels(&mut self) {
        if !self.rng.gen_bool(0.2) {
            return;
        }
        let runs: Vec<(String, RunId, bool)> = self
            .agents
            .iter()
            .flat_map(|(n, a)| {
                a.store
                    .runs
                    .iter()
                    .map(move |(id, r)| (n.clone(), id.clone(), r.status.is_settled()))
            })
            .collect();
        let live: Vec<&(String, RunId, bool)> = runs.iter().filter(|r| !r.2).collect();
        let pick = if !live.is_empty() && self.rng.gen_bool(0.8) {
            live[self.rng.gen_range(0..live.len())].clone()
        } else if !runs.is_empty() {
            runs[self.rng.gen_range(0..runs.len())].clone()
        } else {
            return;
        };
        let (agent, run, _) = pick;
        let h = self.fleet.host_of(&agent);
        self.send(h, &agent.clone(), Msg::Cancel { agent, run });
    }

    /// Blocked runs, with the gate each waits on and whether it is in doubt, from the stores
    /// (what an operator lists through the API).
    pub(crate) fn blocked_runs(&self) -> Vec<(String, RunId, String, bool)> {
        let mut out = Vec::new();
        for (name, agent) in &self.agents {
            for (id, run) in &agent.store.runs {
                if run.status != RunStatus::Blocked {
                    continue;
                }
                let view = RunView::from_events(&run.events);
                if let Some((tu, gate)) = view.waiting_gate() {
                    let gate_id = step::gate_id(id, tu, gate.asks);
                    out.push((name.clone(), id.clone(), gate_id, gate.in_doubt));
                }
            }
        }
        out
    }

    /// What an operator decides on a gate: mostly approve; on a gate in doubt, now and then
    /// it records what happened instead.
    fn draw_decision(&mut self, in_doubt: bool) -> Decision {
        if in_doubt && self.rng.gen_bool(0.3) {
            let failed = self.rng.gen_bool(0.3);
            return Decision::Record {
                content: format!("sim: recorded by the operator (failed: {failed})"),
                is_error: failed,
            };
        }
        if self.rng.gen_bool(0.7) {
            Decision::Approve
        } else {
            Decision::Deny
        }
    }

    /// An operator decides: mostly on a run it sees blocked, now and then on any run (one
    /// that is running, waiting, settled, or blocked no more); one time in five it sends the
    /// same decision twice (a client that retried at once), and one time in four it sends one
    /// of its earlier decisions again (a client that got no answer and retried later).
    pub(crate) fn operator_decides(&mut self) {
        if !self.decisions_sent.is_empty() && self.rng.gen_bool(0.25) {
            let i = self.rng.gen_range(0..self.decisions_sent.len());
            let (agent, run, decision, saw) = self.decisions_sent[i].clone();
            self.stats.cover("decision sent again".into());
            self.send_decision(&agent, &run, decision, saw);
            return;
        }
        let blocked = self.blocked_runs();
        let (agent, run, saw, decision) = if !blocked.is_empty() && self.rng.gen_bool(0.8) {
            let (agent, run, gate, in_doubt) =
                blocked[self.rng.gen_range(0..blocked.len())].clone();
            let decision = self.draw_decision(in_doubt);
            (agent, run, Some(gate), decision)
        } else {
            let runs: Vec<(String, RunId)> = self
                .agents
                .iter()
                .flat_map(|(n, a)| a.store.runs.keys().map(move |id| (n.clone(), id.clone())))
                .collect();
            if runs.is_empty() {
                return;
            }
            let (agent, run) = runs[self.rng.gen_range(0..runs.len())].clone();
            let decision = self.draw_decision(false);
            (agent, run, None, decision)
        };
        let times = if self.rng.gen_bool(0.2) { 2 } else { 1 };
        for _ in 0..times {
            self.send_decision(&agent, &run, decision.clone(), saw.clone());
        }
    }

    /// The calm phase's operator: every run still blocked gets a decision. True if any did.
    pub(crate) fn decide_all_blocked(&mut self) -> bool {
        let blocked = self.blocked_runs();
        for (agent, run, gate, in_doubt) in &blocked {
            let decision = self.draw_decision(*in_doubt);
            self.send_decision(agent, run, decision, Some(gate.clone()));
        }
        !blocked.is_empty()
    }

    fn send_decision(&mut self, agent: &str, run: &RunId, decision: Decision, saw: Option<String>) {
        // The API of the agent's own host: a crash of that host loses the request.
        let h = self.fleet.host_of(agent);
        if self.decisions_sent.len() >= 16 {
            self.decisions_sent.remove(0);
        }
        let sent = (agent.to_owned(), run.clone(), decision.clone(), saw.clone());
        self.decisions_sent.push(sent);
        self.decisions_made
            .entry(run.clone())
            .or_default()
            .push((decision.clone(), saw.clone()));
        let msg = Msg::Decide {
            agent: agent.to_owned(),
            run: run.clone(),
            decision,
            saw,
        };
        self.send(h, agent, msg);
    }

    /// An agent.yaml edited and reloaded: its host's actor steps every run from now on under
    /// the new config (a host that is down reads it when it restarts).
    pub(crate) fn reload_config(&mut self) {
        self.stats.reloads += 1;
        let (agent, what) = self.fleet.reload(&mut self.rng);
        self.stats.cover("config reloaded".into());
        self.log(format!("RELOAD {agent}: {what}"));
    }
}
