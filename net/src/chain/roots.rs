//! The verified-roots cache: batch signatures a receiving host already checked, so that the
//! other envelopes of the same batch skip the signature check.
//!
//! An entry is the exact fact a strict check established: this pinned key signed this root of
//! this many leaves *with these signature bytes*. It is keyed by all four, so a hop carrying
//! other signature bytes (malleated, or simply wrong) over a cached root is checked, and
//! refused, like any other; a hop whose host was re-keyed is looked up under the new key and
//! misses. Every hop's own inclusion proof is still checked against the root, and every other
//! check of the chain (links, times, origin, placements) runs as before: the cache saves the
//! signature check and nothing else.
//!
//! It is bounded (least recently used entries go first) and small: a batch's envelopes arrive
//! together, so a few hundred roots cover every batch in flight. This module holds facts; it
//! verifies nothing itself and decides nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many verified roots a host remembers by default.
pub const DEFAULT_VERIFIED_ROOTS: usize = 256;

/// One batch signature that verified strictly.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RootKey {
    pub(crate) key: [u8; 32],
    pub(crate) root: [u8; 32],
    pub(crate) leaf_count: u32,
    pub(crate) signature: [u8; 64],
}

/// A bounded LRU cache of batch signatures that verified, shared by a host's link handlers.
#[derive(Debug)]
pub struct VerifiedRoots {
    capacity: usize,
    lru: Mutex<Lru>,
    hits: AtomicU64,
    checks: AtomicU64,
}

#[derive(Debug, Default)]
struct Lru {
    /// Entry -> its last use.
    entries: HashMap<RootKey, u64>,
    /// Last use -> entry, oldest first.
    order: BTreeMap<u64, RootKey>,
    clock: u64,
}

impl VerifiedRoots {
    /// A cache of at most `capacity` roots (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            lru: Mutex::new(Lru::default()),
            hits: AtomicU64::new(0),
            checks: AtomicU64::new(0),
        }
    }

    /// How many signature checks the cache saved, and how many signatures were checked, since
    /// the cache was made.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.checks.load(Ordering::Relaxed),
        )
    }

    /// How many roots it holds now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this signature verified before; a hit counts as a use.
    pub(crate) fn contains(&self, entry: &RootKey) -> bool {
        let mut lru = self.lock();
        let hit = lru.touch(entry);
        drop(lru);
        if hit {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Remembers signatures that just verified strictly, dropping the least recently used
    /// entries beyond the capacity.
    pub(crate) fn insert_verified<'a>(&self, verified: impl IntoIterator<Item = &'a RootKey>) {
        let mut lru = self.lock();
        for entry in verified {
            self.checks.fetch_add(1, Ordering::Relaxed);
            if lru.touch(entry) {
                continue;
            }
            while lru.entries.len() >= self.capacity {
                match lru.order.pop_first() {
                    Some((_, oldest)) => {
                        lru.entries.remove(&oldest);
                    }
                    None => break,
                }
            }
            let now = lru.tick();
            lru.entries.insert(entry.clone(), now);
            lru.order.insert(now, entry.clone());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // The map is consistent after every statement that could panic; a poisoned lock
        // still holds a usable cache.
        self.lru
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for VerifiedRoots {
    fn default() -> Self {
        Self::new(DEFAULT_VERIFIED_ROOTS)
    }
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Marks `entry` used now; false if it is not there.
    fn touch(&mut self, entry: &RootKey) -> bool {
        let now = self.tick();
        let Some(used) = self.entries.get_mut(entry) else {
            return false;
        };
        let before = std::mem::replace(used, now);
        if let Some(moved) = self.order.remove(&before) {
            self.order.insert(now, moved);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u8) -> RootKey {
        RootKey {
            key: [1; 32],
            root: [n; 32],
            leaf_count: 2,
            signature: [3; 64],
        }
    }

    #[test]
    fn the_least_recently_used_root_goes_first() {
        let roots = VerifiedRoots::new(2);
        roots.insert_verified([&entry(1), &entry(2)]);
        assert!(roots.contains(&entry(1)));
        roots.insert_verified([&entry(3)]);
        assert!(roots.contains(&entry(1)));
        assert!(!roots.contains(&entry(2)), "2 was the least recently used");
        assert!(roots.contains(&entry(3)));
        assert_eq!(roots.len(), 2);
        assert_eq!(roots.counts(), (3, 3));
    }

    #[test]
    fn an_entry_is_the_exact_signature() {
        let roots = VerifiedRoots::new(4);
        roots.insert_verified([&entry(1)]);
        let mut other = entry(1);
        other.signature[0] ^= 1;
        assert!(!roots.contains(&other));
        let mut other = entry(1);
        other.key[0] ^= 1;
        assert!(!roots.contains(&other));
        let mut other = entry(1);
        other.leaf_count = 3;
        assert!(!roots.contains(&other));
    }
}
