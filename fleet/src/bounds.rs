//! Bounds that hold under abuse: plain decisions over counts and clocks, with no I/O.
//!
//! The HTTP API is reachable by clients that do not play fair: one that opens connections and
//! never finishes a request, one that starts runs as fast as it can, one that parks hundreds of
//! long waits. Each bound here is a small piece of state and a question asked before the work:
//! [`RateBook`] (a token bucket per principal: how fast runs are started), [`HeldBook`] (how
//! many of something one key holds at once: connections per client address, waits and streams
//! per principal) and [`header_deadline`] (how long a new connection may take to send its
//! headers, shorter as the host nears its connection cap). The listener and the routes ask;
//! nothing here knows about HTTP.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most keys a book keeps: past it, keys that hold nothing (or whose bucket is full again)
/// are forgotten first, so a flood of new keys cannot grow memory without bound.
const MAX_KEYS: usize = 10_000;

/// A token bucket: up to `burst` at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug)]
struct TokenBucket {
    tokens: f64,
    last: Instant,
}

/// How fast one principal may do something (start runs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens refilled per second.
    pub per_second: f64,
    /// The most taken at once.
    pub burst: u32,
}

/// A token bucket per key.
#[derive(Debug)]
pub struct RateBook {
    rate: Rate,
    buckets: HashMap<String, TokenBucket>,
}

impl RateBook {
    /// A book where every key may go at `rate`.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            buckets: HashMap::new(),
        }
    }

    /// Takes one token for `key` at `now`, or says how long until one is there.
    pub fn take(&mut self, key: &str, now: Instant) -> Result<(), Duration> {
        let Rate { per_second, burst } = self.rate;
        if per_second <= 0.0 || burst == 0 {
            return Err(Duration::from_secs(60));
        }
        let burst = f64::from(burst);
        if self.buckets.len() >= MAX_KEYS && !self.buckets.contains_key(key) {
            self.buckets.retain(|_, b| {
                let refilled =
                    b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * per_second;
                refilled < burst
            });
        }
        let bucket = self.buckets.entry(key.to_owned()).or_insert(TokenBucket {
            tokens: burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / per_second;
            Err(Duration::from_secs_f64(wait.max(0.001)))
        }
    }
}

/// How many of something each key holds at once, at most `cap` each.
#[derive(Debug)]
pub struct HeldBook<K: Eq + Hash> {
    cap: usize,
    held: HashMap<K, usize>,
}

impl<K: Eq + Hash + Clone> HeldBook<K> {
    /// A book that lets each key hold `cap` at once.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            held: HashMap::new(),
        }
    }

    /// Counts one more for `key`, unless it holds `cap` already (or the book is full of keys).
    pub fn try_hold(&mut self, key: &K) -> bool {
        let held = self.held.get(key).copied().unwrap_or(0);
        if held >= self.cap || (held == 0 && self.held.len() >= MAX_KEYS) {
            return false;
        }
        self.held.insert(key.clone(), held + 1);
        true
    }

    /// One fewer for `key`.
    pub fn release(&mut self, key: &K) {
        if let Some(held) = self.held.get_mut(key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.held.remove(key);
            }
        }
    }

    /// How many `key` holds.
    pub fn held(&self, key: &K) -> usize {
        self.held.get(key).copied().unwrap_or(0)
    }
}

/// A [`HeldBook`] shared by tasks; [`SharedHeld::hold`] hands out a [`Holding`] that gives
/// its count back when dropped.
#[derive(Clone, Debug)]
pub struct SharedHeld<K: Eq + Hash>(Arc<Mutex<HeldBook<K>>>);

impl<K: Eq + Hash + Clone> SharedHeld<K> {
    /// A shared book that lets each key hold `cap` at once.
    pub fn new(cap: usize) -> Self {
        Self(Arc::new(Mutex::new(HeldBook::new(cap))))
    }

    /// One more for `key`, held until the returned value is dropped; `None` when `key` holds
    /// its cap already.
    pub fn hold(&self, key: K) -> Option<Holding<K>> {
        let mut book = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.try_hold(&key).then(|| Holding {
            book: self.0.clone(),
            key,
        })
    }
}

