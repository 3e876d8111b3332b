//! The link glue between a host supervisor and the other hosts of a fleet.
//!
//! Owns two things: [`LinkRemote`], the supervisor's [`RemoteCalls`] seam implemented over a
//! [`LinkEndpoint`] (it signs every pending hop this host serves before an envelope leaves,
//! signs replies, and turns link failures into typed outcomes), and [`Inbound`], the
//! [`FrameHandler`] that answers other hosts' requests (it verifies every chain and reply
//! against the fleet's pinned keys and placements, checks that the sending host is the one
//! serving the caller, then hands the call to the supervisor, where the callee's agent actor
//! runs the very same `accept` (replay check, inbound guards, store) as for an in-host call).
//!
//! It must not decide whether a call is allowed: consent, depth and caps are decided by
//! `consort_actors::guards` inside the agent actors; this module only proves who sent what
//! (with `consort_net::chain`) and moves frames. It never writes a run store; it reads one
//! (read-only) to check that a reply or status request concerns a call the asker placed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ractor::ActorRef;
use tracing::{Instrument, debug, info_span, warn};

use consort_actors::run::now_ms;
use consort_actors::store::RunStore;
use consort_actors::supervisor::{BoxFuture, RemoteCalls, SupervisorMsg};
use consort_actors::{ActorsError, CallOutcome, Channel, Cost, DataFolder, RunRecord, RunStatus};
use consort_core::step::cap_output;
use consort_core::{Limits, Refusal};
use consort_net::{
    CallEnvelope, ChainError, ChainLimits, Frame, FrameHandler, HostKey, KeyRing, LinkEndpoint,
    LinkError, RefusalReason, RemoteRunState, ReplyEnvelope, RunId,
};

/// Clock skew allowed between hosts when checking issue and expiry times.
pub(crate) const ALLOWED_SKEW_MS: u64 = 30_000;
/// The longest lifetime a call envelope may claim, and how long ago it may have been issued,
/// unless [`InboundLimits`] says otherwise. Senders give calls 5 minutes.
pub(crate) const MAX_ENVELOPE_LIFETIME_MS: u64 = 15 * 60_000;

/// What this host accepts of the chains other hosts send, checked on the link before the
/// call reaches the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InboundLimits {
    /// The deepest chain any agent of this host could accept (the largest hop limit). A
    /// longer chain is refused with the same depth-limit refusal the agent would give, before
    /// any signature is checked.
    pub max_chain_depth: usize,
    /// Clock skew allowed between hosts.
    pub allowed_skew_ms: u64,
    /// The longest lifetime (expiry minus issue time) of a call, and its oldest issue time.
    pub max_envelope_lifetime_ms: u64,
}

impl Default for InboundLimits {
    fn default() -> Self {
        Self {
            max_chain_depth: Limits::DEFAULT_MAX_DEPTH as usize,
            allowed_skew_ms: ALLOWED_SKEW_MS,
            max_envelope_lifetime_ms: MAX_ENVELOPE_LIFETIME_MS,
        }
    }
}

/// How long the inbound side waits for the supervisor to answer a call.
const ACCEPT_TIMEOUT_MS: u64 = 30_000;
/// How long the caller's agent may take to say whether it takes a reply.
const REPLY_CHECK_TIMEOUT_MS: u64 = 10_000;

/// What every host of a fleet knows about the fleet: who it is, where each agent lives, where
/// each host listens and which key each host holds.
#[derive(Clone, Debug)]
pub struct FleetMap {
    /// This host's name.
    pub host: String,
    /// Agent -> the host serving it (every agent of the fleet).
    pub placements: BTreeMap<String, String>,
    /// Host -> its link address.
    pub addresses: BTreeMap<String, SocketAddr>,
    /// Host -> its pinned public key (this host included).
    pub ring: KeyRing,
}

impl FleetMap {
    fn host_of(&self, agent: &str) -> Option<&str> {
        self.placements.get(agent).map(String::as_str)
    }

    fn is_local(&self, agent: &str) -> bool {
        self.host_of(agent) == Some(self.host.as_str())
    }
}

