//! The host's side of fleet commands: `OperatorInbound`, the link's [`OperatorHandler`].
//!
//! The link proved which operator is on the other end (its key is one fleet.yaml lists under
//! `operators:`) and handed over an operator request, nothing else. Here the request is
//! checked with consort-net's pure [`verify_operator_request`] (format, operator, the link's
//! operator, this host as the target, lifetime, times with the links' clock skew, a strict
//! signature) and then the [`ReplayWindow`] (a nonce seen within the request's lifetime is a
//! replay); a refusal is logged at warn with the operator's name, its key's fingerprint, the
//! command and the reason, and answered with the typed reason. A request that passes runs in a
//! span naming the operator, the host and the command.
//!
//! It decides nothing itself: the checks are consort-net's, what a command does is
//! `commands`', and the host's actors decide about runs.

use std::sync::{Arc, Mutex, OnceLock};

use tracing::{Instrument, info, info_span, warn};

use consort_actors::Host;
use consort_actors::run::now_ms;
use consort_net::{
    KeyRing, LinkView, MAX_OPERATOR_LIFETIME_MS, OperatorAnswer, OperatorHandler, OperatorLimits,
    OperatorPeer, OperatorRequest, ReplayWindow, verify_operator_request,
};

use super::commands;

/// This host's answers to its operators.
pub(crate) struct OperatorInbound {
    here: String,
    operators: KeyRing,
    allowed_skew_ms: u64,
    window: Mutex<ReplayWindow>,
    host: OnceLock<Host>,
    links: OnceLock<LinkView>,
}

impl OperatorInbound {
    /// The operators of host `here`, whose keys are `operators` (fleet.yaml's `operators:`),
    /// with the links' clock skew.
    pub(crate) fn new(here: &str, operators: KeyRing, allowed_skew_ms: u64) -> Self {
        Self {
            here: here.to_owned(),
            operators,
            allowed_skew_ms,
            window: Mutex::new(ReplayWindow::default()),
            host: OnceLock::new(),
            links: OnceLock::new(),
        }
    }

    /// The operators' keys, for the link's handshake.
    pub(crate) fn keys(&self) -> &KeyRing {
        &self.operators
    }

    /// Hands over the host once it is up; until then commands fail with `starting`.
    pub(crate) fn set_host(&self, host: Host) {
        if self.host.set(host).is_err() {
            warn!("the host was handed to the operator handler twice; the first one stays");
        }
    }

    /// Hands over the view of the link endpoint, for `status`.
    pub(crate) fn set_links(&self, links: LinkView) {
        if self.links.set(links).is_err() {
            warn!("the links were handed to the operator handler twice; the first ones stay");
        }
    }

    /// This handler as the link endpoint wants it.
    pub(crate) fn handler(self: &Arc<Self>) -> Arc<dyn OperatorHandler> {
        let me = self.clone();
        Arc::new(move |operator: OperatorPeer, request: OperatorRequest| {
            let me = me.clone();
            async move { me.handle(operator, request).await }
        })
    }

    /// Checks one request from `peer` and, if it passes, runs its command.
    pub(crate) async fn handle(
        &self,
        peer: OperatorPeer,
        request: OperatorRequest,
    ) -> OperatorAnswer {
        let command = request.command.name();
        let span = info_span!("operator_command", operator = %peer.name, host = %self.here,
            command, key = %peer.key.fingerprint());
        async {
            let limits = OperatorLimits {
                now_ms: now_ms(),
                allowed_skew_ms: self.allowed_skew_ms,
                max_lifetime_ms: MAX_OPERATOR_LIFETIME_MS,
            };
            let checked =
                verify_operator_request(&request, &self.operators, &self.here, &peer.name, &limits)
                    .and_then(|()| {
                        self.window
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .admit(&request, &limits)
                    });
            if let Err(refusal) = checked {
                let signed_as: String = request.operator.chars().take(64).collect();
                warn!(signed_as = %signed_as, reason = refusal.code(),
                    "operator request refused: {refusal}");
                return OperatorAnswer::Refused(refusal);
            }
            let Some(host) = self.host.get() else {
                return OperatorAnswer::Failed {
                    code: "starting".into(),
                    message: "the host is starting; try again".into(),
                };
            };
            let answer = commands::run(
                request.command,
                &peer.name,
                &self.here,
                host,
                self.links.get(),
            )
            .await;
            match &answer {
                OperatorAnswer::Done { .. } => info!("operator command done"),
                OperatorAnswer::Failed { code, message } => {
                    warn!(%code, "operator command failed: {message}");
                }
                OperatorAnswer::Refused(_) => {}
            }
            answer
        }
        .instrument(span)
        .await
    }
}
