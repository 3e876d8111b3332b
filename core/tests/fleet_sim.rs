//! A seeded simulation of a fleet, run over the agent machine that ships
//! (`consort_core::machine::AgentMachine`).
//!
//! Each trial draws a fleet from its seed (2–4 hosts, 3–7 agents, each declaring its own
//! `can_call`, `accept_from` and limits, halves that do not always match, one in three with a
//! tree budget for the runs it starts, and now and then a tool: `lookup`, or `deploy` with
//! `approval: required`) and runs scripted models over it (`sim/model.rs`): a root run places
//! 1–4 `call_agent` uses in one turn, its callees call further down, leaves answer, so chains
//! reach and pass the depth limit, fan-out passes the call cap and trees spend their budgets.
//! Some runs also use a declared tool (or one nobody declared), read a call still out with
//! `check_run`, or use their gated tool a second time before they answer.
//!
//! Every agent has a durable store (runs, their `RunEvent` logs, status, parent links and the
//! counters beside them) and a volatile node: its own `AgentMachine`, the store writer's queue
//! of jobs not committed yet, the link's timeouts and the askers waiting for verdicts, exactly
//! the split of the real agent actor: a crash loses the node and keeps the store.
//!
//! The driver (`sim/driver.rs`) drives each machine as the agent actor does
//! (`actors/src/agent/drive.rs`): what happens becomes an `Input`; the machine's commands are
//! executed until it has none. `Command::Append` goes to the store writer's queue; a commit
//! takes one or several queued jobs at once (group commit), late, and its notices come back to
//! the agent in the writer's order as tasks of their own (`AgentMachine::committed`): the
//! machine must hold back every effect that lets something out of a run (a call, a tool, a
//! reply) until the run's writes before it are committed, and answer askers only then.
//! `PlaceCall` is a message to the callee's host, where the machine reserves the call's place
//! (`AgentMachine::reserve_call`) and a store job admits it in the gate's order (replay by child
//! run id, inbound guards with the callee's config and the hop's budget, insert), answering the
//! caller once committed; the outcome comes back as `Input::CallEnded`; a settled child sends
//! the reply its machine builds (`AgentMachine::reply_of`), which the caller's machine takes,
//! holds until its call is recorded, or drops. A placement without an answer within the call
//! timeout is refused as `unreachable`, as the supervisor's call timeout does; the scripted
//! models retry such a call with a new tool use. `UseTool` goes through `sim/tools.rs`, as
//! `actors/src/agent/tool_use.rs`: an undeclared tool gets its error at once; a declared one
//! goes to the machine's approval gate (`Input::ToolAuthorized`), which records it as started,
//! parks the run `blocked`, or refuses it; `RunTool` runs it on its own task. `CheckRun` asks
//! the callee's host for the child's summary from its own task. The machine's re-ask timer
//! (`AgentMachine::reask_due_now`, on each host's skewed clock) asks callees again for lost
//! replies. A restarted host builds new machines, restores their unsettled counts from the
//! store and resumes every unsettled run with `Input::Resume`.
//!
//! The scheduler draws every next event from the seed: deliver a message (or drop, duplicate,
//! reorder it), run a queued task, commit a writer's jobs, advance the clock, crash a host
//! (its nodes, tasks and messages in flight are lost; with the trial's probability right after
//! a commit, before anything waiting for it ran), restart one. The world outside the fleet acts
//! too (`sim/operator.rs`): root runs start through the API, operators decide on blocked runs
//! (approve, deny, or record what happened to a gate in doubt, naming the gate they saw; one
//! time in five twice at once, one time in four an earlier decision sent again), now and then
//! decide on a run that is not blocked, cancel runs, peers deliver messages into runs (and send
//! them again, now and then with another text under the same id), and agent.yaml files are
//! edited and reloaded under runs in flight. After a fault phase comes a calm phase (every host
//! up, no faults, time jumping to the next deadline) until nothing moves.
//!
//! Checked as it happens: each kept view equals its log (as the writer will commit it) folded
//! from scratch; no call, tool, check or reply leaves a run before its writes are committed; no
//! call placed beyond the caller's config in force when the turn naming it was recorded; a run
//! whose model is asked is not `queued`; a gated tool runs only with an approval and its start
//! committed, never twice in one host epoch, never twice under one approval and never after
//! its result was recorded; a decision's answer is what the committed log shows (the gate it
//! names decided as it said, a repeat answered as already decided, a stale gate refused
//! `stale_decision`, a run not blocked refused `not_awaiting_approval`), as is a cancel's and a
//! delivery's (a repeat answered with the first one's seq). Checked over the stores at the end
//! (`sim/check.rs`): no duplicate child run; consent, depth and caps as each side's config said
//! when it decided; no child of a call its caller recorded as refused; no tree holding more
//! runs than its budget; every accepted run settled; no run waiting on a reply nothing will
//! send; a reply taken says how its child ended; each gate asked once (again only in doubt) and
//! decided at most once, by a decision made for it; each delivery written once; the counters
//! equal the logs. The trials must also reach the paths these invariants are about: the test
//! counts them and fails when one is never taken.
//!
//! No violation is tolerated. The classes the simulation found are fixed, and a seed that
//! showed each is kept in `seeds_that_once_failed_run_clean`: a gated tool ran again after a
//! crash under its one approval; a retried decision decided the next gate; a placement lost
//! with its caller's host was decided again on resume under a config reloaded meanwhile, and
//! recorded as refused while its child ran (a call is now decided once, when its turn is
//! recorded).
//!
//! Why a scheduler of our own and not turmoil: consort-core is pure (no sockets, no clock, no
//! tasks), so the network here is a list of messages between plain functions, and a
//! message-level scheduler over it is exact (every interleaving it draws is one the real
//! runtime can produce, and nothing else runs) and fast (thousands of trials a second, no
//! runtime, no dependency). turmoil simulates a socket layer and tokio tasks that the core does
//! not have.
//!
//! `cargo test -p consort-core --test fleet_sim` runs 2,000 seeds; `CONSORT_SIM_SEEDS=N` runs N;
//! `CONSORT_SIM_SEED=S` runs seed S and prints its trace; `CONSORT_SIM_NO_REASK=1` and
//! `CONSORT_SIM_NO_RELOADS=1` run without the re-ask timer or without reloads. A failure prints
//! the seed, the violations and the trace (the scheduler's event list) that reproduce it.

