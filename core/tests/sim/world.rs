//! The simulated world's state: what a trial may do, the hosts with their agents (a durable
//! store, and the volatile node a crash loses: the shipping [`AgentMachine`], the store
//! writer's queue, the link's timeouts), the messages between hosts, the counts of what
//! happened, and the few primitives every part uses (the log, host clocks, sending).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use consort_core::machine::{AdmissionLimits, AgentMachine, AskerId};
use consort_core::step::{CallOutcome, Decision, Input, ReplyIn, TurnAsked};
use consort_core::{Message, RunId, TreeBudget};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::check::Violation;
use super::fleet::{AgentSpec, Fleet};
use super::store::{Done, Job, Placed, Store};
use super::trace::describe_msg;

/// How long a placement waits for its answer before the call is refused as unreachable (the
/// supervisor's `call_t` timeout), on the caller's clock.
pub(crate) const CALL_TIMEOUT: i64 = 100;
/// How long an envelope stays valid after it is issued (the real `call_ttl` is five times the
/// supervisor's call timeout).
pub(crate) const CALL_TTL: i64 = 5 * CALL_TIMEOUT;
/// The clock skew a callee allows when it checks an envelope's expiry.
pub(crate) const ALLOWED_SKEW: i64 = 20;
/// How long a `check_run` waits for the callee's host (the supervisor's `call_t` for a run
/// summary is half the call timeout).
pub(crate) const CHECK_TIMEOUT: i64 = CALL_TIMEOUT / 2;
/// The turn limit of every agent of a trial (`limits.max_turns`).
pub(crate) const MAX_MODEL_TURNS: u32 = 8;
pub(crate) const REPLY_CAP: usize = 1024;
/// Milliseconds of a host's clock per unit of simulated time: the machine's re-ask timer
/// (`REASK_AFTER`, 10 s) is 200 units, twice the call timeout.
pub(crate) const UNIT_MS: i64 = 50;
/// Where the hosts' clocks start, in Unix milliseconds (so a skewed clock stays positive).
const CLOCK_START_MS: i64 = 1_000_000;

/// What a trial may do.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Drive the machine's re-ask timer (`AgentMachine::reask_due_now`) on every tick.
    pub reask: bool,
    /// Edit agent.yaml files while runs go on (in the trials whose faults draw reloads).
    pub reloads: bool,
    /// Events of the fault phase.
    pub fault_events: usize,
    /// Record a human-readable trace.
    pub trace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            reask: true,
            reloads: true,
            fault_events: 400,
            trace: false,
        }
    }
}

/// Fault rates of one trial (drawn from its seed, so some trials are calm and some rough).
#[derive(Clone, Debug)]
pub(crate) struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    /// How often a host crashes right after one of its store's commits, before anything
    /// waiting for it runs.
    pub crash_at_commit: f64,
    pub crash_weight: u32,
    /// How often a model turn fails (the provider errs, times out).
    pub model_error: f64,
    /// How often a declared tool fails.
    pub tool_error: f64,
    /// How often the scheduler edits an agent.yaml (0: never in this trial).
    pub reload_weight: u32,
    /// How often the store writer commits when it could (low: long batches, late commits).
    pub commit_weight: u32,
}

// --- one agent ------------------------------------------------------------------------------

/// Someone waiting for a verdict of an agent's machine (`Command::Answer`), as the actor's
/// askers are.
#[derive(Clone, Debug)]
pub(crate) enum Asker {
    /// The link that brought a reply, told whether it was taken.
    Taken,
    /// An operator's decision: the gate its request names (the one it saw waiting).
    Decide {
        decision: Decision,
        saw: Option<String>,
    },
    /// An operator's cancel.
    Cancel,
    /// A peer's delivery into a run.
    Deliver { from: String, delivery_id: String },
}

/// What an agent keeps in memory only (the actor's state): lost on a crash.
#[derive(Debug)]
pub(crate) struct Node {
    /// The shipping agent machine.
    pub machine: AgentMachine,
    /// The store writer's queue: jobs sent and not committed yet (a crash loses them).
    pub jobs: VecDeque<Job>,
    /// Commits done whose notices the agent has not taken yet, in the writer's order.
    pub commits: VecDeque<(u64, Done)>,
    /// When each placement or `check_run` times out (the supervisor's `call_t`).
    pub deadlines: BTreeMap<(RunId, String), Deadline>,
    pub askers: BTreeMap<AskerId, Asker>,
    pub next_asker: AskerId,
}

