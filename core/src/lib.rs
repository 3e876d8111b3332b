//! consort-core: the rules of consort, as plain data and pure functions.
//!
//! Everything consort *decides* about a call lives here, once: who may call whom
//! (`consent`), how deep a chain may grow and how many calls a run may place ([`guards`]),
//! what a refusal is called and what the calling model reads ([`Refusal`]), what a run records
//! ([`RunEvent`]) and what its log means ([`RunView`]). The actors, the links and the HTTP API
//! gather facts, call these functions, and execute what they return.
//!
//! Like quinn-proto, this crate performs no I/O and reads no clock: it depends on no runtime
//! crate (no tokio, ractor, rusqlite, quinn, rustls, axum or reqwest; CI checks it with
//! `cargo tree -p consort-core -e normal`). Time comes in as an argument, storage is someone
//! else's, and the same functions drive a real host and the seeded fleet simulation.
//!
//! - [`RunId`]: run ids, and the derivation that makes delegation effectively-once.
//! - `consent`: the two halves of consent and the [`ConsentGraph`] `consort edges` prints.
//! - [`guards`]: the caller's and the callee's checks of a call, over [`Limits`].
//! - [`budget`]: budgets over a whole call tree ([`TreeBudget`]): the allowance each call is
//!   handed, what a reply charges, and when a tree is spent.
//! - [`Refusal`]: every refusal, with a stable code, the sentence the model reads and its wire
//!   form.
//! - [`RunEvent`] and [`RunView`]: a run's typed, versioned event log and its incremental fold.
//! - `conversation`: what a model is shown and what it may answer.
//! - [`step()`]: the run state machine: what a run writes and does next, given what happened.
//! - [`machine`]: the agent machine: what one agent decides with beside its runs' logs
//!   (admission and its reservations, uses out, held replies, re-ask timers, replies).
//! - [`directory`]: the peer directory's rules: which goal a caller may see, the presence
//!   vocabulary and its one mapping, and how a packet is assembled from every host's answer.
//! - [`visibility`]: which tools a caller is shown (allow / deny / unknown): the auth
//!   descriptor, caller facts, the seven-rule decision, the evaluation ladder with its probe
//!   cache, and the meta-tool answers.

pub mod budget;
mod consent;
mod conversation;
pub mod directory;
mod error;
pub mod event;
pub mod guards;
mod ids;
pub mod machine;
mod refusal;
mod run;
pub mod step;
#[cfg(test)]
mod strategy;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod view;
pub mod visibility;

pub use budget::{TreeBudget, TreeSpend};
pub use consent::{ConsentGraph, Edge, EdgeStatus};
pub use consort_config::{Limits, TreeLimits};
pub use conversation::{Message, ModelStep, ToolUse};
pub use error::CoreError;
pub use event::{EVENT_FORMAT, RunEvent};
pub use ids::RunId;
pub use refusal::Refusal;
pub use run::{Channel, RunStatus};
pub use step::{Effect, Input, Policy, Step, Transition, step};
pub use view::{GateDecided, GateView, PlacedCall, RunView};
