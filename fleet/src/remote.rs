//! The link glue between a host supervisor and the other hosts of a fleet.
//!
//! One concern per file:
//! - `outbound`: [`LinkRemote`], the supervisor's `RemoteCalls` seam implemented over a
//!   `LinkEndpoint`: it signs what leaves this host and turns link failures into typed
//!   outcomes;
//! - `inbound`: `Inbound`, the `FrameHandler` that answers other hosts' requests: it verifies
//!   every chain and reply against the fleet's pinned keys and placements, asks consort-core
//!   whether the sending host may send or ask that, and hands calls and replies to the
//!   supervisor;
//! - `signer`: the batch signer `LinkRemote` signs calls and replies with (one signature for
//!   whatever leaves for one peer host at the same moment);
//! - `wire`: refusals, denials and run states in and out of link frames;
//! - this file: what both sides share, the [`FleetMap`] and the limits the inbound side
//!   applies to chains.
//!
//! None of it decides whether a call is allowed or who may ask about a run: consent, depth and
//! caps are decided by `consort_core::guards` inside the agent actors, relay and locality by
//! `consort_core::guards::arrived_call` and `consort_core::guards::remote`; this glue proves
//! who sent what (with `consort_net::chain`), gathers the facts and moves frames. It never
//! writes a run store.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use consort_core::Limits;
use consort_net::KeyRing;

mod inbound;
mod outbound;
mod signer;
mod wire;

pub(crate) use inbound::Inbound;
pub use outbound::LinkRemote;

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
