//! When a failed request is sent again, and after how long.
//!
//! A 429, a 408, a 5xx, a timeout or a failed connection is worth another attempt; any other
//! answer is the server's final word (a 401 stays a 401). The wait doubles from
//! [`BASE_DELAY`] up to [`MAX_DELAY`], scaled by a random factor in `[0.5, 1]` so that many
//! runs hitting one rate limit do not come back in step; a `Retry-After` the server sent wins,
//! capped at [`MAX_RETRY_AFTER`] so that one header cannot park a run for an hour. Pure
//! functions: the caller supplies the randomness.

use std::time::Duration;

/// The first wait.
pub const BASE_DELAY: Duration = Duration::from_millis(250);
/// The longest computed wait.
pub const MAX_DELAY: Duration = Duration::from_secs(8);
/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How one attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The server answered with this status (and maybe a `Retry-After`).
    Status(u16, Option<Duration>),
    /// No connection could be made, or it broke before an answer.
    Connect,
    /// No (complete) answer within the request timeout.
    Timeout,
}

/// Whether the failure is worth another attempt.
pub fn is_retryable(failure: Failure) -> bool {
    match failure {
        Failure::Status(status, _) => {
            status == 408 || status == 429 || (500..=599).contains(&status)
        }
        Failure::Connect | Failure::Timeout => true,
    }
}

/// The wait before attempt `retry` (1 for the first retry), or `None` when the failure is
/// final or `max_retries` are spent. `jitter` is a random number in `[0, 1]`.
pub fn delay(failure: Failure, retry: u32, max_retries: u32, jitter: f64) -> Option<Duration> {
    if !is_retryable(failure) || retry == 0 || retry > max_retries {
        return None;
    }
    if let Failure::Status(_, Some(after)) = failure {
        return Some(after.min(MAX_RETRY_AFTER));
    }
    let doubled = BASE_DELAY.saturating_mul(1u32 << (retry - 1).min(16));
    let capped = doubled.min(MAX_DELAY);
    let factor = 0.5 + 0.5 * jitter.clamp(0.0, 1.0);
    Some(capped.mul_f64(factor))
}

/// Reads a `Retry-After` value in seconds (the HTTP-date form is not used by the APIs this
/// adapter talks to, and is ignored).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retried() {
        for status in [408, 429, 500, 502, 503, 599] {
            assert!(is_retryable(Failure::Status(status, None)), "{status}");
        }
        for status in [400, 401, 403, 404, 422, 200, 600] {
            assert!(!is_retryable(Failure::Status(status, None)), "{status}");
        }
        assert!(is_retryable(Failure::Connect) && is_retryable(Failure::Timeout));
    }

    #[test]
    fn waits_double_with_jitter_up_to_the_cap_and_stop_after_the_budget() {
        let f = Failure::Status(503, None);
        assert_eq!(delay(f, 1, 3, 1.0), Some(BASE_DELAY));
        assert_eq!(delay(f, 1, 3, 0.0), Some(BASE_DELAY / 2));
        assert_eq!(delay(f, 2, 3, 1.0), Some(BASE_DELAY * 2));
        assert_eq!(delay(f, 3, 3, 1.0), Some(BASE_DELAY * 4));
        assert_eq!(delay(f, 4, 3, 1.0), None);
        assert_eq!(delay(f, 30, 40, 1.0), Some(MAX_DELAY));
        assert_eq!(delay(Failure::Status(401, None), 1, 3, 1.0), None);
        assert_eq!(delay(Failure::Connect, 1, 0, 1.0), None);
        for j in [0.0, 0.3, 0.7, 1.0, -4.0, 9.0] {
            let d = delay(Failure::Timeout, 2, 3, j).unwrap();
            assert!(d >= BASE_DELAY && d <= BASE_DELAY * 2, "{j}: {d:?}");
        }
    }

    #[test]
    fn retry_after_wins_and_is_capped() {
        let f = Failure::Status(429, Some(Duration::from_secs(2)));
        assert_eq!(delay(f, 1, 3, 0.0), Some(Duration::from_secs(2)));
        let f = Failure::Status(429, Some(Duration::from_secs(3600)));
        assert_eq!(delay(f, 1, 3, 0.0), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        for bad in [
            "",
            "-1",
            "soon",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "inf",
            "NaN",
        ] {
            assert_eq!(parse_retry_after(bad), None, "{bad}");
        }
    }
}
