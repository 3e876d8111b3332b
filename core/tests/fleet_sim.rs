//! A seeded simulation of a fleet, run over consort-core's pure functions.
//!
//! Each trial draws a fleet from its seed (2–4 hosts, 3–7 agents, each declaring its own
//! `can_call`, `accept_from` and limits, halves that do not always match, and now and then a
//! tool: `lookup`, or `deploy` with `approval: required`) and runs scripted models over it
//! (`sim/model.rs`): a root run places 1–4 `call_agent` uses in one turn, its callees call
//! further down, leaves answer, so chains reach and pass the depth limit and fan-out passes the
//! call cap. Some runs also use a declared tool (or one nobody declared), read a call still out
//! with `check_run`, or use their gated tool a second time before they answer. Every agent has
//! a durable store (runs, their `RunEvent` logs, status, parent links and the in-memory counters
//! beside them) and volatile state (kept views, tool uses, checks and calls in flight, replies
//! held until their call is recorded, timers), exactly the split of the real agent actor: a
//! crash loses the second and keeps the first.
//!
//! The executor (`sim/engine.rs`) mirrors `actors/src/agent/engine.rs`: `step` → append the
//! transition (the store derives `status` events like the real one) → execute the effects.
//! `PlaceCall` is a message to the callee's host, which accepts it like the real `accept`
//! (replay by child run id, else `guards::check_inbound` with the callee's config, insert); the
//! outcome comes back as `Input::CallEnded`; a settled child sends its reply (`Input::Reply`,
//! with `placing`, a held reply offered again after `CallEnded`); `AskReplies` sends resend
//! requests; a restarted host resumes every unsettled run with `Input::Resume`. A placement
//! without an answer within the call timeout is refused as `unreachable`, as the supervisor's
//! call timeout does; the scripted models retry such a call with a new tool use.
//! `UseTool` goes through `sim/tools.rs`, which mirrors `actors/src/agent/tool_use.rs`: a tool
//! the agent does not declare gets its error result at once; a declared one goes through
//! `step::approval_gate` (a gated use parks the run `blocked`; a denied one gets the denial as
//! its result; an approved one is recorded as started, and runs once that is durable; one
//! started by an incarnation that crashed is asked again, in doubt), then runs on its own task,
//! whose result comes back as `Input::ToolFinished`.
//! `CheckRun` asks the callee's host for the child's summary from its own task, with a timeout
//! and the link's error for a host that is down. A tool or a check in flight when its host
//! crashes is lost with it; on resume the run steps `Advance` with nothing busy, so the use is
//! resolved again: the tool runs again, the check is asked again (what the real engine does).
//! A model turn sometimes fails (`Input::ModelAnswered` with `Err`): the run fails, and a
//! delegated run's failure goes back to its caller as a failed reply.
//!
//! The scheduler draws every next event from the seed: deliver a message (or drop, duplicate,
//! reorder it), run a queued task of an agent, advance the clock (each host has its own skew;
//! timers read the host's clock), crash a host (its volatile state and its messages in flight
//! are lost), restart one. The world outside the fleet acts too (`sim/operator.rs`): root runs
//! start through the API; an operator decides on runs it sees blocked, on runs that are not,
//! twice at once, and again later (a client that got no answer retries), through the API of
//! the agent's host, so a crash loses a decision; agent.yaml files are edited and reloaded
//! (one name more or less in `can_call` or `accept_from`, or new limits), and every run in
//! flight steps under the new config from then on. A decision names the gate the operator saw
//! (a decision on a run that was not blocked names none); on a gate in doubt the operator
//! sometimes records what happened instead of approving or denying. Every append is a durable
//! boundary, and each
//! `Effect::Advance` is its own event, so a crash can fall between any two appends; a trial
//! also crashes a host right after an append with some probability, before the append's
//! effects run. Then a calm phase (every host up, no more faults; the operator decides every
//! run still blocked) runs until nothing moves, and the invariants are checked (see
//! `sim/check.rs`): no duplicate child run; every accepted run settled (a blocked one too, once
//! decided, whatever crashed meanwhile); kept views and counters equal the log; no child run on
//! an edge both sides did not declare, each side judged by the config in force when it
//! decided (the simulation records it with the call: `sim/store.rs`); no chain deeper than the
//! limits in force at placement and acceptance; no call placed past the cap in force when the
//! caller's step decided it, no child accepted past the callee's, and no run holding more
//! calls or children than its agent's largest cap; no run left waiting on a reply nothing will
//! send; a reply taken says how its child ended (a failed child, a failed reply). As it
//! happens (`sim/tools.rs`): a gated tool use runs only with an approval in its log, never
//! twice in one host epoch, never twice under one approval and never after its result was
//! recorded; a decision that names no gate on a run that is not awaiting approval is refused
//! `not_awaiting_approval`, one naming a gate that does not wait is answered as already decided
//! (the same decision) or refused `stale_decision`, and neither writes anything; one on a
//! blocked run decides exactly the gate it names (or, naming none, the one waiting); each gate
//! is asked once and decided at most once, and a use is asked again only in doubt. A run whose
//! model answers is never `queued` in its store: its ask was written (`model_turn_started`)
//! before the model was asked; every other agent's model is told to the step as one that
//! answers at once, so only its runs' first turns record the ask.
//! The trials must also reach the paths these invariants are about (refusals on both sides,
//! replays, held replies, blocks and decisions before and after crashes, tools and checks lost
//! with a crash, failed models and failed replies, refusals under a reloaded config): the test
//! counts them and fails when one is never taken.
//!
//! A placement that times out (refused as `unreachable`) while its callee did accept it leaves a
//! child run its caller never recorded, and the model may retry with a new tool use. The
//! simulation found that this let a parent hold more children than its cap; since then a
//! placement that ended unreachable counts against the cap (`RunView::calls_counted`), and
//! `a_timed_out_placement_still_counts_against_the_cap` keeps the case covered.
//!
//! Two classes the simulation found are fixed, and the seeds that once showed them are kept
//! (`seeds_that_once_reran_a_gated_tool_or_decided_a_stale_gate_run_clean`): a gated tool ran
//! again after a crash under its one approval (the approval was in the log, the tool's run was
//! not, so on resume the gate said `Proceed` again; now `tool_started` is recorded before it
//! runs, and a use started by an incarnation that is gone is asked again in doubt), and a
//! retried decision that arrived after its gate was decided decided the next gate (now a
//! decision names its gate).
//!
//! Known gaps of the runtime the simulation found, reported apart (`CONSORT_SIM_STRICT=1` fails
//! on them), each kept on record by a test below:
//! - A placement lost with its caller's host after the callee stored the child is decided again
//!   on resume, under the config as reloaded meanwhile; when the new config refuses it, the
//!   caller records the call as refused while its child runs, and the child's reply is dropped
//!   (`a_reload_under_a_lost_placement_leaves_a_child_recorded_as_refused`;
//!   `CONSORT_SIM_NO_RELOADS=1` runs without reloads, and the gap goes).
//!
//! Why a scheduler of our own and not turmoil: consort-core is pure (no sockets, no clock, no
//! tasks), so the network here is a list of messages between plain functions, and a
//! message-level scheduler over it is exact (every interleaving it draws is one the real
//! runtime can produce, and nothing else runs) and fast (thousands of trials a second, no
//! runtime, no dependency). turmoil simulates a socket layer and tokio tasks that the core does
//! not have.
//!
//! The re-ask timer: a run that waits longer than `REASK_AFTER` (on its host's clock) steps
//! with `Input::Resume`, asking its callees again for the replies it lacks, as the agent actor
//! does on its checkpoint tick. Without it, a reply lost on the way (a dropped message, or a
//! callee host that crashed right after the child settled) leaves the caller waiting until its
//! own host restarts: the simulation found that hang. `CONSORT_SIM_NO_REASK=1` runs without
//! the timer and shows it; the test `without_reask_a_lost_reply_hangs` keeps it on record.
//!
//! `cargo test -p consort-core --test fleet_sim` runs 2,000 seeds; `CONSORT_SIM_SEEDS=N` runs N;
//! `CONSORT_SIM_SEED=S` runs seed S and prints its trace. A failure prints the seed, the
//! violations and the trace (the scheduler's event list) that reproduce it.

