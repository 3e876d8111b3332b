//! How the CLI prints runs, events and edges for people (tables) and for programs (`--json`).
//! Printing only: nothing here talks to a host.

use consort_actors::directory::WaitAnswer;
use consort_actors::{EventRecord, RunRecord};
use consort_core::directory::{
    AttentionRollup, DeliveryOutcome, DirectoryPacket, Observation, Receipt, WaitOutcome,
};

/// A left-aligned text table with a header row.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.clone()));
    }
    out
}

pub(crate) fn runs_table(runs: &[RunRecord]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.agent.clone(),
                r.status.to_string(),
                r.channel.to_string(),
                r.parent_run
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into()),
                r.hop_depth.to_string(),
                r.cost.model_turns.to_string(),
                r.cost.tool_calls.to_string(),
                r.cost.calls_placed.to_string(),
                (r.cost.input_tokens + r.cost.output_tokens).to_string(),
                tree_summary(&r.tree_cost),
                format!("{}ms", r.cost.wall_ms),
            ]
        })
        .collect();
    table(
        &[
            "RUN", "AGENT", "STATUS", "CHANNEL", "PARENT", "DEPTH", "TURNS", "TOOLS", "CALLS",
            "TOKENS", "TREE", "WALL",
        ],
        &rows,
    )
}

/// A run's tree cost in one cell: model turns / tool calls / calls placed / tokens.
fn tree_summary(cost: &consort_actors::Cost) -> String {
    format!(
        "{}/{}/{}/{}",
        cost.model_turns,
        cost.tool_calls,
        cost.calls_placed,
        cost.input_tokens + cost.output_tokens
    )
}

pub(crate) fn run_detail(run: &RunRecord, events: &[EventRecord]) -> String {
    let mut out = run_fields(run);
    if let Some(line) = budget_line(run, events) {
        out.push_str(&format!("{:<12}{line}\n", "budget"));
    }
    out.push_str("\nevents:\n");
    for e in events {
        out.push_str(&event_line(e));
        out.push('\n');
    }
    out
}

/// The run's tree budget against what its tree spent (`runs 3/10, tokens 1,234/50,000, wall
/// 12 s/300 s`), read from its log; `None` for a run without one. An unsettled run's wall time
/// counts until now.
pub(crate) fn budget_line(run: &RunRecord, events: &[EventRecord]) -> Option<String> {
    let view = consort_core::RunView::from_events(events.iter().map(|e| &e.event));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let until = run.settled_at_ms.unwrap_or(now_ms);
    consort_core::budget::BudgetReport::of(&view, run.created_at_ms, until).map(|b| b.line())
}

/// One event of a run's log as `runs show` prints it.
pub(crate) fn event_line(e: &EventRecord) -> String {
    format!("  {:>3}  {:<18} {}", e.seq, e.kind(), e.data())
}

/// A run's fields, one per line, without its events.
pub(crate) fn run_fields(run: &RunRecord) -> String {
    let mut out = String::new();
    let mut field = |k: &str, v: String| out.push_str(&format!("{k:<12}{v}\n"));
    field("run", run.id.to_string());
    field("agent", run.agent.clone());
    field("status", run.status.to_string());
    field("channel", run.channel.to_string());
    field("principal", run.principal.clone());
    field("origin", run.origin.clone());
    field(
        "parent",
        run.parent_run
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into()),
    );
    field("hop depth", run.hop_depth.to_string());
    field("input", run.input.clone());
    if let Some(output) = &run.output {
        field("output", output.clone());
    }
    if let Some(error) = &run.error {
        field("error", error.clone());
    }
    let c = run.cost;
    field(
        "cost",
        format!(
            "{} model turns, {} tool calls, {} calls placed, {} tokens, {} ms",
            c.model_turns,
            c.tool_calls,
            c.calls_placed,
            c.input_tokens + c.output_tokens,
            c.wall_ms
        ),
    );
    let t = run.tree_cost;
    field(
        "tree cost",
        format!(
            "{} model turns, {} tool calls, {} calls placed, {} tokens (this run and every descendant that replied)",
            t.model_turns,
            t.tool_calls,
            t.calls_placed,
            t.input_tokens + t.output_tokens
        ),
    );
    out
}

/// A directory packet for people: the goal, one line per row, then what the packet cannot
/// say (its limitations) or why it has no rows (its scope gap).
pub(crate) fn directory(packet: &DirectoryPacket) -> String {
    if let Some(gap) = &packet.scope_gap {
        return format!("no rows: {gap}");
    }
    let rows: Vec<Vec<String>> = packet
        .rows
        .iter()
        .map(|r| {
            let work = r.work.as_ref().map_or_else(
                || "-".to_owned(),
                |w| {
                    format!(
                        "{} open ({} running, {} waiting, {} blocked, {} queued)",
                        w.open(),
                        w.running,
                        w.waiting,
                        w.blocked,
                        w.queued
                    )
                },
            );
            vec![
                r.agent.clone(),
                r.host.clone(),
                r.presence.state.to_string(),
                r.presence.basis.as_str().to_owned(),
                work,
            ]
        })
        .collect();
    let mut out = format!(
        "goal {}: {} registered, {} shown, {} omitted\n",
        packet.goal.as_deref().unwrap_or("-"),
        packet.registered_agent_count,
        packet.rows.len(),
        packet.omitted_row_count
    );
    out.push_str(&table(
        &["AGENT", "HOST", "PRESENCE", "BASIS", "WORK"],
        &rows,
    ));
    push_limits(&mut out, "limitations", &packet.limitations);
    out
}

