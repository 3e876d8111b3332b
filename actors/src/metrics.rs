//! What a host records about its runs, calls, stores and agent mailboxes, through the
//! `metrics` facade.
//!
//! This module owns the metric names ([`names`]), the label values they carry (pure functions
//! over plain data: [`channel_kind`], [`refusal_reason`]) and the handles a host keeps
//! ([`HostMetrics`], and one `AgentMetrics` per agent actor). It must not install a recorder,
//! render anything or decide anything about runs: without a recorder installed (the binary's
//! job) every handle is a no-op, and an embedding app that installs its own recorder gets the
//! same series.
//!
//! Every series carries a `host` label (the host's name in its fleet, `local` for `consort
//! dev`), so several hosts in one process stay apart. Per-agent labels appear only on the run
//! and call counters, whose series a host creates only for agents that ran something; gauges and
//! histograms are per host (and per peer host for the link round trip), so a host of 100,000
//! agents does not make 100,000 gauge series.
//!
//! Handles are registered once and kept: a host's when it starts, an agent's when its actor
//! starts (and each callee's call counter on the first call to it). Recording on the hot path
//! is then an atomic add on a kept handle: no lock, no label string. Handles registered before
//! a recorder is installed stay no-ops, so the binary installs the recorder before it starts a
//! host.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, SharedString};

use consort_core::{Refusal, RunStatus};

use crate::run::Channel;

/// The metric names, as Prometheus shows them.
pub mod names {
    /// Counter `{host, agent, channel}`: runs stored on this host (root runs and calls
    /// accepted), by the agent that runs them and the kind of channel they came in on.
    pub const RUNS_STARTED: &str = "consort_runs_started_total";
    /// Counter `{host, agent, status}`: runs that settled, `succeeded` or `failed`.
    pub const RUNS_SETTLED: &str = "consort_runs_settled_total";
    /// Counter `{host, caller, callee}`: calls a run of `caller` placed that `callee` accepted
    /// (a call replayed after a crash is not counted again).
    pub const CALLS_PLACED: &str = "consort_calls_placed_total";
    /// Counter `{host, reason}`: calls refused, by the refusal's stable code, on the host of the
    /// calling run (whichever side refused).
    pub const CALLS_REFUSED: &str = "consort_calls_refused_total";
    /// Gauge `{host, peer}`: the QUIC link's round-trip time to a peer host, in seconds.
    pub const LINK_RTT: &str = consort_net::LINK_RTT;
    /// Histogram `{host}`: how long one store transaction commit of the store writer took, in
    /// seconds (one per store per batch for SQLite, one per batch for PostgreSQL).
    pub const STORE_COMMIT: &str = "consort_store_commit_seconds";
    /// Gauge `{host}`: messages sent to this host's agent actors that they have not handled
    /// yet.
    pub const MAILBOX_DEPTH: &str = "consort_mailbox_depth";
}

/// The `channel` label of a run: the kind of channel only (`api`, `cli`, `agent`,
/// `delivery`), never the caller's name, which would make one series per caller.
pub fn channel_kind(channel: &Channel) -> &'static str {
    CHANNELS[channel_slot(channel)]
}

/// The `channel` label values, in the order of [`channel_slot`].
const CHANNELS: [&str; 4] = ["api", "cli", "agent", "delivery"];

/// Where a channel's counter is kept in an agent's handles.
fn channel_slot(channel: &Channel) -> usize {
    match channel {
        Channel::Api => 0,
        Channel::Cli => 1,
        Channel::Agent(_) => 2,
        Channel::Delivery(_) => 3,
    }
}

/// The `reason` label of a refused call: the refusal's stable code, or `other` when the refusal
/// came from a newer host in a form this version does not know (its code is text from the
/// wire, and a label value from the wire could make any number of series).
pub fn refusal_reason(refusal: Option<&Refusal>) -> &'static str {
    refusal.map_or("other", Refusal::code)
}

