//! The host's side of the peer directory as an app or the HTTP API asks it: a goal's
//! directory, observing a peer, waiting on a run, delivering a message, a delivery's status
//! and what needs attention. Each is a request to the supervisor, which decides what the
//! audience may see; the handle only carries it, through the host's
//! [`HostInbox`](crate::HostInbox) (the same hand-over a link uses), and bounds the wait.

use std::time::Duration;

use consort_core::directory::{
    AttentionRollup, Audience, DeliveryOutcome, DirectoryPacket, ExcerptSource, Observation,
    Receipt, ScopeGap,
};
use consort_net::RunId;

use super::{ASK_TIMEOUT_MS, Host};
use crate::ActorsError;
use crate::directory::{DeliveryRequest, MAX_WAIT, WaitAnswer, WaitRequest};
use crate::supervisor::SupervisorMsg;

/// How long a directory request waits for the supervisor beyond its own bound.
const ASK_TIMEOUT: Duration = Duration::from_millis(ASK_TIMEOUT_MS);

impl Host {
    /// The peer directory of `goal` (or of the one goal `audience` may see) as `audience` may
    /// see it. `audience` must be what this host established about the caller (a run's agent,
    /// an operator's credentials), never a name the caller gave.
    pub async fn directory(
        &self,
        audience: Audience,
        goal: Option<String>,
    ) -> Result<DirectoryPacket, ActorsError> {
        let ask = |reply| SupervisorMsg::Directory {
            audience,
            goal,
            reply,
        };
        self.inbox().ask(ask, ASK_TIMEOUT).await
    }

    /// What `audience` may see of `agent` and (optionally) one of its runs: typed state, and
    /// an excerpt of at most `lines` lines from `source` when the audience placed the run.
    pub async fn observe(
        &self,
        audience: Audience,
        agent: &str,
        run: Option<RunId>,
        source: ExcerptSource,
        lines: usize,
    ) -> Result<Observation, ActorsError> {
        let agent = agent.to_owned();
        self.inbox()
            .observe(audience, agent, run, source, lines, ASK_TIMEOUT)
            .await
    }

    /// Waits, pinned to the agent's incarnation, up to `timeout` for the run to reach what
    /// `request.until` asks after `request.after_seq`; `Err(gap)` inside when `audience` may
    /// not wait on it.
    pub async fn wait_run(
        &self,
        audience: Audience,
        request: WaitRequest,
        timeout: Duration,
    ) -> Result<Result<WaitAnswer, ScopeGap>, ActorsError> {
        let wait = timeout.min(MAX_WAIT);
        let bound = wait + ASK_TIMEOUT;
        self.inbox().wait_run(audience, request, wait, bound).await
    }

    /// Delivers a message for `audience` (see `consort_actors::directory::DeliveryRequest`):
    /// the receipt, then whether the run moved inside the window. An agent audience delivers
    /// only to agents its `agents.can_call` on this host lists (`rejected`,
    /// `delivery_not_in_can_call` otherwise, decided before anything is sent).
    pub async fn deliver(
        &self,
        audience: Audience,
        request: DeliveryRequest,
    ) -> Result<DeliveryOutcome, ActorsError> {
        let bound = request.timeout + request.window.unwrap_or(MAX_WAIT) + ASK_TIMEOUT;
        let ask = |reply| SupervisorMsg::Deliver {
            audience,
            request,
            reply,
        };
        self.inbox().ask(ask, bound).await
    }

    /// The receipt of an earlier delivery of `audience`'s (`unknown_delivery` when none,
    /// `unreachable` when the host that holds it could not be asked).
    pub async fn delivery_status(
        &self,
        audience: Audience,
        agent: &str,
        run: Option<RunId>,
        delivery_id: &str,
    ) -> Result<Receipt, ActorsError> {
        let (agent, delivery_id) = (agent.to_owned(), delivery_id.to_owned());
        self.inbox()
            .delivery_status(audience, agent, run, delivery_id, ASK_TIMEOUT)
            .await
    }

    /// The attention rollup of `goal` (or of the one goal `audience` may see).
    pub async fn attention(
        &self,
        audience: Audience,
        goal: Option<String>,
    ) -> Result<AttentionRollup, ActorsError> {
        let ask = |reply| SupervisorMsg::Attention {
            audience,
            goal,
            reply,
        };
        self.inbox().ask(ask, ASK_TIMEOUT).await
    }
}
