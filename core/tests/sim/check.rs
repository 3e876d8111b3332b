//! The invariants checked after each trial.

use std::collections::BTreeMap;

use consort_core::{RunEvent, RunId, RunStatus, RunView};

use super::store::StoredRun;
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

impl Violation {
    /// A known gap of the runtime (reported, failing only with `CONSORT_SIM_STRICT=1`).
    /// None is left: a placement that ended unreachable counts against the caller's cap.
    pub(crate) fn known(&self) -> bool {
        false
    }
}

/// Checks every invariant over the stores of a finished trial.
pub(crate) fn check(world: &World, quiesced: bool) -> Vec<Violation> {
    let mut out: Vec<Violation> = world
        .violations
        .iter()
        .map(|detail| Violation {
            class: "kept view differs from the log",
            detail: detail.clone(),
        })
        .collect();
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
        // Consent: the edge must be declared by both sides.
        let (caller, callee) = (world.fleet.spec(&parent.agent), world.fleet.spec(agent));
        if !caller.can_call.iter().any(|n| n == agent) || !callee.accept_from.contains(&caller.name)
        {
            v(
                "consent wider than config",
                format!(
                    "{} -> {agent} ran {} but can_call={:?}, accept_from={:?}",
                    caller.name,
                    short(id),
                    caller.can_call,
                    callee.accept_from
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
        let limit = caller.limits.max_depth.min(callee.limits.max_depth);
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
        // Cap: calls this run recorded, and children the fleet holds for it.
        let cap = u64::from(spec.limits.max_calls_per_run);
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
