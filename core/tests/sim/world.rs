//! The simulated world's state: what a trial may do, the hosts with their volatile agent state
//! and queued tasks, the messages between hosts, the counts of what happened, and the few
//! primitives every part uses (the log, host clocks, storing a run, a durable boundary,
//! sending).

use std::collections::{BTreeMap, BTreeSet};

use consort_core::event::Created;
use consort_core::step::{CallOutcome, Decision, Input, ReplyIn, TurnAsked};
use consort_core::{Channel, Message, RunEvent, RunId, RunStatus, RunView};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::check::Violation;
use super::fleet::{AgentSpec, Fleet};
use super::store::{Parent, Placed, Store, StoredRun};
use super::trace::describe_msg;

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
/// How long a `check_run` waits for the callee's host (the supervisor's `call_t` for a run
/// summary is half the call timeout).
pub(crate) const CHECK_TIMEOUT: i64 = CALL_TIMEOUT / 2;
/// The turn limit of every agent of a trial (`limits.max_turns`).
pub(crate) const MAX_MODEL_TURNS: u32 = 8;
pub(crate) const REPLY_CAP: usize = 1024;

/// What a trial may do.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Model the proposed re-ask timer (a runtime change; see the crate docs).
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
    pub crash_at_append: f64,
    pub crash_weight: u32,
    /// How often a model turn fails (the provider errs, times out).
    pub model_error: f64,
    /// How often a declared tool fails.
    pub tool_error: f64,
    /// How often the scheduler edits an agent.yaml (0: never in this trial).
    pub reload_weight: u32,
}

// --- volatile state ------------------------------------------------------------------------------

/// What an agent keeps in memory only (the real actor's `AgentState`): lost on a crash.
#[derive(Clone, Debug, Default)]
pub(crate) struct Volatile {
    pub views: BTreeMap<RunId, RunView>,
    /// Tool uses with a task out: calls being placed, `check_run`s, declared tools running.
    pub in_flight: BTreeSet<(RunId, String)>,
    /// When each placement or `check_run` times out.
    pub deadlines: BTreeMap<(RunId, String), Deadline>,
    pub thinking: BTreeSet<RunId>,
    pub early_replies: BTreeMap<RunId, ReplyIn>,
    /// The re-ask timer: when each waiting run last asked for its replies.
    pub asked_at: BTreeMap<RunId, i64>,
    /// Gated tool uses this incarnation recorded as started (the actor's `started_here`).
    pub started: BTreeSet<(RunId, String)>,
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

#[derive(Clone, Debug)]
pub(crate) struct Agent {
    pub store: Store,
    pub vol: Volatile,
}

/// Work an agent has queued for itself (its mailbox and its spawned tasks).
#[derive(Clone, Debug)]
pub(crate) enum Task {
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
    pub placed: Placed,
}

#[derive(Clone, Debug)]
pub(crate) enum Msg {
    Call(CallMsg),
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
    /// A `check_run` of a call's child run, to the callee's host.
    CheckRun {
        caller: String,
        run: RunId,
        tool_use_id: String,
        callee: String,
        child: RunId,
    },
    CheckAnswer {
        caller: String,
        run: RunId,
        tool_use_id: String,
        content: String,
        is_error: bool,
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
    pub roots_left: u32,
    pub stats: Stats,
    pub trace: Vec<String>,
    /// Violations seen while running (kept views against the log, effects against the
    /// config in force, tool runs against approvals, decisions against the run's state).
    pub violations: Vec<Violation>,
    /// Every run of a declared tool, by (run, tool use): the epoch of its host when it
    /// started, and the gate ask whose approval it ran under (0 for an ungated tool). The
    /// outside world's record of side effects, so it survives crashes.
    pub tool_runs: BTreeMap<(RunId, String), Vec<(u64, u32)>>,
    /// `check_run`s sent, by (run, tool use): the epochs of the caller's host.
    pub checks: BTreeMap<(RunId, String), Vec<u64>>,
    /// When each run last blocked: the epoch of its host.
    pub blocked_in: BTreeMap<RunId, u64>,
    /// The operator's recent decisions (agent, run, decision, the gate it saw), which it may
    /// send again: a client that got no answer (a host that crashed after the commit) retries.
    pub decisions_sent: Vec<(String, RunId, Decision, Option<String>)>,
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
            model_error: [0.0, 0.03, 0.1][rng.gen_range(0..3)],
            tool_error: [0.0, 0.2][rng.gen_range(0..2)],
            reload_weight: [0, 0, 1, 2][rng.gen_range(0..4)],
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
            roots_left,
            stats: Stats::default(),
            trace: Vec::new(),
            violations: Vec::new(),
            tool_runs: BTreeMap::new(),
            checks: BTreeMap::new(),
            blocked_in: BTreeMap::new(),
            decisions_sent: Vec::new(),
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

    pub(crate) fn clock(&self, host: usize) -> i64 {
        self.now + self.hosts[host].skew
    }

    pub(crate) fn spec(&self, agent: &str) -> &AgentSpec {
        self.fleet.spec(agent)
    }

    pub(crate) fn agent(&mut self, name: &str) -> &mut Agent {
        self.agents
            .get_mut(name)
            .unwrap_or_else(|| panic!("unknown agent {name}"))
    }

    pub(crate) fn insert_run(
        &mut self,
        agent: &str,
        id: RunId,
        parent: Option<Parent>,
        hop_depth: u32,
        channel: Channel,
        input: String,
    ) {
        self.stats.runs += 1;
        let config_version = self.spec(agent).version;
        let created = RunEvent::Created(Created {
            channel,
            input,
            parent_run: parent.as_ref().map(|p| p.run.clone()),
            hop_depth,
            principal: parent
                .as_ref()
                .map_or_else(|| "anonymous".to_owned(), |p| p.agent.clone()),
            budget: None,
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
                config_version,
            },
        );
    }

    /// A durable append just committed on host `h`: with the trial's probability, the host
    /// crashes right here, before anything after the append runs. True if it did.
    pub(crate) fn durable(&mut self, h: usize) -> bool {
        self.stats.appends += 1;
        if self.faults_on && self.rng.gen_bool(self.faults.crash_at_append) {
            self.crash(h, "right after a durable append");
            return true;
        }
        false
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
