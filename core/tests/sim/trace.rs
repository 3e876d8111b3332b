//! How the trace names runs, messages, tasks and events.

use consort_core::RunEvent;
use consort_core::RunId;
use consort_core::step::{CallOutcome, Input};

use super::world::{Msg, Task};

/// The first hex digits of a run id, for traces.
pub(crate) fn short(id: &RunId) -> &str {
    &id.as_str()[4..12]
}

pub(crate) fn describe_msg(msg: &Msg) -> String {
    match msg {
        Msg::Call(c) => format!(
            "Call {}->{} tu={} child={} depth={} (caller config v{})",
            c.caller,
            c.callee,
            c.tool_use_id,
            short(&c.child_run),
            c.chain_depth,
            c.placed.version
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
        Msg::CheckRun {
            caller,
            tool_use_id,
            callee,
            child,
            ..
        } => format!(
            "CheckRun {caller}->{callee} tu={tool_use_id} child={}",
            short(child)
        ),
        Msg::CheckAnswer {
            caller,
            run,
            tool_use_id,
            is_error,
            ..
        } => format!(
            "CheckAnswer to {caller} {} tu={tool_use_id}{}",
            short(run),
            if *is_error { " (error)" } else { "" }
        ),
        Msg::Decide {
            agent,
            run,
            decision,
            saw,
        } => format!("Decide {agent} {} {decision:?} gate={saw:?}", short(run)),
        Msg::Cancel { agent, run } => format!("Cancel {agent} {}", short(run)),
        Msg::Deliver {
            from,
            agent,
            run,
            delivery_id,
            text,
        } => format!(
            "Deliver {from}->{agent} {} id={delivery_id} {text:?}",
            short(run)
        ),
    }
}

pub(crate) fn describe_task(task: &Task) -> String {
    match task {
        Task::Input { agent, run, input } => {
            let what = match input {
                Input::Resume => "Resume".to_owned(),
                other => format!("{other:?}").chars().take(60).collect(),
            };
            format!("Input {agent} {} {what}", short(run))
        }
        Task::Committed { agent } => format!("Committed {agent}"),
        Task::Model { agent, run, .. } => format!("ModelDone {agent} {}", short(run)),
        Task::ToolDone {
            agent,
            run,
            tool_use_id,
            name,
            is_error,
            ..
        } => format!(
            "ToolDone {agent} {} tu={tool_use_id} {name}{}",
            short(run),
            if *is_error { " (error)" } else { "" }
        ),
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

pub(crate) fn describe_event(event: &RunEvent) -> String {
    match event {
        RunEvent::Status(s) => format!("status {}->{}", s.from, s.to),
        RunEvent::ModelTurn(t) => match &t.step {
            consort_core::ModelStep::ToolUses(uses) => format!(
                "model_turn uses[{}]",
                uses.iter()
                    .map(|u| match u.input.get("agent").and_then(|a| a.as_str()) {
                        Some(callee) => format!("{}->{callee}", u.id),
                        None => format!("{}:{}", u.id, u.name),
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
        RunEvent::ReplyReceived(r) => format!(
            "reply_received child={} {:?}",
            short(&r.child_run),
            r.status
        ),
        RunEvent::ApprovalRequested(a) => format!(
            "approval_requested {}{}",
            a.tool_use_id,
            if a.in_doubt { " (in doubt)" } else { "" }
        ),
        RunEvent::ApprovalDecided(d) => format!(
            "approval_decided {} approved={}{}",
            d.tool_use_id,
            d.approved,
            if d.recorded { " (recorded)" } else { "" }
        ),
        RunEvent::ToolStarted(s) => format!("tool_started {}", s.tool_use_id),
        RunEvent::Failed(f) => format!("failed: {}", f.error),
        other => other.kind().to_owned(),
    }
}
