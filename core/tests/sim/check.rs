//! The invariants checked after each trial.

use std::collections::BTreeMap;

use consort_core::event::ReplyOutcome;
use consort_core::{RunEvent, RunId, RunStatus, RunView};

use super::store::StoredRun;
use super::tools::STALE_DECISION;
use super::trace::short;
use super::world::World;

/// One broken invariant: its class (stable, for grouping) and what exactly is wrong.
#[derive(Clone, Debug)]
pub(crate) struct Violation {
    pub class: &'static str,
    pub detail: String,
}

/// The class of a run left waiting on a reply that nothing will send.
pub(crate) const LOST_REPLY: &str = "waits on a reply nothing will send";

/// The class of a parent whose children in the fleet outnumber its cap: a placement that timed
/// out (refused as unreachable) while its callee accepted it leaves a child the caller never
/// counts, and the model's retry places another. A known gap of the runtime, reported apart.
pub(crate) const ORPHANS_BEYOND_CAP: &str =
    "children beyond the cap (orphans of timed-out placements)";

/// The class of a child run whose caller's log records the call that created it as refused
/// by the caller itself (a placement decided again after a crash, under a config reloaded
/// meanwhile, used to do it).
pub(crate) const REFUSED_YET_CHILD: &str = "child of a call its caller recorded as refused";

/// The class of a call tree holding more runs than its tree budget allows.
pub(crate) const TREE_BEYOND_BUDGET: &str = "tree holds more runs than its budget";

/// The class of a peer's delivery written into a run more than once.
pub(crate) const DELIVERED_TWICE: &str = "delivery landed twice";

