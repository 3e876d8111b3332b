//! consort-net: what travels between agents and between hosts.
//!
//! This crate owns the *call envelope* (the signed chain of hops that carries one delegated
//! request), its one codec, the derivation of run ids, and the QUIC links that carry envelopes
//! between hosts. It knows nothing of actors, runs or stores: it turns bytes into verified
//! envelopes and back, and moves them. Decisions about whether a call is *allowed* (consent,
//! depth, caps) are not made here; the receiving supervisor makes them with what this crate
//! proves (who signed which hop, how long the chain is, whether it expired).

pub mod envelope;
pub mod error;
pub mod ids;

pub use envelope::{CallEnvelope, Hop, HopSignature, ReplyEnvelope, ReplyStatus};
pub use error::NetError;
pub use ids::RunId;
