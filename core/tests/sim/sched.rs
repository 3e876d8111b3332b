//! The seeded scheduler: the fault phase and the calm phase, timers, crashes and restarts, and
//! the tasks an agent queued for itself (a model turn among them, which may fail).

use consort_core::step::{CHECK_RUN, CallOutcome, Input, ModelAnswer};
use consort_core::{Refusal, RunId, RunStatus};
use rand::Rng;

use super::engine::{MODEL_ERROR, QUEUED_WHILE_ASKED};
use super::model::{self, UNREACHABLE_MARK};
use super::trace::{describe_task, short};
use super::world::{CALL_TIMEOUT, REASK_AFTER, Task, Volatile, World};

impl World {
    /// Runs the trial: a fault phase, then a calm phase (every host up, no drops, duplicates or
    /// crashes) until nothing moves. Returns whether the calm phase reached quiescence.
    pub(crate) fn run(&mut self) -> bool {
        self.start_root();
        for _ in 0..self.opts.fault_events {
            if !self.fault_event() {
                break;
            }
        }
        self.faults_on = false;
        self.log("calm phase: faults off, every host up".into());
        for h in 0..self.hosts.len() {
            if !self.hosts[h].up {
                self.restart(h);
            }
        }
        while self.roots_left > 0 {
            self.start_root();
        }
        let mut idle = 0;
        for _ in 0..50_000 {
            if self.has_work() {
                self.work_event();
                continue;
            }
            if self.decide_all_blocked() {
                continue;
            }
            let before = self.stats.appends;
            let step = CALL_TIMEOUT.max(REASK_AFTER) + 1;
            self.tick(step);
            while self.has_work() {
                self.work_event();
                self.stats.events += 1;
            }
            if self.stats.appends == before {
                idle += 1;
                if idle >= 3 {
                    return true;
                }
            } else {
                idle = 0;
            }
        }
        false
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.net.is_empty() || self.hosts.iter().any(|h| h.up && !h.tasks.is_empty())
    }

    /// One event of the fault phase; false when there is nothing left to do.
    pub(crate) fn fault_event(&mut self) -> bool {
        self.stats.events += 1;
        let down = self.hosts.iter().filter(|h| !h.up).count() as u32;
        let up = self.hosts.len() as u32 - down;
        let tasks = self.hosts.iter().any(|h| h.up && !h.tasks.is_empty());
        let blocked = self.agents.values().any(|a| {
            a.store
                .runs
                .values()
                .any(|r| r.status == RunStatus::Blocked)
        });
        let weights = [
            if self.net.is_empty() { 0 } else { 10 },
            if tasks { 10 } else { 0 },
            2,
            if up > 0 { self.faults.crash_weight } else { 0 },
            if down > 0 { 3 } else { 0 },
            if self.roots_left > 0 { 1 } else { 0 },
            match (blocked, self.decisions_sent.is_empty()) {
                (true, _) => 3,
                (false, false) => 1,
                (false, true) => 0,
            },
            if self.opts.reloads {
                self.faults.reload_weight
            } else {
                0
            },
        ];
        if weights[0] + weights[1] + weights[4] + weights[5] == 0
            && !blocked
            && !self.timers_pending()
        {
            return false;
        }
        let total: u32 = weights.iter().sum();
        let mut pick = self.rng.gen_range(0..total);
        let mut choice = 0;
        while pick >= weights[choice] {
            pick -= weights[choice];
            choice += 1;
        }
        match choice {
            0 => self.deliver(),
            1 => self.run_task(),
            2 => {
                let dt = self.rng.gen_range(1..=40);
                self.tick(dt);
            }
            3 => {
                let ups: Vec<usize> = (0..self.hosts.len())
                    .filter(|h| self.hosts[*h].up)
                    .collect();
                let h = ups[self.rng.gen_range(0..ups.len())];
                self.crash(h, "scheduler");
            }
            4 => {
                let downs: Vec<usize> = (0..self.hosts.len())
                    .filter(|h| !self.hosts[*h].up)
                    .collect();
                let h = downs[self.rng.gen_range(0..downs.len())];
                self.restart(h);
            }
            5 => self.start_root(),
            6 => self.operator_decides(),
            _ => self.reload_config(),
        }
        true
    }

    /// Whether a timer (a placement's timeout, the re-ask timer) could still fire.
    pub(crate) fn timers_pending(&self) -> bool {
        self.agents.values().any(|a| {
            !a.vol.deadlines.is_empty()
                || (self.opts.reask
                    && a.store
                        .runs
                        .values()
                        .any(|r| r.status == RunStatus::Waiting))
        })
    }

    /// One event of the calm phase: a message or a task.
    pub(crate) fn work_event(&mut self) {
        let tasks = self.hosts.iter().any(|h| h.up && !h.tasks.is_empty());
        if !self.net.is_empty() && (!tasks || self.rng.gen_bool(0.5)) {
            self.deliver();
        } else {
            self.run_task();
        }
    }