impl Node {
    pub(crate) fn new(spec: &AgentSpec) -> Self {
        let limits = AdmissionLimits {
            admission_limit: spec.admission_limit,
            per_principal_limit: spec.admission_limit,
        };
        Self {
            machine: AgentMachine::new(&spec.name, REPLY_CAP, limits),
            jobs: VecDeque::new(),
            commits: VecDeque::new(),
            deadlines: BTreeMap::new(),
            askers: BTreeMap::new(),
            next_asker: 0,
        }
    }

    pub(crate) fn asker(&mut self, asker: Asker) -> AskerId {
        self.next_asker += 1;
        self.askers.insert(self.next_asker, asker);
        self.next_asker
    }
}

/// A task's timeout, on its host's clock: the supervisor's `call_t` around a placement or a
/// `check_run`.
#[derive(Clone, Debug)]
pub(crate) struct Deadline {
    pub at: i64,
    pub callee: String,
    /// A `check_run` (else a placement).
    pub check: bool,
}

#[derive(Debug)]
pub(crate) struct Agent {
    pub store: Store,
    pub node: Node,
}

/// Work an agent has queued for itself (its mailbox and its spawned tasks).
#[derive(Clone, Debug)]
pub(crate) enum Task {
    /// A message that moves a run (a timer's `Resume`, a restart's).
    Input {
        agent: String,
        run: RunId,
        input: Input,
    },
    /// A model turn being answered on its own task.
    Model {
        agent: String,
        run: RunId,
        asked: TurnAsked,
        conversation: Vec<Message>,
    },
    /// A tool use's result from its own task: a declared tool that ran, or a `check_run` the
    /// link answered itself (a timeout, a host that is down).
    ToolDone {
        agent: String,
        run: RunId,
        tool_use_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
    /// A placement's outcome reached through the link itself (a timeout, a down host).
    CallDone {
        agent: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
    },
    /// The store writer's notice of the agent's oldest commit not taken yet.
    Committed { agent: String },
}

#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub up: bool,
    pub skew: i64,
    pub tasks: Vec<Task>,
    /// Crashes so far: what was started in one epoch and not finished is lost with it.
    pub epoch: u64,
}

// --- the network ---------------------------------------------------------------------------------

/// A call's envelope, with the caller's config at the decision beside it (see [`Placed`]).
#[derive(Clone, Debug)]
pub(crate) struct CallMsg {
    pub caller: String,
    pub callee: String,
    pub parent_run: RunId,
    pub tool_use_id: String,
    pub child_run: RunId,
    pub input: String,
    pub chain_depth: usize,
    pub issued_at: i64,
    /// The child's share of the tree budget (the hop's allowance).
    pub budget: Option<TreeBudget>,
    pub placed: Placed,
    /// The caller's host epoch when it sent the call: the answer goes back on the request's
    /// connection, which dies with that incarnation.
    pub epoch: u64,
}