mod sim;

use std::time::Instant;

use sim::check::{LOST_REPLY, ORPHANS_BEYOND_CAP, REFUSED_YET_CHILD};
use sim::driver::{ANSWER_DIFFERS, STALLED, VIEW_DIFFERS};
use sim::tools::{DECISION_MISTAKEN, GATED_RERUN, STALE_DECISION};
use sim::world::Options;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn options() -> Options {
    Options {
        reask: !off("CONSORT_SIM_NO_REASK"),
        reloads: !off("CONSORT_SIM_NO_RELOADS"),
        ..Options::default()
    }
}

fn report(seed: u64, opts: &Options) -> String {
    let traced = sim::trial(
        seed,
        Options {
            trace: true,
            ..opts.clone()
        },
    );
    let mut out = format!("seed {seed}: {} violation(s)\n", traced.violations.len());
    for v in &traced.violations {
        out.push_str(&format!("  [{}] {}\n", v.class, v.detail));
    }
    out.push_str("trace:\n");
    for line in &traced.trace {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!(
        "reproduce: CONSORT_SIM_SEED={seed}{}{} cargo test -p consort-core --test fleet_sim -- --nocapture\n",
        if opts.reask { "" } else { " CONSORT_SIM_NO_REASK=1" },
        if opts.reloads { "" } else { " CONSORT_SIM_NO_RELOADS=1" },
    ));
    out
}

