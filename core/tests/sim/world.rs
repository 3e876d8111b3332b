//! The simulated fleet: durable stores, volatile agent state, the network, the executor that
//! mirrors the agent actor, and the seeded scheduler.

use std::collections::{BTreeMap, BTreeSet};

use consort_core::event::{Created, ReplyOutcome, StatusChanged};
use consort_core::guards::{self, InboundFacts};
use consort_core::step::{
    self, CallOutcome, Effect, Input, ModelAnswer, Policy, ReplyIn, TurnAsked, Verdict,
};
use consort_core::{Channel, Message, Refusal, RunEvent, RunId, RunStatus, RunView, Transition};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::fleet::{self, AgentSpec, Fleet, UNREACHABLE_MARK};

/// How long a placement waits for its answer before the call is refused as unreachable (the
/// supervisor's `call_t` timeout), on the caller's clock.
pub(crate) const CALL_TIMEOUT: i64 = 100;
/// How long an envelope stays valid after it is issued (the real `call_ttl` is five times the
/// supervisor's call timeout).
pub(crate) const CALL_TTL: i64 = 5 * CALL_TIMEOUT;
/// The clock skew a callee allows when it checks an envelope's expiry.
pub(crate) const ALLOWED_SKEW: i64 = 20;
/// The proposed re-ask timer: a run waiting longer than this asks its callees again.
pub(crate) const REASK_AFTER: i64 = 200;
const MAX_MODEL_TURNS: u64 = 8;
const REPLY_CAP: usize = 1024;

/// What a trial may do.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Model the proposed re-ask timer (a runtime change; see the crate docs).
    pub reask: bool,
    /// Events of the fault phase.
    pub fault_events: usize,
    /// Record a human-readable trace.
    pub trace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            reask: true,
            fault_events: 400,
            trace: false,
        }
    }
}

/// Fault rates of one trial (drawn from its seed, so some trials are calm and some rough).
#[derive(Clone, Debug)]
struct Faults {
    drop: f64,
    duplicate: f64,
    crash_at_append: f64,
    crash_weight: u32,
}

// --- durable state -------------------------------------------------------------------------------

/// Who placed a child run.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub run: RunId,
    pub agent: String,
    pub tool_use_id: String,
}

/// One run as the store keeps it: the row and its event log.
#[derive(Clone, Debug)]
pub(crate) struct StoredRun {
    pub parent: Option<Parent>,
    pub hop_depth: u32,
    pub events: Vec<RunEvent>,
    pub status: RunStatus,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The cost counter `calls_placed`, added to by transitions.
    pub calls_placed: u64,
}

/// One agent's durable store, with the in-memory counters the real store keeps beside it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    pub runs: BTreeMap<RunId, StoredRun>,
    /// Unsettled runs (what admission counts).
    pub unsettled: usize,
    /// Child runs accepted, per parent run.
    pub children: BTreeMap<RunId, u64>,
}

impl Store {
    fn insert(&mut self, id: RunId, run: StoredRun) {
        if let Some(parent) = &run.parent {
            *self.children.entry(parent.run.clone()).or_default() += 1;
        }
        self.unsettled += 1;
        self.runs.insert(id, run);
    }

    /// Appends a transition in one transaction, deriving `status` events as the real store
    /// does; returns every event written.
    fn append(&mut self, id: &RunId, t: Transition) -> Vec<RunEvent> {
        let Some(run) = self.runs.get_mut(id) else {
            panic!("append to unknown run {id}");
        };
        let mut status = run.status;
        let mut events = Vec::new();
        let starting = t.start && status == RunStatus::Queued;
        if starting {
            events.push(RunEvent::Status(StatusChanged {
                from: RunStatus::Queued,
                to: RunStatus::Running,
                error: None,
            }));
            status = RunStatus::Running;
        }
        events.extend(t.events);
        if let Some(next) = t.status
            && status != next
        {
            events.push(RunEvent::Status(StatusChanged {
                from: status,
                to: next,
                error: t.error.clone(),
            }));
        }
        run.events.extend(events.iter().cloned());
        run.calls_placed += t.cost.calls_placed;
        let was_settled = run.status.is_settled();
        if let Some(next) = t.status.or(starting.then_some(RunStatus::Running)) {
            run.status = next;
            run.output = t.output.or(run.output.take());
            run.error = t.error.or(run.error.take());
        }
        if !was_settled && run.status.is_settled() {
            self.unsettled -= 1;
        }
        events
    }
}