/// Checks every invariant over the stores of a finished trial.
pub(crate) fn check(world: &World, quiesced: bool) -> Vec<Violation> {
    let mut out: Vec<Violation> = world.violations.clone();
    let mut v = |class: &'static str, detail: String| out.push(Violation { class, detail });
    if !quiesced {
        v(
            "no quiescence",
            "the calm phase did not come to rest within its bound".into(),
        );
    }
    let runs: BTreeMap<&RunId, (&str, &StoredRun)> = world
        .agents
        .iter()
        .flat_map(|(name, a)| {
            a.store
                .runs
                .iter()
                .map(move |(id, r)| (id, (name.as_str(), r)))
        })
        .collect();
    let total: usize = world.agents.values().map(|a| a.store.runs.len()).sum();
    if total != runs.len() {
        v(
            "duplicate child run",
            format!("{total} stored runs but {} distinct run ids", runs.len()),
        );
    }

    // Children per (parent, tool use), and per parent across the fleet.
    let mut per_use: BTreeMap<(&RunId, &str), Vec<&RunId>> = BTreeMap::new();
    let mut per_parent: BTreeMap<&RunId, u64> = BTreeMap::new();
    for (id, (agent, run)) in &runs {
        let Some(parent) = &run.parent else { continue };
        per_use
            .entry((&parent.run, parent.tool_use_id.as_str()))
            .or_default()
            .push(id);
        *per_parent.entry(&parent.run).or_default() += 1;
        if **id != RunId::child_of(&parent.run, &parent.tool_use_id) {
            v(
                "duplicate child run",
                format!("child {id} on {agent} is not the derived id of its (parent, tool use)"),
            );
        }
        // Consent: the edge was declared by both sides, each in the config in force when it
        // decided (a reload may have changed either since).
        let (placed, accepted) = (&parent.placed, &parent.accepted);
        if !placed.listed || !accepted.listed {
            v(
                "consent wider than config",
                format!(
                    "{} -> {agent} ran {} but can_call (v{}) lists it: {}, accept_from (v{}) lists the caller: {}",
                    parent.agent,
                    short(id),
                    placed.version,
                    placed.listed,
                    accepted.version,
                    accepted.listed
                ),
            );
        }
        if accepted.children_before >= u64::from(accepted.limits.max_calls_per_run) {
            v(
                "children beyond the callee's cap",
                format!(
                    "{agent} accepted {} as child {} of {} under cap {} (v{})",
                    short(id),
                    accepted.children_before + 1,
                    short(&parent.run),
                    accepted.limits.max_calls_per_run,
                    accepted.version
                ),
            );
        }
        // Depth: one more than the parent, and within both sides' limits.
        match runs.get(&parent.run) {
            Some((pagent, prun)) => {
                if run.hop_depth != prun.hop_depth + 1 || *pagent != parent.agent {
                    v(
                        "chain deeper than the limit",
                        format!(
                            "child {} depth {} under parent {} depth {}",
                            short(id),
                            run.hop_depth,
                            short(&parent.run),
                            prun.hop_depth
                        ),
                    );
                }
            }
            None => v(
                "duplicate child run",
                format!("child {id} names a parent run no store has"),
            ),
        }
        // The caller's log must not call a child that exists refused by the caller's own
        // guards (an unreachable placement may well have a child: it counts against the cap).
        if let Some((_, prun)) = runs.get(&parent.run) {
            let refused = prun.events.iter().find_map(|e| match e {
                RunEvent::CallRefused(c) if c.tool_use_id == parent.tool_use_id => Some(&c.code),
                _ => None,
            });
            if let Some(code) = refused.filter(|c| *c != "unreachable") {
                v(
                    REFUSED_YET_CHILD,
                    format!(
                        "{} recorded {} of {} as refused {code}, yet {agent} holds its child {} ({}), placed under can_call v{}",
                        parent.agent,
                        parent.tool_use_id,
                        short(&parent.run),
                        short(id),
                        run.status,
                        placed.version
                    ),
                );
            }
        }
        let limit = placed.limits.max_depth.min(accepted.limits.max_depth);
        if run.hop_depth > limit {
            v(
                "chain deeper than the limit",
                format!(
                    "run {} on {agent} at depth {} > {limit}",
                    short(id),
                    run.hop_depth
                ),
            );
        }
    }
    for ((parent, tool_use), children) in &per_use {
        if children.len() > 1 {
            v(
                "duplicate child run",
                format!(
                    "parent {} tool use {tool_use} has {} children",
                    short(parent),
                    children.len()
                ),
            );
        }
    }

    for (id, (agent, run)) in &runs {
        let spec = world.fleet.spec(agent);
        let view = RunView::from_events(&run.events);
        // Counters: the row's status and cost against the log.
        let logged = view.status.unwrap_or(RunStatus::Queued);
        if logged != run.status {
            v(
                "counter differs from the log",
                format!(
                    "run {} on {agent}: row says {} but the log says {logged}",
                    short(id),
                    run.status
                ),
            );
        }
        let placed = run
            .events
            .iter()
            .filter(|e| matches!(e, RunEvent::CallPlaced(_)))
            .count() as u64;
        if placed != run.calls_placed || placed != view.calls_placed() {
            v(
                "counter differs from the log",
                format!(
                    "run {} on {agent}: calls_placed counter {} but {placed} call_placed events ({} distinct)",
                    short(id),
                    run.calls_placed,
                    view.calls_placed()
                ),
            );
        }
        // Cap: calls this run recorded, and children the fleet holds for it, under the largest
        // cap its agent's config ever had (each placement was checked against the cap in force
        // when it was decided, as it happened).
        let cap = u64::from(spec.max_cap_ever);
        if placed > cap {
            v(
                "calls beyond the cap",
                format!(
                    "run {} on {agent} placed {placed} calls, cap {cap}",
                    short(id)
                ),
            );
        }
        let children = per_parent.get(id).copied().unwrap_or(0);
        if children > cap && placed <= cap {
            v(
                ORPHANS_BEYOND_CAP,
                format!(
                    "run {} on {agent} (cap {cap}) has {children} child runs in the fleet, {placed} of them recorded",
                    short(id)
                ),
            );
        }
        // Settlement: after the calm phase, every accepted run has settled.
        if !run.status.is_settled() {
            explain_unsettled(world, &runs, id, agent, run, &view, &mut v);
        }
        // A reply taken says how its child ended.
        for event in &run.events {
            let RunEvent::ReplyReceived(r) = event else {
                continue;
            };
            let child = runs.get(&r.child_run).map(|(_, c)| c.status);
            let expected = match child {
                Some(RunStatus::Succeeded) => Some(ReplyOutcome::Succeeded),
                Some(RunStatus::Failed) => Some(ReplyOutcome::Failed),
                _ => None,
            };
            if expected != Some(r.status) {
                v(
                    "reply differs from the child's outcome",
                    format!(
                        "run {} on {agent} took a {:?} reply from {} which is {child:?}",
                        short(id),
                        r.status,
                        short(&r.child_run)
                    ),
                );
            }
        }
        // Each gate is asked once and decided at most once: a gated tool use is asked again
        // only in doubt (started under its approval, then its host stopped), and each ask is
        // decided once, after it was asked.
        let mut asked: BTreeMap<&str, (u32, u32, bool)> = BTreeMap::new();
        for event in &run.events {
            match event {
                RunEvent::ApprovalRequested(a) => {
                    let entry = asked.entry(&a.tool_use_id).or_default();
                    entry.0 += 1;
                    entry.2 |= (entry.0 > 1) != a.in_doubt;
                }
                RunEvent::ApprovalDecided(d) => {
                    let entry = asked.entry(&d.tool_use_id).or_default();
                    entry.1 += 1;
                    entry.2 |= entry.1 > entry.0;
                }
                _ => {}
            }
        }
        for (tu, (requested, decided, out_of_order)) in asked {
            if out_of_order || decided > requested {
                v(
                    "approval asked or decided more than once",
                    format!(
                        "run {} on {agent}: {tu} asked {requested} times, decided {decided} times",
                        short(id)
                    ),
                );
            }
        }
    }
    // Tree budgets: a run's subtree (itself and every descendant, on any host) holds no more
    // runs than the budget its `created` event records.
    let mut kids: BTreeMap<&RunId, Vec<&RunId>> = BTreeMap::new();
    for (id, (_, run)) in &runs {
        if let Some(parent) = &run.parent {
            kids.entry(&parent.run).or_default().push(id);
        }
    }
    for (id, (agent, run)) in &runs {
        let Some(RunEvent::Created(created)) = run.events.first() else {
            continue;
        };
        let Some(max_runs) = created.budget.and_then(|b| b.max_runs) else {
            continue;
        };
        let mut count = 0u64;
        let mut todo = vec![*id];
        while let Some(next) = todo.pop() {
            count += 1;
            todo.extend(kids.get(next).into_iter().flatten().copied());
        }
        if count > max_runs {
            v(
                TREE_BEYOND_BUDGET,
                format!(
                    "run {} on {agent} holds {count} runs in its tree, budget {max_runs}",
                    short(id)
                ),
            );
        }
    }
    // Decisions and deliveries, as the logs record them.
    for (id, (agent, run)) in &runs {
        let sent = world.decisions_made.get(*id);
        let mut asks: BTreeMap<&str, u32> = BTreeMap::new();
        let mut delivered: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        for event in &run.events {
            match event {
                RunEvent::ApprovalRequested(a) => *asks.entry(&a.tool_use_id).or_default() += 1,
                RunEvent::ApprovalDecided(d) => {
                    let ask = asks.get(d.tool_use_id.as_str()).copied().unwrap_or(0);
                    let gate = consort_core::step::gate_id(id, &d.tool_use_id, ask);
                    let made = sent.into_iter().flatten().any(|(decision, saw)| {
                        saw.as_ref().is_none_or(|s| *s == gate)
                            && decision.approves() == d.approved
                            && matches!(decision, consort_core::step::Decision::Record { .. })
                                == d.recorded
                    });
                    if !made {
                        v(
                            STALE_DECISION,
                            format!(
                                "run {} on {agent}: gate {gate} decided (approved {}) by no decision made for it",
                                short(id),
                                d.approved
                            ),
                        );
                    }
                }
                RunEvent::MessageReceived(m) => {
                    *delivered.entry((&m.from, &m.delivery_id)).or_default() += 1;
                }
                _ => {}
            }
        }
        for ((from, delivery), n) in delivered {
            if n > 1 {
                v(
                    DELIVERED_TWICE,
                    format!(
                        "run {} on {agent}: delivery {delivery} from {from} landed {n} times",
                        short(id)
                    ),
                );
            }
        }
    }
    for (name, agent) in &world.agents {
        let unsettled = agent
            .store
            .runs
            .values()
            .filter(|r| !r.status.is_settled())
            .count();
        if unsettled != agent.store.unsettled {
            v(
                "counter differs from the log",
                format!(
                    "{name}: unsettled counter {} but {unsettled} unsettled runs",
                    agent.store.unsettled
                ),
            );
        }
        let mut children: BTreeMap<RunId, u64> = BTreeMap::new();
        for run in agent.store.runs.values() {
            if let Some(p) = &run.parent {
                *children.entry(p.run.clone()).or_default() += 1;
            }
        }
        if children != agent.store.children {
            v(
                "counter differs from the log",
                format!("{name}: children-per-parent counters differ from the runs"),
            );
        }
    }
    out
}