/// The supervisor's way to other hosts: calls, replies, `check_run` and reply resends as
/// frames over this host's [`LinkEndpoint`].
pub struct LinkRemote {
    map: Arc<FleetMap>,
    key: HostKey,
    endpoint: LinkEndpoint,
    /// How often a reply is tried before it is left to the caller's resend-on-resume.
    reply_attempts: u32,
}

impl LinkRemote {
    /// The link glue of one host: its fleet map, its key (to sign what leaves it) and its
    /// link endpoint.
    pub fn new(map: Arc<FleetMap>, key: HostKey, endpoint: LinkEndpoint) -> Self {
        Self {
            map,
            key,
            endpoint,
            reply_attempts: 8,
        }
    }

    /// The peer host serving `agent` and its address.
    fn route(&self, agent: &str) -> Result<(String, SocketAddr), String> {
        let host = self
            .map
            .host_of(agent)
            .ok_or_else(|| format!("agent `{agent}` is not placed on any host"))?;
        let addr = self
            .map
            .addresses
            .get(host)
            .copied()
            .ok_or_else(|| format!("host `{host}` has no address"))?;
        Ok((host.to_owned(), addr))
    }

    async fn call(&self, mut envelope: CallEnvelope) -> CallOutcome {
        let Some(last) = envelope.last_hop().cloned() else {
            return CallOutcome::Refused(Refusal::BadEnvelope {
                callee: String::new(),
                detail: "empty chain".into(),
            });
        };
        let callee = last.callee.clone();
        let (peer, addr) = match self.route(&callee) {
            Ok(route) => route,
            Err(detail) => return CallOutcome::Refused(Refusal::Unreachable { callee, detail }),
        };
        let map = &self.map;
        consort_net::sign_pending_hops(&mut envelope, &map.host, &self.key, |agent| {
            map.is_local(agent)
        });
        let frame = Frame::Call(envelope);
        // Only a call whose response was lost (the request may have been handled) or that the
        // peer could not take yet is sent again: the child run id makes that safe. A call
        // that could not be delivered at all ends as `unreachable` at once.
        let mut retries_left = 2u32;
        loop {
            let answer = self.endpoint.request(&peer, addr, &frame).await;
            match answer {
                Ok(Frame::Accepted {
                    child_run,
                    existing,
                }) if child_run == last.child_run => {
                    debug!(existing, "call accepted by the callee's host");
                    return CallOutcome::Accepted {
                        child_run,
                        existing,
                    };
                }
                Ok(Frame::Refused {
                    reason: RefusalReason::Internal,
                    text,
                }) if retries_left > 0 => {
                    retries_left -= 1;
                    debug!(%text, "callee's host could not take the call yet; retrying");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok(Frame::Refused { reason, text }) => {
                    let refusal = refusal_from_wire(reason, &text, &callee);
                    debug!(reason = refusal.code(), "call refused by the callee's host");
                    return CallOutcome::Refused(refusal);
                }
                Ok(other) => {
                    warn!(peer_host = %peer, "unexpected answer to a call: {other:?}");
                    return CallOutcome::Refused(Refusal::BadEnvelope {
                        callee,
                        detail: "the callee's host answered with an unexpected frame".into(),
                    });
                }
                Err(e @ (LinkError::ConnectionLost { .. } | LinkError::Timeout(_)))
                    if retries_left > 0 =>
                {
                    retries_left -= 1;
                    warn!(peer_host = %peer, error = %e, "response lost; sending the same call again on a fresh connection (it dedupes on the child run id)");
                    self.endpoint.reset_peer(&peer);
                }
                Err(e) => {
                    warn!(peer_host = %peer, error = %e, "call not delivered");
                    return CallOutcome::Refused(Refusal::Unreachable {
                        callee,
                        detail: e.to_string(),
                    });
                }
            }
        }
    }

    async fn reply(&self, mut reply: ReplyEnvelope) {
        let (peer, addr) = match self.route(&reply.caller) {
            Ok(route) => route,
            Err(detail) => {
                warn!(%detail, "reply has nowhere to go");
                return;
            }
        };
        consort_net::sign_reply(&mut reply, &self.map.host, &self.key);
        let frame = Frame::Reply(reply);
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=self.reply_attempts {
            match self.endpoint.request(&peer, addr, &frame).await {
                Ok(Frame::Ack) => {
                    debug!(attempt, "reply delivered");
                    return;
                }
                // Not known *yet* (the caller records the call when its ack arrives) or the
                // caller's host is starting: try again shortly.
                // A reply that is still unknown after a few tries answers no call of the caller.
                Ok(Frame::Refused {
                    reason: RefusalReason::UnknownRun,
                    text,
                }) if attempt >= 3 => {
                    warn!(peer_host = %peer, %text, "reply refused: the caller placed no such call");
                    return;
                }
                Ok(Frame::Refused {
                    reason: RefusalReason::UnknownRun | RefusalReason::Internal,
                    text,
                }) => debug!(attempt, %text, "reply not taken yet"),
                Ok(other) => {
                    warn!(peer_host = %peer, "reply refused: {other:?}");
                    return;
                }
                Err(e) => debug!(attempt, error = %e, "reply not delivered yet"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        warn!(peer_host = %peer, "reply not delivered; the caller's host asks for it again when it resumes the run");
    }

    async fn summary(
        &self,
        caller: String,
        parent_run: RunId,
        agent: String,
        run: RunId,
    ) -> Result<RunRecord, ActorsError> {
        let (peer, addr) = self.route(&agent).map_err(ActorsError::Remote)?;
        let frame = Frame::CheckRun {
            caller: caller.clone(),
            callee: agent.clone(),
            parent_run: parent_run.clone(),
            child_run: run.clone(),
        };
        let answer = self
            .endpoint
            .request(&peer, addr, &frame)
            .await
            .map_err(|e| ActorsError::Remote(format!("{agent} is unreachable: {e}")))?;
        match answer {
            Frame::RunStatus {
                child_run,
                state,
                output,
                hop_depth,
                created_at_ms,
                input,
            } if child_run == run => {
                let status = match state {
                    RemoteRunState::Queued => RunStatus::Queued,
                    RemoteRunState::Running => RunStatus::Running,
                    RemoteRunState::Waiting => RunStatus::Waiting,
                    RemoteRunState::Blocked => RunStatus::Blocked,
                    RemoteRunState::Succeeded => RunStatus::Succeeded,
                    RemoteRunState::Failed => RunStatus::Failed,
                    // A state added by a newer host: say so rather than guess one.
                    other => {
                        warn!(peer_host = %peer, "check_run answered with an unknown state: {other:?}");
                        return Err(ActorsError::Remote(format!(
                            "{agent}'s host reports a run state this host does not know ({other:?})"
                        )));
                    }
                };
                let (output, error) = if status == RunStatus::Failed {
                    (None, output)
                } else {
                    (output, None)
                };
                let caller_principal = caller.clone();
                Ok(RunRecord {
                    id: child_run,
                    agent,
                    status,
                    channel: Channel::Agent(caller.clone()),
                    parent_run: Some(parent_run),
                    parent_agent: Some(caller),
                    // The callee's host does not share it: the tool-use id is the caller's own.
                    tool_use_id: None,
                    hop_depth,
                    input,
                    output,
                    error,
                    created_at_ms,
                    settled_at_ms: None,
                    cost: Cost::default(),
                    tree_cost: Cost::default(),
                    principal: format!("agent:{caller_principal}"),
                    roles: Vec::new(),
                })
            }
            Frame::Refused { text, .. } => Err(ActorsError::Remote(format!(
                "{agent}'s host refused check_run: {text}"
            ))),
            other => Err(ActorsError::Remote(format!(
                "{agent}'s host answered check_run with an unexpected frame: {other:?}"
            ))),
        }
    }

    async fn resend(&self, callee: String, child_run: RunId) {
        let Ok((peer, addr)) = self.route(&callee) else {
            return;
        };
        let frame = Frame::ResendReply { callee, child_run };
        match self.endpoint.request(&peer, addr, &frame).await {
            Ok(Frame::Ack) => debug!("asked the callee's host to send a reply again"),
            Ok(other) => debug!("reply resend refused: {other:?}"),
            Err(e) => {
                debug!(error = %e, "reply resend not delivered; the callee's host replies when the child settles");
            }
        }
    }
}

impl RemoteCalls for LinkRemote {
    fn serves(&self, agent: &str) -> bool {
        self.map.host_of(agent).is_some_and(|h| h != self.map.host)
    }

    fn place_call(&self, envelope: CallEnvelope) -> BoxFuture<'_, CallOutcome> {
        let span = match envelope.last_hop() {
            Some(hop) => info_span!("link_call", host = %self.map.host,
                peer_host = self.map.host_of(&hop.callee).unwrap_or("?"),
                run_id = %hop.child_run, agent = %hop.callee, caller = %hop.caller,
                hop_depth = envelope.depth()),
            None => info_span!("link_call", host = %self.map.host),
        };
        Box::pin(self.call(envelope).instrument(span))
    }

    fn send_reply(&self, reply: ReplyEnvelope) -> BoxFuture<'_, ()> {
        let span = info_span!("link_reply", host = %self.map.host, run_id = %reply.child_run,
            agent = %reply.callee, caller = %reply.caller);
        Box::pin(self.reply(reply).instrument(span))
    }

    fn run_summary(
        &self,
        caller: String,
        parent_run: RunId,
        agent: String,
        run: RunId,
    ) -> BoxFuture<'_, Result<RunRecord, ActorsError>> {
        let span = info_span!("link_check_run", host = %self.map.host, run_id = %run, agent = %agent, caller = %caller);
        Box::pin(
            self.summary(caller, parent_run, agent, run)
                .instrument(span),
        )
    }

    fn resend_reply(&self, callee: String, child_run: RunId) -> BoxFuture<'_, ()> {
        let span =
            info_span!("link_resend", host = %self.map.host, run_id = %child_run, agent = %callee);
        Box::pin(self.resend(callee, child_run).instrument(span))
    }
}

