//! Waiting, pinned, on a run of one of this host's agents.
//!
//! The wait resolves its pin once (the agent's incarnation now, unless the caller brings the
//! one it saw), then re-reads the run each time the presence board changes (and at least every
//! second), and asks consort-core's [`wait_decision`] whether it is over. It never ends in
//! success by itself: time running out is [`WaitOutcome::Timeout`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use consort_core::RunId;
use consort_core::directory::{Observed, WaitOutcome, WaitPin, WaitUntil, wait_decision};

use crate::data::DataFolder;
use crate::presence::PresenceBoard;

/// The longest a wait may last.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// How a wait ended, and what it was pinned to (pass `pin.incarnation` and the outcome's
/// `seq` to wait again on the same occupant).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitAnswer {
    /// What the wait was pinned to.
    pub pin: WaitPin,
    /// How it ended.
    pub outcome: WaitOutcome,
}

/// What a caller asks to wait for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRequest {
    /// The agent.
    pub agent: String,
    /// Its run.
    pub run: RunId,
    /// What ends the wait.
    pub until: WaitUntil,
    /// The state-change sequence already seen (0: none).
    pub after_seq: u64,
    /// The incarnation to pin to, if the caller already resolved one; else the current one.
    pub incarnation: Option<String>,
}

/// Waits up to `timeout` on a run of an agent this host serves.
pub(crate) async fn wait_here(
    data: DataFolder,
    board: PresenceBoard,
    request: WaitRequest,
    timeout: Duration,
) -> WaitAnswer {
    let current = board
        .seat(&request.agent)
        .map(|(_, incarnation)| incarnation);
    let pin = WaitPin {
        agent: request.agent.clone(),
        run: request.run.clone(),
        incarnation: request
            .incarnation
            .clone()
            .or_else(|| current.clone())
            .unwrap_or_default(),
        after_seq: request.after_seq,
        until: request.until,
    };
    let deadline = tokio::time::Instant::now() + timeout.min(MAX_WAIT);
    let mut last = (None, request.after_seq);
    loop {
        let changed = board.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // `None`: the store could not be read this moment; that is no state, so keep waiting.
        if let Some(observed) = observe(&data, &board, &pin.agent, &pin.run).await {
            if let Observed::Agent {
                run: Some((status, seq)),
                ..
            } = &observed
            {
                last = (Some(*status), *seq);
            }
            if let Some(outcome) = wait_decision(&pin, &observed) {
                return WaitAnswer { pin, outcome };
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return WaitAnswer {
                pin,
                outcome: WaitOutcome::Timeout {
                    status: last.0,
                    last_seq: last.1,
                },
            };
        }
        // A change, or a second at most: a missed notification costs a second, not the wait.
        let _woken =
            tokio::time::timeout((deadline - now).min(Duration::from_secs(1)), changed).await;
    }
}

/// What the host sees of the pinned agent and run now; `None` when the run's store could not
/// be read this moment.
async fn observe(
    data: &DataFolder,
    board: &PresenceBoard,
    agent: &str,
    run: &RunId,
) -> Option<Observed> {
    let Some((_, incarnation)) = board.seat(agent) else {
        return Some(Observed::AgentGone);
    };
    let (data, agent, id) = (data.clone(), agent.to_owned(), run.clone());
    match tokio::task::spawn_blocking(move || data.run_of(&agent, &id)).await {
        Ok(Ok(found)) => Some(Observed::Agent {
            incarnation,
            run: found.map(|(record, seq)| (record.status, seq)),
        }),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "wait: the run could not be read; waiting on");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "wait: the read task failed; waiting on");
            None
        }
    }
}
