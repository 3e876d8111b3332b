//! [`HostInbox`]: what another host's requests ask of this one, for the link glue.
//!
//! A link (consort-fleet's inbound handler) verifies a frame, decides whether the sending host
//! may ask it at all, and then hands the request to this host: a call to accept, a reply to
//! offer to the run that placed its call, a reply to send again, presence to report, a
//! directory request to answer. This handle is that hand-over and nothing more: each method
//! sends the supervisor one message and waits at most the time it is given, so the supervisor's
//! message type stays the crate's own. It decides nothing a link should have decided, and the
//! link decides nothing the agents decide (consent, guards, whether a reply is expected).

use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};

use consort_core::directory::{
    AgentReport, Audience, ExcerptSource, Observation, Receipt, ScopeGap,
};
use consort_core::step::CallOutcome;
use consort_net::{CallEnvelope, ReplyEnvelope, RunId};

use crate::ActorsError;
use crate::directory::{WaitAnswer, WaitRequest};
use crate::routing::SupervisorMsg;

/// A handle on a host for the requests other hosts send it over a link; cheap to clone. Get
/// one from [`Host::inbox`](crate::Host::inbox).
#[derive(Clone)]
pub struct HostInbox {
    supervisor: ActorRef<SupervisorMsg>,
}

impl std::fmt::Debug for HostInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostInbox")
            .field("supervisor", &self.supervisor.get_id())
            .finish()
    }
}

impl HostInbox {
    pub(crate) fn new(supervisor: ActorRef<SupervisorMsg>) -> Self {
        Self { supervisor }
    }

    /// Sends the supervisor the message `ask` builds and waits up to `timeout` for its answer;
    /// a supervisor that is gone or too slow is [`ActorsError::Actor`].
    pub(crate) async fn ask<T: Send + 'static>(
        &self,
        ask: impl FnOnce(RpcReplyPort<T>) -> SupervisorMsg,
        timeout: Duration,
    ) -> Result<T, ActorsError> {
        let (reply, answered) = ractor::concurrency::oneshot();
        self.supervisor
            .cast(ask(reply.into()))
            .map_err(|e| ActorsError::Actor(format!("the host supervisor is gone: {e}")))?;
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(ActorsError::Actor(
                "the host supervisor dropped the request".into(),
            )),
            Err(_) => Err(ActorsError::Actor(format!(
                "the host supervisor did not answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// A call another host placed on one of this host's agents, its chain already verified
    /// by the link: the callee's agent accepts it (or finds the run it already started for
    /// it) or refuses it.
    pub async fn place_call(
        &self,
        envelope: CallEnvelope,
        timeout: Duration,
    ) -> Result<CallOutcome, ActorsError> {
        self.ask(
            |reply| SupervisorMsg::PlaceCall { envelope, reply },
            timeout,
        )
        .await
    }

    /// A reply another host sent, its signature already verified by the link: `true` when the
    /// caller's agent took it (it answers a call one of its runs placed).
    pub async fn offer_reply(
        &self,
        reply: ReplyEnvelope,
        timeout: Duration,
    ) -> Result<bool, ActorsError> {
        self.ask(|taken| SupervisorMsg::OfferReply { reply, taken }, timeout)
            .await
    }

    /// Asks local agent `callee` to send the reply of its settled run `child_run` again (the
    /// link checked that the asking host may ask). Does not wait for the reply.
    pub fn resend_reply(&self, callee: &str, child_run: &RunId) -> Result<(), ActorsError> {
        self.supervisor
            .cast(SupervisorMsg::ResendReply {
                callee: callee.to_owned(),
                child_run: child_run.clone(),
            })
            .map_err(|e| ActorsError::Actor(format!("the host supervisor is gone: {e}")))
    }

    /// The presence of `agents` on this host, and when it was observed (Unix milliseconds),
    /// for the link to sign and send back.
    pub async fn presence(
        &self,
        agents: Vec<String>,
        timeout: Duration,
    ) -> Result<(u64, Vec<AgentReport>), ActorsError> {
        self.ask(|reply| SupervisorMsg::Presence { agents, reply }, timeout)
            .await
    }

    /// What `audience` (established by the link) may see of `agent` and one of its runs; see
    /// [`Host::observe`](crate::Host::observe).
    pub async fn observe(
        &self,
        audience: Audience,
        agent: String,
        run: Option<RunId>,
        source: ExcerptSource,
        lines: usize,
        timeout: Duration,
    ) -> Result<Observation, ActorsError> {
        self.ask(
            |reply| SupervisorMsg::Observe {
                audience,
                agent,
                run,
                source,
                lines,
                reply,
            },
            timeout,
        )
        .await
    }

    /// Waits up to `wait` for a run to reach what `request` asks; see
    /// [`Host::wait_run`](crate::Host::wait_run). `timeout` bounds the whole request.
    pub async fn wait_run(
        &self,
        audience: Audience,
        request: WaitRequest,
        wait: Duration,
        timeout: Duration,
    ) -> Result<Result<WaitAnswer, ScopeGap>, ActorsError> {
        self.ask(
            |reply| SupervisorMsg::WaitRun {
                audience,
                request,
                timeout: wait,
                reply,
            },
            timeout,
        )
        .await
    }

    /// Hands a delivery from `from` (an agent the link proved, or the operator sender) to
    /// local agent `agent`, into run `run` or a new run; the receipt says what became of it.
    pub async fn deliver_here(
        &self,
        from: String,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
        text: String,
        timeout: Duration,
    ) -> Result<Receipt, ActorsError> {
        self.ask(
            |reply| SupervisorMsg::DeliverHere {
                from,
                agent,
                run,
                delivery_id,
                text,
                reply,
            },
            timeout,
        )
        .await
    }

    /// The receipt of an earlier delivery of `audience`'s; see
    /// [`Host::delivery_status`](crate::Host::delivery_status).
    pub async fn delivery_status(
        &self,
        audience: Audience,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
        timeout: Duration,
    ) -> Result<Receipt, ActorsError> {
        self.ask(
            |reply| SupervisorMsg::DeliveryStatus {
                audience,
                agent,
                run,
                delivery_id,
                reply,
            },
            timeout,
        )
        .await
    }
}