/// The wire reason of a refusal.
pub(crate) fn wire_reason(refusal: &Refusal) -> RefusalReason {
    match refusal {
        Refusal::NotAccepted { .. } | Refusal::NotInCanCall { .. } | Refusal::NoPeers { .. } => {
            RefusalReason::NotAccepted
        }
        Refusal::DepthLimit { .. } => RefusalReason::DepthLimit,
        Refusal::CallCap { .. } => RefusalReason::CallLimit,
        Refusal::Saturated { .. } => RefusalReason::Saturated,
        Refusal::UnknownAgent { .. } => RefusalReason::UnknownAgent,
        Refusal::BadEnvelope { .. } => RefusalReason::BadChain,
        Refusal::MalformedCall | Refusal::EmptyInput | Refusal::NotAwaitingApproval { .. } => {
            RefusalReason::Malformed
        }
        _ => RefusalReason::Internal,
    }
}

/// A refusal as a frame: the typed reason, and the [`Refusal`] itself as JSON in `text` (its
/// fields are words a model can act on).
pub(crate) fn refusal_frame(refusal: &Refusal) -> Frame {
    Frame::Refused {
        reason: wire_reason(refusal),
        text: refusal.to_wire(),
    }
}

/// Reads a refusal off the wire: the JSON [`Refusal`] when it is one whose reason matches,
/// else a refusal built from the reason alone.
pub(crate) fn refusal_from_wire(reason: RefusalReason, text: &str, callee: &str) -> Refusal {
    if let Ok(refusal) = serde_json::from_str::<Refusal>(text)
        && wire_reason(&refusal) == reason
    {
        return refusal;
    }
    let detail: String = text.chars().take(500).collect();
    match reason {
        RefusalReason::DepthLimit => Refusal::DepthLimit {
            limit: Limits::DEFAULT_MAX_DEPTH as usize,
        },
        RefusalReason::CallLimit => Refusal::CallCap {
            limit: u64::from(Limits::DEFAULT_MAX_CALLS_PER_RUN),
        },
        RefusalReason::Internal => Refusal::AgentDown {
            callee: callee.to_owned(),
        },
        _ => Refusal::BadEnvelope {
            callee: callee.to_owned(),
            detail,
        },
    }
}

