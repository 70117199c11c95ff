use wasmtime::CacheStore;

use super::*;

fn key(i: u32) -> Vec<u8> {
    i.to_le_bytes().repeat(8)
}

#[test]
fn holds_no_more_than_its_capacity_whatever_is_inserted() {
    let capacity = 64 << 10;
    let cache = FunctionCache::new(capacity);
    for i in 0..10_000u32 {
        // 1 B to ~8 KiB values, as many uploads' distinct functions would be.
        let value = vec![i as u8; (i as usize * 7919) % 8192 + 1];
        assert!(cache.insert(&key(i), value));
        let stats = cache.stats();
        assert!(stats.bytes <= capacity, "{} bytes held after {i} inserts", stats.bytes);
    }
    let stats = cache.stats();
    assert!(stats.entries > 0 && stats.entries < 10_000);
    // The last one inserted is always there.
    assert_eq!(cache.get(&key(9_999)).as_deref(), Some(&vec![9_999u32 as u8; (9_999 * 7919) % 8192 + 1][..]));
}

#[test]
fn a_function_read_since_the_last_sweep_outlives_one_that_was_not() {
    // Room for three entries of 1,000 bytes.
    let cache = FunctionCache::new(3 * (1_000 + 32 + ENTRY_OVERHEAD));
    for i in 0..3 {
        assert!(cache.insert(&key(i), vec![0; 1_000]));
    }
    assert!(cache.get(&key(0)).is_some());
    // A fourth pushes out the oldest not read since: 1, not 0.
    assert!(cache.insert(&key(3), vec![0; 1_000]));
    assert!(cache.get(&key(0)).is_some());
    assert!(cache.get(&key(1)).is_none());
    assert!(cache.get(&key(2)).is_some());
    assert!(cache.get(&key(3)).is_some());
}

#[test]
fn a_value_larger_than_the_whole_cache_is_refused_and_nothing_is_evicted_for_it() {
    let cache = FunctionCache::new(4_096);
    assert!(cache.insert(&key(1), vec![1; 100]));
    assert!(!cache.insert(&key(2), vec![2; 4_096]));
    assert!(cache.get(&key(1)).is_some());
    assert!(cache.get(&key(2)).is_none());
    // Off: nothing is ever held.
    let off = FunctionCache::new(0);
    assert!(!off.insert(&key(1), vec![1]));
    assert_eq!(off.stats().entries, 0);
}

#[test]
fn counts_hits_and_misses_and_keeps_the_first_of_two_inserts() {
    let cache = FunctionCache::new(1 << 20);
    assert!(cache.get(&key(1)).is_none());
    assert!(cache.insert(&key(1), vec![1; 10]));
    assert!(cache.insert(&key(1), vec![2; 10]));
    assert_eq!(cache.get(&key(1)).as_deref(), Some(&[1u8; 10][..]));
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
    assert_eq!(stats.bytes, 32 + 10 + ENTRY_OVERHEAD);
}
