//! A worker's prefix cache, keyed by chained block ids, with LRU eviction at capacity.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a u64 id with one multiply: ids are already well spread (dense integers or
/// chained hashes), and a fixed hasher keeps the simulation free of per-process
/// randomness (the maps are only looked up, never iterated, but be safe and fast).
#[derive(Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = (id ^ (id >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(super) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Blocks cached on one worker. Because ids are chained, a cached id stands for its whole
/// prefix, so the overlap with a request is the number of its leading ids present.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    capacity: usize,
    /// id → the stamp of its last use.
    stamps: IdMap<u64>,
    /// stamp → id, oldest first: the eviction order.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    /// A cache of `capacity` blocks (0 holds nothing).
    pub fn new(capacity: usize) -> Self {
        Self { capacity, stamps: IdMap::default(), order: BTreeMap::new(), clock: 0 }
    }

    /// Leading ids of `hashes` that are cached: the prefix this worker can reuse, blocks.
    /// A read: it does not refresh anything (the router asks every worker).
    pub fn overlap(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.stamps.contains_key(h)).count()
    }

    /// Stores (or refreshes) the blocks of a prompt that was just computed, then evicts
    /// the least recently used blocks down to capacity. Ids are touched leaf first, so
    /// the shared root of a prefix is the most recent and leaves are evicted before it.
    pub fn insert(&mut self, hashes: &[u64]) {
        for &id in hashes.iter().rev() {
            self.clock += 1;
            if let Some(old) = self.stamps.insert(id, self.clock) {
                self.order.remove(&old);
            }
            self.order.insert(self.clock, id);
        }
        while self.stamps.len() > self.capacity {
            let Some((_, id)) = self.order.pop_first() else { break };
            self.stamps.remove(&id);
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_the_leading_run_of_cached_ids() {
        let mut cache = PrefixCache::new(100);
        cache.insert(&[1, 2, 3]);
        assert_eq!(cache.overlap(&[1, 2, 3, 4]), 3);
        assert_eq!(cache.overlap(&[1, 9, 3]), 1, "stops at the first miss");
        assert_eq!(cache.overlap(&[9, 2, 3]), 0);
        assert_eq!(cache.overlap(&[]), 0);
    }

    #[test]
    fn evicts_least_recently_used_leaves_first_at_capacity() {
        let mut cache = PrefixCache::new(4);
        cache.insert(&[1, 2, 3]);
        cache.insert(&[1, 5]); // refreshes 1, adds 5: {1,2,3,5}
        assert_eq!(cache.len(), 4);
        cache.insert(&[7]); // evicts the oldest: 3 (the leaf of the first prompt)
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.overlap(&[1, 2, 3]), 2);
        cache.insert(&[8]); // next oldest is 2
        assert_eq!(cache.overlap(&[1, 2]), 1);
        assert_eq!(cache.overlap(&[1, 5]), 2, "the refreshed prefix survives");
        let mut none = PrefixCache::new(0);
        none.insert(&[1]);
        assert!(none.is_empty());
    }
}