fn refused(reason: RefusalReason, text: impl Into<String>) -> Frame {
    Frame::Refused {
        reason,
        text: text.into(),
    }
}

/// The refusal of an envelope that failed verification.
fn chain_refusal(callee: &str, error: &ChainError) -> Frame {
    let refusal = Refusal::BadEnvelope {
        callee: callee.to_owned(),
        detail: error.to_string(),
    };
    let reason = match error {
        ChainError::Expired { .. }
        | ChainError::NotYetValid { .. }
        | ChainError::LifetimeTooLong { .. }
        | ChainError::IssuedTooLongAgo { .. } => RefusalReason::Expired,
        _ => RefusalReason::BadChain,
    };
    Frame::Refused {
        reason,
        text: serde_json::to_string(&refusal).unwrap_or_else(|_| refusal.to_string()),
    }
}

/// This host's answers to other hosts' requests.
pub(crate) struct Inbound {
    map: Arc<FleetMap>,
    data: DataFolder,
    reply_cap: usize,
    limits: InboundLimits,
    supervisor: OnceLock<ActorRef<SupervisorMsg>>,
}

impl Inbound {
    pub(crate) fn new(map: Arc<FleetMap>, data: DataFolder, reply_cap: usize) -> Self {
        Self {
            map,
            data,
            reply_cap,
            limits: InboundLimits::default(),
            supervisor: OnceLock::new(),
        }
    }