mod sim;

use std::time::Instant;

use sim::check::{KNOWN, LOST_REPLY, ORPHANS_BEYOND_CAP, REFUSED_YET_CHILD};
use sim::tools::{GATED_RERUN, STALE_DECISION};
use sim::world::Options;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn strict() -> bool {
    std::env::var("CONSORT_SIM_STRICT").is_ok_and(|v| !v.is_empty() && v != "0")
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
        let failed = sim::trial(seed, opts)
            .violations
            .iter()
            .any(|v| strict() || !v.known());
        assert!(!failed, "seed {seed} failed");
        return;
    }
    let seeds = env_u64("CONSORT_SIM_SEEDS").unwrap_or(2_000);
    let totals_seeds = seeds;
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut known: Vec<(&str, u64)> = Vec::new();
    let mut totals = sim::world::Stats::default();
    for seed in 0..seeds {
        let trial = sim::trial(seed, opts.clone());
        totals.add(&trial.stats);
        for class in KNOWN {
            if trial.violations.iter().any(|v| v.class == *class) {
                known.push((class, seed));
            }
        }
        if trial.violations.iter().any(|v| strict() || !v.known()) {
            failed.push((trial.seed, trial.violations));
        }
    }
    println!(
        "{seeds} seeds in {:.1?}: {} events, {} appends, {} roots, {} runs, {} delivered, {} dropped, {} duplicated, {} crashes, {} timeouts, {} re-asks, {} decisions, {} reloads, {} tool runs; {} failed",
        started.elapsed(),
        totals.events,
        totals.appends,
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
    for class in KNOWN {
        let seeds: Vec<u64> = known
            .iter()
            .filter(|(c, _)| c == class)
            .map(|(_, s)| *s)
            .collect();
        if !seeds.is_empty() {
            println!(
                "known gap [{class}] in {} seeds (first: {:?}); CONSORT_SIM_STRICT=1 fails on it",
                seeds.len(),
                &seeds[..seeds.len().min(10)]
            );
        }
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
        let mut classes: Vec<&str> = failed
            .iter()
            .flat_map(|(_, vs)| vs.iter().map(|v| v.class))
            .collect();
        classes.sort_unstable();
        classes.dedup();
        let seeds: Vec<u64> = failed.iter().map(|(s, _)| *s).take(20).collect();
        panic!(
            "{} of {total} seeds broke an invariant ({classes:?}); failing seeds (first 20): {seeds:?}\n{}",
            failed.len(),
            report(*seed, &opts),
            total = totals_seeds,
        );
    }
}