    pub(crate) fn tick(&mut self, dt: i64) {
        self.now += dt;
        self.log(format!("tick +{dt}"));
        for h in 0..self.hosts.len() {
            if !self.hosts[h].up {
                continue;
            }
            let clock = self.clock(h);
            let names: Vec<String> = self
                .fleet
                .agents
                .iter()
                .filter(|a| a.host == h)
                .map(|a| a.name.clone())
                .collect();
            for name in names {
                let reask = self.opts.reask;
                let agent = self.agent(&name);
                let due: Vec<(RunId, String)> = agent
                    .vol
                    .deadlines
                    .iter()
                    .filter(|(_, d)| d.at <= clock)
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut tasks = Vec::new();
                for key in due {
                    let Some(deadline) = agent.vol.deadlines.remove(&key) else {
                        continue;
                    };
                    let (run, tool_use_id) = key;
                    let callee = deadline.callee;
                    tasks.push(if deadline.check {
                        Task::ToolDone {
                            agent: name.clone(),
                            run,
                            tool_use_id,
                            name: CHECK_RUN.to_owned(),
                            content: format!("{callee} did not answer check_run: timed out"),
                            is_error: true,
                        }
                    } else {
                        Task::CallDone {
                            agent: name.clone(),
                            run,
                            tool_use_id,
                            outcome: CallOutcome::Refused(Refusal::Unreachable {
                                callee: callee.clone(),
                                detail: UNREACHABLE_MARK.to_owned(),
                            }),
                            callee,
                        }
                    });
                }
                if reask {
                    let waiting: Vec<RunId> = agent
                        .store
                        .runs
                        .iter()
                        .filter(|(_, r)| r.status == RunStatus::Waiting)
                        .map(|(id, _)| id.clone())
                        .collect();
                    agent.vol.asked_at.retain(|id, _| waiting.contains(id));
                    for id in waiting {
                        let at = *agent.vol.asked_at.entry(id.clone()).or_insert(clock);
                        if clock - at >= REASK_AFTER {
                            agent.vol.asked_at.insert(id.clone(), clock);
                            tasks.push(Task::Drive {
                                agent: name.clone(),
                                run: id,
                                input: Some(Input::Resume),
                            });
                        }
                    }
                }
                for task in tasks {
                    match &task {
                        Task::CallDone { .. } => self.stats.timeouts += 1,
                        Task::ToolDone { .. } => {
                            self.stats.timeouts += 1;
                            self.stats.cover("check_run timed out".into());
                        }
                        _ => self.stats.reasks += 1,
                    }
                    self.log(format!("h{h} timer {}", describe_task(&task)));
                    self.hosts[h].tasks.push(task);
                }
            }
        }
    }

    pub(crate) fn crash(&mut self, h: usize, why: &str) {
        self.stats.crashes += 1;
        self.log(format!("CRASH h{h} ({why})"));
        // Kept views must equal the log up to the crash.
        self.check_views();
        self.hosts[h].up = false;
        self.hosts[h].epoch += 1;
        let running = self.hosts[h]
            .tasks
            .iter()
            .filter(|t| matches!(t, Task::ToolDone { name, .. } if name != CHECK_RUN))
            .count();
        for _ in 0..running {
            self.stats.cover("tool running at a crash".into());
        }
        self.hosts[h].tasks.clear();
        for spec in &self.fleet.agents {
            if spec.host == h
                && let Some(agent) = self.agents.get_mut(&spec.name)
            {
                agent.vol = Volatile::default();
            }
        }
        self.net.retain(|p| p.from != h && p.to != h);
    }

    pub(crate) fn restart(&mut self, h: usize) {
        self.hosts[h].up = true;
        self.hosts[h].skew = self.rng.gen_range(-30..=30);
        self.log(format!("RESTART h{h} skew={}", self.hosts[h].skew));
        let mut tasks = Vec::new();
        for spec in &self.fleet.agents {
            if spec.host != h {
                continue;
            }
            for (id, run) in &self.agents[&spec.name].store.runs {
                if !run.status.is_settled() {
                    tasks.push(Task::Drive {
                        agent: spec.name.clone(),
                        run: id.clone(),
                        input: Some(Input::Resume),
                    });
                }
            }
        }
        self.hosts[h].tasks.extend(tasks);
    }

    pub(crate) fn run_task(&mut self) {
        let hosts: Vec<usize> = (0..self.hosts.len())
            .filter(|h| self.hosts[*h].up && !self.hosts[*h].tasks.is_empty())
            .collect();
        if hosts.is_empty() {
            return;
        }
        let h = hosts[self.rng.gen_range(0..hosts.len())];
        let i = self.rng.gen_range(0..self.hosts[h].tasks.len());
        let task = self.hosts[h].tasks.remove(i);
        self.log(format!("h{h} task {}", describe_task(&task)));
        match task {
            Task::Drive { agent, run, input } => {
                let input = input.unwrap_or_else(|| self.advance_input(&agent, &run));
                self.drive(&agent, &run, input);
            }
            Task::Model {
                agent,
                run,
                asked,
                conversation,
            } => {
                self.agent(&agent).vol.thinking.remove(&run);
                // The ask was written before the model was asked (the sim's appends are
                // durable at once): a run whose model answers is not `queued`.
                let status = self.agents[&agent].store.runs[&run].status;
                if status == RunStatus::Queued {
                    self.violation(
                        QUEUED_WHILE_ASKED,
                        format!(
                            "{agent}'s run {} is queued while its model answers",
                            short(&run)
                        ),
                    );
                }
                let answer = if self.faults_on && self.rng.gen_bool(self.faults.model_error) {
                    self.stats.cover("model turn failed".into());
                    Err(format!("{MODEL_ERROR}: the provider answered 529"))
                } else {
                    let step = model::answer(self.spec(&agent), &self.fleet, &conversation);
                    Ok(ModelAnswer {
                        step,
                        input_tokens: 0,
                        output_tokens: 0,
                    })
                };
                self.drive(&agent, &run, Input::ModelAnswered { asked, answer });
            }
            Task::ToolDone {
                agent,
                run,
                tool_use_id,
                name,
                content,
                is_error,
            } => self.tool_done(&agent, run, tool_use_id, name, content, is_error),
            Task::CallDone {
                agent,
                run,
                tool_use_id,
                callee,
                outcome,
            } => self.call_done(&agent, run, tool_use_id, callee, outcome),
        }
    }
}
