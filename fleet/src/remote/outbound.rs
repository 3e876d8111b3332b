//! The outbound half of the link glue: [`LinkRemote`], the supervisor's [`RemoteCalls`] seam
//! over this host's [`LinkEndpoint`]. It places calls on the callee's host (signing every
//! pending hop this host serves first, in one batch with whatever else leaves for that host at
//! the same moment: see `signer`), delivers replies (signed the same way, retried with
//! backoff), asks
//! for a remote child's status and for a lost reply again, and turns link failures into typed
//! outcomes (`unreachable`, the callee host's own refusal read off the wire).
//!
//! It must not decide whether a call is allowed (the caller's agent did, the callee's host
//! will again) nor read or write any run store; and it resends a call only when the answer
//! was lost or the peer could not take it yet, which the child run id makes effectively-once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{Instrument, debug, info_span, warn};

use consort_actors::directory::{WaitAnswer, WaitRequest};
use consort_actors::supervisor::{BoxFuture, RemoteCalls, RemoteFailure};
use consort_actors::{ActorsError, CallOutcome, Channel, Cost, RunRecord, RunStatus};
use consort_core::Refusal;
use consort_core::directory::{ExcerptSource, HostAnswer, Observation, Receipt, ScopeGap};
use consort_net::{
    CallEnvelope, Frame, HostKey, LinkEndpoint, LinkError, RefusalReason, ReplyEnvelope, RunId,
};

use super::FleetMap;
use super::signer::{Signer, Unsigned};
use super::wire::{ReplyNext, after_reply_answer, refusal_from_wire, run_status};

/// How long a presence query that could not reach a host answers the next ones at once (one
/// query in the background keeps checking whether the host is back).
const REMEMBER_FAILURE: Duration = Duration::from_secs(30);

/// What the last presence queries found out about hosts that could not be reached, so that a
/// directory of a fleet with a host down does not wait the presence deadline on every ask.
#[derive(Clone, Default)]
struct PresenceMemory {
    hosts: Arc<Mutex<HashMap<String, HostMemory>>>,
}

#[derive(Default)]
struct HostMemory {
    /// When the last query failed, and whether the link refused at once (unreachable) or the
    /// answer timed out (no answer).
    failed: Option<(Instant, bool)>,
    probing: bool,
}

impl PresenceMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HostMemory>> {
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer a recent failure gives `host` now, if it failed within [`REMEMBER_FAILURE`].
    fn recent_failure(&self, host: &str) -> Option<HostAnswer> {
        let hosts = self.lock();
        let (at, unreachable) = hosts.get(host)?.failed?;
        (at.elapsed() < REMEMBER_FAILURE).then(|| {
            let host = host.to_owned();
            if unreachable {
                HostAnswer::Unreachable { host }
            } else {
                HostAnswer::NoAnswer { host }
            }
        })
    }

    /// Marks a background probe of `host` as started; false if one already runs.
    fn start_probe(&self, host: &str) -> bool {
        let mut hosts = self.lock();
        let memory = hosts.entry(host.to_owned()).or_default();
        !std::mem::replace(&mut memory.probing, true)
    }

    /// What a query to `host` found: reached (`None`) or the link's error.
    fn probed(&self, host: &str, error: Option<&LinkError>) {
        let mut hosts = self.lock();
        let memory = hosts.entry(host.to_owned()).or_default();
        memory.probing = false;
        memory.failed = error.map(|e| (Instant::now(), !matches!(e, LinkError::Timeout(_))));
    }
}

/// The supervisor's way to other hosts: calls, replies, `check_run` and reply resends as
/// frames over this host's [`LinkEndpoint`].
pub struct LinkRemote {
    map: Arc<FleetMap>,
    /// Signs calls and replies with this host's key, a batch per peer host at a time.
    signer: Signer,
    endpoint: LinkEndpoint,
    /// How often a reply is tried before it is left to the caller's resend-on-resume.
    reply_attempts: u32,
    presence_memory: PresenceMemory,
}

impl LinkRemote {
    /// The link glue of one host: its fleet map, its key (to sign what leaves it) and its
    /// link endpoint.
    pub fn new(map: Arc<FleetMap>, key: HostKey, endpoint: LinkEndpoint) -> Self {
        Self {
            signer: Signer::new(map.clone(), key),
            map,
            endpoint,
            reply_attempts: 8,
            presence_memory: PresenceMemory::default(),
        }
    }