/// Tells the installed recorder what each series means (Prometheus shows it as `# HELP`);
/// repeating it when another host starts in the same process changes nothing.
fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        names::RUNS_STARTED,
        Unit::Count,
        "Runs stored on this host (root runs and calls accepted), by agent and channel kind"
    );
    metrics::describe_counter!(
        names::RUNS_SETTLED,
        Unit::Count,
        "Runs that settled, by agent and status (succeeded, failed)"
    );
    metrics::describe_counter!(
        names::CALLS_PLACED,
        Unit::Count,
        "Calls placed by a run of caller and accepted by callee"
    );
    metrics::describe_counter!(
        names::CALLS_REFUSED,
        Unit::Count,
        "Calls refused, by the refusal's stable code, counted on the calling run's host"
    );
    metrics::describe_gauge!(
        names::LINK_RTT,
        Unit::Seconds,
        "Smoothed round-trip time of the QUIC link to a peer host"
    );
    metrics::describe_histogram!(
        names::STORE_COMMIT,
        Unit::Seconds,
        "Time of one store transaction commit of the store writer"
    );
    metrics::describe_gauge!(
        names::MAILBOX_DEPTH,
        Unit::Count,
        "Messages sent to this host's agent actors and not yet taken by them"
    );
}

/// A host's metric handles: what every agent actor and the store writer of the host share.
/// Cheap to clone.
#[derive(Clone)]
pub struct HostMetrics {
    host: SharedString,
    mailbox: Gauge,
    commit: Histogram,
}

impl std::fmt::Debug for HostMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMetrics")
            .field("host", &&*self.host)
            .finish_non_exhaustive()
    }
}

impl HostMetrics {
    /// Registers the host-level series of host `host` with the installed recorder (no-ops
    /// without one).
    pub fn new(host: &str) -> Self {
        describe();
        let host = SharedString::from(Arc::<str>::from(host));
        Self {
            mailbox: metrics::gauge!(names::MAILBOX_DEPTH, "host" => host.clone()),
            commit: metrics::histogram!(names::STORE_COMMIT, "host" => host.clone()),
            host,
        }
    }

    /// The host label.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The store commit time histogram (the store writer records into it).
    pub fn store_commit(&self) -> Histogram {
        self.commit.clone()
    }

    /// The mailbox depth gauge, for what sends to and handles agent messages.
    pub(crate) fn mailbox(&self) -> &Gauge {
        &self.mailbox
    }

    /// Counts one refused call with `reason`. Refusals are rare next to calls; the counter is
    /// looked up in the recorder each time rather than kept.
    pub(crate) fn call_refused(&self, reason: &'static str) {
        metrics::counter!(names::CALLS_REFUSED, "host" => self.host.clone(), "reason" => reason)
            .increment(1);
    }

    /// The handles of one agent's actor.
    pub(crate) fn agent(&self, agent: &str) -> AgentMetrics {
        let name = SharedString::from(Arc::<str>::from(agent));
        let started = CHANNELS.map(|channel| {
            metrics::counter!(names::RUNS_STARTED, "host" => self.host.clone(), "agent" => name.clone(), "channel" => channel)
        });
        let [succeeded, failed] = [RunStatus::Succeeded, RunStatus::Failed].map(|status| {
            metrics::counter!(names::RUNS_SETTLED, "host" => self.host.clone(), "agent" => name.clone(), "status" => status.as_str())
        });
        AgentMetrics {
            host: self.clone(),
            agent: name,
            started,
            succeeded,
            failed,
            placed: HashMap::new(),
        }
    }
}

/// One agent actor's handles: its run counters, and a call counter per callee it called.
pub(crate) struct AgentMetrics {
    host: HostMetrics,
    agent: SharedString,
    started: [Counter; 4],
    succeeded: Counter,
    failed: Counter,
    placed: HashMap<String, Counter>,
}

impl AgentMetrics {
    /// The counter of runs started on `channel` (cloned into a commit's callback).
    pub(crate) fn started(&self, channel: &Channel) -> Counter {
        self.started[channel_slot(channel)].clone()
    }

    /// Counts a run that settled with `status` (a status that is not settled counts nothing).
    pub(crate) fn settled(&self, status: RunStatus) {
        match status {
            RunStatus::Succeeded => self.succeeded.increment(1),
            RunStatus::Failed => self.failed.increment(1),
            RunStatus::Queued | RunStatus::Running | RunStatus::Waiting | RunStatus::Blocked => {}
        }
    }

    /// Counts what a transition of one of the agent's runs records, as it is handed to the
    /// store: each call placed (a replayed call that found its run is not placed again), each
    /// refusal (counted once, by the calling run's host), and the run's settling.
    pub(crate) fn recorded(&mut self, transition: &consort_core::Transition) {
        for event in transition.events() {
            match event {
                consort_core::RunEvent::CallPlaced(placed) if !placed.existing => {
                    self.call_placed(&placed.agent);
                }
                consort_core::RunEvent::CallRefused(refused) => {
                    self.call_refused(refused.refusal.as_ref());
                }
                _ => {}
            }
        }
        if transition.settles()
            && let Some(status) = transition.status()
        {
            self.settled(status);
        }
    }

