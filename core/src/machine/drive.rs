//! The drive: how the machine moves its runs with [`step`](crate::step()), and the commands it
//! gives its driver.
//!
//! Whatever moves a run arrives as an [`Input`] ([`AgentMachine::input`]), optionally from an
//! asker who waits for the verdict (an operator's decision, a delivery, a reply from another
//! host). Inputs queue in the run's *drive*; [`AgentMachine::poll`] steps them one by one with
//! the run's kept view and hands out [`Command`]s in the order they must happen:
//!
//! - [`Command::Load`]: the run's view is not kept (a restart, a run settled earlier); read its
//!   log and give it back ([`AgentMachine::loaded`]);
//! - [`Command::Append`]: a step's transition, already folded into the kept view, with the
//!   ticket of its store job;
//! - [`Command::Execute`]: an effect. One that lets something out of the run (a call, a tool
//!   use, a `check_run`, a settle notice) is handed out only once the run's writes before it
//!   are durable: until then the drive is *suspended*, and later inputs of the run wait in it,
//!   in order, while the machine moves its other runs (so they share the store's commits);
//! - [`Command::Answer`]: an asker's verdict, once what it reports is durable;
//! - [`Command::Done`]: a drive ended (a settled run's kept state can go).
//!
//! An effect's outcome comes back as a new input: at once for an effect answered in place (an
//! immediate model, [`AgentMachine::input_first`]), later for one run on a task. Nothing here
//! performs I/O or reads a clock.

use std::collections::VecDeque;

use crate::step::{self, Effect, Input, Policy, Verdict};
use crate::{RunEvent, RunId, RunView, Transition};

use super::AgentMachine;
use super::tickets::Waiter;

/// Who asked for an input's verdict: an id the driver chose, handed back with the answer.
pub type AskerId = u64;

/// What the driver does next for the machine. See the module docs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Command {
    /// Read run `0`'s log and hand its fold back with [`AgentMachine::loaded`].
    Load(RunId),
    /// Append `transition` to `run`'s log, as store job `ticket`; the kept view now ends at
    /// `expected_seq` (a log that ends elsewhere was written by someone else).
    Append {
        /// The run.
        run: RunId,
        /// The store job's ticket: report its commit with [`AgentMachine::committed`].
        ticket: u64,
        /// What to append, in one transaction.
        transition: Transition,
        /// The kept view's last seq after it.
        expected_seq: u64,
    },
    /// Execute one effect of `run`; its outcome comes back as an input.
    Execute {
        /// The run.
        run: RunId,
        /// The effect.
        effect: Effect,
    },
    /// Answer asker `asker` (when there is one) about run `run`'s input: its verdict, now
    /// durable. A reply the run did not take is answered even without an asker, so that the
    /// driver can say why it was dropped.
    Answer(Answer),
    /// A drive of `run` is over; `settled` when the run has settled (nothing steps it again
    /// but a late input, which loads it back).
    Done {
        /// The run.
        run: RunId,
        /// Its log is final.
        settled: bool,
    },
    /// A drive of `run` stepped its bound without settling: it is left for the next input, and
    /// the askers of the inputs it still held are answered [`Verdict::Dropped`].
    Stalled(RunId),
    /// A barrier the driver asked for ([`AgentMachine::barrier`]) is reached: the writes
    /// before it are durable, and nothing after it has been handed out.
    Barrier {
        /// The run.
        run: RunId,
        /// The driver's token.
        token: u32,
    },
}

/// An asker's answer (see [`Command::Answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Who asked, if anyone.
    pub asker: Option<AskerId>,
    /// The run.
    pub run: RunId,
    /// What its step decided. A reply held until its call is recorded reads
    /// [`Verdict::Taken`].
    pub verdict: Verdict,
}

/// One run's drive: the inputs it has to step and the effects it has left to hand out.
#[derive(Debug, Default)]
pub(crate) struct Drive {
    inputs: VecDeque<(Input, Option<AskerId>)>,
    todo: VecDeque<Todo>,
    /// An effect asked to step again once the inputs are done.
    again: bool,
    /// Steps left (set from the policy at the drive's first step, one more for each input
    /// that arrives after it).
    bound: Option<u64>,
    /// Waiting for the run's log to be loaded.
    loading: bool,
    /// Waiting for a commit.
    suspended: bool,
}

impl Drive {
    /// An input arrived: it takes one step of its own, which the run's own steps must not be
    /// short of (a burst of decisions or deliveries while the drive waits for a commit is not
    /// a run going round in circles).
    fn one_more_step(&mut self) {
        if let Some(bound) = self.bound.as_mut() {
            *bound += 1;
        }
    }
}

