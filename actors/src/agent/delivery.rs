//! Deliveries into this agent: a message into one of its runs, or a new run with channel
//! `delivery:<sender>`.
//!
//! Consent is the call's (`consort_core::directory::receiver_consents`: the sender must be in
//! `accept_from`; the sender's host checked its `can_call`). A message into a run is decided by
//! the run state machine (`Input::Deliver`): refused before anything is written when the run
//! is settled or gated on an approval, answered from the first delivery for a repeated id, and
//! otherwise written as a `message_received` event the model reads on its next turn. A new-run
//! delivery's run id is derived from (agent, sender, delivery id), so a repeat finds the run it
//! made; what a repeat or a reused id gets is `directory::new_run_delivery`'s to decide. The
//! receipt is given once what it reports is committed.

use ractor::{ActorRef, RpcReplyPort};
use tracing::{info, warn};

use consort_core::RunId;
use consort_core::directory::{
    Receipt, check_delivery_id, delivery_run_id, may_deliver_into, new_run_delivery,
    payload_digest, receiver_consents, run_not_found,
};
use consort_core::step::Input;

use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::asker::Asker;
use crate::run::Channel;

impl AgentActor {
    /// A delivery from `from` (an agent, or the operator sender) into run `run`, or into a new
    /// run when `None`.
    pub(super) async fn deliver(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        (from, run): (String, Option<RunId>),
        (delivery_id, text): (String, String),
        reply: RpcReplyPort<Receipt>,
    ) -> Result<(), ActorsError> {
        let me = state.config.name.clone();
        let checked = check_delivery_id(&delivery_id)
            .and_then(|()| receiver_consents(&from, &state.config.accept_from, &me));
        if let Err(refusal) = checked {
            info!(agent = %me, sender = %from, reason = refusal.code(), "delivery refused");
            send_receipt(reply, Receipt::rejected(&delivery_id, &refusal));
            return Ok(());
        }
        let Some(run) = run else {
            return self
                .deliver_new(myself, state, (from, delivery_id, text), reply)
                .await;
        };
        let allowed = match state.record(&run).await? {
            Some(record) => may_deliver_into(&from, &run, record.parent_agent.as_deref()),
            None => Err(run_not_found(&run)),
        };
        if let Err(refusal) = allowed {
            send_receipt(reply, Receipt::rejected(&delivery_id, &refusal));
            return Ok(());
        }
        let input = Input::Deliver {
            run: run.clone(),
            from: from.clone(),
            delivery_id: delivery_id.clone(),
            digest: payload_digest(&me, Some(&run), &text),
            text,
        };
        // The receipt reports a write: the machine answers once the run's writes commit.
        let asker = Asker::Receipt {
            port: reply,
            delivery_id,
            from,
        };
        self.drive_asked(myself, state, &run, input, asker).await
    }

    async fn deliver_new(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        (from, delivery_id, text): (String, String, String),
        reply: RpcReplyPort<Receipt>,
    ) -> Result<(), ActorsError> {
        let me = state.config.name.clone();
        let id = delivery_run_id(&me, &from, &delivery_id);
        let existing = state.record(&id).await?;
        let stored = existing.as_ref().map(|r| r.input.as_str());
        if let Err(receipt) = new_run_delivery(&me, &delivery_id, &id, stored, &text) {
            send_receipt(reply, receipt);
            return Ok(());
        }
        let grants = &state.options.host_grants;
        let (identity, origin) = state.tools.catalog.sender_identity(&from, grants);
        // The receipt reports the insert: the store job answers it once committed.
        let starter = Asker::Receipt {
            port: reply,
            delivery_id,
            from: from.clone(),
        };
        let channel = Channel::Delivery(from);
        let who = (identity, origin);
        self.start_as(
            myself,
            state,
            (id, text, channel),
            who,
            (None, None),
            starter,
        )
        .await
    }
}

fn send_receipt(reply: RpcReplyPort<Receipt>, receipt: Receipt) {
    if reply.send(receipt).is_err() {
        warn!("a delivery's sender stopped waiting for its receipt");
    }
}