/// The runtime has no timer that asks for a reply again: a reply lost without a later restart
/// of the caller's host leaves the caller waiting for good. This keeps that gap on record (and
/// shows the harness reports it as such); when the runtime gains such a timer, the harness's
/// re-ask option models it.
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

/// A placement in flight when its caller's host crashes, after its callee stored the child: on
/// resume the caller decides the same tool use again, under its config as reloaded meanwhile
/// (a narrower `can_call`, a lower cap or depth), and may record the call as refused while the
/// child runs (and its reply is dropped as "a call this run never placed"). This keeps that
/// gap on record, and shows it takes a reload.
#[test]
fn a_reload_under_a_lost_placement_leaves_a_child_recorded_as_refused() {
    let found = |reloads: bool| {
        let opts = Options {
            reloads,
            ..Options::default()
        };
        (0..300).find(|seed| {
            sim::trial(*seed, opts.clone())
                .violations
                .iter()
                .any(|v| v.class == REFUSED_YET_CHILD)
        })
    };
    assert!(
        found(true).is_some(),
        "expected a seed where a resumed placement is refused while its child runs"
    );
    assert_eq!(
        found(false),
        None,
        "a child recorded as refused without a reload"
    );
}

/// Seeds on which, before gates had ids and a started gated tool was recorded, a gated tool
/// ran again after a crash under its one approval (13, 20, 37, …) or a retried decision
/// decided the next gate (37, 214, 267, 294): a gate started before a crash is now asked again
/// in doubt, and a decision names its gate. Each must run clean.
#[test]
fn seeds_that_once_reran_a_gated_tool_or_decided_a_stale_gate_run_clean() {
    for seed in [
        13, 20, 37, 38, 75, 78, 84, 95, 127, 130, 214, 267, 294, 317, 484, 522,
    ] {
        let trial = sim::trial(seed, Options::default());
        let classes: Vec<&str> = trial.violations.iter().map(|v| v.class).collect();
        assert!(
            !classes.contains(&GATED_RERUN) && !classes.contains(&STALE_DECISION),
            "seed {seed}: {classes:?}\n{}",
            report(seed, &Options::default())
        );
        assert!(
            trial.violations.iter().all(|v| v.known()),
            "seed {seed}: {classes:?}"
        );
    }
}