#[derive(Debug)]
enum Todo {
    Effect(Effect),
    Barrier(u32),
}

impl AgentMachine {
    // --- what the driver tells -----------------------------------------------------------

    /// Input `input` for run `run`; `asker` waits for its verdict.
    pub fn input(&mut self, run: &RunId, input: Input, asker: Option<AskerId>) {
        let drive = self.drive_of(run);
        drive.inputs.push_back((input, asker));
        drive.one_more_step();
        self.wake(run);
    }

    /// An effect's outcome that is the run's next input, ahead of any other (an immediate
    /// model's answer).
    pub fn input_first(&mut self, run: &RunId, input: Input) {
        let drive = self.drive_of(run);
        drive.inputs.push_front((input, None));
        drive.one_more_step();
        self.wake(run);
    }

    /// An executed effect recorded something: step the run again once its inputs are done.
    pub fn again(&mut self, run: &RunId) {
        self.drive_of(run).again = true;
        self.wake(run);
    }

    /// The log of run `run` as [`Command::Load`] asked, folded; `None` when the store has no
    /// such run (its inputs are dropped, their askers answered
    /// [`Verdict::Dropped`]).
    pub fn loaded(&mut self, run: &RunId, view: Option<RunView>) {
        match view {
            Some(view) => {
                self.views.insert(run.clone(), view);
                if let Some(drive) = self.drives.get_mut(run) {
                    drive.loading = false;
                }
                self.wake(run);
            }
            None => {
                let Some(drive) = self.drives.remove(run) else {
                    return;
                };
                self.ready.retain(|r| r != run);
                for (_, asker) in drive.inputs {
                    self.out.push_back(Command::Answer(Answer {
                        asker,
                        run: run.clone(),
                        verdict: Verdict::Dropped("no such run"),
                    }));
                }
            }
        }
    }

    /// A run just stored with its first events: its view is kept, so its first step reads
    /// nothing back. A view kept already is newer and stays: a request can reach a called run
    /// between its admission's commit and the notice of it (an operator's cancel read the run
    /// from the store), and its step loaded and moved the run since.
    pub fn created(&mut self, run: &RunId, events: &[RunEvent]) {
        self.views
            .entry(run.clone())
            .or_insert_with(|| RunView::from_events(events));
    }

    /// The ticket of a store job that starts run `run`'s log (a root run's insert): what the
    /// run lets out waits for it.
    pub fn insert_ticket(&mut self, run: &RunId) -> u64 {
        self.tickets.issue_for(run)
    }

    /// The ticket of a store job that writes no run's log (a call's admission).
    pub fn job_ticket(&mut self) -> u64 {
        self.tickets.issue()
    }

    /// Store job `ticket` committed (and every one before it): what waited for it moves on.
    pub fn committed(&mut self, ticket: u64) {
        for waiter in self.tickets.committed(ticket) {
            match waiter {
                Waiter::Drive(run) => {
                    if let Some(drive) = self.drives.get_mut(&run) {
                        drive.suspended = false;
                    }
                    self.wake(&run);
                }
                Waiter::Answer(answer) => self.out.push_back(Command::Answer(answer)),
            }
        }
    }

    /// The run's log was found out of step with its kept view (someone else wrote to it):
    /// the view goes, and the next step loads it again.
    pub fn forget_view(&mut self, run: &RunId) {
        self.views.remove(run);
    }

    /// Holds everything `run` has left to hand out until its writes so far are durable, then
    /// gives [`Command::Barrier`] with `token` (the crash tests' durable boundaries).
    pub fn barrier(&mut self, run: &RunId, token: u32) {
        self.drive_of(run).todo.push_front(Todo::Barrier(token));
        self.wake(run);
    }

    // --- what the driver reads -------------------------------------------------------------

    /// The kept view of run `run`.
    pub fn view(&self, run: &RunId) -> Option<&RunView> {
        self.views.get(run)
    }

    /// Whether run `run` has a drive (inputs to step or effects to hand out).
    pub fn has_drive(&self, run: &RunId) -> bool {
        self.drives.contains_key(run)
    }

    /// Whether run `run` has a drive waiting for a commit.
    pub fn is_suspended(&self, run: &RunId) -> bool {
        self.drives.get(run).is_some_and(|d| d.suspended)
    }

    /// The last ticket handed out (what a checkpoint compares with).
    pub fn tickets_issued(&self) -> u64 {
        self.tickets.issued()
    }

