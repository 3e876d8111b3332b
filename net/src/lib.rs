//! consort-net: what travels between agents and between hosts.
//!
//! This crate owns the *call envelope* (the signed chain of hops that carries one delegated
//! request), its one codec, the derivation of run ids, host keys, and the QUIC links that
//! carry envelopes between hosts. It knows nothing of actors, runs or stores: it turns bytes
//! into verified envelopes and back, and moves them. Decisions about whether a call is
//! *allowed* (consent, depth, caps) are not made here; the receiving supervisor makes them
//! with what this crate proves (who signed which hop, how long the chain is, whether it
//! expired).
//!
//! - `codec`: the one bincode configuration; [`Frame`], the link protocol's messages.
//! - `keys`: [`HostKey`] (ed25519, PKCS#8 PEM on disk, mode 0600), [`PublicKey`]
//!   (`ed25519:<hex>`), [`KeyRing`] (host -> key).
//! - [`chain`]: canonical hop bytes, batch signatures over a Merkle root with an inclusion
//!   proof per hop or reply ([`sign_batch`], [`sign_pending_hops`]), [`verify_chain`] and the
//!   [`VerifiedRoots`] cache a receiver keeps, reply signatures;
//!   signed presence reports; signed operator requests ([`verify_operator_request`],
//!   [`ReplayWindow`]).
//! - `trace_context`: [`TraceContext`], the W3C trace context a hop carries inside its signed
//!   bytes, and its `traceparent` text form.
//! - `link`: [`LinkEndpoint`], QUIC with mutual TLS pinned to host keys, one request frame
//!   and one response frame per stream; operators' keys accepted beside the hosts' for
//!   operator requests only; [`OperatorLink`], an operator's client-only endpoint.
//!
//! Placements (agent -> host) are passed in as plain `BTreeMap<String, String>`; this crate
//! reads no configuration files.

pub mod chain;
mod codec;
mod envelope;
mod error;
mod keys;
mod link;
#[cfg(test)]
mod testing;
mod trace_context;

pub use chain::operator::{
    MAX_OPERATOR_LIFETIME_MS, MAX_OPERATOR_REQUEST, OPERATOR_FORMAT, OperatorAnswer,
    OperatorCommand, OperatorLimits, OperatorRefusal, OperatorRequest, ReplayWindow,
    operator_canonical_bytes, sign_operator_request, verify_operator_request,
};
pub use chain::presence::{
    MAX_PRESENCE_AGENTS, PresenceReport, presence_canonical_bytes, sign_presence, verify_presence,
};
pub use chain::{
    BatchSigned, ChainLimits, NextHop, Outgoing, VerifiedChain, VerifiedRoots, extend, first_hop,
    hop_digest, new_call, new_reply, next_hop, sign_batch, sign_pending_hops, sign_reply,
    verify_chain, verify_chain_cached, verify_reply, verify_reply_cached,
};
pub use codec::{
    Frame, MAX_FRAME, RefusalReason, RemoteRunState, decode_call, decode_frame, decode_reply,
    encode_call, encode_frame, encode_reply,
};
pub use consort_core::RunId;
pub use envelope::{
    BatchProof, CallEnvelope, ENVELOPE_VERSION, Hop, HopSignature, ReplyEnvelope, ReplyStatus,
};
pub use error::{ChainError, CodecError, KeyError, LinkError, NetError, TraceparentError};
pub use keys::{HostKey, KeyRing, PublicKey};
pub use link::{
    FrameHandler, HandlerFuture, LINK_RTT, LinkConfig, LinkEndpoint, LinkView, OperatorAccess,
    OperatorFuture, OperatorHandler, OperatorLink, OperatorPeer, PeerLink, PeerLinkState,
};
pub use trace_context::TraceContext;
