//! The host's side of the peer directory as an app or the HTTP API asks it: a goal's
//! directory, observing a peer, waiting on a run, delivering a message, a delivery's status
//! and what needs attention. Each is a request to the supervisor, which decides what the
//! audience may see; the handle only carries it and bounds the wait.

use std::time::Duration;

use consort_net::RunId;

use super::{ASK_TIMEOUT_MS, Host};
use crate::ActorsError;
use crate::supervisor::SupervisorMsg;

impl Host {
    /// The peer directory of `goal` (or of the one goal `audience` may see) as `audience` may
    /// see it. `audience` must be what this host established about the caller (a run's agent,
    /// an operator's credentials), never a name the caller gave.
    pub async fn directory(
        &self,
        audience: consort_core::directory::Audience,
        goal: Option<String>,
    ) -> Result<consort_core::directory::DirectoryPacket, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Directory {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// What `audience` may see of `agent` and (optionally) one of its runs: typed state, and
    /// an excerpt of at most `lines` lines from `source` when the audience placed the run.
    pub async fn observe(
        &self,
        audience: consort_core::directory::Audience,
        agent: &str,
        run: Option<RunId>,
        source: consort_core::directory::ExcerptSource,
        lines: usize,
    ) -> Result<consort_core::directory::Observation, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Observe {
                audience: audience.clone(),
                agent: agent.to_owned(),
                run: run.clone(),
                source,
                lines,
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Waits, pinned to the agent's incarnation, up to `timeout` for the run to reach what
    /// `request.until` asks after `request.after_seq`; `Err(gap)` inside when `audience` may
    /// not wait on it.
    pub async fn wait_run(
        &self,
        audience: consort_core::directory::Audience,
        request: crate::directory::WaitRequest,
        timeout: Duration,
    ) -> Result<Result<crate::directory::WaitAnswer, consort_core::directory::ScopeGap>, ActorsError>
    {
        let timeout = timeout.min(crate::directory::MAX_WAIT);
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::WaitRun {
                audience: audience.clone(),
                request: request.clone(),
                timeout,
                reply
            },
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX) + ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// Delivers a message for `audience` (see `consort_actors::directory::DeliveryRequest`):
    /// the receipt, then whether the run moved inside the window. An agent audience delivers
    /// only to agents its `agents.can_call` on this host lists (`rejected`,
    /// `delivery_not_in_can_call` otherwise, decided before anything is sent).
    pub async fn deliver(
        &self,
        audience: consort_core::directory::Audience,
        request: crate::directory::DeliveryRequest,
    ) -> Result<consort_core::directory::DeliveryOutcome, ActorsError> {
        let bound = request.timeout + request.window.unwrap_or(crate::directory::MAX_WAIT);
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Deliver {
                audience: audience.clone(),
                request: request.clone(),
                reply
            },
            u64::try_from(bound.as_millis()).unwrap_or(u64::MAX) + ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// The receipt of an earlier delivery of `audience`'s (`unknown_delivery` when none,
    /// `unreachable` when the host that holds it could not be asked).
    pub async fn delivery_status(
        &self,
        audience: consort_core::directory::Audience,
        agent: &str,
        run: Option<RunId>,
        delivery_id: &str,
    ) -> Result<consort_core::directory::Receipt, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::DeliveryStatus {
                audience: audience.clone(),
                agent: agent.to_owned(),
                run: run.clone(),
                delivery_id: delivery_id.to_owned(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }

    /// The attention rollup of `goal` (or of the one goal `audience` may see).
    pub async fn attention(
        &self,
        audience: consort_core::directory::Audience,
        goal: Option<String>,
    ) -> Result<consort_core::directory::AttentionRollup, ActorsError> {
        ractor::call_t!(
            self.supervisor,
            |reply| SupervisorMsg::Attention {
                audience: audience.clone(),
                goal: goal.clone(),
                reply
            },
            ASK_TIMEOUT_MS
        )
        .map_err(|e| ActorsError::Actor(e.to_string()))
    }
}