    /// These limits instead of [`InboundLimits::default`].
    pub(crate) fn with_limits(mut self, limits: InboundLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Hands over the supervisor once the host is up; until then requests are answered
    /// `Internal` (the sender retries).
    pub(crate) fn set_supervisor(&self, supervisor: ActorRef<SupervisorMsg>) {
        if self.supervisor.set(supervisor).is_err() {
            warn!("the host supervisor was handed over twice; the first one stays");
        }
    }

    /// This handler as the link endpoint wants it.
    pub(crate) fn handler(self: &Arc<Self>) -> Arc<dyn FrameHandler> {
        let me = self.clone();
        Arc::new(move |peer: String, frame: Frame| {
            let me = me.clone();
            async move { me.handle(peer, frame).await }
        })
    }

    fn supervisor(&self) -> Result<&ActorRef<SupervisorMsg>, Box<Frame>> {
        self.supervisor.get().ok_or_else(|| {
            Box::new(refused(
                RefusalReason::Internal,
                "the host is starting; try again",
            ))
        })
    }

    /// Answers one request from the authenticated host `peer`.
    pub(crate) async fn handle(&self, peer: String, frame: Frame) -> Frame {
        match frame {
            Frame::Call(envelope) => {
                let span = match envelope.last_hop() {
                    Some(hop) => {
                        info_span!("link_inbound", host = %self.map.host, peer_host = %peer,
                        run_id = %hop.child_run, agent = %hop.callee, caller = %hop.caller,
                        hop_depth = envelope.depth())
                    }
                    None => info_span!("link_inbound", host = %self.map.host, peer_host = %peer),
                };
                self.on_call(&peer, envelope).instrument(span).await
            }
            Frame::Reply(reply) => {
                let span = info_span!("link_inbound_reply", host = %self.map.host, peer_host = %peer,
                    run_id = %reply.child_run, agent = %reply.callee, caller = %reply.caller);
                self.on_reply(&peer, reply).instrument(span).await
            }
            Frame::CheckRun {
                caller,
                callee,
                parent_run,
                child_run,
            } => self.on_check(&peer, &caller, &callee, &parent_run, &child_run),
            Frame::ResendReply { callee, child_run } => self.on_resend(&peer, &callee, &child_run),
            other => {
                warn!(peer_host = %peer, "refused: not a request frame: {}", frame_name(&other));
                refused(RefusalReason::Malformed, "not a request frame")
            }
        }
    }

    async fn on_call(&self, peer: &str, envelope: CallEnvelope) -> Frame {
        let Some(last) = envelope.last_hop().cloned() else {
            warn!(peer_host = %peer, "call refused: empty chain");
            return chain_refusal("", &ChainError::Empty);
        };
        let limits = ChainLimits {
            now_ms: now_ms(),
            allowed_skew_ms: self.limits.allowed_skew_ms,
            max_depth: self.limits.max_chain_depth,
            max_lifetime_ms: self.limits.max_envelope_lifetime_ms,
        };
        let verified =
            consort_net::verify_chain(&envelope, &self.map.ring, &self.map.placements, &limits);
        if let Err(ChainError::TooDeep { depth, limit }) = verified {
            // The refusal the agent itself would give (same code, same words), only cheaper:
            // no signature of a chain this deep is worth checking.
            let refusal = Refusal::DepthLimit { limit };
            warn!(peer_host = %peer, depth, reason = refusal.code(), "call refused at the receiving host before verification: {refusal}");
            return refusal_frame(&refusal);
        }
        if let Err(error) = verified {
            warn!(peer_host = %peer, %error, "call refused: the envelope failed verification");
            return chain_refusal(&last.callee, &error);
        }
        // Relay and locality: the sending host serves the caller, this host the callee.
        if let Err(refusal) = consort_core::guards::arrived_call(
            &self.map.placements,
            &self.map.host,
            peer,
            &last.caller,
            &last.callee,
        ) {
            warn!(peer_host = %peer, reason = refusal.code(), "call refused: {refusal}");
            return refusal_frame(&refusal);
        }
        let supervisor = match self.supervisor() {
            Ok(s) => s,
            Err(frame) => return *frame,
        };
        let outcome = ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::PlaceCall {
                envelope: envelope.clone(),
                reply,
            },
            ACCEPT_TIMEOUT_MS
        );
        match outcome {
            Ok(CallOutcome::Accepted {
                child_run,
                existing,
            }) => Frame::Accepted {
                child_run,
                existing,
            },
            Ok(CallOutcome::Refused(refusal)) => {
                warn!(peer_host = %peer, reason = refusal.code(), "call refused at the receiving host: {refusal}");
                refusal_frame(&refusal)
            }
            Err(e) => refused(
                RefusalReason::Internal,
                format!("the host did not take the call: {e}"),
            ),
        }
    }