/// One count of a [`SharedHeld`], given back when dropped.
#[derive(Debug)]
pub struct Holding<K: Eq + Hash + Clone> {
    book: Arc<Mutex<HeldBook<K>>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Drop for Holding<K> {
    fn drop(&mut self) {
        let mut book = self
            .book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.release(&self.key);
    }
}

/// How long a new connection may take to send its headers when `in_use` of `cap` connections
/// are taken: `base` while at most half are, then less, down to `floor` at the cap. Slots held
/// by clients that never finish a request come back sooner the fuller the host is.
pub fn header_deadline(in_use: usize, cap: usize, base: Duration, floor: Duration) -> Duration {
    let cap = cap.max(1);
    let half = cap / 2;
    if in_use <= half {
        return base;
    }
    let left = cap.saturating_sub(in_use) as f64 / (cap - half).max(1) as f64;
    let span = base.saturating_sub(floor).as_secs_f64();
    floor + Duration::from_secs_f64(span * left.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_a_burst_through_then_one_per_refill() {
        let mut book = RateBook::new(Rate {
            per_second: 10.0,
            burst: 3,
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(book.take("api:eve", t0).is_ok());
        }
        let wait = book.take("api:eve", t0).unwrap_err();
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::ZERO,
            "{wait:?}"
        );
        // Another principal has its own bucket.
        assert!(book.take("api:bob", t0).is_ok());
        assert!(
            book.take("api:eve", t0 + Duration::from_millis(100))
                .is_ok()
        );
        assert!(
            book.take("api:eve", t0 + Duration::from_millis(100))
                .is_err()
        );
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(book.take("api:eve", later).is_ok());
        }
        assert!(book.take("api:eve", later).is_err());
    }

    #[test]
    fn a_zero_rate_refuses_everything() {
        let mut book = RateBook::new(Rate {
            per_second: 0.0,
            burst: 5,
        });
        assert!(book.take("k", Instant::now()).is_err());
    }

    #[test]
    fn a_flood_of_keys_does_not_grow_the_rate_book_without_bound() {
        let mut book = RateBook::new(Rate {
            per_second: 1000.0,
            burst: 1,
        });
        let t0 = Instant::now();
        for i in 0..(MAX_KEYS + 500) {
            let _ = book.take(&format!("k{i}"), t0 + Duration::from_millis(i as u64));
        }
        assert!(book.buckets.len() <= MAX_KEYS + 1, "{}", book.buckets.len());
    }

    #[test]
    fn each_key_holds_at_most_its_cap_and_gets_it_back() {
        let shared = SharedHeld::new(2);
        let a = shared.hold("10.0.0.1").expect("first");
        let b = shared.hold("10.0.0.1").expect("second");
        assert!(shared.hold("10.0.0.1").is_none(), "over the cap");
        assert!(
            shared.hold("10.0.0.2").is_some(),
            "another key is not held up"
        );
        drop(a);
        let c = shared.hold("10.0.0.1").expect("a count came back");
        drop((b, c));
        let book = shared.0.lock().expect("book");
        assert_eq!(book.held(&"10.0.0.1"), 0);
        assert!(
            book.held.is_empty(),
            "a key that holds nothing is forgotten"
        );
    }

    #[test]
    fn the_header_deadline_tightens_as_the_host_fills() {
        let (base, floor) = (Duration::from_secs(10), Duration::from_millis(500));
        assert_eq!(header_deadline(0, 256, base, floor), base);
        assert_eq!(header_deadline(128, 256, base, floor), base);
        let three_quarters = header_deadline(192, 256, base, floor);
        assert!(
            three_quarters < base && three_quarters > floor,
            "{three_quarters:?}"
        );
        assert_eq!(header_deadline(256, 256, base, floor), floor);
        assert_eq!(header_deadline(300, 256, base, floor), floor);
        let mut last = base;
        for in_use in 0..=256 {
            let d = header_deadline(in_use, 256, base, floor);
            assert!(d <= last, "never looser as the host fills");
            last = d;
        }
    }
}