/// An observation for people: typed state first, then the excerpt with its label.
pub(crate) fn observation(o: &Observation) -> String {
    if let Some(gap) = &o.scope_gap {
        return format!("nothing to show: {gap}");
    }
    let mut out = format!(
        "agent {} on {}",
        o.agent,
        if o.host.is_empty() { "-" } else { &o.host }
    );
    if let Some(incarnation) = &o.incarnation {
        out.push_str(&format!(" (incarnation {incarnation})"));
    }
    if let Some(w) = &o.work {
        out.push_str(&format!(
            "\nwork: {} open ({} running, {} waiting, {} blocked, {} queued)",
            w.open(),
            w.running,
            w.waiting,
            w.blocked,
            w.queued
        ));
    }
    if let Some(r) = &o.run {
        out.push_str(&format!(
            "\nrun {}: {} (seq {}, depth {}, placed by {})",
            r.run,
            r.status,
            r.seq,
            r.hop_depth,
            r.parent_agent.as_deref().unwrap_or("-")
        ));
    }
    if let Some(e) = &o.excerpt {
        out.push_str(&format!(
            "\nexcerpt ({}, from {}, at most {} lines):",
            e.label,
            match e.source {
                consort_core::directory::ExcerptSource::Events => "events",
                consort_core::directory::ExcerptSource::Output => "output",
            },
            e.bound.max_lines
        ));
        for line in &e.lines {
            out.push_str("\n  ");
            out.push_str(line);
        }
    }
    push_limits(&mut out, "limits", &o.limitations);
    out
}

/// How a wait ended, for people.
pub(crate) fn wait_answer(a: &WaitAnswer) -> String {
    let pin = format!(
        "{} {} (incarnation {}, after seq {})",
        a.pin.agent, a.pin.run, a.pin.incarnation, a.pin.after_seq
    );
    match &a.outcome {
        WaitOutcome::Matched { status, seq } => format!("matched: {pin} is {status} at seq {seq}"),
        WaitOutcome::Replaced { pinned, current } => format!(
            "replaced: {pin}: incarnation {pinned} was replaced by {current}; resolve it again"
        ),
        WaitOutcome::NotRunning => format!("not_running: {pin}: the agent is not served any more"),
        WaitOutcome::UnknownRun => format!("unknown_run: {pin}: the agent has no such run"),
        WaitOutcome::Unreachable => format!("unreachable: {pin}: its host could not be reached"),
        WaitOutcome::Timeout { status, last_seq } => format!(
            "timeout: {pin}: last seen {} at seq {last_seq}; nothing was resent",
            status.map_or_else(|| "-".to_owned(), |s| s.to_string())
        ),
    }
}

/// The attention rollup for people.
pub(crate) fn attention(r: &AttentionRollup) -> String {
    if let Some(gap) = &r.scope_gap {
        return format!("nothing to show: {gap}");
    }
    let rows: Vec<Vec<String>> = r
        .items
        .iter()
        .map(|i| {
            vec![
                i.agent.clone(),
                i.host.clone(),
                serde_json::to_value(i.reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                i.runs.to_string(),
                i.presence.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            ]
        })
        .collect();
    let mut out = format!(
        "goal {}: {} items, {} omitted\n",
        r.goal.as_deref().unwrap_or("-"),
        r.items.len(),
        r.omitted_item_count
    );
    out.push_str(&table(
        &["AGENT", "HOST", "REASON", "RUNS", "PRESENCE"],
        &rows,
    ));
    push_limits(&mut out, "limitations", &r.limitations);
    out
}

/// Appends `label: ` and each limit's JSON form, on a line of its own, when there are any.
fn push_limits<T: serde::Serialize + std::fmt::Debug>(out: &mut String, label: &str, limits: &[T]) {
    let limits: Vec<String> = limits
        .iter()
        .map(|l| serde_json::to_value(l).map_or_else(|_| format!("{l:?}"), |v| v.to_string()))
        .collect();
    if !limits.is_empty() {
        out.push_str(&format!("\n{label}: "));
        out.push_str(&limits.join(", "));
    }
}

/// A delivery's outcome for people.
pub(crate) fn delivery(outcome: &DeliveryOutcome) -> String {
    let receipt = |r: &Receipt| match r {
        Receipt::Enqueued {
            delivery_id,
            run,
            seq,
            existing,
        } => format!(
            "{delivery_id} enqueued in {run} at seq {seq}{}",
            if *existing {
                " (delivered before: the first receipt)"
            } else {
                ""
            }
        ),
        other => format!("{other:?}"),
    };
    match outcome {
        DeliveryOutcome::Active {
            receipt: r,
            activity_seq,
        } => format!(
            "active: {}; the run moved on (seq {activity_seq})",
            receipt(r)
        ),
        DeliveryOutcome::Stalled {
            receipt: r,
            window_ms,
        } => format!(
            "stalled: {}; nothing followed within {window_ms} ms (not a failure, not a success: read the run before delivering again)",
            receipt(r)
        ),
        DeliveryOutcome::Rejected {
            delivery_id,
            code,
            reason,
        } => format!("rejected: {delivery_id}: {code}: {reason}"),
        DeliveryOutcome::Timeout {
            delivery_id,
            detail,
        } => format!("timeout: {delivery_id}: {detail}"),
        DeliveryOutcome::Queued {
            delivery_id,
            detail,
        } => format!("queued: {delivery_id}: {detail}"),
    }
}

mod fleet;
pub(crate) use fleet::fleet_answers;
