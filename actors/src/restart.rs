//! The supervisor's restart budget, as a pure rule over restart times.
//!
//! ractor links children to their supervisor but has no restart strategies; consort's
//! supervisor restarts a failed agent actor while it has failed fewer than `max_restarts`
//! times within `window`. Past that the agent is marked down (calls to it are refused with a
//! typed answer) rather than restarted in a tight loop. Its accepted runs stay in its store.

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

#[cfg(test)]
mod tests {
    use super::*;

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
