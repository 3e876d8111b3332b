//! The fleet simulation's parts: the fleet (`fleet`) and its scripted models (`model`); the
//! simulated world's state (`world`) and durable stores with their writers' jobs (`store`);
//! the driver of each agent's shipping `AgentMachine` (`driver`) with declared tools and
//! decisions (`tools`) and the store writers' commits (`writer`); the network and the far side of each message (`link`); the scheduler
//! (`sched`) and the world outside the fleet (`operator`); the invariant checks (`check`) and
//! the trace's names (`trace`).

pub(crate) mod check;
pub(crate) mod driver;
pub(crate) mod fleet;
mod link;
mod model;
mod operator;
mod sched;
pub(crate) mod store;
pub(crate) mod tools;
mod trace;
pub(crate) mod world;
mod writer;

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
