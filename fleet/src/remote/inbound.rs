//! The inbound half of the link glue: `Inbound`, the [`FrameHandler`] that answers other
//! hosts' requests. A call's chain is verified (`consort_net::verify_chain_cached`, with this
//! host's [`InboundLimits`]) and a reply's signature (`consort_net::verify_reply_cached`), both
//! with the host's cache of batch signatures already verified, so the other envelopes of a
//! batch skip the signature check but not their own proof; consort-core's
//! guards then say whether the sending host may send it (`guards::arrived_call`,
//! `guards::remote::arrived_reply`) or may ask about the run it names
//! (`guards::remote::run_query`), and calls and replies go to the supervisor, where the agent
//! actors decide the rest exactly as for an in-host call.
//!
//! It must not decide anything itself: it gathers the facts (placements, the authenticated
//! sending host, what a store holds) and asks. It never writes a run store; it reads one,
//! read-only and off the async workers, only after the guards said the agent is served here.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use std::future::Future;
use tracing::{Instrument, debug, info_span, warn};

use consort_actors::directory::WaitRequest;
use consort_actors::run::now_ms;
use consort_actors::{ActorsError, CallOutcome, DataFolder, HostInbox, RunRecord, RunStatus};
use consort_core::directory::Audience;
use consort_core::guards::remote::{self, Denial, RunQuery, RunQueryFacts, StoredRun};
use consort_core::step::cap_output;
use consort_net::{
    CallEnvelope, ChainError, ChainLimits, Frame, FrameHandler, HostKey, MAX_PRESENCE_AGENTS,
    PresenceReport, RefusalReason, ReplyEnvelope, RunId, VerifiedRoots,
};

use super::wire::{chain_refusal, denial_frame, frame_name, refusal_frame, refused, run_state};
use super::{FleetMap, InboundLimits};

/// How long the inbound side waits for the supervisor to answer a call.
const ACCEPT_TIMEOUT_MS: u64 = 30_000;
/// How long the supervisor may take to answer an observation.
const DIRECTORY_TIMEOUT_MS: u64 = 5_000;
/// The longest one remote wait request may wait here (under the link's request timeout).
const MAX_WAIT_SLICE_MS: u64 = 5_000;
/// How long the supervisor may take to report its agents' presence.
const PRESENCE_TIMEOUT_MS: u64 = 2_000;
/// How long the caller's agent may take to say whether it takes a reply.
const REPLY_CHECK_TIMEOUT_MS: u64 = 10_000;

/// This host's answers to other hosts' requests.
pub(crate) struct Inbound {
    map: Arc<FleetMap>,
    data: DataFolder,
    reply_cap: usize,
    limits: InboundLimits,
    inbox: OnceLock<HostInbox>,
    /// This host's key, to sign presence reports.
    key: Option<HostKey>,
    /// Batch signatures already verified: the other calls and replies of a batch skip the
    /// signature check (each proof is still checked).
    roots: VerifiedRoots,
}

impl Inbound {
    pub(crate) fn new(map: Arc<FleetMap>, data: DataFolder, reply_cap: usize) -> Self {
        Self {
            map,
            data,
            reply_cap,
            limits: InboundLimits::default(),
            inbox: OnceLock::new(),
            key: None,
            roots: VerifiedRoots::default(),
        }
    }

    /// Signs presence reports with `key` (without one, presence queries are refused).
    pub(crate) fn with_key(mut self, key: HostKey) -> Self {
        self.key = Some(key);
        self
    }

