//! The bounded-load walk on hand-made cases.

use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::Policy;
use switchyard_guest_sdk::testing::Case;

use super::Chwbl;

fn case(n: usize, key: u64) -> Case {
    let mut case = Case::new(n);
    case.lazy.prefix_hashes = Some(vec![key, key + 1, key + 2]);
    case
}

fn policy(params: &str) -> Chwbl {
    Chwbl::configure(params).unwrap()
}

#[test]
fn unloaded_workers_get_the_ring_owner_and_the_key_is_sticky() {
    let case = case(8, 42);
    let costs = case.costs(&mut policy("{}")).unwrap();
    let owner = case.best(&mut policy("{}"));
    assert_eq!(costs[owner], 0.0);
    assert!(costs.iter().enumerate().all(|(i, &c)| i == owner || (1.0..2.0).contains(&c)));
    // Same key, same owner; a different key somewhere on the ring (most keys elsewhere).
    assert_eq!(case.best(&mut policy("{}")), owner);
    let others = (100..140).filter(|&k| case_owner(8, k) != owner).count();
    assert!(others > 20, "keys spread over the ring ({others}/40 elsewhere)");
}

fn case_owner(n: usize, key: u64) -> usize {
    case(n, key).best(&mut policy("{}"))
}

#[test]
fn an_overloaded_owner_spills_to_the_next_worker_on_the_ring() {
    let mut case = case(4, 7);
    let owner = case.best(&mut policy("{}"));
    let walk_order = |case: &Case| {
        let costs = case.costs(&mut policy("{}")).unwrap();
        let mut rows: Vec<usize> = (0..costs.len()).collect();
        rows.sort_by(|&a, &b| costs[a].total_cmp(&costs[b]));
        rows
    };
    let order = walk_order(&case);
    assert_eq!(order[0], owner);
    // Mean load with the new request: (10 + 1) / 4 × 1.25 = 3.44: the owner at 10 spills.
    case[Column::ActiveRequests][owner] = 10;
    let spilled = case.best(&mut policy("{}"));
    assert_ne!(spilled, owner);
    // The spill goes to the next candidate in ring order (not merely the least loaded).
    let unloaded_order: Vec<usize> = order.iter().copied().filter(|&r| r != owner).collect();
    assert_eq!(spilled, unloaded_order[0]);
    // At the bound exactly, the owner keeps the key: (3 + 1) / 4 × 1.25 = 1.25 ≥ 1.
    case[Column::ActiveRequests] = vec![0; 4];
    case[Column::ActiveRequests][owner] = 1;
    case[Column::ActiveRequests][unloaded_order[0]] = 2;
    assert_eq!(case.best(&mut policy("{}")), owner);
    // With every other worker busier than the bound too, the walk continues past them.
    case[Column::ActiveRequests] = vec![9, 9, 9, 9];
    case[Column::ActiveRequests][unloaded_order[2]] = 0;
    // bound = (27 + 1) / 4 × 1.25 = 8.75: only the idle one qualifies.
    assert_eq!(case.best(&mut policy("{}")), unloaded_order[2]);
}

#[test]
fn when_no_worker_is_within_the_bound_the_first_met_wins() {
    let mut case = case(3, 99);
    let owner = case.best(&mut policy("{}"));
    case[Column::ActiveRequests] = vec![5, 5, 5];
    // bound = 16 / 3 × 0.5 = 2.67 < 5 for all: fall back to the first on the walk.
    assert_eq!(case.best(&mut policy(r#"{"load_factor": 0.5}"#)), owner);
}

#[test]
fn the_key_is_the_hash_of_the_first_k_blocks() {
    // Hashes differ after block 2: with K = 2 both requests share a key, with K = 16 not.
    let mut a = Case::new(16);
    let mut b = Case::new(16);
    a.lazy.prefix_hashes = Some(vec![1, 2, 3]);
    b.lazy.prefix_hashes = Some(vec![1, 2, 4]);
    let k2 = r#"{"prefix_blocks": 2}"#;
    assert_eq!(a.costs(&mut policy(k2)).unwrap(), b.costs(&mut policy(k2)).unwrap());
    assert_ne!(a.costs(&mut policy("{}")).unwrap(), b.costs(&mut policy("{}")).unwrap());
}

#[test]
fn parameters_are_checked_by_name() {
    for (params, field) in [
        (r#"{"prefix_blocks": 0}"#, "prefix_blocks"),
        (r#"{"replication": 0}"#, "replication"),
        (r#"{"replication": 5000}"#, "replication"),
        (r#"{"load_factor": -1}"#, "load_factor"),
        (r#"{"load_factor": "x"}"#, "load_factor"),
        (r#"{"ring": 1}"#, "ring"),
    ] {
        let err = Chwbl::configure(params).unwrap_err();
        assert!(err.message.contains(field), "{params}: {err}");
    }
}

#[test]
fn kept_sorted_points_give_exactly_the_hashed_distance() {
    // Keys at, between, before and after points, and wrapping past the last one.
    let (worker_id, dp_rank, replication) = (7, 1, 64);
    let e = switchyard_guest_sdk::hash::endpoint(worker_id, dp_rank);
    let mut points: Vec<u64> = (0..64).map(|i| switchyard_guest_sdk::hash::hash2(e, i)).collect();
    points.sort_unstable();
    let mut keys = vec![0, 1, u64::MAX, points[0], points[63], points[63].wrapping_add(1), points[10] - 1];
    keys.extend((0..200u64).map(switchyard_guest_sdk::hash::mix64));
    for key in keys {
        assert_eq!(
            super::nearest(&points, key),
            super::distance(worker_id, dp_rank, replication, key),
            "key {key}"
        );
    }
}

#[test]
fn repeated_and_changing_batches_score_as_a_fresh_policy_does() {
    // The kept points must never change an answer: the same policy over batches whose
    // membership changes (and grows past the pruning bound) scores like a new one.
    let mut kept = policy("{}");
    for round in 0..6u64 {
        let n = [5, 40, 3, 1200, 8, 40][round as usize];
        let mut c = case(n, round * 977);
        c.worker_ids = (0..n as u64).map(|i| i * 3 + round).collect();
        c[Column::ActiveRequests] = (0..n as u32).map(|i| i % 5).collect();
        assert_eq!(c.costs(&mut kept).unwrap(), c.costs(&mut policy("{}")).unwrap(), "round {round}");
    }
}

#[test]
fn kept_points_stay_bounded_under_churn() {
    // Every batch brings new workers: departed ones must not accumulate, and the kept
    // points never exceed the bound, even when one batch alone nearly fills it.
    for (n, replication) in [(100usize, 256u32), (1000, 4096)] {
        let mut p = policy(&format!(r#"{{"replication": {replication}}}"#));
        for round in 0..40u64 {
            let mut c = case(n, round);
            c.worker_ids = (0..n as u64).map(|i| round * 1_000_000 + i).collect();
            c.costs(&mut p).unwrap();
            let kept = p.points.by_endpoint.len();
            assert!(kept * replication as usize <= super::PointCache::MAX_POINTS, "n {n}: {kept} kept");
            assert!(kept <= 2 * n + 1024 + n / 8 + 1, "n {n}, round {round}: {kept} kept");
        }
    }
}
