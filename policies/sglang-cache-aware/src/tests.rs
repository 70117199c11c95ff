//! The cache-aware rule, the commit discipline and the tree's eviction on hand-made cases.

use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::testing::Case;
use switchyard_guest_sdk::{Policy, WorkerRank};

use super::SglangCacheAware;

fn policy(params: &str) -> SglangCacheAware {
    SglangCacheAware::configure(params).unwrap()
}

/// Three idle workers and a prompt of the given block hashes.
fn case(hashes: &[u64]) -> Case {
    let mut case = Case::new(3);
    case.lazy.prefix_hashes = Some(hashes.to_vec());
    case
}

fn worker(id: u64) -> WorkerRank {
    WorkerRank { worker_id: id, dp_rank: 0 }
}

#[test]
fn a_committed_prompt_draws_its_continuations_to_the_same_worker() {
    let mut p = policy("{}");
    let first = case(&[1, 2, 3, 4]);
    // Empty trees: the smallest tree, the first row on ties.
    assert_eq!(first.best(&mut p), 0);
    first.commit(&mut p, 2);
    assert_eq!(p.tree_size(worker(2)), 4);
    // 4 of 5 blocks held by worker 2: rate 0.8 > 0.3.
    assert_eq!(case(&[1, 2, 3, 4, 5]).best(&mut p), 2);
    // 1 of 4 blocks: rate 0.25 ≤ 0.3 → the smallest tree (worker 0, empty).
    assert_eq!(case(&[1, 9, 9, 9]).best(&mut p), 0);
}

#[test]
fn scoring_without_a_commit_changes_nothing() {
    let mut p = policy("{}");
    let request = case(&[7, 8, 9]);
    let before = request.costs(&mut p).unwrap();
    for _ in 0..5 {
        assert_eq!(request.costs(&mut p).unwrap(), before, "dry runs leave no trace");
    }
    assert_eq!((p.commits(), p.tree_size(worker(0))), (0, 0));
    request.commit(&mut p, 1);
    assert_eq!((p.commits(), p.tree_size(worker(1))), (1, 3));
    assert_eq!(request.best(&mut p), 1);
}

#[test]
fn imbalanced_load_overrides_the_cache() {
    let mut p = policy("{}");
    let mut request = case(&[1, 2, 3]);
    request.commit(&mut p, 0);
    // Spread 70 > 64 and 80 > 1.5 × 10: imbalanced → least loaded, despite the full hit.
    request[Column::ActiveRequests] = vec![80, 10, 40];
    assert_eq!(request.best(&mut p), 1);
    // Spread 60 ≤ 64: balanced → the cache wins.
    request[Column::ActiveRequests] = vec![70, 10, 40];
    assert_eq!(request.best(&mut p), 0);
    // Spread 70 > 64 but 210 ≤ 1.5 × 140: the relative test fails → balanced.
    request[Column::ActiveRequests] = vec![210, 140, 150];
    assert_eq!(request.best(&mut p), 0);
}

#[test]
fn the_tree_evicts_least_recently_used_blocks_to_its_size_limit() {
    // 64 tokens of 16-token blocks: 4 blocks per worker.
    let mut p = policy(r#"{"max_tree_size": 64}"#);
    case(&[1, 2, 3, 4]).commit(&mut p, 0);
    // Refreshes 1 and 2, adds 5: five blocks, so the oldest goes. 3 and 4 are equally
    // old; the deeper one (4) goes first, so the held prefix stays contiguous.
    case(&[1, 2, 5]).commit(&mut p, 0);
    assert_eq!(p.tree_size(worker(0)), 4);
    assert_eq!(case(&[1, 2, 3]).best(&mut p), 0, "1, 2, 3 still held: a full match");
    // Adds three: evicts 3 (tick 1), then 5 and 2 (tick 2, deepest first); 1 stays.
    case(&[10, 11, 12]).commit(&mut p, 0);
    assert_eq!(p.tree_size(worker(0)), 4);
    assert_eq!(case(&[10, 11, 12]).best(&mut p), 0);
    // 1 of [1, 2, 3] is left: rate 1/3 > 0.3 still matches; [1, 2, 3, 4] (1/4) does not.
    assert_eq!(case(&[1, 2, 3]).best(&mut p), 0);
    assert_eq!(case(&[1, 2, 3, 4]).best(&mut p), 1, "smallest tree: worker 1 (ties → first)");
    // A prompt pushed out entirely no longer matches at all.
    let mut strict = policy(r#"{"max_tree_size": 64, "cache_threshold": 0.5}"#);
    case(&[1, 2, 3, 4]).commit(&mut strict, 1);
    case(&[20, 21, 22, 23]).commit(&mut strict, 1);
    assert_eq!(strict.tree_size(worker(1)), 4);
    assert_eq!(case(&[1, 2, 3, 4]).best(&mut strict), 0, "evicted: the smallest tree wins");
}

#[test]
fn the_owner_must_be_a_candidate() {
    let mut p = policy("{}");
    let mut c = Case::new(3);
    c.lazy.prefix_hashes = Some(vec![1, 2]);
    c.commit(&mut p, 2);
    // Worker 2 is gone from the batch: no owner among candidates → smallest tree.
    let mut smaller = Case::new(2);
    smaller.lazy.prefix_hashes = Some(vec![1, 2]);
    assert_eq!(smaller.best(&mut p), 0);
}

#[test]
fn parameters_are_checked_by_name() {
    for (params, field) in [
        (r#"{"cache_threshold": 1.5}"#, "cache_threshold"),
        (r#"{"balance_rel_threshold": -1}"#, "balance_rel_threshold"),
        (r#"{"max_tree_size": 0}"#, "max_tree_size"),
        (r#"{"balance_abs_threshold": -3}"#, "balance_abs_threshold"),
        (r#"{"eviction_interval_secs": 60}"#, "eviction_interval_secs"),
    ] {
        let err = SglangCacheAware::configure(params).unwrap_err();
        assert!(err.message.contains(field), "{params}: {err}");
    }
}
