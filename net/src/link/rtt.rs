//! The link's round-trip time to each peer host, sampled for the host's metrics.
//!
//! Every [`SAMPLE_EVERY`] the sampler reads quinn's smoothed RTT of each open connection in the
//! peer cache (connections this host dialed and ones peers dialed in alike) and sets the gauge
//! [`LINK_RTT`]`{host, peer}`. Sampling off the request path keeps requests free of metric work;
//! a peer whose slot is busy (a dial under way) is skipped until the next tick. Without a
//! metrics recorder installed the gauges are no-ops. It must not dial, close or otherwise
//! change a connection: it only reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Gauge, SharedString};

use super::peers::{Peers, lock};

/// The gauge's name: `consort_link_rtt_seconds{host, peer}`.
pub const LINK_RTT: &str = "consort_link_rtt_seconds";

/// How often the round-trip times are sampled.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Samples the round trip of every open connection in `peers` every `every`, until aborted.
pub(super) async fn sample(host: &str, peers: Arc<Peers>, every: Duration) {
    let host = SharedString::from(Arc::<str>::from(host));
    // One gauge per peer host, registered on its first sample and kept: peers are the
    // fleet's pinned hosts, so this stays as small as the fleet.
    let mut gauges: HashMap<String, Gauge> = HashMap::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let slots: Vec<_> = lock(&peers)
            .iter()
            .map(|(peer, slot)| (peer.clone(), slot.clone()))
            .collect();
        for (peer, slot) in slots {
            let Ok(slot) = slot.try_lock() else {
                continue;
            };
            let Some(rtt) = slot
                .connection
                .as_ref()
                .filter(|connection| connection.close_reason().is_none())
                .map(quinn::Connection::rtt)
            else {
                continue;
            };
            drop(slot);
            gauges
                .entry(peer)
                .or_insert_with_key(|peer| {
                    metrics::gauge!(LINK_RTT, "host" => host.clone(), "peer" => peer.clone())
                })
                .set(rtt.as_secs_f64());
        }
    }
}
