//! The supervisor's restart rules, as pure functions over times: the restart budget and the
//! backoff of the store probe.
//!
//! ractor links children to their supervisor but has no restart strategies; consort's
//! supervisor restarts a failed agent actor while it has failed fewer than `max_restarts`
//! times within `window`. Past that the agent is marked down (calls to it are refused with a
//! typed answer) rather than restarted in a tight loop. Its accepted runs stay in its store.
//!
//! An agent down because its store could not be written (a full disk, a file-size limit) is
//! not restarted until the store takes writes again: the supervisor probes the store on the
//! [`ProbeBackoff`] schedule and revives the agent with a fresh budget once a probe passes.
//! This module only computes when; the supervisor probes and restarts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How many restarts are allowed in a sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartBudget {
    /// Restarts allowed within one window; one more leaves the agent down.
    pub max_restarts: usize,
    /// The length of the sliding window.
    pub window: Duration,
}

impl Default for RestartBudget {
    fn default() -> Self {
        Self {
            max_restarts: 5,
            window: Duration::from_secs(60),
        }
    }
}

impl RestartBudget {
    /// Records a failure at `now` and says whether a restart is allowed.
    pub fn admit(&self, history: &mut VecDeque<Instant>, now: Instant) -> bool {
        while history
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.window)
        {
            history.pop_front();
        }
        if history.len() >= self.max_restarts {
            return false;
        }
        history.push_back(now);
        true
    }
}

/// When a down agent's store is probed: `first` after it went down, then twice as long after
/// each probe that failed, never longer than `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeBackoff {
    /// The wait before the first probe.
    pub first: Duration,
    /// The longest wait between two probes.
    pub max: Duration,
}

impl Default for ProbeBackoff {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

impl ProbeBackoff {
    /// The wait before probe number `attempt` (0 for the first).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doubled = 2u32
            .checked_pow(attempt)
            .and_then(|factor| self.first.checked_mul(factor))
            .unwrap_or(self.max);
        doubled.min(self.max)
    }

    /// The attempt a new down period starts probing at. An agent revived on a passing probe
    /// that is down on its store again within `settle` of that revival picks the backoff up
    /// where it stopped (`previous`): a store whose probe passes while real writes still fail
    /// must not be revived once a second. Otherwise probing starts from the first delay.
    pub fn start_at(
        &self,
        previous: u32,
        revived_at: Option<Instant>,
        now: Instant,
        settle: Duration,
    ) -> u32 {
        match revived_at {
            Some(at) if now.saturating_duration_since(at) < settle => previous,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_wait_one_second_then_double_up_to_thirty() {
        let backoff = ProbeBackoff::default();
        let waits: Vec<u64> = (0..8).map(|a| backoff.delay(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(30));
        assert_eq!(backoff.delay(64), Duration::from_secs(30));
    }

    #[test]
    fn a_short_first_wait_still_stops_at_the_cap() {
        let backoff = ProbeBackoff {
            first: Duration::from_millis(50),
            max: Duration::from_millis(300),
        };
        let waits: Vec<u128> = (0..5).map(|a| backoff.delay(a).as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
    }

    #[test]
    fn a_revival_that_fails_again_soon_keeps_its_backoff() {
        let backoff = ProbeBackoff::default();
        let revived = Instant::now();
        let settle = Duration::from_secs(60);
        let soon = revived + Duration::from_secs(5);
        assert_eq!(backoff.start_at(4, Some(revived), soon, settle), 4);
        let later = revived + Duration::from_secs(61);
        assert_eq!(backoff.start_at(4, Some(revived), later, settle), 0);
        assert_eq!(backoff.start_at(4, None, soon, settle), 0);
    }

    #[test]
    fn allows_up_to_the_budget_then_refuses_until_the_window_slides() {
        let budget = RestartBudget {
            max_restarts: 2,
            window: Duration::from_secs(10),
        };
        let start = Instant::now();
        let mut history = VecDeque::new();
        assert!(budget.admit(&mut history, start));
        assert!(budget.admit(&mut history, start + Duration::from_secs(1)));
        assert!(!budget.admit(&mut history, start + Duration::from_secs(2)));
        assert!(budget.admit(&mut history, start + Duration::from_secs(12)));
    }

    #[test]
    fn zero_budget_never_restarts() {
        let budget = RestartBudget {
            max_restarts: 0,
            window: Duration::from_secs(10),
        };
        assert!(!budget.admit(&mut VecDeque::new(), Instant::now()));
    }
}
