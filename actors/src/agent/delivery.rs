//! Deliveries into this agent: a message into one of its runs, or a new run with channel
//! `delivery:<sender>`.
//!
//! Consent is the call's (`consort_core::directory::receiver_consents`: the sender must be in
//! `accept_from`; the sender's host checked its `can_call`). A message into a run is decided by
//! the run state machine (`Input::Deliver`): refused before anything is written when the run
//! is settled or gated on an approval, answered from the first delivery for a repeated id, and
//! otherwise written as a `message_received` event the model reads on its next turn. A new-run
//! delivery's run id is derived from (agent, sender, delivery id), so a repeat finds the run it
//! made; what a repeat or a reused id gets is `directory::new_run_delivery`'s to decide. The receipt is given once what it reports is committed.

use ractor::{ActorRef, RpcReplyPort};
use tracing::{info, warn};

use consort_core::RunId;
use consort_core::directory::{
    Receipt, check_delivery_id, delivery_run_id, may_deliver_into, new_run_delivery,
    payload_digest, receiver_consents, run_not_found,
};
use consort_core::step::Input;

use super::commits::Asker;
use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::run::Channel;
use crate::visibility::{Identity, Origin};

impl AgentActor {
    /// A delivery from `from` (an agent, or the operator sender).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn deliver(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        from: String,
        run: Option<RunId>,
        delivery_id: String,
        text: String,
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
        match run {
            Some(run) => {
                self.deliver_into(myself, state, from, run, delivery_id, text, reply)
                    .await
            }
            None => {
                self.deliver_new(myself, state, from, delivery_id, text, reply)
                    .await
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn deliver_into(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        from: String,
        run: RunId,
        delivery_id: String,
        text: String,
        reply: RpcReplyPort<Receipt>,
    ) -> Result<(), ActorsError> {
        let me = state.config.name.clone();
        let Some(record) = state.record(&run).await? else {
            let refusal = run_not_found(&run);
            send_receipt(reply, Receipt::rejected(&delivery_id, &refusal));
            return Ok(());
        };
        if let Err(refusal) = may_deliver_into(&from, &run, record.parent_agent.as_deref()) {
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
        from: String,
        delivery_id: String,
        text: String,
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
        // An operator's message acts for nobody. A peer's acts for that agent, for an origin
        // the delivery does not carry: unknown, so the peer cannot lend this run roles that
        // whoever started its own request may not hold.
        let (identity, origin) = if from == consort_core::directory::OPERATOR_SENDER {
            (Identity::Absent, Origin::Absent)
        } else {
            let origin = Origin::Unknown;
            let identity =
                state
                    .tools
                    .catalog
                    .peer_identity(&from, &origin, &state.options.host_grants);
            (identity, origin)
        };
        let (port, stored) = ractor::concurrency::oneshot();
        self.start_as(
            myself,
            state,
            id.clone(),
            text,
            Channel::Delivery(from),
            (identity, origin),
            (None, None),
            port.into(),
        )
        .await?;
        // The starter's answer comes from the writer once the insert committed.
        tokio::spawn(async move {
            let receipt = match stored.await {
                Ok(Ok(record)) => Receipt::Enqueued {
                    delivery_id,
                    run: record.id,
                    seq: 1,
                    existing: false,
                },
                Ok(Err(ActorsError::Refused(refusal))) => Receipt::rejected(&delivery_id, &refusal),
                Ok(Err(e)) => Receipt::Rejected {
                    delivery_id,
                    code: "not_stored".into(),
                    reason: format!("the message was not stored: {e}"),
                },
                Err(_) => Receipt::Rejected {
                    delivery_id,
                    code: "not_stored".into(),
                    reason: "the agent stopped before the message was stored".into(),
                },
            };
            send_receipt(reply, receipt);
        });
        Ok(())
    }
}

fn send_receipt(reply: RpcReplyPort<Receipt>, receipt: Receipt) {
    if reply.send(receipt).is_err() {
        warn!("a delivery's sender stopped waiting for its receipt");
    }
}
