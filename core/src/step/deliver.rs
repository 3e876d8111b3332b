//! Taking a peer's delivered message into a run: [`Input::Deliver`](super::Input::Deliver).
//!
//! `receive` decides whether a message lands in the run (one `message_received` event, which
//! the model reads as `[message from <sender>] <text>` on its next turn), is a repeat of one
//! that landed (answered with the first one's seq, nothing written), or is refused (a settled
//! or blocked run, a reused id, an empty message). It must not check consent or who placed
//! the run: those facts live outside the run's log, so the runtime checks them before it
//! builds the input (with [`Refusal::DeliveryNotConsented`] and
//! [`Refusal::DeliveryNotYourRun`]). Nor may it ask the model itself: a waiting run is
//! handed back to `turn` with [`Effect::Advance`].

use super::effect::{Effect, Step, Verdict};
use super::transition::Transition;
use crate::directory::check_delivery_id;
use crate::event::MessageReceived;
use crate::{Refusal, RunEvent, RunId, RunStatus, RunView};

/// A peer's message for the run `run`; see the module docs.
pub(super) fn receive(view: &RunView, run: &RunId, message: MessageReceived) -> Step {
    // The request's own shape first: a message nobody could read is refused whatever the
    // run's state. A delivery that was written had text and a good id, so a repeat of it
    // never ends here.
    if message.text.trim().is_empty() || check_delivery_id(&message.delivery_id).is_err() {
        return Step::verdict(Verdict::Refused(Refusal::MalformedDelivery));
    }
    // A repeat is answered before the run's state is looked at: the sender retries when its
    // receipt was lost, and the message did land, even if the run settled or blocked since.
    let key = (message.from.clone(), message.delivery_id.clone());
    if let Some((digest, seq)) = view.deliveries.get(&key) {
        if *digest == message.digest {
            return Step::verdict(Verdict::Delivered {
                seq: *seq,
                existing: true,
            });
        }
        return Step::verdict(Verdict::Refused(Refusal::DeliveryConflict {
            delivery_id: message.delivery_id,
        }));
    }
    let status = view.status.unwrap_or(RunStatus::Queued);
    if status.is_settled() {
        return Step::verdict(Verdict::Refused(Refusal::DeliveryTargetSettled {
            run: run.to_string(),
            status: status.to_string(),
        }));
    }
    if status == RunStatus::Blocked {
        // Only an operator ends the gate; a message would sit unread behind it while the
        // sender believed it was being read.
        return Step::verdict(Verdict::Refused(Refusal::DeliveryTargetBlocked {
            run: run.to_string(),
        }));
    }
    // A waiting run moves only when something steps it; a queued or running one reads the
    // message on the turn it is about to take (or is taking: the message is newer than what
    // that turn saw, so the next advance asks again).
    let effects = if status == RunStatus::Waiting {
        vec![Effect::Advance]
    } else {
        vec![]
    };
    Step {
        // No status change: the one event is the next in the log.
        write: Some(Transition::empty().event(RunEvent::MessageReceived(message))),
        effects,
        verdict: Verdict::Delivered {
            seq: view.last_seq + 1,
            existing: false,
        },
    }
}
