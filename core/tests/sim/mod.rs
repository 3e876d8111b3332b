//! The fleet simulation's parts: the fleet and its scripted models, the simulated world with
//! its executor and scheduler, and the invariant checks.

pub(crate) mod check;
pub(crate) mod engine;
pub(crate) mod fleet;
mod link;
mod model;
mod operator;
mod sched;
pub(crate) mod store;
pub(crate) mod tools;
mod trace;
pub(crate) mod world;

use check::Violation;
use world::{Options, Stats, World};

/// What one trial found.
pub(crate) struct Trial {
    pub seed: u64,
    pub violations: Vec<Violation>,
    pub stats: Stats,
    pub trace: Vec<String>,
}

/// Runs one seeded trial and checks it.
pub(crate) fn trial(seed: u64, opts: Options) -> Trial {
    let mut world = World::new(seed, opts);
    let quiesced = world.run();
    world.check_views();
    let violations = check::check(&world, quiesced);
    Trial {
        seed,
        violations,
        stats: world.stats,
        trace: world.trace,
    }
}
