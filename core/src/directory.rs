//! The peer directory's rules: who may see which goal, what an owning host's report means as
//! presence, and how one packet is put together from every host's answer.
//!
//! The directory answers three questions for an agent (or an operator): which agents share my
//! goal, which of them is live right now, and what is each doing. Its facts have owners:
//! registration comes from the fleet's goals, work state from the store of the host that serves
//! the agent, presence from that host's supervisor. Nothing here creates a fact; it maps them.
//!
//! - [`scope`]: the [`Audience`] (who asks, as the host established it, never as the caller
//!   names itself) and [`resolve_goal`], which finds the goal it may see or the typed
//!   [`ScopeGap`] that makes a packet of zero rows.
//! - [`presence`]: the vocabulary ([`PresenceState`]: working, blocked, idle, done,
//!   unreachable, unknown) and [`presence_of`], the one mapping from what a host knows about
//!   one of its agents ([`AgentReport`]) to a state and its basis.
//! - [`packet`]: [`assemble`], which turns the registered agents and every host's
//!   [`HostAnswer`] into a [`DirectoryPacket`]: one row per registered agent in a fixed order,
//!   capped, with `rows + omitted = registered` always and every gap named as a
//!   [`Limitation`].
//!
//! - [`observe`]: bounded observation of one peer: typed state first, an excerpt only of a run
//!   the caller placed, with its source, bound, advisory label and declared limits.
//! - [`wait`]: waits pinned to (agent, run, incarnation) that only a forward-moving state
//!   change of that very run ends.
//! - [`rollup`](mod@rollup): which agents need a decision now, from typed facts only.
//! - [`delivery`]: peer delivery's ids, payload digest, derived new-run ids, and the typed
//!   [`Receipt`] and [`DeliveryOutcome`] a sender reads (active only once the run moved on).
//!
//! Presence is advisory colour: it never adds, drops or orders a row, and no typed fact depends
//! on it. This module reads no clock and no store: times and reports come in as arguments.

/// The model tool that lists an agent's peers.
pub const LIST_PEERS: &str = "list_peers";

pub mod delivery;
pub mod observe;
pub mod packet;
pub mod presence;
pub mod rollup;
pub mod scope;
pub mod wait;

pub use delivery::{
    DELIVER, DeliveryOutcome, OPERATOR_SENDER, Receipt, activity_outcome, check_delivery_id,
    delivery_receipt, delivery_run_id, may_deliver_into, new_run_delivery, payload_digest,
    receiver_consents, run_not_found, sender_consents,
};
pub use observe::{
    Excerpt, ExcerptBound, ExcerptDetail, ExcerptSource, Observation, ObservationLimit, RunFacts,
    cut_excerpt, excerpt_detail, may_observe,
};
pub use packet::{
    DirectoryPacket, DirectoryRow, HostAnswer, Limitation, PacketRequest, RegisteredAgent,
    SCHEMA_VERSION, assemble, scope_gap_packet,
};
pub use presence::{
    ActorState, AgentReport, LastSettled, Presence, PresenceBasis, PresenceState, WorkState,
    presence_of,
};
pub use rollup::{
    ATTENTION_CAP, AttentionItem, AttentionReason, AttentionRollup, needs_attention, rollup,
    rollup_gap,
};
pub use scope::{Audience, Goal, ScopeGap, resolve_goal};
pub use wait::{Observed, WaitOutcome, WaitPin, WaitUntil, wait_decision};

/// The model tool that observes one peer (and a run it placed).
pub const OBSERVE_PEER: &str = "observe_peer";
/// The model tool that waits, pinned, for a peer's run to change.
pub const WAIT_PEER: &str = "wait_peer";
/// The model tool that lists what in the goal needs a decision.
pub const NEEDS_ATTENTION: &str = "needs_attention";
