//! When the outbox's carrier tries a journaled delivery again, as pure functions of how many
//! attempts failed in a row, what the last one ran into, how long it took, and a jitter draw.
//!
//! A delivery is handed to the carrier because its peer's host could not be reached; hosts
//! come back within moments of a restart, so the first retry is milliseconds away and each
//! further failure doubles the wait, never beyond [`CARRY_EVERY`]. The wait runs from the
//! start of the failed attempt: a dial that already waited out its timeout is not waited for
//! again. A refusal (the host answered without a receipt: starting, or refusing the frame) is
//! retried on a slower schedule than silence, since that host is up and asking it again at
//! once changes little. This module only computes waits; the carrier (`outbox.rs`) sends,
//! reads the outbox and sleeps, and must ask this module for every wait.

use std::time::Duration;

/// The longest wait between two attempts at one journaled delivery.
pub(crate) const CARRY_EVERY: Duration = Duration::from_secs(2);

/// The wait after the first failure to reach a host.
pub(crate) const FIRST_RETRY_UNREACHABLE: Duration = Duration::from_millis(20);

/// The wait after a host's first refusal of a frame.
pub(crate) const FIRST_RETRY_REFUSED: Duration = Duration::from_millis(200);

/// What a failed attempt ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttemptFailure {
    /// The peer's host could not be reached (down, restarting, no link).
    Unreachable,
    /// The peer's host answered without a receipt.
    Refused,
}

/// The spacing between the start of failed attempt number `failures` (1: the first failure in
/// a row) and the start of the next: the failure's first wait doubled per earlier failure,
/// capped at [`CARRY_EVERY`], then jittered into its upper half by `jitter` (a draw in
/// `[0, 1)`; anything outside is clamped) so deliveries that failed together spread out.
pub(crate) fn retry_spacing(failures: u32, failure: AttemptFailure, jitter: f64) -> Duration {
    let first = match failure {
        AttemptFailure::Unreachable => FIRST_RETRY_UNREACHABLE,
        AttemptFailure::Refused => FIRST_RETRY_REFUSED,
    };
    let doublings = failures.saturating_sub(1).min(16);
    let full = first.saturating_mul(1u32 << doublings).min(CARRY_EVERY);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    full / 2 + full.mul_f64(jitter / 2.0)
}

/// How long the carrier waits, once a failed attempt has ended, before the next attempt: the
/// [`retry_spacing`] less the `took` the failed attempt already lasted.
pub(crate) fn wait_after_failure(
    failures: u32,
    failure: AttemptFailure,
    took: Duration,
    jitter: f64,
) -> Duration {
    retry_spacing(failures, failure, jitter).saturating_sub(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: AttemptFailure = AttemptFailure::Unreachable;
    const R: AttemptFailure = AttemptFailure::Refused;

    #[test]
    fn the_first_retry_after_silence_is_milliseconds_away() {
        assert_eq!(retry_spacing(1, U, 0.0), Duration::from_millis(10));
        let highest = retry_spacing(1, U, 0.999_999);
        assert!(highest > Duration::from_micros(19_990) && highest < Duration::from_millis(20));
        assert!(retry_spacing(1, U, 0.5) < Duration::from_millis(20));
    }

    #[test]
    fn each_failure_doubles_the_spacing_up_to_carry_every() {
        let spacings: Vec<Duration> = (1..=10).map(|n| retry_spacing(n, U, 0.0)).collect();
        assert_eq!(
            spacings,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map(Duration::from_millis)
        );
        for n in [8, 9, 20, 1000, u32::MAX] {
            assert!(retry_spacing(n, U, 0.999) < CARRY_EVERY, "{n}");
            assert!(retry_spacing(n, R, 0.999) < CARRY_EVERY, "{n}");
            assert!(retry_spacing(n, U, 0.0) >= CARRY_EVERY / 2, "{n}");
        }
    }

    #[test]
    fn a_refusal_is_retried_more_slowly_than_silence() {
        for n in 1..8 {
            assert!(retry_spacing(n, R, 0.3) > retry_spacing(n, U, 0.3), "{n}");
        }
        assert_eq!(retry_spacing(1, R, 0.0), Duration::from_millis(100));
        assert_eq!(retry_spacing(5, R, 0.0), Duration::from_millis(1000));
    }

    #[test]
    fn the_jitter_stays_in_the_upper_half_of_the_spacing_and_bad_draws_are_clamped() {
        let full = Duration::from_millis(160);
        for j in [0.0, 0.1, 0.5, 0.9, 0.999] {
            let s = retry_spacing(4, U, j);
            assert!(s >= full / 2 && s < full, "{j}: {s:?}");
        }
        assert_eq!(retry_spacing(4, U, -3.0), full / 2);
        assert_eq!(retry_spacing(4, U, 7.0), full);
        assert_eq!(retry_spacing(4, U, f64::NAN), full / 2);
        assert_eq!(retry_spacing(4, U, f64::INFINITY), full / 2);
    }

    #[test]
    fn zero_failures_is_read_as_the_first() {
        assert_eq!(retry_spacing(0, U, 0.4), retry_spacing(1, U, 0.4));
        assert_eq!(retry_spacing(0, R, 0.4), retry_spacing(1, R, 0.4));
    }

    #[test]
    fn an_attempt_that_took_its_spacing_already_is_followed_at_once() {
        // A dial that waited out its timeout: no further wait.
        assert_eq!(
            wait_after_failure(9, U, Duration::from_secs(5), 0.7),
            Duration::ZERO
        );
        // A quick refusal waits the rest of its spacing.
        let spacing = retry_spacing(2, R, 0.0);
        assert_eq!(
            wait_after_failure(2, R, Duration::from_millis(30), 0.0),
            spacing - Duration::from_millis(30)
        );
        assert_eq!(
            wait_after_failure(1, U, Duration::ZERO, 0.0),
            Duration::from_millis(10)
        );
    }
}