// --- volatile state ------------------------------------------------------------------------------

/// What an agent keeps in memory only (the real actor's `AgentState`): lost on a crash.
#[derive(Clone, Debug, Default)]
pub(crate) struct Volatile {
    pub views: BTreeMap<RunId, RunView>,
    pub in_flight: BTreeSet<(RunId, String)>,
    /// When each placement times out, on this host's clock.
    pub deadlines: BTreeMap<(RunId, String), i64>,
    pub thinking: BTreeSet<RunId>,
    pub early_replies: BTreeMap<RunId, ReplyIn>,
    /// The re-ask timer: when each waiting run last asked for its replies.
    pub asked_at: BTreeMap<RunId, i64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Agent {
    pub store: Store,
    pub vol: Volatile,
}

/// Work an agent has queued for itself (its mailbox and its spawned tasks).
#[derive(Clone, Debug)]
enum Task {
    /// Step a run: `None` is `Input::Advance` built when the task runs.
    Drive {
        agent: String,
        run: RunId,
        input: Option<Input>,
    },
    /// A model turn being answered on its own task.
    Model {
        agent: String,
        run: RunId,
        asked: TurnAsked,
        conversation: Vec<Message>,
    },
    /// A tool use's result (the scripted models use none; kept for completeness).
    Tool {
        agent: String,
        run: RunId,
        tool_use_id: String,
        name: String,
    },
    /// A placement's outcome reached through the link itself (a timeout, a down host).
    CallDone {
        agent: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub up: bool,
    pub skew: i64,
    tasks: Vec<Task>,
}

// --- the network ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Msg {
    Call {
        caller: String,
        callee: String,
        parent_run: RunId,
        tool_use_id: String,
        child_run: RunId,
        input: String,
        chain_depth: usize,
        issued_at: i64,
    },
    CallAnswer {
        caller: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    },
    Reply {
        caller: String,
        reply: ReplyIn,
    },
    Resend {
        callee: String,
        child_run: RunId,
    },
}

#[derive(Clone, Debug)]
struct Packet {
    id: u64,
    from: usize,
    to: usize,
    msg: Msg,
}

/// Counts of what a trial did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub events: u64,
    pub appends: u64,
    pub roots: u64,
    pub runs: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub crashes: u64,
    pub timeouts: u64,
    pub reasks: u64,
    /// How often each interesting path was taken (refusal codes on either side, replays,
    /// held and dropped replies, expired envelopes), so a run can show it exercised them.
    pub coverage: BTreeMap<String, u64>,
}

impl Stats {
    /// Adds another trial's counts.
    pub(crate) fn add(&mut self, other: &Self) {
        self.events += other.events;
        self.appends += other.appends;
        self.roots += other.roots;
        self.runs += other.runs;
        self.delivered += other.delivered;
        self.dropped += other.dropped;
        self.duplicated += other.duplicated;
        self.crashes += other.crashes;
        self.timeouts += other.timeouts;
        self.reasks += other.reasks;
        for (k, n) in &other.coverage {
            *self.coverage.entry(k.clone()).or_default() += n;
        }
    }

    fn cover(&mut self, what: String) {
        *self.coverage.entry(what).or_default() += 1;
    }
}

// --- the world -----------------------------------------------------------------------------------

pub(crate) struct World {
    rng: StdRng,
    pub opts: Options,
    faults: Faults,
    faults_on: bool,
    pub fleet: Fleet,
    pub agents: BTreeMap<String, Agent>,
    pub hosts: Vec<Host>,
    net: Vec<Packet>,
    next_packet: u64,
    pub now: i64,
    roots_left: u32,
    pub stats: Stats,
    pub trace: Vec<String>,
    /// Violations seen while running (kept views against the log).
    pub violations: Vec<String>,
}

