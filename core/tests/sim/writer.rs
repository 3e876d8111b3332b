//! The store writers of the simulated agents: a commit takes one or several queued jobs of an
//! agent at once (group commit) and writes them to its store; a call's admission answers its
//! caller from the writer; each job's notice reaches the agent later, in the writer's order
//! (`AgentActor::on_committed`), and the machine releases what waited for it. Also the check
//! that every kept view equals its log as the writer will commit it.

use consort_core::event::ReplyOutcome;
use consort_core::step;
use consort_core::{RunEvent, RunStatus, RunView};
use rand::Rng;

use super::driver::{MODEL_ERROR, VIEW_DIFFERS};
use super::store::{Done, Job};
use super::trace::short;
use super::world::{Msg, Task, World};

impl World {
    /// The store writer of agent `agent` commits the oldest of its queued jobs, one or several
    /// in one transaction (group commit). A call's admission answers its caller right after
    /// the commit, from the writer; every job's notice reaches the agent later, in order, as a
    /// task of its own. With the trial's probability the host crashes right after the commit,
    /// before any of that.
    pub(crate) fn commit(&mut self, agent: &str) {
        let h = self.fleet.host_of(agent);
        let queued = self.agents[agent].node.jobs.len();
        if queued == 0 || !self.hosts[h].up {
            return;
        }
        let n = self.rng.gen_range(1..=queued);
        let jobs: Vec<Job> = self.node(agent).jobs.drain(..n).collect();
        self.stats.commits += 1;
        if n > 1 {
            self.stats.cover("commit of several jobs".into());
        }
        self.log(format!("h{h} commit {agent}: {n} of {queued} jobs"));
        let mut notices = Vec::new();
        let mut answers = Vec::new();
        for job in jobs {
            let ticket = job.ticket();
            let (done, answer) = self.apply(h, agent, job);
            notices.push((ticket, done));
            answers.extend(answer);
        }
        if self.faults_on && self.rng.gen_bool(self.faults.crash_at_commit) {
            self.crash(h, "right after a commit");
            return;
        }
        for (to, msg) in answers {
            self.send(h, &to, msg);
        }
        for notice in notices {
            self.node(agent).commits.push_back(notice);
            self.hosts[h].tasks.push(Task::Committed {
                agent: agent.to_owned(),
            });
        }
    }

    /// One job, written to the store; what its notice says, and a message the writer sends
    /// once the commit is done (a call's answer).
    fn apply(&mut self, h: usize, agent: &str, job: Job) -> (Done, Option<(String, Msg)>) {
        match job {
            Job::Append {
                run,
                transition,
                expected_seq,
                ..
            } => {
                let version = self.spec(agent).version;
                let store = &mut self.agent(agent).store;
                let reloaded = store.runs[&run].config_version != version;
                let events = store.append(&run, transition);
                let last_seq = store.runs[&run].events.len() as u64;
                self.cover_events(&events, reloaded);
                if events
                    .iter()
                    .any(|e| matches!(e, RunEvent::Status(s) if s.to == RunStatus::Blocked))
                {
                    let epoch = self.hosts[h].epoch;
                    self.blocked_in.insert(run.clone(), epoch);
                }
                (
                    Done::Appended {
                        run,
                        expected_seq,
                        last_seq,
                    },
                    None,
                )
            }
            Job::Insert { run, stored, .. } => {
                self.stats.runs += 1;
                self.agent(agent).store.insert(run, *stored);
                (Done::Started, None)
            }
            Job::Admit {
                call,
                gate,
                reservation,
                accepted,
                ..
            } => self.admit(agent, *call, &gate, reservation, accepted),
        }
    }

    /// A commit's notice, taken by the agent: keep what the job left, then let the machine
    /// release what waited for it (`AgentActor::on_committed`).
    pub(crate) fn committed(&mut self, agent: &str) {
        let Some((ticket, done)) = self.node(agent).commits.pop_front() else {
            return;
        };
        match done {
            Done::Appended {
                run,
                expected_seq,
                last_seq,
            } => {
                if last_seq != expected_seq {
                    let detail = format!(
                        "{agent} {}: the log ends at {last_seq}, the kept view at {expected_seq}",
                        short(&run)
                    );
                    self.violation(VIEW_DIFFERS, detail);
                    self.node(agent).machine.forget_view(&run);
                }
            }
            Done::Started => {}
            Done::Admitted {
                child,
                reservation,
                found,
                created,
            } => {
                let machine = &mut self.node(agent).machine;
                machine.call_admitted(&child, &reservation, &found);
                if let Some(events) = created {
                    machine.created(&child, &events);
                    machine.again(&child);
                }
            }
        }
        self.node(agent).machine.committed(ticket);
        self.pump(agent);
    }

    fn cover_events(&mut self, events: &[RunEvent], reloaded: bool) {
        for event in events {
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
                RunEvent::ApprovalRequested(a) if a.in_doubt => {
                    "gate in doubt after a crash".into()
                }
                RunEvent::ApprovalDecided(d) if d.approved => "approval approved".into(),
                RunEvent::ApprovalDecided(_) => "approval denied".into(),
                RunEvent::ToolResult(r) if r.name == step::CHECK_RUN && r.is_error => {
                    "check_run result (error)".into()
                }
                RunEvent::ToolResult(r) if r.name == step::CHECK_RUN => "check_run result".into(),
                RunEvent::ToolResult(r) if r.content.contains("budget_exhausted") => {
                    "tool result budget_exhausted".into()
                }
                RunEvent::Failed(f) if f.error.starts_with(MODEL_ERROR) => {
                    "run failed by its model".into()
                }
                RunEvent::Failed(f) if f.error.starts_with("budget_exhausted") => {
                    "run failed budget_exhausted".into()
                }
                RunEvent::MessageReceived(_) => "message received".into(),
                _ => continue,
            };
            self.stats.cover(what);
        }
    }

    /// Every kept view of an agent whose writer has nothing queued equals its run's log folded
    /// from scratch.
    pub(crate) fn check_views(&mut self) {
        let mut bad = Vec::new();
        for (name, agent) in &self.agents {
            for (id, run) in &agent.store.runs {
                let Some(view) = agent.node.machine.view(id) else {
                    continue;
                };
                let log = agent.store.read_through(id, agent.node.jobs.iter());
                if log.map(|e| RunView::from_events(e.iter())).as_ref() != Some(view) {
                    bad.push(format!(
                        "kept view of {name} {id} ({}) differs from its log folded from scratch",
                        run.status
                    ));
                }
            }
        }
        for detail in bad {
            self.violation(VIEW_DIFFERS, detail);
        }
    }
}
