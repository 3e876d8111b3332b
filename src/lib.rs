//! consort: a runtime for fleets of AI agents that delegate to each other across hosts.
//!
//! This facade re-exports the crates an embedding app needs: [`config`] (agent.yaml and
//! fleet.yaml), [`core`] (the rules: consent, guards, refusals, run events), [`actors`] (the
//! host, its agents, runs and tools), [`models`] (the model seam and the adapters for real
//! models), [`net`] (envelopes and links) and [`fleet`] (the HTTP API and the client SDK). Start with
//! [`actors::Host::spawn_linked`] to put a host under your own ractor supervisor; see
//! `examples/embedded`.

pub use consort_actors as actors;
pub use consort_config as config;
pub use consort_core as core;
pub use consort_fleet as fleet;
pub use consort_models as models;
pub use consort_net as net;