    async fn on_reply(&self, peer: &str, reply: ReplyEnvelope) -> Frame {
        if let Err(error) = consort_net::verify_reply(&reply, &self.map.ring, &self.map.placements)
        {
            warn!(peer_host = %peer, %error, "reply refused: it failed verification");
            return refused(RefusalReason::BadChain, format!("reply refused: {error}"));
        }
        if self.map.host_of(&reply.callee) != Some(peer) {
            warn!(peer_host = %peer, "reply refused: the callee is not served by the sending host");
            return refused(
                RefusalReason::BadChain,
                format!("{} is not served by host {peer}", reply.callee),
            );
        }
        if !self.map.is_local(&reply.caller) {
            warn!(peer_host = %peer, "reply refused: the caller is not served here");
            return refused(
                RefusalReason::UnknownAgent,
                format!("{} is not served here", reply.caller),
            );
        }
        // Only a reply to a call this host's run placed is delivered: the caller's agent
        // actor, which owns the run, decides (and holds a reply that overtook its call's ack).
        let supervisor = match self.supervisor() {
            Ok(supervisor) => supervisor.clone(),
            Err(frame) => return *frame,
        };
        let offered = reply.clone();
        let taken = ractor::call_t!(
            supervisor,
            |taken| SupervisorMsg::OfferReply {
                reply: offered.clone(),
                taken
            },
            REPLY_CHECK_TIMEOUT_MS
        );
        match taken {
            Ok(true) => Frame::Ack,
            Ok(false) => {
                warn!(peer_host = %peer, "reply refused: no such call was placed");
                refused(
                    RefusalReason::UnknownRun,
                    format!(
                        "run {} placed no call {} to {}",
                        reply.parent_run, reply.child_run, reply.callee
                    ),
                )
            }
            Err(e) => refused(
                RefusalReason::Internal,
                format!("the caller's agent did not answer: {e}"),
            ),
        }
    }

    /// The stored child run `child` of local agent `callee`, if its caller is served by `peer`.
    fn own_child(&self, peer: &str, callee: &str, child: &RunId) -> Result<RunRecord, Box<Frame>> {
        if !self.map.is_local(callee) {
            return Err(Box::new(refused(
                RefusalReason::UnknownAgent,
                format!("{callee} is not served here"),
            )));
        }
        let run = RunStore::open_read_only(&self.data.store_path(callee))
            .and_then(|store| store.run(child))
            .ok()
            .flatten();
        match run {
            Some(run)
                if run
                    .parent_agent
                    .as_deref()
                    .is_some_and(|caller| self.map.host_of(caller) == Some(peer)) =>
            {
                Ok(run)
            }
            _ => {
                warn!(peer_host = %peer, run_id = %child, agent = %callee, "refused: no such child run of a caller on the asking host");
                Err(Box::new(refused(
                    RefusalReason::UnknownRun,
                    format!("{callee} has no run {child} placed by an agent of host {peer}"),
                )))
            }
        }
    }

