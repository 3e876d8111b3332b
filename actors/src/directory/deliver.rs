//! Delivering a message to a peer, from the sending host's side: the receipt from the agent's
//! host (this one, or another over the link), inside the sender's own timeout, then a watch
//! for activity inside the window.
//!
//! Nothing here resends: a delivery whose receipt did not come in time ends as `timeout` (it
//! may or may not have arrived; the sender reads state, or delivers again with the same id,
//! which the receiver answers from the first). A receipt is no proof of execution: only a
//! state change of the run after the message (its next model turn) makes the outcome
//! `active`; none inside the window is `stalled`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::warn;

use consort_core::RunId;
use consort_core::directory::{
    Audience, DeliveryOutcome, OPERATOR_SENDER, Receipt, WaitOutcome, WaitUntil, activity_outcome,
    sender_consents,
};

use super::WaitRequest;
use super::outbox::Pending;
use super::requests::DirectoryHost;
use crate::routing::{RemoteFailure, SupervisorMsg};

/// The longest message a delivery carries, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What a sender asks to deliver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRequest {
    /// The agent it goes to.
    pub agent: String,
    /// One of its runs the sender placed, or `None` for a new run.
    pub run: Option<RunId>,
    /// The sender's idempotency key (same id, same message: the first receipt again).
    pub delivery_id: String,
    /// The message.
    pub text: String,
    /// How long the sender waits for the receipt.
    pub timeout: Duration,
    /// How long after the receipt activity is watched for; `None`: the host's
    /// `activity_window_s`.
    pub window: Option<Duration>,
}

impl DirectoryHost {
    /// Delivers `request` for `audience`. `can_call` is the sending agent's `agents.can_call`
    /// as this host serves it (empty for an agent it does not serve; unused for an operator):
    /// the sender's half of consent is decided here, before anything is journaled or sent.
    pub(crate) async fn deliver(
        self,
        audience: Audience,
        can_call: Vec<String>,
        request: DeliveryRequest,
    ) -> DeliveryOutcome {
        let reject = |code: &str, reason: String| DeliveryOutcome::Rejected {
            delivery_id: request.delivery_id.clone(),
            code: code.to_owned(),
            reason,
        };
        let (sender, asker) = match &audience {
            Audience::Agent(agent) => (agent.clone(), Some(agent.clone())),
            Audience::Operator => (OPERATOR_SENDER.to_owned(), None),
            Audience::Principal(_) | Audience::Unidentified => {
                return reject(
                    "audience_not_authorized",
                    "only an agent of the fleet or an operator may deliver".into(),
                );
            }
        };
        // The sender's own side refuses with its own code: the peer is not asked, and is not
        // blamed.
        if let Err(refusal) = sender_consents(&sender, &can_call, &request.agent) {
            return DeliveryOutcome::rejected(&request.delivery_id, &refusal);
        }
        if request.text.len() > MAX_MESSAGE_BYTES {
            return reject(
                "message_too_large",
                format!(
                    "the message is {} bytes; a delivery carries at most {MAX_MESSAGE_BYTES}",
                    request.text.len()
                ),
            );
        }
        let Some(host) = self.host_of_agent(&request.agent) else {
            return reject(
                "unknown_agent",
                format!("no agent named `{}` is placed in this fleet", request.agent),
            );
        };
        let remote = host != self.host;
        let pending = Pending {
            sender: sender.clone(),
            host: host.clone(),
            agent: request.agent.clone(),
            run: request.run.clone(),
            delivery_id: request.delivery_id.clone(),
            text: request.text.clone(),
        };
        // The intent is journaled before the frame leaves: a crash of this host leaves it
        // readable, and it is carried if the peer's host cannot be reached now.
        if remote && let Err(e) = self.outbox.journal(&pending).await {
            return reject(
                "not_journaled",
                format!("the delivery could not be journaled on this host: {e}"),
            );
        }
        let asked = async {
            if !remote {
                self.deliver_here(sender.clone(), &request).await
            } else {
                match &self.remote {
                    None => Err(RemoteFailure::Unreachable("this host has no links".into())),
                    Some(links) => {
                        links
                            .deliver(
                                host.clone(),
                                asker,
                                request.agent.clone(),
                                request.run.clone(),
                                request.delivery_id.clone(),
                                request.text.clone(),
                            )
                            .await
                    }
                }
            }
        };
        let answered = tokio::time::timeout(request.timeout, asked).await;
        let forget = || {
            self.outbox
                .done(&sender, &request.agent, &request.delivery_id)
        };
        let receipt = match answered {
            Ok(Err(RemoteFailure::Unreachable(detail))) if remote => {
                self.outbox
                    .mark_queued(&sender, &request.agent, &request.delivery_id)
                    .await;
                return DeliveryOutcome::Queued {
                    delivery_id: request.delivery_id.clone(),
                    detail: format!(
                        "{detail}; journaled on this host and carried, with the same id, once {host} is back"
                    ),
                };
            }
            Err(_) => {
                // No automatic resend after a timeout: the sender decides.
                if remote {
                    forget().await;
                }
                return DeliveryOutcome::Timeout {
                    delivery_id: request.delivery_id.clone(),
                    detail: format!(
                        "no receipt within {:?}: the message may or may not have arrived; read the run, or deliver again with the same id",
                        request.timeout
                    ),
                };
            }
            Ok(Err(RemoteFailure::Unreachable(detail))) => {
                return reject("host_unreachable", detail);
            }
            Ok(Err(RemoteFailure::Refused(detail))) => {
                if remote {
                    forget().await;
                }
                return reject("host_refused", detail);
            }
            Ok(Ok(receipt)) => {
                if remote {
                    forget().await;
                }
                receipt
            }
        };
        let window = request.window.unwrap_or(self.spec.activity_window);
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let Receipt::Enqueued { run, seq, .. } = &receipt else {
            return activity_outcome(receipt, None, window_ms);
        };
        let watch = WaitRequest {
            agent: request.agent.clone(),
            run: run.clone(),
            until: WaitUntil::Changed,
            after_seq: *seq,
            incarnation: None,
        };
        // The host's own watch: it reveals only whether the run moved after the message.
        let observed = match self
            .wait(Audience::Operator, watch, (window, Vec::new()))
            .await
        {
            Ok(answer) => match answer.outcome {
                WaitOutcome::Matched { seq, .. } => Some(seq),
                _ => None,
            },
            Err(_) => None,
        };
        activity_outcome(receipt, observed, window_ms)
    }

