//! How `consort fleet ...` prints each host's answer for people: one section per host, headed
//! by its name, with the command's answer or why there is none. Printing only.

use consort_fleet::operator::{
    Decided, DrainState, HostAnswer, HostStatus, JobsPage, Reloaded, Restarted,
};
use consort_net::OperatorCommand;

use super::{runs_table, table};

/// Every host's section, in the order the hosts were asked.
pub(crate) fn fleet_answers(command: &OperatorCommand, answers: &[HostAnswer]) -> String {
    answers
        .iter()
        .map(|answer| host_section(command, answer))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn host_section(command: &OperatorCommand, answer: &HostAnswer) -> String {
    let mut out = format!("== {} ==\n", answer.host);
    let body = match (&answer.answer, &answer.error) {
        (Some(value), _) => answer_text(command, &answer.host, value),
        (None, Some(error)) if answer.not_here() => format!("not here: {}", error.message),
        (None, Some(error)) => match error.kind.as_str() {
            "unreachable" => format!("unreachable: {}", error.message),
            "refused" => format!("refused ({}): {}", error.code, error.message),
            _ => format!("failed ({}): {}", error.code, error.message),
        },
        (None, None) => "no answer".to_owned(),
    };
    out.push_str(&body);
    out
}

/// The command's answer, read back into its type (the raw JSON if it does not read).
fn answer_text(command: &OperatorCommand, host: &str, value: &serde_json::Value) -> String {
    let read = |value: &serde_json::Value| value.clone();
    let text =
        match command {
            OperatorCommand::Status => serde_json::from_value::<HostStatus>(read(value))
                .ok()
                .map(|s| status(&s)),
            OperatorCommand::Drain | OperatorCommand::Resume => {
                serde_json::from_value::<DrainState>(read(value))
                    .ok()
                    .map(|d| drain(&d))
            }
            OperatorCommand::Restart { .. } => serde_json::from_value::<Restarted>(read(value))
                .ok()
                .map(|r| {
                    format!(
                        "restarted {}: {}, {} restart(s) since the host started",
                        r.agent.name,
                        if r.agent.up { "up" } else { "down" },
                        r.agent.restarts
                    )
                }),
            OperatorCommand::Reload => {
                serde_json::from_value::<Reloaded>(read(value))
                    .ok()
                    .map(|r| {
                        let mut out = if r.changed.is_empty() {
                            "no agent.yaml changed".to_owned()
                        } else {
                            format!("reloaded: {}", r.changed.join(", "))
                        };
                        if !r.revived.is_empty() {
                            out.push_str(&format!("\nstarted again: {}", r.revived.join(", ")));
                        }
                        out
                    })
            }
            OperatorCommand::Decide { .. } => serde_json::from_value::<Decided>(read(value))
                .ok()
                .map(|d| {
                    format!(
                        "{} {}: it is {}",
                        if d.approved { "approved" } else { "denied" },
                        d.run.id,
                        d.run.status
                    )
                }),
            OperatorCommand::Jobs { .. } => serde_json::from_value::<JobsPage>(read(value))
                .ok()
                .map(|j| {
                    let mut out = runs_table(&j.page.runs);
                    if let Some(next) = &j.page.next {
                        out.push_str(&format!(
                            "\nmore runs: consort fleet jobs --host {host} --cursor {next}"
                        ));
                    }
                    out
                }),
        };
    text.unwrap_or_else(|| value.to_string())
}

fn status(s: &HostStatus) -> String {
    let mut out = if s.draining {
        format!(
            "draining: no new root runs; {} unsettled run(s) still to finish\n",
            s.unsettled
        )
    } else {
        format!("admitting new runs; {} unsettled run(s)\n", s.unsettled)
    };
    let rows: Vec<Vec<String>> = s
        .agents
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                match (&a.down, a.up) {
                    (_, true) => "yes".to_owned(),
                    (Some(down), false) => format!("no ({})", down.reason),
                    (None, false) => "no".to_owned(),
                },
                a.restarts.to_string(),
                a.runs.queued.to_string(),
                a.runs.running.to_string(),
                a.runs.waiting.to_string(),
                a.runs.blocked.to_string(),
                a.runs.succeeded.to_string(),
                a.runs.failed.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "AGENT",
            "UP",
            "RESTARTS",
            "QUEUED",
            "RUNNING",
            "WAITING",
            "BLOCKED",
            "SUCCEEDED",
            "FAILED",
        ],
        &rows,
    ));
    if !s.links.is_empty() {
        let rows: Vec<Vec<String>> = s
            .links
            .iter()
            .map(|l| {
                vec![
                    l.host.clone(),
                    l.state.clone(),
                    l.last_error.clone().unwrap_or_else(|| "-".to_owned()),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(&["PEER", "LINK", "LAST_ERROR"], &rows));
    }
    out.push('\n');
    match &s.last_failure {
        None => out.push_str("last failure: none"),
        Some(f) => out.push_str(&format!(
            "last failure: run {} ({}): {}",
            f.run,
            f.agent,
            f.error.as_deref().unwrap_or("no error recorded")
        )),
    }
    out
}

fn drain(d: &DrainState) -> String {
    if d.draining {
        format!(
            "draining: no new root runs; {} unsettled run(s) still to finish",
            d.unsettled
        )
    } else {
        format!("admitting new runs; {} unsettled run(s)", d.unsettled)
    }
}
