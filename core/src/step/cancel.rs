//! Canceling a run: someone the host checked stops a run that is no longer wanted.
//!
//! A cancel settles an unsettled run (queued, running, waiting or blocked) `failed` in one
//! transaction: a `canceled` event saying who and why, then the failure every consumer of a
//! failed run already reads. A settled run's log is final, so a cancel of one is refused
//! ([`Refusal::AlreadySettled`]) and writes nothing. Work the run still has out (a model turn,
//! a tool's task, calls it placed) is not stopped here: what it returns reaches a settled run,
//! and every other handler of [`step`](super::step()) writes nothing for one. Who may cancel is
//! the host's decision (the HTTP API's access rules), never this module's.

use super::effect::{Effect, Step, Verdict};
use super::transition::Transition;
use crate::event::Canceled;
use crate::{Refusal, RunEvent, RunId, RunStatus, RunView};

/// The error a canceled run settles with: `canceled by <by>`, then `: <reason>` when one was
/// given.
pub fn canceled_error(by: &str, reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!("canceled by {by}: {reason}"),
        None => format!("canceled by {by}"),
    }
}

/// Cancels the run `by` someone, for `reason`; see the module docs.
pub(super) fn cancel(view: &RunView, run: &RunId, by: String, reason: Option<String>) -> Step {
    let status = view.status.unwrap_or(RunStatus::Queued);
    if status.is_settled() {
        return Step::verdict(Verdict::Refused(Refusal::AlreadySettled {
            run: run.to_string(),
            status: status.to_string(),
        }));
    }
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    let error = canceled_error(&by, reason.as_deref());
    Step::write(
        Transition::empty()
            .event(RunEvent::Canceled(Canceled { by, reason }))
            .settle(Err(error)),
        // The settle notice: whoever waits is told, and a delegated run's caller gets its
        // failed reply, as for any failure.
        vec![Effect::Settled],
    )
}