    fn on_check(
        &self,
        peer: &str,
        caller: &str,
        callee: &str,
        parent_run: &RunId,
        child: &RunId,
    ) -> Frame {
        let run = match self.own_child(peer, callee, child) {
            Ok(run) => run,
            Err(frame) => return *frame,
        };
        if run.parent_agent.as_deref() != Some(caller)
            || run.parent_run.as_ref() != Some(parent_run)
        {
            warn!(peer_host = %peer, run_id = %child, "check_run refused: the run was not placed by this caller");
            return refused(
                RefusalReason::UnknownRun,
                format!("run {child} was not placed by {caller}'s run {parent_run}"),
            );
        }
        let state = match run.status {
            RunStatus::Queued => RemoteRunState::Queued,
            RunStatus::Running => RemoteRunState::Running,
            RunStatus::Waiting => RemoteRunState::Waiting,
            RunStatus::Blocked => RemoteRunState::Blocked,
            RunStatus::Succeeded => RemoteRunState::Succeeded,
            RunStatus::Failed => RemoteRunState::Failed,
        };
        let output = match run.status {
            RunStatus::Succeeded => run.output,
            RunStatus::Failed => run.error,
            _ => None,
        };
        Frame::RunStatus {
            child_run: run.id,
            state,
            output: output.map(|o| cap_output(&o, self.reply_cap)),
            hop_depth: run.hop_depth,
            created_at_ms: run.created_at_ms,
            input: cap_output(&run.input, self.reply_cap),
        }
    }

    fn on_resend(&self, peer: &str, callee: &str, child: &RunId) -> Frame {
        if let Err(frame) = self.own_child(peer, callee, child) {
            return *frame;
        }
        match self.supervisor() {
            Ok(supervisor) => {
                let asked = supervisor.cast(SupervisorMsg::ResendReply {
                    callee: callee.to_owned(),
                    child_run: child.clone(),
                });
                match asked {
                    Ok(()) => Frame::Ack,
                    Err(e) => {
                        warn!(peer_host = %peer, "resend request not delivered: {e}");
                        refused(RefusalReason::Internal, "the host is shutting down")
                    }
                }
            }
            Err(frame) => *frame,
        }
    }
}

fn frame_name(frame: &Frame) -> &'static str {
    match frame {
        Frame::Call(_) => "Call",
        Frame::Reply(_) => "Reply",
        Frame::Accepted { .. } => "Accepted",
        Frame::Refused { .. } => "Refused",
        Frame::CheckRun { .. } => "CheckRun",
        Frame::RunStatus { .. } => "RunStatus",
        Frame::Ack => "Ack",
        Frame::ResendReply { .. } => "ResendReply",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_depth_bound_is_the_hosts_hop_limit_and_refuses_as_the_agent_would() {
        assert_eq!(InboundLimits::default().max_chain_depth, 4);
        let Frame::Refused { reason, text } = refusal_frame(&Refusal::DepthLimit {
            limit: InboundLimits::default().max_chain_depth,
        }) else {
            panic!("not a refusal");
        };
        assert_eq!(reason, RefusalReason::DepthLimit);
        let read = refusal_from_wire(reason, &text, "f");
        assert_eq!(read.code(), "depth_limit");
        assert!(read.to_string().contains("depth limit (4)"), "{read}");
    }

    #[test]
    fn stale_or_overlong_envelopes_are_refused_as_expired() {
        for error in [
            ChainError::LifetimeTooLong {
                hop: 0,
                lifetime_ms: u64::MAX,
                limit_ms: MAX_ENVELOPE_LIFETIME_MS,
            },
            ChainError::IssuedTooLongAgo {
                hop: 0,
                issued_at_ms: 0,
                now_ms: 1,
            },
        ] {
            let Frame::Refused { reason, .. } = chain_refusal("cfo", &error) else {
                panic!("not a refusal");
            };
            assert_eq!(reason, RefusalReason::Expired);
        }
    }
}