    /// These limits instead of [`InboundLimits::default`].
    pub(crate) fn with_limits(mut self, limits: InboundLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Hands over the host's inbox once the host is up; until then requests are answered
    /// `Internal` (the sender retries).
    pub(crate) fn set_inbox(&self, inbox: HostInbox) {
        if self.inbox.set(inbox).is_err() {
            warn!("the host's inbox was handed over twice; the first one stays");
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

    fn inbox(&self) -> Result<&HostInbox, Box<Frame>> {
        self.inbox.get().ok_or_else(|| {
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
                        hop_depth = envelope.depth(),
                        origin = envelope.origin().map_or_else(|| "unknown".to_owned(), ToString::to_string))
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
            } => {
                let span = info_span!("link_inbound_check", host = %self.map.host, peer_host = %peer,
                    run_id = %child_run, agent = %callee, caller = %caller);
                self.on_check(&peer, &caller, &callee, &parent_run, &child_run)
                    .instrument(span)
                    .await
            }
            Frame::ResendReply { callee, child_run } => {
                let span = info_span!("link_inbound_resend", host = %self.map.host, peer_host = %peer,
                    run_id = %child_run, agent = %callee);
                self.on_resend(&peer, &callee, &child_run)
                    .instrument(span)
                    .await
            }
            Frame::PresenceQuery { nonce, agents } => {
                let span = info_span!("link_inbound_presence", host = %self.map.host, peer_host = %peer,
                    agents = agents.len());
                self.on_presence(&peer, nonce, agents)
                    .instrument(span)
                    .await
            }
            Frame::Observe {
                asker,
                agent,
                run,
                source,
                lines,
            } => {
                let span = info_span!("link_inbound_observe", host = %self.map.host, peer_host = %peer, agent = %agent);
                let Some(audience) = self.audience_of(&peer, asker) else {
                    return refused(
                        RefusalReason::Malformed,
                        "the asking agent is not served by the asking host",
                    );
                };
                let lines = usize::try_from(lines).unwrap_or(usize::MAX);
                let timeout = Duration::from_millis(DIRECTORY_TIMEOUT_MS);
                self.answer_json(|inbox| async move {
                    inbox
                        .observe(audience, agent, run, source, lines, timeout)
                        .await
                })
                .instrument(span)
                .await
            }
            Frame::WaitRun {
                asker,
                agent,
                run,
                until,
                after_seq,
                incarnation,
                wait_ms,
            } => {
                let span = info_span!("link_inbound_wait", host = %self.map.host, peer_host = %peer, agent = %agent, run_id = %run);
                let Some(audience) = self.audience_of(&peer, asker) else {
                    return refused(
                        RefusalReason::Malformed,
                        "the asking agent is not served by the asking host",
                    );
                };
                // Under the link's request timeout: the asking host asks again for longer waits.
                let timeout = Duration::from_millis(u64::from(wait_ms).min(MAX_WAIT_SLICE_MS));
                let request = WaitRequest {
                    agent,
                    run,
                    until,
                    after_seq,
                    incarnation,
                };
                let bound = Duration::from_millis(MAX_WAIT_SLICE_MS + DIRECTORY_TIMEOUT_MS);
                self.answer_json(|inbox| async move {
                    inbox.wait_run(audience, request, timeout, bound).await
                })
                .instrument(span)
                .await
            }
            Frame::Deliver {
                asker,
                agent,
                run,
                delivery_id,
                text,
            } => {
                let span = info_span!("link_inbound_deliver", host = %self.map.host, peer_host = %peer, agent = %agent);
                let from = match self.audience_of(&peer, asker) {
                    Some(Audience::Agent(agent)) => agent,
                    Some(_) => consort_core::directory::OPERATOR_SENDER.to_owned(),
                    None => {
                        return refused(
                            RefusalReason::Malformed,
                            "the asking agent is not served by the asking host",
                        );
                    }
                };
                if text.len() > consort_actors::directory::MAX_MESSAGE_BYTES {
                    return refused(RefusalReason::Malformed, "the message is too large");
                }
                let timeout = Duration::from_millis(DIRECTORY_TIMEOUT_MS);
                self.answer_json(|inbox| async move {
                    inbox
                        .deliver_here(from, agent, run, delivery_id, text, timeout)
                        .await
                })
                .instrument(span)
                .await
            }
            Frame::DeliveryStatus {
                asker,
                agent,
                run,
                delivery_id,
            } => {
                let span = info_span!("link_inbound_delivery_status", host = %self.map.host, peer_host = %peer, agent = %agent);
                let Some(audience) = self.audience_of(&peer, asker) else {
                    return refused(
                        RefusalReason::Malformed,
                        "the asking agent is not served by the asking host",
                    );
                };
                let timeout = Duration::from_millis(DIRECTORY_TIMEOUT_MS);
                self.answer_json(|inbox| async move {
                    inbox
                        .delivery_status(audience, agent, run, delivery_id, timeout)
                        .await
                })
                .instrument(span)
                .await
            }
            other => {
                warn!(peer_host = %peer, "refused: not a request frame: {}", frame_name(&other));
                refused(RefusalReason::Malformed, "not a request frame")
            }
        }
    }

    /// Reports the presence of agents this host serves, signed, to a host of the fleet (the
    /// link proved which). The asking host decided the caller's scope; an agent this host does
    /// not serve is reported as not served, never guessed.
    async fn on_presence(&self, peer: &str, nonce: [u8; 16], agents: Vec<String>) -> Frame {
        if agents.len() > MAX_PRESENCE_AGENTS {
            warn!(peer_host = %peer, asked = agents.len(), "presence query refused: too many agents");
            return refused(
                RefusalReason::Malformed,
                format!("a presence query names at most {MAX_PRESENCE_AGENTS} agents"),
            );
        }
        let Some(key) = &self.key else {
            return refused(
                RefusalReason::Internal,
                "this host cannot sign presence reports",
            );
        };
        let inbox = match self.inbox() {
            Ok(inbox) => inbox,
            Err(frame) => return *frame,
        };
        let asked = inbox
            .presence(agents, Duration::from_millis(PRESENCE_TIMEOUT_MS))
            .await;
        match asked {
            Ok((observed_at_ms, reports)) => {
                let mut report = PresenceReport {
                    host: self.map.host.clone(),
                    nonce,
                    observed_at_ms,
                    reports,
                    signature: Vec::new(),
                };
                consort_net::sign_presence(&mut report, key);
                Frame::PresenceReport(report)
            }
            Err(e) => refused(
                RefusalReason::Internal,
                format!("the host supervisor did not answer: {e}"),
            ),
        }
    }

    /// The audience of a directory request from `peer`: its operator, or one of the agents it
    /// serves (proven by the link, checked against the fleet's placements).
    fn audience_of(&self, peer: &str, asker: Option<String>) -> Option<Audience> {
        match asker {
            None => Some(Audience::Operator),
            Some(agent) if self.map.placements.get(&agent).map(String::as_str) == Some(peer) => {
                Some(Audience::Agent(agent))
            }
            Some(agent) => {
                warn!(peer_host = %peer, %agent, "directory request refused: the asking agent is not served by the asking host");
                None
            }
        }
    }

    /// Asks the host through its inbox and answers with its answer as JSON (the inbox bounds
    /// the wait with the timeout `ask` gives it).
    async fn answer_json<T, F>(&self, ask: impl FnOnce(HostInbox) -> F) -> Frame
    where
        T: serde::Serialize,
        F: Future<Output = Result<T, ActorsError>>,
    {
        let inbox = match self.inbox() {
            Ok(inbox) => inbox.clone(),
            Err(frame) => return *frame,
        };
        match ask(inbox).await {
            Ok(value) => match serde_json::to_string(&value) {
                Ok(json) => Frame::DirectoryAnswer { json },
                Err(e) => refused(
                    RefusalReason::Internal,
                    format!("the answer could not be written: {e}"),
                ),
            },
            Err(e) => refused(
                RefusalReason::Internal,
                format!("the host did not answer: {e}"),
            ),
        }
    }

    async fn on_call(&self, peer: &str, envelope: CallEnvelope) -> Frame {
        let Some(last) = envelope.last_hop() else {
            warn!(peer_host = %peer, "call refused: empty chain");
            return chain_refusal("", &ChainError::Empty);
        };
        let limits = ChainLimits {
            now_ms: now_ms(),
            allowed_skew_ms: self.limits.allowed_skew_ms,
            max_depth: self.limits.max_chain_depth,
            max_lifetime_ms: self.limits.max_envelope_lifetime_ms,
        };
        let verified = consort_net::verify_chain_cached(
            &envelope,
            &self.map.ring,
            &self.map.placements,
            &limits,
            &self.roots,
        );
        if let Err(ChainError::TooDeep { depth, limit }) = verified {
            // The refusal the agent itself would give (same code, same words), only cheaper:
            // no signature of a chain this deep is worth checking.
            let refusal = consort_core::guards::chain_too_deep(limit);
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
        let inbox = match self.inbox() {
            Ok(inbox) => inbox,
            Err(frame) => return *frame,
        };
        let outcome = inbox
            .place_call(envelope, Duration::from_millis(ACCEPT_TIMEOUT_MS))
            .await;
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
        if let Err(error) = consort_net::verify_reply_cached(
            &reply,
            &self.map.ring,
            &self.map.placements,
            &self.roots,
        ) {
            warn!(peer_host = %peer, %error, "reply refused: it failed verification");
            return refused(RefusalReason::BadChain, format!("reply refused: {error}"));
        }
        // Locality: the sending host serves the callee, this host the caller.
        if let Err(denial) = remote::arrived_reply(
            &self.map.placements,
            &self.map.host,
            peer,
            &reply.caller,
            &reply.callee,
        ) {
            warn!(peer_host = %peer, "reply refused: {denial}");
            return denial_frame(&denial);
        }
        // Only a reply to a call this host's run placed is delivered: the caller's agent
        // actor, which owns the run, decides (and holds a reply that overtook its call's ack).
        let inbox = match self.inbox() {
            Ok(inbox) => inbox,
            Err(frame) => return *frame,
        };
        // Only what the refusal below names is kept: the reply itself moves to the actor.
        let (parent_run, child_run, callee) = (
            reply.parent_run.clone(),
            reply.child_run.clone(),
            reply.callee.clone(),
        );
        let taken = inbox
            .offer_reply(reply, Duration::from_millis(REPLY_CHECK_TIMEOUT_MS))
            .await;
        match taken {
            Ok(true) => Frame::Ack,
            Ok(false) => {
                warn!(peer_host = %peer, "reply refused: no such call was placed");
                refused(
                    RefusalReason::UnknownRun,
                    format!("run {parent_run} placed no call {child_run} to {callee}"),
                )
            }
            Err(e) => refused(
                RefusalReason::Internal,
                format!("the caller's agent did not answer: {e}"),
            ),
        }
    }

    /// The stored child run `child` of local agent `callee`, if `peer` may have `query`
    /// answered about it (consort-core's `guards::remote::run_query` decides).
    async fn asked_run(
        &self,
        peer: &str,
        callee: &str,
        child: &RunId,
        query: RunQuery<'_>,
    ) -> Result<RunRecord, Box<Frame>> {
        let denied = |denial: Denial| {
            warn!(peer_host = %peer, run_id = %child, agent = %callee, "refused: {denial}");
            Box::new(denial_frame(&denial))
        };
        // Before any path is built from a name another host sent.
        remote::asked_agent(&self.map.placements, &self.map.host, callee).map_err(denied)?;
        let run = self.stored_run(callee, child).await;
        let facts = RunQueryFacts {
            placements: &self.map.placements,
            here: &self.map.host,
            sender: peer,
            callee,
            child_run: child,
            query,
            stored: run.as_ref().map(|run| StoredRun {
                parent_agent: run.parent_agent.as_deref(),
                parent_run: run.parent_run.as_ref(),
            }),
        };
        remote::run_query(&facts).map_err(denied)?;
        run.ok_or_else(|| {
            denied(Denial::NoSuchChild {
                callee: callee.to_owned(),
                child_run: child.clone(),
                sender: peer.to_owned(),
            })
        })
    }

    /// Run `child` as local agent `callee`'s store holds it, read on a blocking thread (opening
    /// and querying the store would stall this tokio worker). A store that cannot be read
    /// holds nothing to tell the asking host.
    async fn stored_run(&self, callee: &str, child: &RunId) -> Option<RunRecord> {
        let (data, agent, id) = (self.data.clone(), callee.to_owned(), child.clone());
        let read = tokio::task::spawn_blocking(move || data.run_of(&agent, &id)).await;
        match read {
            Ok(Ok(run)) => run.map(|(run, _seq)| run),
            Ok(Err(error)) => {
                debug!(agent = %callee, %error, "run store not readable");
                None
            }
            Err(error) => {
                warn!(agent = %callee, %error, "reading the run store did not finish");
                None
            }
        }
    }

    async fn on_check(
        &self,
        peer: &str,
        caller: &str,
        callee: &str,
        parent_run: &RunId,
        child: &RunId,
    ) -> Frame {
        let query = RunQuery::Check { caller, parent_run };
        let run = match self.asked_run(peer, callee, child, query).await {
            Ok(run) => run,
            Err(frame) => return *frame,
        };
        let state = run_state(run.status);
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

    async fn on_resend(&self, peer: &str, callee: &str, child: &RunId) -> Frame {
        if let Err(frame) = self.asked_run(peer, callee, child, RunQuery::Resend).await {
            return *frame;
        }
        match self.inbox() {
            Ok(inbox) => {
                let asked = inbox.resend_reply(callee, child);
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
