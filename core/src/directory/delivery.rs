//! Peer delivery's rules: what names a delivery, how its payload is fingerprinted, which run a
//! new-run delivery lands in, and what a sender is told.
//!
//! A delivery hands a peer a message, either into a run the sender placed or as a new run on
//! the peer (channel `delivery:<sender>`). The sender names each delivery with its own id
//! ([`check_delivery_id`]); with the sender's name it makes a repeat idempotent, and the
//! [`payload_digest`] tells a repeat from a reuse of the id for another message. A new-run
//! delivery's run id is derived ([`delivery_run_id`]), so a repeat finds the run the first one
//! started. The callee answers with a [`Receipt`]; what the sender finally reads is a
//! [`DeliveryOutcome`] from [`activity_outcome`]: a delivery counts as read only when the run
//! moved past it, never merely because it was enqueued.
//!
//! Taking a message into a run is the run state machine's work
//! ([`Input::Deliver`](crate::Input::Deliver)); consent and who placed a run are the runtime's
//! facts. This module holds neither, reads no clock and no store: times, receipts and seqs come
//! in as arguments.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::step::Verdict;
use crate::{Refusal, RunId};

/// The model tool that delivers a message to a peer.
pub const DELIVER: &str = "deliver";

/// Domain tag of the payload digest; bump the version if its fields ever change.
const DIGEST_DOMAIN: &[u8] = b"consort/delivery-digest/v1";
/// Domain tag of a new-run delivery's run id, apart from child runs' (`RunId::child_of`).
const DELIVERY_RUN_DOMAIN: &[u8] = b"consort/delivery-run-id/v1";
/// The longest delivery id, in characters.
const MAX_DELIVERY_ID: usize = 128;

/// The fingerprint of what a delivery carries: sha256 hex over its length-prefixed fields
/// (the callee, the run it goes into or none, the text), so no two payloads share one by
/// moving bytes between fields.
pub fn payload_digest(to: &str, run: Option<&RunId>, text: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(DIGEST_DOMAIN);
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    field(to.as_bytes());
    // A marker byte keeps "no run" apart from any run's text.
    match run {
        None => field(&[0]),
        Some(run) => {
            field(&[1]);
            field(run.as_str().as_bytes());
        }
    }
    field(text.as_bytes());
    hex::encode(hasher.finalize())
}

/// The run a new-run delivery starts on `to`: the same for every repeat of the delivery.
pub fn delivery_run_id(to: &str, sender: &str, delivery_id: &str) -> RunId {
    RunId::derived(
        DELIVERY_RUN_DOMAIN,
        &[to.as_bytes(), sender.as_bytes(), delivery_id.as_bytes()],
    )
}

/// Whether `id` may name a delivery: 1 to 128 characters of `[A-Za-z0-9_.:-]`.
pub fn check_delivery_id(id: &str) -> Result<(), Refusal> {
    let ok = !id.is_empty()
        && id.len() <= MAX_DELIVERY_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Refusal::MalformedDelivery)
    }
}

/// The callee's answer to a delivery (or to a question about one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "receipt", rename_all = "snake_case")]
pub enum Receipt {
    /// The message is in `run`'s log at `seq`.
    Enqueued {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// The run it went into.
        run: RunId,
        /// The seq of its `message_received` event.
        seq: u64,
        /// It was there already: a repeat, nothing written.
        existing: bool,
    },
    /// The callee refused it; nothing was written.
    Rejected {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// The refusal's stable code.
        code: String,
        /// The sentence the sender's model reads.
        reason: String,
    },
    /// The callee has no record of the delivery.
    UnknownDelivery {
        /// The sender's id for the delivery.
        delivery_id: String,
    },
    /// Journaled on the sender's host, waiting for the peer's host to be back.
    Queued {
        /// The sender's id for the delivery.
        delivery_id: String,
    },
    /// The host that holds the receipt could not be asked (it is down, out of reach, or
    /// answered with nothing this host can read): whether the delivery arrived is not known.
    /// Never an answer about the delivery itself; ask again later.
    Unreachable {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// The host that was asked.
        host: String,
        /// What failed.
        detail: String,
    },
}

impl Receipt {
    /// A refusal, as the receipt the sender gets.
    pub fn rejected(delivery_id: &str, refusal: &Refusal) -> Self {
        Self::Rejected {
            delivery_id: delivery_id.to_owned(),
            code: refusal.code().to_owned(),
            reason: refusal.to_string(),
        }
    }

