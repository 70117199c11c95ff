//! The two-choice switch on hand-made cases.

use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::Policy;
use switchyard_guest_sdk::testing::Case;

use super::TwoChoice;

fn policy(params: &str) -> TwoChoice {
    TwoChoice::configure(params).unwrap()
}

/// (affinity choice, alternative) for a case with no load.
fn choices(case: &Case) -> (usize, usize) {
    let costs = case.costs(&mut policy("{}")).unwrap();
    let a = costs.iter().position(|&c| c == 0.0).unwrap();
    let b = costs.iter().position(|&c| c == 1.0).unwrap();
    assert_eq!(costs.iter().filter(|&&c| c == 2.0).count(), costs.len() - 2);
    (a, b)
}

fn case(n: usize, key: u64) -> Case {
    let mut case = Case::new(n);
    case.lazy.prefix_hashes = Some(vec![key]);
    case
}

#[test]
fn two_distinct_choices_per_key_stable_and_spread() {
    let (a, b) = choices(&case(10, 5));
    assert_ne!(a, b);
    assert_eq!(choices(&case(10, 5)), (a, b));
    let firsts: std::collections::BTreeSet<usize> = (0..60).map(|k| choices(&case(10, k)).0).collect();
    assert!(firsts.len() >= 8, "keys spread over the workers: {firsts:?}");
}

#[test]
fn affinity_is_kept_under_the_bound_and_switches_above_it() {
    let mut case = case(4, 11);
    let (a, b) = choices(&case);
    // Total 4 → bound (4 + 1) / 4 × 1.25 = 1.5625: a at 1 stays, though b is idle.
    case[Column::ActiveRequests][a] = 1;
    case[Column::ActiveRequests][(0..4).find(|&r| r != a && r != b).unwrap()] = 3;
    assert_eq!(case.best(&mut policy("{}")), a);
    // a at 6 of total 9 → bound 3.125: switch to b (idle), and a becomes the alternative.
    case[Column::ActiveRequests][a] = 6;
    let costs = case.costs(&mut policy("{}")).unwrap();
    assert_eq!((costs[b], costs[a]), (0.0, 1.0));
    // If b is even busier, a stays: the switch only goes to the lower load.
    case[Column::ActiveRequests][b] = 7;
    assert_eq!(case.best(&mut policy("{}")), a);
    // A generous factor keeps affinity in the second case.
    case[Column::ActiveRequests][b] = 0;
    assert_eq!(case.best(&mut policy(r#"{"load_factor": 4}"#)), a);
}

#[test]
fn one_candidate_is_the_choice() {
    assert_eq!(case(1, 3).costs(&mut policy("{}")).unwrap(), vec![0.0]);
}

#[test]
fn parameters_are_checked_by_name() {
    for (params, field) in [
        (r#"{"prefix_blocks": 0}"#, "prefix_blocks"),
        (r#"{"load_factor": 0}"#, "load_factor"),
        (r#"{"load_factor": true}"#, "load_factor"),
        (r#"{"choices": 3}"#, "choices"),
    ] {
        let err = TwoChoice::configure(params).unwrap_err();
        assert!(err.message.contains(field), "{params}: {err}");
    }
}