    /// The runs waiting on calls whose time to ask their callees again has come (see
    /// [`AgentMachine::reask_due`]).
    pub fn reask_due_now(&mut self, now: std::time::Instant) -> Vec<RunId> {
        let waiting: Vec<RunId> = self
            .views
            .iter()
            .filter(|(id, v)| !self.is_suspended(id) && Self::waits_on_calls(v))
            .map(|(id, _)| id.clone())
            .collect();
        self.reask_due(now, &waiting)
    }

    // --- the loop -------------------------------------------------------------------------

    /// The next command, or `None` when every drive is done, suspended or loading.
    pub fn poll(&mut self, policy: &Policy<'_>) -> Option<Command> {
        loop {
            if let Some(command) = self.out.pop_front() {
                return Some(command);
            }
            let run = self.ready.pop_front()?;
            self.advance(&run, policy);
        }
    }

    fn drive_of(&mut self, run: &RunId) -> &mut Drive {
        self.drives.entry(run.clone()).or_default()
    }

    /// Puts `run` in line for [`AgentMachine::poll`] if its drive can move.
    fn wake(&mut self, run: &RunId) {
        let movable = self
            .drives
            .get(run)
            .is_some_and(|d| !d.loading && !d.suspended);
        if movable && !self.ready.contains(run) {
            self.ready.push_back(run.clone());
        }
    }

    /// One unit of `run`'s drive: hand out its next effect, or step its next input. Whatever
    /// it hands out goes to `out`; a drive that can go on is put back first in line, so one
    /// run's commands stay in order and its effects' outcomes come back before it steps on.
    fn advance(&mut self, run: &RunId, policy: &Policy<'_>) {
        let uncommitted = self.tickets.uncommitted(run);
        let Some(drive) = self.drives.get_mut(run) else {
            return;
        };
        if let Some(todo) = drive.todo.pop_front() {
            let waits = match &todo {
                Todo::Effect(effect) => waits_for_commit(effect),
                Todo::Barrier(_) => true,
            };
            if waits && let Some(ticket) = uncommitted {
                drive.todo.push_front(todo);
                drive.suspended = true;
                self.tickets.wait(ticket, Waiter::Drive(run.clone()));
                return;
            }
            let command = match todo {
                Todo::Barrier(token) => Command::Barrier {
                    run: run.clone(),
                    token,
                },
                Todo::Effect(Effect::Advance) => {
                    drive.again = true;
                    self.ready.push_front(run.clone());
                    return;
                }
                Todo::Effect(effect) => Command::Execute {
                    run: run.clone(),
                    effect,
                },
            };
            self.out.push_back(command);
            self.ready.push_front(run.clone());
            return;
        }
        // A step that asked to step again is honoured once the inputs queued before it are
        // done, whatever those inputs' own steps asked (a duplicate reply asks nothing).
        if drive.inputs.is_empty() && drive.again {
            drive.again = false;
            let advance = self.advance_input(run);
            let Some(drive) = self.drives.get_mut(run) else {
                return;
            };
            drive.inputs.push_back((advance, None));
        }
        let Some(drive) = self.drives.get_mut(run) else {
            return;
        };
        let Some((mut input, asker)) = drive.inputs.pop_front() else {
            self.drive_over(run);
            return;
        };
        // What only the machine knows is filled in when the input's turn comes, not when it
        // arrived: a reply queued behind a suspended drive may find its call recorded by then.
        let mut ended = None;
        match &mut input {
            Input::Reply { reply, placing } => *placing = self.placing(reply),
            Input::CallEnded {
                tool_use_id,
                outcome,
                ..
            } => {
                self.call_ending(run, tool_use_id);
                ended = Some((tool_use_id.clone(), outcome.clone()));
            }
            Input::ToolFinished { tool_use_id, .. } => {
                self.task_back(run, tool_use_id);
            }
            _ => {}
        }
        // Only this incarnation knows which gated uses it started itself.
        let authorized = match &mut input {
            Input::ToolAuthorized {
                tool_use_id,
                started_here,
                ..
            } => {
                *started_here = self.started.contains(run, tool_use_id);
                Some(tool_use_id.clone())
            }
            _ => None,
        };
        let Some(drive) = self.drives.get_mut(run) else {
            return;
        };
        let Some(view) = self.views.get(run) else {
            drive.inputs.push_front((input, asker));
            drive.loading = true;
            self.out.push_back(Command::Load(run.clone()));
            return;
        };
        // Each model turn takes a few steps: the agent's own turn limit bounds them.
        let bound = drive.bound.get_or_insert(
            u64::from(policy.limits.max_turns) * 4 + 16 + drive.inputs.len() as u64 + 1,
        );
        if *bound == 0 {
            drive.inputs.push_front((input, asker));
            let Some(drive) = self.drives.remove(run) else {
                return;
            };
            self.ready.retain(|r| r != run);
            // Nobody waits for an answer that will not come.
            for (_, asker) in drive.inputs {
                if asker.is_some() {
                    self.out.push_back(Command::Answer(Answer {
                        asker,
                        run: run.clone(),
                        verdict: Verdict::Dropped("the run stepped its bound"),
                    }));
                }
            }
            self.out.push_back(Command::Stalled(run.clone()));
            return;
        }
        *bound -= 1;
        let reply = match &input {
            Input::Reply { reply, .. } => Some(reply.clone()),
            _ => None,
        };
        let step = step::step(view, input, policy);
        if let Some(use_id) = authorized {
            let started = step.write.as_ref().is_some_and(|t| {
                t.events
                    .iter()
                    .any(|e| matches!(e, RunEvent::ToolStarted(s) if s.tool_use_id == use_id))
            });
            if started {
                // Recorded before it runs: only this incarnation may run it under its approval.
                self.started.insert(run, &use_id);
            }
            if step
                .effects
                .iter()
                .any(|e| matches!(e, Effect::RunTool { .. }))
            {
                // A start is spent once.
                self.started.remove(run, &use_id);
            }
        }
        if let Some(transition) = step.write {
            self.append(run, transition);
        }
        let mut verdict = step.verdict;
        if let Some(reply) = reply
            && self.reply_stepped(reply, &verdict)
            && verdict == Verdict::Hold
        {
            verdict = Verdict::Taken;
        }
        if asker.is_some() || matches!(verdict, Verdict::Dropped(_)) {
            let answer = Answer {
                asker,
                run: run.clone(),
                verdict,
            };
            match self.tickets.uncommitted(run) {
                Some(ticket) => self.tickets.wait(ticket, Waiter::Answer(answer)),
                None => self.out.push_back(Command::Answer(answer)),
            }
        }
        let early =
            ended.and_then(|(tool_use_id, outcome)| self.held_for(run, &tool_use_id, &outcome));
        if let Some(drive) = self.drives.get_mut(run) {
            drive
                .todo
                .extend(step.effects.into_iter().map(Todo::Effect));
            if let Some(reply) = early {
                drive.inputs.push_front((reply, None));
            }
        }
        self.ready.push_front(run.clone());
    }