    /// A lookup that could not reach `host`, which holds the receipt: what failed, never
    /// `unknown_delivery` (that would say the delivery is not there).
    pub fn unreachable(delivery_id: &str, host: &str, detail: impl Into<String>) -> Self {
        Self::Unreachable {
            delivery_id: delivery_id.to_owned(),
            host: host.to_owned(),
            detail: detail.into(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Enqueued { .. } => "enqueued",
            Self::Rejected { .. } => "rejected",
            Self::UnknownDelivery { .. } => "unknown_delivery",
            Self::Queued { .. } => "queued",
            Self::Unreachable { .. } => "unreachable",
        }
    }

    /// The sender's id for the delivery.
    pub fn delivery_id(&self) -> &str {
        match self {
            Self::Enqueued { delivery_id, .. }
            | Self::Rejected { delivery_id, .. }
            | Self::UnknownDelivery { delivery_id }
            | Self::Queued { delivery_id }
            | Self::Unreachable { delivery_id, .. } => delivery_id,
        }
    }
}

/// What a sender finally reads about a delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeliveryOutcome {
    /// The run moved past the message inside the window: it is being read.
    Active {
        /// The callee's receipt.
        receipt: Receipt,
        /// The run's seq that showed it moved on.
        activity_seq: u64,
    },
    /// Enqueued, but nothing followed inside the window: never success.
    Stalled {
        /// The callee's receipt.
        receipt: Receipt,
        /// How long the sender watched, in milliseconds.
        window_ms: u64,
    },
    /// Refused, by the sender's host (its own `can_call`, the audience, the message) or by
    /// the callee (or the callee has no record of it); nothing was written.
    Rejected {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// The stable code.
        code: String,
        /// The sentence the sender's model reads.
        reason: String,
    },
    /// The sender's own time ran out: the delivery may or may not have arrived; nothing is
    /// resent (a retry with the same delivery id is safe).
    Timeout {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// What was still out.
        detail: String,
    },
    /// The peer's host could not be reached: the delivery is journaled on the sender's host
    /// and carried, with the same id, once that host is back. Not a success.
    Queued {
        /// The sender's id for the delivery.
        delivery_id: String,
        /// Why it could not go now.
        detail: String,
    },
}

impl DeliveryOutcome {
    /// A refusal decided before any receipt (on the sender's side), as the outcome the sender
    /// reads: the same shape and code as the peer's refusal of that kind would have.
    pub fn rejected(delivery_id: &str, refusal: &Refusal) -> Self {
        Self::Rejected {
            delivery_id: delivery_id.to_owned(),
            code: refusal.code().to_owned(),
            reason: refusal.to_string(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Active { .. } => "active",
            Self::Stalled { .. } => "stalled",
            Self::Rejected { .. } => "rejected",
            Self::Timeout { .. } => "timeout",
            Self::Queued { .. } => "queued",
        }
    }

    /// Whether the delivery is known to be read: only [`DeliveryOutcome::Active`].
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Active { .. })
    }
}

/// What a receipt means once the sender watched the run for `window_ms`: active only when the
/// run's seq moved past the message's (`observed_seq`, the last seq seen, if any).
pub fn activity_outcome(
    receipt: Receipt,
    observed_seq: Option<u64>,
    window_ms: u64,
) -> DeliveryOutcome {
    match receipt {
        Receipt::Enqueued { seq, .. } => match observed_seq {
            Some(observed) if observed > seq => DeliveryOutcome::Active {
                receipt,
                activity_seq: observed,
            },
            _ => DeliveryOutcome::Stalled { receipt, window_ms },
        },
        Receipt::Rejected {
            delivery_id,
            code,
            reason,
        } => DeliveryOutcome::Rejected {
            delivery_id,
            code,
            reason,
        },
        // No record on the callee: it did not arrive, and the sender must not read it as
        // stalled (that would say it waits in a run).
        Receipt::UnknownDelivery { delivery_id } => DeliveryOutcome::Rejected {
            reason: format!(
                "the peer has no record of delivery `{delivery_id}`: it did not arrive; deliver it again with the same delivery id"
            ),
            delivery_id,
            code: "unknown_delivery".to_owned(),
        },
        Receipt::Queued { delivery_id } => DeliveryOutcome::Queued {
            delivery_id,
            detail: "journaled on the sender's host; carried when the peer's host is back".into(),
        },
        // No answer from the host that holds it: as for a missing receipt, it may or may not
        // have arrived, and nothing is resent.
        Receipt::Unreachable {
            delivery_id,
            host,
            detail,
        } => DeliveryOutcome::Timeout {
            delivery_id,
            detail: format!(
                "{host} could not be asked ({detail}): the message may or may not have arrived; look it up later, or deliver again with the same id"
            ),
        },
    }
}