    /// How many signatures this host's calls and replies took, and how many hops and replies
    /// they signed (more than one per signature when several left for one host at once).
    pub fn signing_counts(&self) -> (u64, u64) {
        self.signer.counts()
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

    async fn call(&self, envelope: CallEnvelope) -> CallOutcome {
        let Some((callee, child_run)) = envelope
            .last_hop()
            .map(|last| (last.callee.clone(), last.child_run.clone()))
        else {
            return CallOutcome::Refused(consort_core::guards::empty_chain(""));
        };
        let (peer, addr) = match self.route(&callee) {
            Ok(route) => route,
            Err(detail) => return CallOutcome::Refused(Refusal::unreachable(&callee, detail)),
        };
        let Some(Unsigned::Call(envelope)) =
            self.signer.sign(&peer, Unsigned::Call(envelope)).await
        else {
            warn!(peer_host = %peer, "the call was lost while being signed");
            return CallOutcome::Refused(Refusal::unreachable(
                &callee,
                "this host could not sign the call",
            ));
        };
        let frame = Frame::Call(envelope);
        let expected_child = child_run;
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
                }) if child_run == expected_child => {
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
                    return CallOutcome::Refused(Refusal::bad_envelope(
                        &callee,
                        "the callee's host answered with an unexpected frame",
                    ));
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
                    return CallOutcome::Refused(Refusal::unreachable(&callee, e.to_string()));
                }
            }
        }
    }

    async fn reply(&self, reply: ReplyEnvelope) {
        let (peer, addr) = match self.route(&reply.caller) {
            Ok(route) => route,
            Err(detail) => {
                warn!(%detail, "reply has nowhere to go");
                return;
            }
        };
        let Some(Unsigned::Reply(reply)) = self
            .signer
            .sign(&peer, Unsigned::Reply(Box::new(reply)))
            .await
        else {
            warn!(peer_host = %peer, "the reply was lost while being signed; the caller's host asks for it again when it resumes the run");
            return;
        };
        let frame = Frame::Reply(*reply);
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=self.reply_attempts {
            match self.endpoint.request(&peer, addr, &frame).await {
                Ok(answer) => match after_reply_answer(&answer) {
                    ReplyNext::Delivered => {
                        debug!(attempt, "reply delivered");
                        return;
                    }
                    ReplyNext::Retry => debug!(attempt, "reply not taken yet: {answer:?}"),
                    ReplyNext::Unwanted => {
                        warn!(peer_host = %peer, "reply refused: the caller placed no such call: {answer:?}");
                        return;
                    }
                    ReplyNext::Refused => {
                        warn!(peer_host = %peer, "reply refused: {answer:?}");
                        return;
                    }
                },
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
                // A state added by a newer host: say so rather than guess one.
                let Some(status) = run_status(state) else {
                    warn!(peer_host = %peer, "check_run answered with an unknown state: {state:?}");
                    return Err(ActorsError::Remote(format!(
                        "{agent}'s host reports a run state this host does not know ({state:?})"
                    )));
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
                    // The callee's host does not report it; the caller's own run knows it.
                    origin: "unknown".to_owned(),
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

    /// Asks `peer` for its agents' presence and checks the signed answer: from that host, for
    /// this query's nonce, signed with its pinned key. The caller bounds the wait.
    async fn presence_of(&self, peer: String, agents: Vec<String>) -> HostAnswer {
        let Some(addr) = self.map.addresses.get(&peer).copied() else {
            return HostAnswer::Unreachable { host: peer };
        };
        let nonce: [u8; 16] = rand::random();
        let frame = Frame::PresenceQuery { nonce, agents };
        if let Some(known) = self.presence_memory.recent_failure(&peer) {
            // The last query found the host out of reach: say so now, and let one query in the
            // background find out whether it is back, for the next asker.
            if self.presence_memory.start_probe(&peer) {
                let (endpoint, memory, probe_peer) = (
                    self.endpoint.clone(),
                    self.presence_memory.clone(),
                    peer.clone(),
                );
                tokio::spawn(async move {
                    let probe = Frame::PresenceQuery {
                        nonce,
                        agents: Vec::new(),
                    };
                    let answer = endpoint.request(&probe_peer, addr, &probe).await;
                    memory.probed(&probe_peer, answer.as_ref().err());
                });
            }
            return known;
        }
        // On its own task: when the presence deadline cuts the wait short, the dial still ends
        // and its outcome is remembered for the next query.
        let (endpoint, memory, peer_task) = (
            self.endpoint.clone(),
            self.presence_memory.clone(),
            peer.clone(),
        );
        let asked = tokio::spawn(async move {
            let answer = endpoint.request(&peer_task, addr, &frame).await;
            memory.probed(&peer_task, answer.as_ref().err());
            answer
        });
        let Ok(answer) = asked.await else {
            return HostAnswer::NoAnswer { host: peer };
        };
        match answer {
            Ok(Frame::PresenceReport(report)) => {
                match consort_net::verify_presence(&report, &peer, &nonce, &self.map.ring) {
                    Ok(()) => HostAnswer::Answered {
                        host: peer,
                        observed_at_ms: report.observed_at_ms,
                        reports: report.reports,
                    },
                    Err(error) => {
                        warn!(peer_host = %peer, %error, "presence report refused: it failed verification");
                        HostAnswer::Refused { host: peer }
                    }
                }
            }
            Ok(other) => {
                debug!(peer_host = %peer, "presence not reported: {other:?}");
                HostAnswer::Refused { host: peer }
            }
            Err(LinkError::Timeout(_)) => HostAnswer::NoAnswer { host: peer },
            Err(error) => {
                debug!(peer_host = %peer, %error, "presence query not delivered");
                HostAnswer::Unreachable { host: peer }
            }
        }
    }

    /// Sends a directory request (`Observe`, `WaitRun`) to `peer` and reads the JSON answer.
    async fn directory_request<T: serde::de::DeserializeOwned>(
        &self,
        peer: &str,
        frame: Frame,
    ) -> Result<T, RemoteFailure> {
        let addr =
            self.map.addresses.get(peer).copied().ok_or_else(|| {
                RemoteFailure::Unreachable(format!("host `{peer}` has no address"))
            })?;
        match self.endpoint.request(peer, addr, &frame).await {
            Ok(Frame::DirectoryAnswer { json }) => serde_json::from_str(&json).map_err(|e| {
                RemoteFailure::Refused(format!(
                    "{peer} answered with JSON this host cannot read: {e}"
                ))
            }),
            Ok(Frame::Refused { text, .. }) => {
                Err(RemoteFailure::Refused(format!("{peer} refused: {text}")))
            }
            Ok(other) => Err(RemoteFailure::Refused(format!(
                "{peer} answered with an unexpected frame: {other:?}"
            ))),
            Err(e) => Err(RemoteFailure::Unreachable(format!(
                "{peer} is unreachable: {e}"
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
                hop_depth = envelope.depth(),
                origin = envelope.origin().map_or_else(|| "unknown".to_owned(), ToString::to_string)),
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

    fn presence(&self, host: String, agents: Vec<String>) -> BoxFuture<'_, HostAnswer> {
        let span = info_span!("link_presence", host = %self.map.host, peer_host = %host,
            agents = agents.len());
        Box::pin(self.presence_of(host, agents).instrument(span))
    }

    fn observe(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        source: ExcerptSource,
        lines: usize,
    ) -> BoxFuture<'_, Result<Observation, RemoteFailure>> {
        let span =
            info_span!("link_observe", host = %self.map.host, peer_host = %host, agent = %agent);
        let frame = Frame::Observe {
            asker,
            agent,
            run,
            source,
            lines: u32::try_from(lines).unwrap_or(u32::MAX),
        };
        Box::pin(async move { self.directory_request(&host, frame).await }.instrument(span))
    }

    fn deliver(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
        text: String,
    ) -> BoxFuture<'_, Result<Receipt, RemoteFailure>> {
        let span =
            info_span!("link_deliver", host = %self.map.host, peer_host = %host, agent = %agent);
        let frame = Frame::Deliver {
            asker,
            agent,
            run,
            delivery_id,
            text,
        };
        Box::pin(async move { self.directory_request(&host, frame).await }.instrument(span))
    }

    fn delivery_status(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
    ) -> BoxFuture<'_, Result<Receipt, RemoteFailure>> {
        let span = info_span!("link_delivery_status", host = %self.map.host, peer_host = %host, agent = %agent);
        let frame = Frame::DeliveryStatus {
            asker,
            agent,
            run,
            delivery_id,
        };
        Box::pin(async move { self.directory_request(&host, frame).await }.instrument(span))
    }

    fn wait_run(
        &self,
        host: String,
        asker: Option<String>,
        request: WaitRequest,
        slice: Duration,
    ) -> BoxFuture<'_, Result<Result<WaitAnswer, ScopeGap>, RemoteFailure>> {
        let span = info_span!("link_wait", host = %self.map.host, peer_host = %host,
            agent = %request.agent, run_id = %request.run);
        let frame = Frame::WaitRun {
            asker,
            agent: request.agent,
            run: request.run,
            until: request.until,
            after_seq: request.after_seq,
            incarnation: request.incarnation,
            wait_ms: u32::try_from(slice.as_millis()).unwrap_or(u32::MAX),
        };
        Box::pin(async move { self.directory_request(&host, frame).await }.instrument(span))
    }

    fn resend_reply(&self, callee: String, child_run: RunId) -> BoxFuture<'_, ()> {
        let span =
            info_span!("link_resend", host = %self.map.host, run_id = %child_run, agent = %callee);
        Box::pin(self.resend(callee, child_run).instrument(span))
    }
}