#[test]
fn fleet_simulation() {
    let opts = options();
    if let Some(seed) = env_u64("CONSORT_SIM_SEED") {
        let text = report(seed, &opts);
        println!("{text}");
        let failed = !sim::trial(seed, opts).violations.is_empty();
        assert!(!failed, "seed {seed} failed");
        return;
    }
    let seeds = env_u64("CONSORT_SIM_SEEDS").unwrap_or(2_000);
    let totals_seeds = seeds;
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut totals = sim::world::Stats::default();
    for seed in 0..seeds {
        let trial = sim::trial(seed, opts.clone());
        totals.add(&trial.stats);
        if !trial.violations.is_empty() {
            failed.push((trial.seed, trial.violations));
        }
    }
    println!(
        "{seeds} seeds in {:.1?}: {} events, {} appends, {} commits, {} roots, {} runs, {} delivered, {} dropped, {} duplicated, {} crashes, {} timeouts, {} re-asks, {} decisions, {} reloads, {} tool runs; {} failed",
        started.elapsed(),
        totals.events,
        totals.appends,
        totals.commits,
        totals.roots,
        totals.runs,
        totals.delivered,
        totals.dropped,
        totals.duplicated,
        totals.crashes,
        totals.timeouts,
        totals.reasks,
        totals.decisions,
        totals.reloads,
        totals.tool_runs,
        failed.len()
    );
    let mut by_class: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (seed, violations) in &failed {
        for v in violations {
            let seeds = by_class.entry(v.class).or_default();
            if seeds.last() != Some(seed) {
                seeds.push(*seed);
            }
        }
    }
    for (class, seeds) in &by_class {
        println!(
            "[{class}] in {} seeds (first: {:?})",
            seeds.len(),
            &seeds[..seeds.len().min(10)]
        );
    }
    for (what, n) in &totals.coverage {
        println!("  {what}: {n}");
    }
    if seeds >= 1_000 {
        // The trials must reach the paths the invariants are about.
        for what in [
            "call refused depth_limit",
            "call refused call_cap",
            "call refused not_in_can_call",
            "call refused not_accepted",
            "call refused unreachable",
            "inbound refused not_accepted",
            "call placed (existing)",
            "replay finds the existing run",
            "reply held",
            "reply received",
            "run succeeded",
            // Approval gates and operator decisions.
            "run blocked",
            "approval approved",
            "approval denied",
            "decision refused not_awaiting_approval",
            "decision refused stale_decision",
            "decision already made",
            "decision on a run blocked before a crash",
            "decision sent again",
            // Gates in doubt: a gated tool started before a crash is asked again.
            "gate in doubt after a crash",
            "gate in doubt recorded",
            "gated tool run again under a new approval",
            // Declared tools, across crashes, and check_run.
            "tool not declared",
            "tool running at a crash",
            "tool run again after a crash",
            "check_run answered",
            "check_run result",
            "check_run result (error)",
            "check_run timed out",
            "check_run to a host that is down",
            "check_run asked again after a crash",
            // Failing models.
            "model turn failed",
            "run failed by its model",
            "reply received (failed)",
            // Group commit: batches, and crashes that lose jobs not committed.
            "commit of several jobs",
            "crash with jobs not committed",
            // Cancels and deliveries.
            "run canceled",
            "cancel refused already_settled",
            "delivery taken",
            "delivery repeated",
            "delivery refused delivery_conflict",
            // Tree budgets.
            "root with a tree budget",
            "call refused budget_exhausted",
            "inbound refused budget_exhausted",
            "run failed budget_exhausted",
        ]
        .into_iter()
        .chain(
            opts.reloads
                .then_some([
                    // Config reloads under runs in flight.
                    "config reloaded",
                    "call placed under a reloaded config",
                    "call refused not_in_can_call under a reloaded config",
                    "call refused call_cap under a reloaded config",
                    "call refused depth_limit under a reloaded config",
                    "inbound call decided under a reloaded config",
                ])
                .into_iter()
                .flatten(),
        ) {
            assert!(
                totals.coverage.get(what).is_some_and(|n| *n > 0),
                "no trial of {seeds} took the path `{what}`"
            );
        }
    }
    if let Some((seed, _)) = failed.first() {
        let classes: Vec<&str> = by_class.keys().copied().collect();
        let seeds: Vec<u64> = failed.iter().map(|(s, _)| *s).take(20).collect();
        panic!(
            "{} of {total} seeds broke an invariant ({classes:?}); failing seeds (first 20): {seeds:?}\n{}",
            failed.len(),
            report(*seed, &opts),
            total = totals_seeds,
        );
    }
}