#[cfg(test)]
mod tests;

/// The sender name of an operator's delivery: not a valid agent name, so no agent can take it.
pub const OPERATOR_SENDER: &str = "@operator";

/// A delivery that asks for a new run, checked before anything is stored: the message must say
/// something; and when the run its id derives ([`delivery_run_id`]) exists already, the same
/// message is answered from that run (`existing`, nothing stored again) and a different one is
/// a conflict. `Ok(())` means: store the run. `stored_input` is what the derived run was asked,
/// if it exists.
pub fn new_run_delivery(
    to: &str,
    delivery_id: &str,
    run: &RunId,
    stored_input: Option<&str>,
    text: &str,
) -> Result<(), Receipt> {
    if let Some(stored) = stored_input {
        return Err(
            if payload_digest(to, None, stored) == payload_digest(to, None, text) {
                Receipt::Enqueued {
                    delivery_id: delivery_id.to_owned(),
                    run: run.clone(),
                    seq: 1,
                    existing: true,
                }
            } else {
                Receipt::rejected(
                    delivery_id,
                    &Refusal::DeliveryConflict {
                        delivery_id: delivery_id.to_owned(),
                    },
                )
            },
        );
    }
    if text.trim().is_empty() {
        return Err(Receipt::rejected(delivery_id, &Refusal::MalformedDelivery));
    }
    Ok(())
}

/// The sender's half of a delivery's consent, decided on the sender's host as for a call: the
/// sender's own `can_call` names the callee. An operator needs none.
///
/// A refusal here is the sender's own config speaking ([`Refusal::DeliveryNotInCanCall`],
/// which names the sender's `can_call`), never the callee's
/// [`Refusal::DeliveryNotConsented`]: the callee was not asked and may well accept the sender.
/// The host passes the `can_call` it serves the sender with (empty when it does not serve it).
pub fn sender_consents(sender: &str, can_call: &[String], callee: &str) -> Result<(), Refusal> {
    if sender == OPERATOR_SENDER || crate::consent::caller_consents(can_call, callee) {
        Ok(())
    } else {
        Err(Refusal::DeliveryNotInCanCall {
            sender: sender.to_owned(),
            callee: callee.to_owned(),
            allowed: crate::guards::list_or_none(can_call),
        })
    }
}

/// The receiver's half, as for a call: the callee's `accept_from` names the sender. An
/// operator needs none.
pub fn receiver_consents(
    sender: &str,
    accept_from: &[String],
    callee: &str,
) -> Result<(), Refusal> {
    if sender == OPERATOR_SENDER || crate::consent::callee_consents(accept_from, sender) {
        Ok(())
    } else {
        Err(Refusal::DeliveryNotConsented {
            sender: sender.to_owned(),
            callee: callee.to_owned(),
        })
    }
}

/// The refusal of a delivery into a run the callee has no record of, or that its machine
/// dropped: to the sender it is not a run it placed, which is all it learns (a sender cannot
/// probe which runs exist).
pub fn run_not_found(run: &RunId) -> Refusal {
    Refusal::DeliveryNotYourRun {
        run: run.to_string(),
    }
}

/// What a delivery's sender is told once the run's machine has answered the delivery into
/// `run`: delivered, the message's seq; refused, that refusal; dropped, [`run_not_found`]. Any
/// other verdict answers no delivery: nothing was written, and the sender is told its
/// delivery could not be taken as sent ([`Refusal::MalformedDelivery`]).
pub fn delivery_receipt(delivery_id: &str, run: &RunId, verdict: &Verdict) -> Receipt {
    match verdict {
        Verdict::Delivered { seq, existing } => Receipt::Enqueued {
            delivery_id: delivery_id.to_owned(),
            run: run.clone(),
            seq: *seq,
            existing: *existing,
        },
        Verdict::Refused(refusal) => Receipt::rejected(delivery_id, refusal),
        Verdict::Dropped(_) => Receipt::rejected(delivery_id, &run_not_found(run)),
        _ => Receipt::rejected(delivery_id, &Refusal::MalformedDelivery),
    }
}

/// Whether `sender` may deliver into a run: the agent that placed it (or the operator).
pub fn may_deliver_into(
    sender: &str,
    run: &RunId,
    parent_agent: Option<&str>,
) -> Result<(), Refusal> {
    if sender == OPERATOR_SENDER || parent_agent == Some(sender) {
        Ok(())
    } else {
        Err(run_not_found(run))
    }
}
