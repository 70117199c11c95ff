//! Guest and native builds of the default policy decide identically: bit-identical costs
//! and the same pick, over randomised selections.

use switchyard::selection::{RequestOptions, Scorer, Worker, WorkerInputs};
use switchyard::{GuestScorer, Selector, WorkerTable};
use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::{Pool, WorkerRank};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, Rng, component, random_case, random_parameters};

#[test]
fn default_policy_guest_and_native_agree_bit_for_bit_on_10000_random_selections() {
    let mut rng = Rng::seeded(0x5717_c4ad);
    let component = component(DEFAULT_POLICY);
    let builtin = switchyard_builtins::find("default").unwrap();
    let (mut compared, mut max_candidates, mut sampled) = (0, 0, 0);
    let mut seen_ties_or_equal = 0;
    for _ in 0..100 {
        let params = random_parameters(&mut rng);
        let guest: Box<dyn Scorer> =
            Box::new(GuestScorer::new("default", component.clone(), &params).unwrap());
        let mut guest = Selector::new(guest);
        let mut native = Selector::new(builtin.native(&params).unwrap());
        for _ in 0..100 {
            let (table, request) = random_case(&mut rng);
            let g = guest.select(&table, &request).expect("guest selects");
            let n = native.select(&table, &request).expect("native selects");
            let g_bits: Vec<u64> = guest.last_costs().iter().map(|c| c.to_bits()).collect();
            let n_bits: Vec<u64> = native.last_costs().iter().map(|c| c.to_bits()).collect();
            assert_eq!(g_bits, n_bits, "costs differ with params {params}");
            assert_eq!(g.chosen, n.chosen, "picks differ with params {params}");
            assert_eq!(g.cost.to_bits(), n.cost.to_bits());
            compared += 1;
            max_candidates = max_candidates.max(g.candidates);
            sampled += usize::from(request.temperature().unwrap_or(0.0) > 0.0);
            let costs = native.last_costs();
            seen_ties_or_equal += usize::from(costs.iter().filter(|&&c| c == n.cost).count() > 1);
        }
    }
    assert_eq!(compared, 10_000);
    assert!(max_candidates > 3000, "large batches were exercised (max {max_candidates})");
    assert!(sampled > 4000, "temperature > 0 was exercised ({sampled})");
    assert!(seen_ties_or_equal > 50, "tie-breaking was exercised ({seen_ties_or_equal})");
}

#[test]
fn default_cost_matches_dynamo_formula_on_a_hand_made_case() {
    // Worker 1: pf 8192, cached 1024 tokens (64 blocks on device), decode 900 blocks.
    // prefill = (8192 + (2048 − 1024) + 1024) / 16 = 640 blocks; credit 64 → 576; + 900.
    let table = WorkerTable::new(vec![Worker::new(1, 1, 0, None), Worker::new(2, 1, 0, None)]).unwrap();
    let inputs = WorkerInputs::new(vec![1, 2])
        .with(Column::DeviceOverlapBlocks, vec![64, 0])
        .with(Column::CachedTokens, vec![1024, 0])
        .with(Column::ActivePrefillTokens, vec![8192, 0])
        .with(Column::DecodeBlocks, vec![900, 1200])
        .with(Column::ActiveRequests, vec![9, 1]);
    let facts = switchyard_test_util::fixtures::facts(2048, 16, Pool::Aggregated, 0);
    let request =
        switchyard::SelectionRequest::new(&table, facts, RequestOptions::default(), inputs).unwrap();
    for scorer in [
        switchyard_builtins::find("default").unwrap().native("{}").unwrap(),
        Box::new(GuestScorer::new("default", component(DEFAULT_POLICY), "{}").unwrap()) as Box<dyn Scorer>,
    ] {
        let mut selector = Selector::new(scorer);
        let pick = selector.select(&table, &request).unwrap();
        assert_eq!(selector.last_costs(), &[1476.0, 128.0 + 1200.0]);
        assert_eq!(pick.chosen, WorkerRank { worker_id: 2, dp_rank: 0 });
    }
}