    /// Hands the delivery to this host's agent through the supervisor.
    async fn deliver_here(
        &self,
        from: String,
        request: &DeliveryRequest,
    ) -> Result<Receipt, RemoteFailure> {
        let Some(supervisor) = self.supervisor.clone() else {
            return Err(RemoteFailure::Refused(
                "the host supervisor is not up".into(),
            ));
        };
        ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::DeliverHere {
                from: from.clone(),
                agent: request.agent.clone(),
                run: request.run.clone(),
                delivery_id: request.delivery_id.clone(),
                text: request.text.clone(),
                reply
            },
            u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX)
        )
        .map_err(|e| RemoteFailure::Refused(format!("the agent did not answer: {e}")))
    }
}

impl DirectoryHost {
    /// The receipt of an earlier delivery of `audience` with `delivery_id` to `agent` (into
    /// `run`, or as a new run): `enqueued` where it landed, `unknown_delivery` when nothing
    /// with that id from that sender is there, `unreachable` when the host that holds it could
    /// not be asked. A sender reads this instead of sending again.
    pub(crate) async fn delivery_status(
        self,
        audience: Audience,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
    ) -> Receipt {
        let (sender, asker) = match &audience {
            Audience::Agent(a) => (a.clone(), Some(a.clone())),
            Audience::Operator => (OPERATOR_SENDER.to_owned(), None),
            Audience::Principal(_) | Audience::Unidentified => {
                return Receipt::UnknownDelivery { delivery_id };
            }
        };
        let Some(host) = self.host_of_agent(&agent) else {
            return Receipt::UnknownDelivery { delivery_id };
        };
        if host != self.host {
            if self.outbox.is_pending(&sender, &agent, &delivery_id).await {
                return super::outbox::queued(&delivery_id);
            }
            let Some(remote) = self.remote.clone() else {
                return Receipt::unreachable(&delivery_id, &host, "this host has no links");
            };
            // A failure to ask is no answer about the delivery: it may well be there.
            return match remote
                .delivery_status(host.clone(), asker, agent, run, delivery_id.clone())
                .await
            {
                Ok(receipt) => receipt,
                Err(failure) => {
                    warn!(peer_host = %host, %failure, "delivery lookup: the agent's host did not answer");
                    Receipt::unreachable(&delivery_id, &host, failure.to_string())
                }
            };
        }
        if self.board.seat(&agent).is_none() {
            return Receipt::UnknownDelivery { delivery_id };
        }
        let data = self.data.clone();
        let id = delivery_id.clone();
        let read =
            tokio::task::spawn_blocking(move || receipt_in_store(&data, &sender, &agent, run, &id))
                .await;
        match read {
            Ok(Ok(receipt)) => receipt,
            _ => Receipt::UnknownDelivery { delivery_id },
        }
    }
}

/// Looks a delivery up in `agent`'s store.
fn receipt_in_store(
    data: &crate::DataFolder,
    sender: &str,
    agent: &str,
    run: Option<RunId>,
    delivery_id: &str,
) -> Result<Receipt, crate::ActorsError> {
    let unknown = || Receipt::UnknownDelivery {
        delivery_id: delivery_id.to_owned(),
    };
    match run {
        None => {
            let id = consort_core::directory::delivery_run_id(agent, sender, delivery_id);
            Ok(match data.run_of(agent, &id)? {
                Some((record, _))
                    if record.channel == crate::run::Channel::Delivery(sender.to_owned()) =>
                {
                    Receipt::Enqueued {
                        delivery_id: delivery_id.to_owned(),
                        run: id,
                        seq: 1,
                        existing: true,
                    }
                }
                _ => unknown(),
            })
        }
        Some(run) => {
            if data.run_of(agent, &run)?.is_none() {
                return Ok(unknown());
            }
            let found = data.events_of(agent, &run)?.into_iter().find(|e| {
                matches!(&e.event, consort_core::RunEvent::MessageReceived(m)
                    if m.from == sender && m.delivery_id == delivery_id)
            });
            Ok(match found {
                Some(event) => Receipt::Enqueued {
                    delivery_id: delivery_id.to_owned(),
                    run,
                    seq: event.seq,
                    existing: true,
                },
                None => unknown(),
            })
        }
    }
}