    /// Counts a call placed to `callee`; its counter is registered on the first call.
    pub(crate) fn call_placed(&mut self, callee: &str) {
        if let Some(counter) = self.placed.get(callee) {
            counter.increment(1);
            return;
        }
        let counter = metrics::counter!(
            names::CALLS_PLACED,
            "host" => self.host.host.clone(),
            "caller" => self.agent.clone(),
            "callee" => callee.to_owned()
        );
        counter.increment(1);
        self.placed.insert(callee.to_owned(), counter);
    }

    /// Counts a refused call.
    pub(crate) fn call_refused(&self, refusal: Option<&Refusal>) {
        self.host.call_refused(refusal_reason(refusal));
    }

    /// The host's handles.
    pub(crate) fn host(&self) -> &HostMetrics {
        &self.host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_label_names_its_kind_never_its_sender() {
        assert_eq!(channel_kind(&Channel::Api), "api");
        assert_eq!(channel_kind(&Channel::Cli), "cli");
        assert_eq!(channel_kind(&Channel::Agent("cmo".into())), "agent");
        assert_eq!(channel_kind(&Channel::Delivery("cfo".into())), "delivery");
        // Each kind has a counter of its own.
        let slots: std::collections::BTreeSet<usize> = [
            Channel::Api,
            Channel::Cli,
            Channel::Agent("x".into()),
            Channel::Delivery("y".into()),
        ]
        .iter()
        .map(channel_slot)
        .collect();
        assert_eq!(slots.len(), CHANNELS.len());
    }

    #[test]
    fn a_refusal_reason_is_its_stable_code_and_unknown_ones_are_other() {
        for refusal in Refusal::examples() {
            assert_eq!(refusal_reason(Some(&refusal)), refusal.code());
        }
        assert_eq!(refusal_reason(None), "other");
    }

    #[test]
    fn the_handles_record_into_the_recorder_with_the_host_label() {
        // A recorder of this thread only: the test sees exactly what the handles recorded.
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let host = HostMetrics::new("alpha");
            let mut agent = host.agent("cmo");
            agent.started(&Channel::Agent("boss".into())).increment(1);
            agent.settled(RunStatus::Succeeded);
            agent.settled(RunStatus::Running);
            agent.call_placed("cfo");
            agent.call_placed("cfo");
            agent.call_refused(
                Refusal::examples()
                    .iter()
                    .find(|r| matches!(r, Refusal::CallCap { .. })),
            );
            host.store_commit().record(0.002);
        });
        /// A series as the test reads it: name, labels, value.
        type Seen = (String, Vec<(String, String)>, String);
        let seen: Vec<Seen> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                (key.name().to_owned(), labels, format!("{value:?}"))
            })
            .collect();
        let find = |name: &str, label: (&str, &str)| {
            seen.iter()
                .find(|(n, labels, _)| {
                    n == name
                        && labels.iter().any(|(k, v)| k == label.0 && v == label.1)
                        && labels.iter().any(|(k, v)| k == "host" && v == "alpha")
                })
                .map(|(_, _, value)| value.clone())
        };
        assert_eq!(
            find(names::RUNS_STARTED, ("channel", "agent")).as_deref(),
            Some("Counter(1)")
        );
        assert_eq!(
            find(names::RUNS_STARTED, ("channel", "api")).as_deref(),
            Some("Counter(0)")
        );
        assert_eq!(
            find(names::RUNS_SETTLED, ("status", "succeeded")).as_deref(),
            Some("Counter(1)")
        );
        assert_eq!(
            find(names::RUNS_SETTLED, ("status", "failed")).as_deref(),
            Some("Counter(0)")
        );
        assert_eq!(
            find(names::CALLS_PLACED, ("callee", "cfo")).as_deref(),
            Some("Counter(2)")
        );
        assert_eq!(
            find(names::CALLS_REFUSED, ("reason", "call_cap")).as_deref(),
            Some("Counter(1)")
        );
        assert!(
            find(names::STORE_COMMIT, ("host", "alpha")).is_some(),
            "{seen:?}"
        );
    }
}