/// Why an unsettled run did not settle, as precisely as the stores tell.
fn explain_unsettled(
    world: &World,
    runs: &BTreeMap<&RunId, (&str, &StoredRun)>,
    id: &RunId,
    agent: &str,
    run: &StoredRun,
    view: &RunView,
    v: &mut impl FnMut(&'static str, String),
) {
    let _ = world;
    if run.status != RunStatus::Waiting {
        v(
            "run never settled",
            format!(
                "run {} on {agent} left {} (unresolved tool uses: {:?})",
                short(id),
                run.status,
                view.unresolved_tool_uses()
                    .iter()
                    .map(|u| u.id.clone())
                    .collect::<Vec<_>>()
            ),
        );
        return;
    }
    for (child, call) in view.unreplied() {
        match runs.get(child) {
            None => v(
                "run never settled",
                format!(
                    "run {} on {agent} waits on child {} on {} that no store has",
                    short(id),
                    short(child),
                    call.agent
                ),
            ),
            Some((_, c)) if c.status.is_settled() => v(
                LOST_REPLY,
                format!(
                    "run {} on {agent} waits on child {} on {} ({}), whose reply was lost; \
                     nothing will send it again unless {agent}'s host restarts",
                    short(id),
                    short(child),
                    call.agent,
                    c.status
                ),
            ),
            Some((_, c)) => v(
                "run never settled",
                format!(
                    "run {} on {agent} waits on child {} on {}, itself left {}",
                    short(id),
                    short(child),
                    call.agent,
                    c.status
                ),
            ),
        }
    }
    if view.pending_calls() == 0 {
        v(
            "run never settled",
            format!("run {} on {agent} waits with no call out", short(id)),
        );
    }
}