/// Without the machine's re-ask timer a reply lost on the way (a dropped message, a callee
/// host that crashed right after its run settled) leaves the caller waiting until its own host
/// restarts: the simulation found that hang before the timer existed, and this shows the
/// harness still reports it when the driver never fires the timer.
#[test]
fn without_reask_a_lost_reply_hangs() {
    let opts = Options {
        reask: false,
        ..Options::default()
    };
    let found = (0..300).find(|seed| {
        sim::trial(*seed, opts.clone())
            .violations
            .iter()
            .any(|v| v.class == LOST_REPLY)
    });
    assert!(
        found.is_some(),
        "expected a seed where a lost reply leaves a run waiting"
    );
}

/// A placement that times out while its callee accepts it leaves a child run the caller never
/// counts; the model's retry places another, so the parent's children in the fleet outnumber
/// its cap (and the orphan's reply is dropped as "a call this run never placed"). This keeps
/// that gap on record.
#[test]
fn a_timed_out_placement_still_counts_against_the_cap() {
    // Seeds 0..300 held, before the fix, dozens of parents with more children than their cap.
    let found = (0..300).find(|seed| {
        sim::trial(*seed, Options::default())
            .violations
            .iter()
            .any(|v| v.class == ORPHANS_BEYOND_CAP)
    });
    assert_eq!(found, None, "a parent holds more children than its cap");
}

/// Seeds on which the simulation found each defect it no longer tolerates, each found again by
/// putting the defect back into the code (the class it showed, and what was put back). Each
/// must run clean.
#[test]
fn seeds_that_once_failed_run_clean() {
    let once: [(u64, &str, &str); 15] = [
        // A call decided again on resume, under a config reloaded meanwhile.
        (
            47,
            REFUSED_YET_CHILD,
            "calls decided when placed, not with their turn",
        ),
        (
            105,
            REFUSED_YET_CHILD,
            "calls decided when placed, not with their turn",
        ),
        // A late copy of a refused call accepted after a reload raised the callee's cap.
        (
            1968,
            REFUSED_YET_CHILD,
            "the callee forgets the calls it refused",
        ),
        // A gated tool run again after a crash under its one approval.
        (0, GATED_RERUN, "a use started by a gone incarnation runs"),
        (19, GATED_RERUN, "a use started by a gone incarnation runs"),
        // A retried decision that decided the next gate.
        (
            10,
            STALE_DECISION,
            "a decision decides the waiting gate, whatever it names",
        ),
        (
            81,
            STALE_DECISION,
            "a decision decides the waiting gate, whatever it names",
        ),
        // A model that answered `wait` while a reply arrived, left waiting for good.
        (
            33,
            "run never settled",
            "a wait turn never hands the run back to advance",
        ),
        (
            39,
            "run never settled",
            "a wait turn never hands the run back to advance",
        ),
        // A called run canceled before its admission was noticed, then stepped from scratch.
        (11, VIEW_DIFFERS, "a run's first view replaces a newer one"),
        (
            272,
            ANSWER_DIFFERS,
            "a run's first view replaces a newer one",
        ),
        // A denial sent to a gate decided by a recorded result answered as already decided.
        (1016, DECISION_MISTAKEN, "any denial is the same decision"),
        (1301, DECISION_MISTAKEN, "any denial is the same decision"),
        (1389, DECISION_MISTAKEN, "any denial is the same decision"),
        // A burst of decisions queued while a drive waited for a commit counted against the
        // run's own step bound: the drive stalled and dropped them.
        (
            96529,
            STALLED,
            "inputs arriving later count against the run's own steps",
        ),
    ];
    for (seed, class, defect) in once {
        let trial = sim::trial(seed, Options::default());
        let classes: Vec<&str> = trial.violations.iter().map(|v| v.class).collect();
        assert!(
            classes.is_empty(),
            "seed {seed} (once [{class}], when {defect}): {classes:?}\n{}",
            report(seed, &Options::default())
        );
    }
}