#[derive(Clone, Debug)]
pub(crate) enum Msg {
    Call(CallMsg),
    /// A call's answer, for the caller's incarnation that asked (`epoch`).
    CallAnswer {
        caller: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        outcome: CallOutcome,
        epoch: u64,
    },
    Reply {
        caller: String,
        reply: ReplyIn,
    },
    Resend {
        callee: String,
        child_run: RunId,
    },
    /// A `check_run` of a call's child run, to the callee's host.
    CheckRun {
        caller: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        child: RunId,
        epoch: u64,
    },
    /// A `check_run`'s answer, for the caller's incarnation that asked (`epoch`).
    CheckAnswer {
        caller: String,
        run: RunId,
        tool_use_id: String,
        content: String,
        is_error: bool,
        epoch: u64,
    },
    /// An operator's decision, through the API of the agent's host. `saw` is the gate the
    /// operator saw the run blocked on, and the one its request names (`None` for a decision
    /// on a run that was not, which names none).
    Decide {
        agent: String,
        run: RunId,
        decision: Decision,
        saw: Option<String>,
    },
    /// An operator's cancel of a run, through the API of the agent's host.
    Cancel {
        agent: String,
        run: RunId,
    },
    /// A peer's message delivered into a run (the directory's `deliver`).
    Deliver {
        from: String,
        agent: String,
        run: RunId,
        delivery_id: String,
        text: String,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Packet {
    pub id: u64,
    pub from: usize,
    pub to: usize,
    pub msg: Msg,
}

/// Counts of what a trial did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub events: u64,
    pub appends: u64,
    pub commits: u64,
    pub roots: u64,
    pub runs: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub crashes: u64,
    pub timeouts: u64,
    pub reasks: u64,
    pub decisions: u64,
    pub reloads: u64,
    pub tool_runs: u64,
    /// How often each interesting path was taken (refusal codes on either side, replays,
    /// held and dropped replies, expired envelopes), so a run can show it exercised them.
    pub coverage: BTreeMap<String, u64>,
}

impl Stats {
    /// Adds another trial's counts.
    pub(crate) fn add(&mut self, other: &Self) {
        self.events += other.events;
        self.appends += other.appends;
        self.commits += other.commits;
        self.roots += other.roots;
        self.runs += other.runs;
        self.delivered += other.delivered;
        self.dropped += other.dropped;
        self.duplicated += other.duplicated;
        self.crashes += other.crashes;
        self.timeouts += other.timeouts;
        self.reasks += other.reasks;
        self.decisions += other.decisions;
        self.reloads += other.reloads;
        self.tool_runs += other.tool_runs;
        for (k, n) in &other.coverage {
            *self.coverage.entry(k.clone()).or_default() += n;
        }
    }

    pub(crate) fn cover(&mut self, what: String) {
        *self.coverage.entry(what).or_default() += 1;
    }
}

// --- the world -----------------------------------------------------------------------------------

pub(crate) struct World {
    pub rng: StdRng,
    pub opts: Options,
    pub faults: Faults,
    pub faults_on: bool,
    pub fleet: Fleet,
    pub agents: BTreeMap<String, Agent>,
    pub hosts: Vec<Host>,
    pub net: Vec<Packet>,
    pub next_packet: u64,
    pub now: i64,
    /// What every host's `Instant` clock counts from (only differences are read).
    pub instant_zero: Instant,
    pub roots_left: u32,
    pub stats: Stats,
    pub trace: Vec<String>,
    /// Violations seen while running (kept views against the log, effects against the
    /// config in force, tool runs against approvals, answers against the run's state).
    pub violations: Vec<Violation>,
    /// Every run of a declared tool, by (run, tool use): the epoch of its host when it
    /// started, and the gate ask whose approval it ran under (0 for an ungated tool). The
    /// outside world's record of side effects, so it survives crashes.
    pub tool_runs: BTreeMap<(RunId, String), Vec<(u64, u32)>>,
    /// `check_run`s sent, by (run, tool use): the epochs of the caller's host.
    pub checks: BTreeMap<(RunId, String), Vec<u64>>,
    /// When each run last blocked, as committed: the epoch of its host.
    pub blocked_in: BTreeMap<RunId, u64>,
    /// The operator's recent decisions (agent, run, decision, the gate it saw), which it may
    /// send again: a client that got no answer (a host that crashed after the commit) retries.
    pub decisions_sent: Vec<(String, RunId, Decision, Option<String>)>,
    /// Every decision the operator sent, by run: what a decided gate is checked against.
    pub decisions_made: BTreeMap<RunId, Vec<(Decision, Option<String>)>>,
    /// Deliveries sent (from, to agent, run, id, text), which a sender may send again.
    pub deliveries_sent: Vec<(String, String, RunId, String, String)>,
    /// The seq each delivery was first answered with, by (run, sender, id).
    pub delivered_at: BTreeMap<(RunId, String, String), u64>,
    /// For each call use of a recorded model turn, the caller's config when the turn was
    /// recorded and the calls counted before it: what its placement is checked against.
    pub decided_under: BTreeMap<(RunId, String), Placed>,
    pub next_delivery: u64,
}

impl World {
    pub(crate) fn new(seed: u64, opts: Options) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let fleet = Fleet::random(&mut rng);
        let faults = Faults {
            drop: [0.0, 0.02, 0.08, 0.2][rng.gen_range(0..4)],
            duplicate: [0.0, 0.05, 0.15][rng.gen_range(0..3)],
            crash_at_commit: [0.0, 0.01, 0.04][rng.gen_range(0..3)],
            crash_weight: [0, 1, 3][rng.gen_range(0..3)],
            model_error: [0.0, 0.03, 0.1][rng.gen_range(0..3)],
            tool_error: [0.0, 0.2][rng.gen_range(0..2)],
            reload_weight: [0, 0, 1, 2][rng.gen_range(0..4)],
            commit_weight: [2, 6, 20][rng.gen_range(0..3)],
        };
        let agents = fleet
            .agents
            .iter()
            .map(|spec| {
                (
                    spec.name.clone(),
                    Agent {
                        store: Store::default(),
                        node: Node::new(spec),
                    },
                )
            })
            .collect();
        let hosts = (0..fleet.hosts)
            .map(|_| Host {
                up: true,
                skew: rng.gen_range(-30..=30),
                tasks: Vec::new(),
                epoch: 0,
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
            instant_zero: Instant::now(),
            roots_left,
            stats: Stats::default(),
            trace: Vec::new(),
            violations: Vec::new(),
            tool_runs: BTreeMap::new(),
            checks: BTreeMap::new(),
            blocked_in: BTreeMap::new(),
            decisions_sent: Vec::new(),
            decisions_made: BTreeMap::new(),
            deliveries_sent: Vec::new(),
            delivered_at: BTreeMap::new(),
            decided_under: BTreeMap::new(),
            next_delivery: 0,
        };
        if world.opts.trace {
            world.log(format!("fleet {:#?}", world.fleet.agents));
            world.log(format!("seed {seed}, faults {:?}", world.faults));
        }
        world
    }

