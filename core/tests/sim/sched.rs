//! The seeded scheduler: the fault phase and the calm phase, timers (the link's timeouts and
//! the machine's re-ask deadline), the store writers' commits, crashes and restarts, and the
//! tasks an agent queued for itself (a model turn among them, which may fail).

use consort_core::step::{CHECK_RUN, CallOutcome, Input};
use consort_core::{Refusal, RunId, RunStatus};
use rand::Rng;

use super::model::UNREACHABLE_MARK;
use super::trace::describe_task;
use super::world::{CALL_TIMEOUT, Node, Task, World};

/// The longest the calm phase lets time jump at once, in units: past the machine's longest
/// re-ask backoff (300 s).
const LONGEST_JUMP: i64 = 6_100;

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
            // Time jumps to the next deadline any host has (at least past the call timeout).
            let step = self
                .next_deadline()
                .unwrap_or(CALL_TIMEOUT)
                .clamp(CALL_TIMEOUT + 1, LONGEST_JUMP);
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
        !self.net.is_empty()
            || self.hosts.iter().any(|h| h.up && !h.tasks.is_empty())
            || self.writers_busy()
    }

    /// Whether a store writer of a host that is up has jobs to commit.
    fn writers_busy(&self) -> bool {
        self.fleet
            .agents
            .iter()
            .any(|a| self.hosts[a.host].up && !self.agents[&a.name].node.jobs.is_empty())
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
        let live = self
            .agents
            .values()
            .any(|a| a.store.runs.values().any(|r| !r.status.is_settled()));
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
            if self.writers_busy() {
                self.faults.commit_weight
            } else {
                0
            },
            // A peer delivers into a run, or sends one of its deliveries again.
            if live { 1 } else { 0 },
            // An operator cancels a run now and then.
            if live { 1 } else { 0 },
        ];
        if weights[0] + weights[1] + weights[4] + weights[5] + weights[8] == 0
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
            7 => self.reload_config(),
            8 => self.commit_any(),
            9 => self.peer_delivers(),
            _ => self.operator_cancels(),
        }
        true
    }

    /// A store writer with jobs commits (a random one).
    fn commit_any(&mut self) {
        let busy: Vec<String> = self
            .fleet
            .agents
            .iter()
            .filter(|a| self.hosts[a.host].up && !self.agents[&a.name].node.jobs.is_empty())
            .map(|a| a.name.clone())
            .collect();
        if busy.is_empty() {
            return;
        }
        let agent = busy[self.rng.gen_range(0..busy.len())].clone();
        self.commit(&agent);
    }

    /// Whether a timer (a placement's timeout, the re-ask timer) could still fire.
    pub(crate) fn timers_pending(&self) -> bool {
        self.agents.values().any(|a| {
            !a.node.deadlines.is_empty()
                || (self.opts.reask && a.node.machine.poll_timeout().is_some())
        })
    }

    /// The units until the next deadline of a host that is up, if any.
    fn next_deadline(&self) -> Option<i64> {
        let mut next: Option<i64> = None;
        for spec in &self.fleet.agents {
            let h = spec.host;
            if !self.hosts[h].up {
                continue;
            }
            let node = &self.agents[&spec.name].node;
            let clock = self.clock(h);
            let links = node.deadlines.values().map(|d| d.at - clock);
            let reask = self
                .opts
                .reask
                .then(|| node.machine.poll_timeout())
                .flatten()
                .map(|at| self.units_until(h, at));
            for due in links.chain(reask) {
                next = Some(next.map_or(due, |n: i64| n.min(due)));
            }
        }
        next
    }

    /// One event of the calm phase: a message, a task or a commit.
    pub(crate) fn work_event(&mut self) {
        let tasks = self.hosts.iter().any(|h| h.up && !h.tasks.is_empty());
        let writers = self.writers_busy();
        let mut options = Vec::new();
        if !self.net.is_empty() {
            options.push(0);
        }
        if tasks {
            options.push(1);
        }
        if writers {
            options.push(2);
        }
        match options[self.rng.gen_range(0..options.len())] {
            0 => self.deliver(),
            1 => self.run_task(),
            _ => self.commit_any(),
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
            let instant = self.instant(h);
            let names: Vec<String> = self
                .fleet
                .agents
                .iter()
                .filter(|a| a.host == h)
                .map(|a| a.name.clone())
                .collect();
            for name in names {
                let reask = self.opts.reask;
                let node = self.node(&name);
                let due: Vec<(RunId, String)> = node
                    .deadlines
                    .iter()
                    .filter(|(_, d)| d.at <= clock)
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut tasks = Vec::new();
                for key in due {
                    let Some(deadline) = node.deadlines.remove(&key) else {
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
                            outcome: CallOutcome::Refused(Refusal::unreachable(
                                &callee,
                                UNREACHABLE_MARK,
                            )),
                            callee,
                        }
                    });
                }
                if reask {
                    for run in node.machine.reask_due_now(instant) {
                        tasks.push(Task::Input {
                            agent: name.clone(),
                            run,
                            input: Input::Resume,
                        });
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

    /// Host `h` stops: its agents' machines, writers' queues, tasks and messages are lost;
    /// their stores stay.
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
        let specs: Vec<_> = self
            .fleet
            .agents
            .iter()
            .filter(|a| a.host == h)
            .cloned()
            .collect();
        for spec in specs {
            let node = self.node(&spec.name);
            if !node.jobs.is_empty() {
                self.stats.cover("crash with jobs not committed".into());
            }
            *self.node(&spec.name) = Node::new(&spec);
        }
        self.net.retain(|p| p.from != h && p.to != h);
    }

    /// Host `h` starts again: each agent's new machine counts the unsettled runs its store
    /// holds, and each of them resumes (`Input::Resume`, as the actor's start sends itself).
    pub(crate) fn restart(&mut self, h: usize) {
        self.hosts[h].up = true;
        self.hosts[h].skew = self.rng.gen_range(-30..=30);
        self.log(format!("RESTART h{h} skew={}", self.hosts[h].skew));
        let mut tasks = Vec::new();
        let specs: Vec<_> = self
            .fleet
            .agents
            .iter()
            .filter(|a| a.host == h)
            .cloned()
            .collect();
        for spec in specs {
            let agent = self.agent(&spec.name);
            let mut node = Node::new(&spec);
            for (id, run) in &agent.store.runs {
                if run.status.is_settled() {
                    continue;
                }
                let root_principal = run.parent.is_none().then(|| run.principal.clone());
                node.machine.restore_unsettled(id.clone(), root_principal);
                tasks.push(Task::Input {
                    agent: spec.name.clone(),
                    run: id.clone(),
                    input: Input::Resume,
                });
            }
            agent.node = node;
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
            Task::Input { agent, run, input } => self.feed(&agent, &run, input),
            Task::Model {
                agent,
                run,
                asked,
                conversation,
            } => {
                self.node(&agent).machine.answered(&run);
                let answer = self.model_answer(&agent, &conversation);
                self.feed(&agent, &run, Input::ModelAnswered { asked, answer });
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
            Task::Committed { agent } => self.committed(&agent),
        }
    }
}