    /// Folds `transition` into run `run`'s kept view and hands it out with its ticket.
    fn append(&mut self, run: &RunId, transition: Transition) {
        let Some(view) = self.views.get_mut(run) else {
            return;
        };
        let status = view.status.unwrap_or(crate::RunStatus::Queued);
        for event in transition.appended_events(status) {
            view.apply(&event);
        }
        let expected_seq = view.last_seq;
        if transition.settles() {
            self.run_settled(run);
        }
        let ticket = self.tickets.issue_for(run);
        self.out.push_back(Command::Append {
            run: run.clone(),
            ticket,
            transition,
            expected_seq,
        });
    }

    /// A drive with nothing left: a settled run's kept state goes.
    fn drive_over(&mut self, run: &RunId) {
        self.drives.remove(run);
        let settled = self
            .views
            .get(run)
            .and_then(|v| v.status)
            .is_some_and(crate::RunStatus::is_settled);
        if settled {
            self.views.remove(run);
            self.forget_run(run);
        }
        self.out.push_back(Command::Done {
            run: run.clone(),
            settled,
        });
    }

    /// Whether the machine has no drive and nothing waiting for a commit.
    pub(crate) fn drives_quiet(&self) -> bool {
        self.drives.is_empty() && self.out.is_empty() && self.tickets.is_quiet()
    }
}

/// Whether an effect lets something out of the run that must follow the commit of the writes
/// before it: a call (its child run id comes from a tool use the log must remember), a tool's
/// side effect, a `check_run`, a settle notice (a reply). Asking the model, timers and asking
/// callees again go on without waiting.
fn waits_for_commit(effect: &Effect) -> bool {
    match effect {
        Effect::PlaceCall { .. }
        | Effect::CheckRun { .. }
        | Effect::UseTool(_)
        | Effect::RunTool { .. }
        | Effect::Settled => true,
        Effect::Advance
        | Effect::AskModel(_)
        | Effect::AwaitReply { .. }
        | Effect::AskReplies(_) => false,
    }
}