    pub(crate) fn log(&mut self, line: String) {
        if self.opts.trace {
            self.trace
                .push(format!("[{:>5} t={}] {line}", self.stats.events, self.now));
        }
    }

    /// An invariant broken while running.
    pub(crate) fn violation(&mut self, class: &'static str, detail: String) {
        self.log(format!("  VIOLATION [{class}] {detail}"));
        self.violations.push(Violation { class, detail });
    }

    /// Host `host`'s clock, in units of simulated time.
    pub(crate) fn clock(&self, host: usize) -> i64 {
        self.now + self.hosts[host].skew
    }

    /// Host `host`'s clock in Unix milliseconds (what a step's `now_ms` reads).
    pub(crate) fn clock_ms(&self, host: usize) -> u64 {
        (CLOCK_START_MS + self.clock(host) * UNIT_MS).max(0) as u64
    }

    /// Host `host`'s clock as an `Instant` (what the machine's timers read).
    pub(crate) fn instant(&self, host: usize) -> Instant {
        let ms = (CLOCK_START_MS + self.clock(host) * UNIT_MS).max(0) as u64;
        self.instant_zero + Duration::from_millis(ms)
    }

    /// The units of simulated time from now until `at` on host `host`'s `Instant` clock.
    pub(crate) fn units_until(&self, host: usize, at: Instant) -> i64 {
        let now = self.instant(host);
        let ms = at.saturating_duration_since(now).as_millis() as i64;
        (ms + UNIT_MS - 1) / UNIT_MS
    }

    pub(crate) fn spec(&self, agent: &str) -> &AgentSpec {
        self.fleet.spec(agent)
    }

    pub(crate) fn agent(&mut self, name: &str) -> &mut Agent {
        self.agents
            .get_mut(name)
            .unwrap_or_else(|| panic!("unknown agent {name}"))
    }

    pub(crate) fn node(&mut self, name: &str) -> &mut Node {
        &mut self.agent(name).node
    }

    pub(crate) fn send(&mut self, from: usize, to_agent: &str, msg: Msg) {
        let to = self.fleet.host_of(to_agent);
        let id = self.next_packet;
        self.next_packet += 1;
        self.log(format!(
            "  send m{id} h{from}->h{to} {}",
            describe_msg(&msg)
        ));
        self.net.push(Packet { id, from, to, msg });
    }
}