impl World {
    pub(crate) fn new(seed: u64, opts: Options) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let fleet = Fleet::random(&mut rng);
        let faults = Faults {
            drop: [0.0, 0.02, 0.08, 0.2][rng.gen_range(0..4)],
            duplicate: [0.0, 0.05, 0.15][rng.gen_range(0..3)],
            crash_at_append: [0.0, 0.01, 0.04][rng.gen_range(0..3)],
            crash_weight: [0, 1, 3][rng.gen_range(0..3)],
        };
        let agents = fleet
            .names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    Agent {
                        store: Store::default(),
                        vol: Volatile::default(),
                    },
                )
            })
            .collect();
        let hosts = (0..fleet.hosts)
            .map(|_| Host {
                up: true,
                skew: rng.gen_range(-30..=30),
                tasks: Vec::new(),
            })
            .collect();
        let roots_left = rng.gen_range(1..=4);
        let mut world = Self {
            rng,
            opts,
            faults,
            faults_on: true,
            fleet,
            agents,
            hosts,
            net: Vec::new(),
            next_packet: 0,
            now: 0,
            roots_left,
            stats: Stats::default(),
            trace: Vec::new(),
            violations: Vec::new(),
        };
        if world.opts.trace {
            world.log(format!("fleet {:#?}", world.fleet.agents));
            world.log(format!("seed {seed}, faults {:?}", world.faults));
        }
        world
    }

    fn log(&mut self, line: String) {
        if self.opts.trace {
            self.trace
                .push(format!("[{:>5} t={}] {line}", self.stats.events, self.now));
        }
    }

    fn clock(&self, host: usize) -> i64 {
        self.now + self.hosts[host].skew
    }

    fn spec(&self, agent: &str) -> &AgentSpec {
        self.fleet.spec(agent)
    }

    fn agent(&mut self, name: &str) -> &mut Agent {
        self.agents
            .get_mut(name)
            .unwrap_or_else(|| panic!("unknown agent {name}"))
    }

    // --- the scheduler -------------------------------------------------------------------------

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

    fn has_work(&self) -> bool {
        !self.net.is_empty() || self.hosts.iter().any(|h| h.up && !h.tasks.is_empty())
    }

    /// One event of the fault phase; false when there is nothing left to do.
    fn fault_event(&mut self) -> bool {
        self.stats.events += 1;
        let down = self.hosts.iter().filter(|h| !h.up).count() as u32;
        let up = self.hosts.len() as u32 - down;
        let tasks = self.hosts.iter().any(|h| h.up && !h.tasks.is_empty());
        let weights = [
            if self.net.is_empty() { 0 } else { 10 },
            if tasks { 10 } else { 0 },
            2,
            if up > 0 { self.faults.crash_weight } else { 0 },
            if down > 0 { 3 } else { 0 },
            if self.roots_left > 0 { 1 } else { 0 },
        ];
        if weights[0] + weights[1] + weights[4] + weights[5] == 0 && !self.timers_pending() {
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
            _ => self.start_root(),
        }
        true
    }

    /// Whether a timer (a placement's timeout, the re-ask timer) could still fire.
    fn timers_pending(&self) -> bool {
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
    fn work_event(&mut self) {
        let tasks = self.hosts.iter().any(|h| h.up && !h.tasks.is_empty());
        if !self.net.is_empty() && (!tasks || self.rng.gen_bool(0.5)) {
            self.deliver();
        } else {
            self.run_task();
        }
    }

    fn tick(&mut self, dt: i64) {
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
                    .filter(|(_, at)| **at <= clock)
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut tasks = Vec::new();
                for key in due {
                    agent.vol.deadlines.remove(&key);
                    if let Some(callee) = agent
                        .vol
                        .views
                        .get(&key.0)
                        .and_then(|v| v.call_uses.get(&key.1))
                        .cloned()
                        .or_else(|| call_use_callee(&agent.store, &key.0, &key.1))
                    {
                        tasks.push(Task::CallDone {
                            agent: name.clone(),
                            run: key.0.clone(),
                            tool_use_id: key.1.clone(),
                            outcome: CallOutcome::Refused(Refusal::Unreachable {
                                callee: callee.clone(),
                                detail: UNREACHABLE_MARK.to_owned(),
                            }),
                            callee,
                        });
                    }
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
                        _ => self.stats.reasks += 1,
                    }
                    self.log(format!("h{h} timer {}", describe_task(&task)));
                    self.hosts[h].tasks.push(task);
                }
            }
        }
    }

    fn crash(&mut self, h: usize, why: &str) {
        self.stats.crashes += 1;
        self.log(format!("CRASH h{h} ({why})"));
        // Kept views must equal the log up to the crash.
        self.check_views();
        self.hosts[h].up = false;
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

    fn restart(&mut self, h: usize) {
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

    /// A root run started through the API on a random agent: admission, then the store.
    fn start_root(&mut self) {
        if self.roots_left == 0 {
            return;
        }
        self.roots_left -= 1;
        let name = self.fleet.names[self.rng.gen_range(0..self.fleet.names.len())].clone();
        let h = self.fleet.host_of(&name);
        let input = fleet::root_task(&mut self.rng);
        let id = RunId::parse(&format!("run_{:032x}", self.rng.r#gen::<u128>())).expect("id");
        if !self.hosts[h].up {
            self.log(format!("root on {name}: host h{h} down, not started"));
            return;
        }
        let (active, limit) = (
            self.agents[&name].store.unsettled,
            self.spec(&name).admission_limit,
        );
        if let Err(refusal) = guards::admit(&name, &input, active, limit) {
            self.log(format!("root on {name} refused: {}", refusal.code()));
            return;
        }
        self.stats.roots += 1;
        self.log(format!("root {} on {name}: {input}", short(&id)));
        self.insert_run(&name, id.clone(), None, 0, Channel::Api, input);
        if self.durable(h) {
            return;
        }
        self.hosts[h].tasks.push(Task::Drive {
            agent: name,
            run: id,
            input: None,
        });
    }

    fn insert_run(
        &mut self,
        agent: &str,
        id: RunId,
        parent: Option<Parent>,
        hop_depth: u32,
        channel: Channel,
        input: String,
    ) {
        self.stats.runs += 1;
        let created = RunEvent::Created(Created {
            channel,
            input,
            parent_run: parent.as_ref().map(|p| p.run.clone()),
            hop_depth,
            principal: parent
                .as_ref()
                .map_or_else(|| "anonymous".to_owned(), |p| p.agent.clone()),
        });
        self.agent(agent).store.insert(
            id,
            StoredRun {
                parent,
                hop_depth,
                events: vec![created],
                status: RunStatus::Queued,
                output: None,
                error: None,
                calls_placed: 0,
            },
        );
    }

    /// A durable append just committed on host `h`: with the trial's probability, the host
    /// crashes right here, before anything after the append runs. True if it did.
    fn durable(&mut self, h: usize) -> bool {
        self.stats.appends += 1;
        if self.faults_on && self.rng.gen_bool(self.faults.crash_at_append) {
            self.crash(h, "right after a durable append");
            return true;
        }
        false
    }

    fn send(&mut self, from: usize, to_agent: &str, msg: Msg) {
        let to = self.fleet.host_of(to_agent);
        let id = self.next_packet;
        self.next_packet += 1;
        self.log(format!(
            "  send m{id} h{from}->h{to} {}",
            describe_msg(&msg)
        ));
        self.net.push(Packet { id, from, to, msg });
    }

    fn deliver(&mut self) {
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

    fn run_task(&mut self) {
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
                let step = fleet::answer(self.spec(&agent), &self.fleet, &conversation);
                let input = Input::ModelAnswered {
                    asked,
                    answer: Ok(ModelAnswer {
                        step,
                        input_tokens: 0,
                        output_tokens: 0,
                    }),
                };
                self.drive(&agent, &run, input);
            }
            Task::Tool {
                agent,
                run,
                tool_use_id,
                name,
            } => {
                self.agent(&agent)
                    .vol
                    .in_flight
                    .remove(&(run.clone(), tool_use_id.clone()));
                let input = Input::ToolFinished {
                    tool_use_id,
                    name,
                    content: "sim: no such tool".into(),
                    is_error: true,
                    counts: true,
                };
                self.drive(&agent, &run, input);
            }
            Task::CallDone {
                agent,
                run,
                tool_use_id,
                callee,
                outcome,
            } => self.call_done(&agent, run, tool_use_id, callee, outcome),
        }
    }

    // --- the executor (mirrors actors/src/agent) -------------------------------------------------

    fn advance_input(&self, agent: &str, run: &RunId) -> Input {
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
    fn drive(&mut self, agent_name: &str, id: &RunId, input: Input) -> Option<Verdict> {
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

    fn tool_out(&mut self, h: usize, agent: &str, run: &RunId, tool_use_id: String, name: String) {
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
    fn write(&mut self, agent_name: &str, id: &RunId, transition: Transition) {
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
    fn report_settled(&mut self, h: usize, agent: &str, id: &RunId) {
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

    /// The callee's side of a call (`accept` in the real engine): the replay check by child
    /// run id, then the inbound guards, then the store. `None` when the host crashed.
    #[allow(clippy::too_many_arguments)]
    fn accept(
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

    /// A placement's outcome (`call_done`): record it, then hand over a reply that beat it.
    fn call_done(
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

    fn receive_reply(&mut self, agent: &str, reply: ReplyIn) {
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

fn call_use_callee(store: &Store, run: &RunId, tool_use_id: &str) -> Option<String> {
    let events = &store.runs.get(run)?.events;
    RunView::from_events(events)
        .call_uses
        .get(tool_use_id)
        .cloned()
}

/// The first hex digits of a run id, for traces.
pub(crate) fn short(id: &RunId) -> &str {
    &id.as_str()[4..12]
}

fn describe_msg(msg: &Msg) -> String {
    match msg {
        Msg::Call {
            caller,
            callee,
            tool_use_id,
            child_run,
            chain_depth,
            ..
        } => format!(
            "Call {caller}->{callee} tu={tool_use_id} child={} depth={chain_depth}",
            short(child_run)
        ),
        Msg::CallAnswer {
            caller,
            run,
            tool_use_id,
            outcome,
            ..
        } => {
            let what = match outcome {
                CallOutcome::Accepted { existing, .. } => format!("accepted existing={existing}"),
                CallOutcome::Refused(r) => format!("refused {}", r.code()),
            };
            format!(
                "CallAnswer to {caller} {} tu={tool_use_id} {what}",
                short(run)
            )
        }
        Msg::Reply { caller, reply } => format!(
            "Reply {}->{caller} child={} parent={}",
            reply.callee,
            short(&reply.child_run),
            short(&reply.parent_run)
        ),
        Msg::Resend { callee, child_run } => {
            format!("Resend to {callee} child={}", short(child_run))
        }
    }
}

fn describe_task(task: &Task) -> String {
    match task {
        Task::Drive { agent, run, input } => {
            let what = match input {
                None => "Advance".to_owned(),
                Some(Input::Resume) => "Resume".to_owned(),
                Some(other) => format!("{other:?}").chars().take(60).collect(),
            };
            format!("Drive {agent} {} {what}", short(run))
        }
        Task::Model { agent, run, .. } => format!("ModelDone {agent} {}", short(run)),
        Task::Tool {
            agent,
            run,
            tool_use_id,
            ..
        } => format!("ToolDone {agent} {} tu={tool_use_id}", short(run)),
        Task::CallDone {
            agent,
            run,
            tool_use_id,
            outcome,
            ..
        } => {
            let what = match outcome {
                CallOutcome::Accepted { .. } => "accepted".to_owned(),
                CallOutcome::Refused(r) => format!("refused {}", r.code()),
            };
            format!("CallDone {agent} {} tu={tool_use_id} {what}", short(run))
        }
    }
}

fn describe_event(event: &RunEvent) -> String {
    match event {
        RunEvent::Status(s) => format!("status {}->{}", s.from, s.to),
        RunEvent::ModelTurn(t) => match &t.step {
            consort_core::ModelStep::ToolUses(uses) => format!(
                "model_turn uses[{}]",
                uses.iter()
                    .map(|u| {
                        let callee = u.input.get("agent").and_then(|a| a.as_str()).unwrap_or("");
                        format!("{}->{callee}", u.id)
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            consort_core::ModelStep::Wait => "model_turn wait".into(),
            consort_core::ModelStep::Answer(_) => "model_turn answer".into(),
        },
        RunEvent::ToolResult(r) => format!(
            "tool_result {}{}",
            r.tool_use_id,
            if r.is_error { " (error)" } else { "" }
        ),
        RunEvent::CallPlaced(c) => format!(
            "call_placed {} child={}{}",
            c.tool_use_id,
            short(&c.child_run),
            if c.existing { " existing" } else { "" }
        ),
        RunEvent::CallRefused(c) => format!("call_refused {} {}", c.tool_use_id, c.code),
        RunEvent::ReplyReceived(r) => format!("reply_received child={}", short(&r.child_run)),
        other => other.kind().to_owned(),
    }
}
