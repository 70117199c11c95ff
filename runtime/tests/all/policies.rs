//! The ported policies: guest and native builds of each decide identically (bit-identical
//! costs, the same pick) on randomised selections, and the stateful one over sequences
//! of selections with commits.

use switchyard::selection::Scorer;
use switchyard::{GuestScorer, SelectError, Selection, SelectionRequest, Selector, WorkerTable};
use switchyard_builtins as builtin;

use switchyard_guest_sdk::{Pool, WorkerRank};

use switchyard_test_util::fixtures::{
    Rng, component, random_case, random_hashes, random_inputs, random_table,
};

/// Random but valid parameters for a builtin, so its branches are exercised.
fn random_parameters(name: &str, rng: &mut Rng) -> String {
    if rng.chance(25) {
        return "{}".into();
    }
    let u = |rng: &mut Rng, scale: f64| rng.unit() * scale;
    match name {
        "chwbl" => format!(
            r#"{{"prefix_blocks": {}, "replication": {}, "load_factor": {}}}"#,
            1 + rng.below(32),
            1 + rng.below(256),
            0.5 + u(rng, 2.0)
        ),
        "two-choice" => {
            format!(r#"{{"prefix_blocks": {}, "load_factor": {}}}"#, 1 + rng.below(32), 0.5 + u(rng, 2.0))
        }
        "llmd-precise" => format!(
            r#"{{"prefix_cache_weight": {}, "kv_cache_utilization_weight": {}, "queue_weight": {}}}"#,
            u(rng, 4.0),
            u(rng, 2.0),
            u(rng, 2.0)
        ),
        "capacity-aware" => format!(r#"{{"max_usage": {}}}"#, 0.05 + u(rng, 1.5)),
        "class-aware" => format!(
            r#"{{"classes": {{"latency": {{"prefill_load_scale": {}}}, "gold": {{"overlap_score_credit": {}, "decode_active_request_weight": {}}}}}, "default": {{"host_cache_hit_weight": {}}}}}"#,
            u(rng, 4.0),
            u(rng, 1.0),
            u(rng, 8.0),
            u(rng, 1.0)
        ),
        "request-limit" => format!(
            r#"{{"max_in_flight_requests": {}, "cost": {{"prefill_load_scale": {}}}}}"#,
            1 + rng.below(300),
            u(rng, 2.0)
        ),
        "sglang-cache-aware" => format!(
            r#"{{"cache_threshold": {}, "balance_abs_threshold": {}, "balance_rel_threshold": {}, "max_tree_size": {}}}"#,
            u(rng, 1.0),
            rng.below(128),
            1.0 + u(rng, 2.0),
            1 + rng.below(20_000)
        ),
        _ => "{}".into(),
    }
}

/// Both builds of `name` configured with `params`.
fn both(name: &str, params: &str) -> (Selector, Selector) {
    let builtin = builtin::find(name).unwrap_or_else(|| panic!("builtin {name}"));
    let guest = GuestScorer::new(name, component(builtin.component), params)
        .unwrap_or_else(|e| panic!("{name} guest with {params}: {e:?}"));
    let native = builtin.native(params).unwrap_or_else(|e| panic!("{name} native with {params}: {e}"));
    (Selector::new(Box::new(guest) as Box<dyn Scorer>), Selector::new(native))
}

/// Selects with both and checks they agree; returns the pick (None: no eligible worker).
fn agree(
    guest: &mut Selector,
    native: &mut Selector,
    table: &WorkerTable,
    request: &SelectionRequest,
    what: &str,
) -> Option<Selection> {
    let g = guest.select(table, request);
    let n = native.select(table, request);
    match (g, n) {
        (Ok(g), Ok(n)) => {
            let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(guest), bits(native), "costs differ: {what}");
            assert_eq!(g.chosen, n.chosen, "picks differ: {what}");
            assert_eq!(g.cost.to_bits(), n.cost.to_bits(), "{what}");
            Some(n)
        }
        (Err(SelectError::NoEligibleWorker), Err(SelectError::NoEligibleWorker)) => None,
        (g, n) => panic!("outcomes differ ({what}): guest {g:?}, native {n:?}"),
    }
}

/// 2,000 random selections (20 parameter sets × 100) for a stateless builtin.
fn stateless_equivalence(name: &str, seed: u64) {
    let mut rng = Rng::seeded(seed);
    let (mut compared, mut none_eligible, mut distinct_picks) = (0, 0, std::collections::BTreeSet::new());
    for _ in 0..20 {
        let params = random_parameters(name, &mut rng);
        let (mut guest, mut native) = both(name, &params);
        for _ in 0..100 {
            let (table, request) = random_case(&mut rng);
            match agree(&mut guest, &mut native, &table, &request, &format!("{name} {params}")) {
                Some(pick) => {
                    distinct_picks.insert(pick.chosen);
                }
                None => none_eligible += 1,
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 2000);
    assert!(none_eligible < 1000, "{name}: most selections had a pick ({none_eligible} had none)");
    assert!(distinct_picks.len() > 100, "{name}: picks vary ({})", distinct_picks.len());
}

#[test]
fn chwbl_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("chwbl", 0xc4b1);
}

#[test]
fn two_choice_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("two-choice", 0x2c40);
}

#[test]
fn lmetric_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("lmetric", 0x1e7);
}

#[test]
fn llmd_precise_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("llmd-precise", 0x11d);
}

#[test]
fn capacity_aware_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("capacity-aware", 0xca9);
}

#[test]
fn class_aware_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("class-aware", 0xc1a55);
}

#[test]
fn request_limit_guest_and_native_agree_on_2000_random_selections() {
    stateless_equivalence("request-limit", 0x11a1);
}

/// 40 sequences of 60 selections over one worker set each: prompts from a few shared
/// conversations, most picks committed to both builds, some left as dry runs.
#[test]
fn sglang_cache_aware_guest_and_native_agree_over_2400_selections_with_commits() {
    let mut rng = Rng::seeded(0x5917);
    let (mut compared, mut committed, mut dry) = (0, 0, 0);
    let mut followed_cache = 0;
    for _ in 0..40 {
        let params = random_parameters("sglang-cache-aware", &mut rng);
        let (mut guest, mut native) = both("sglang-cache-aware", &params);
        let slots = 1 + rng.below(64);
        let table = random_table(&mut rng, slots);
        let mut last: Option<(Vec<u64>, WorkerRank)> = None;
        for _ in 0..60 {
            let block_size = [16u32, 64][rng.below(2) as usize];
            let prompt_tokens = rng.below(8192) as u32;
            let facts = switchyard_test_util::fixtures::facts(
                prompt_tokens,
                block_size,
                Pool::Aggregated,
                rng.next_u64(),
            );
            let hashes = random_hashes(&mut rng, facts.request_blocks, 4);
            let inputs = random_inputs(&mut rng, &table, prompt_tokens, facts.pool);
            let options = switchyard::selection::RequestOptions {
                prefix_hashes: Some(hashes.clone()),
                temperature: Some(if rng.chance(20) { 0.5 } else { 0.0 }),
                ..Default::default()
            };
            let request = SelectionRequest::new(&table, facts, options, inputs).unwrap();
            let pick = agree(&mut guest, &mut native, &table, &request, &params).expect("always a pick");
            compared += 1;
            if let Some((previous, worker)) = &last
                && hashes.len() > 4
                && previous.starts_with(&hashes)
                && pick.chosen == *worker
            {
                followed_cache += 1;
            }
            if rng.chance(85) {
                guest.commit(&table, &request, pick.chosen).unwrap();
                native.commit(&table, &request, pick.chosen).unwrap();
                committed += 1;
                last = Some((hashes, pick.chosen));
            } else {
                dry += 1;
            }
        }
    }
    assert_eq!(compared, 2400);
    assert!(committed > 1800 && dry > 200, "{committed} commits, {dry} dry runs");
    assert!(followed_cache > 0, "the tree steered some repeats to the committed worker");
}

/// A long prompt (32,768 tokens in 16-token blocks: 2,048 hashes) commits, repeatedly and
/// with evictions, within the default fuel budget of a one-candidate call.
#[test]
fn sglang_commits_of_long_prompts_fit_the_default_budget() {
    let builtin = builtin::find("sglang-cache-aware").unwrap();
    // 2^15 tokens per worker = the prompt exactly: each new prompt evicts the last.
    let params = r#"{"max_tree_size": 32768}"#;
    let guest = GuestScorer::new("sglang", component(builtin.component), params).unwrap();
    let mut guest = Selector::new(Box::new(guest) as Box<dyn Scorer>);
    let table = WorkerTable::new(vec![switchyard::selection::Worker::new(1, 1, 1000, None)]).unwrap();
    let mut rng = Rng::seeded(7);
    for round in 0..4 {
        let facts = switchyard_test_util::fixtures::facts(32_768, 16, Pool::Aggregated, round);
        let options = switchyard::selection::RequestOptions {
            prefix_hashes: Some(random_hashes(&mut rng, facts.request_blocks, 1_000_000)),
            ..Default::default()
        };
        let request = SelectionRequest::new(&table, facts, options, Default::default()).unwrap();
        let pick = guest.select(&table, &request).unwrap();
        guest.commit(&table, &request, pick.chosen).expect("a long commit fits the budget");
    }
}

/// Every builtin states an out-of-range parameter in the SDK's one shape, with the path
/// from the top of its parameters (a composite policy's row included), and its guest
/// build refuses with exactly the native build's message.
#[test]
fn parameter_errors_have_one_shape_natively_and_as_guests() {
    let cases = [
        (
            "default",
            r#"{"overlap_score_credit": 1.5}"#,
            "field `overlap_score_credit`: 1.5 is out of range [0, 1]",
        ),
        ("chwbl", r#"{"replication": 5000}"#, "field `replication`: 5000 is out of range [1, 4096]"),
        ("chwbl", r#"{"load_factor": 0}"#, "field `load_factor`: 0 is out of range (0, ∞)"),
        ("two-choice", r#"{"prefix_blocks": 0}"#, "field `prefix_blocks`: 0 is out of range [1, ∞)"),
        ("llmd-precise", r#"{"queue_weight": -1}"#, "field `queue_weight`: -1 is out of range [0, ∞)"),
        ("capacity-aware", r#"{"max_usage": 0}"#, "field `max_usage`: 0 is out of range (0, ∞)"),
        (
            "class-aware",
            r#"{"classes": {"gold": {"overlap_score_credit": 3}}}"#,
            "field `classes.gold.overlap_score_credit`: 3 is out of range [0, 1]",
        ),
        (
            "request-limit",
            r#"{"cost": {"prefill_load_scale": -2}}"#,
            "field `cost.prefill_load_scale`: -2 is out of range [0, ∞)",
        ),
        (
            "request-limit",
            r#"{"max_in_flight_requests": 0}"#,
            "field `max_in_flight_requests`: 0 is out of range [1, ∞)",
        ),
        (
            "sglang-cache-aware",
            r#"{"cache_threshold": 1.5}"#,
            "field `cache_threshold`: 1.5 is out of range [0, 1]",
        ),
    ];
    for (name, params, message) in cases {
        assert_eq!(refusal(name, params).message, message, "{name} {params}");
    }
}

/// A value of the wrong type or an unknown field is named by its whole path, however
/// deep, natively and as a guest, and with two wrong the first is named.
#[test]
fn type_errors_name_the_whole_path_natively_and_as_guests() {
    let cases = [
        (
            "class-aware",
            r#"{"classes": {"gold": {"prefill_load_scale": "x"}}}"#,
            "field `classes.gold.prefill_load_scale`: invalid type: string \"x\", expected f64",
        ),
        (
            "request-limit",
            r#"{"cost": {"bogus": 1}}"#,
            "field `cost.bogus`: unknown field `bogus`, expected one of",
        ),
        (
            "chwbl",
            r#"{"prefix_blocks": "x", "load_factor": "y"}"#,
            "field `load_factor`: invalid type: string \"y\"",
        ),
        ("lmetric", r#"{"alpha": 1}"#, "field `alpha`: unknown field `alpha`"),
    ];
    for (name, params, start) in cases {
        let message = refusal(name, params).message;
        assert!(message.starts_with(start), "{name} {params}: {message}");
    }
}

/// The default policy's component stays the size the SDK's allocator makes it: Cranelift's
/// compile of an upload, and the memory its code holds, follow the size (the sizes with and
/// without dlmalloc: docs/benchmarks-history.md, "the SDK's own allocator"). The bound
/// leaves room for the toolchain's drift, not for dlmalloc linked in.
#[test]
fn the_default_policy_component_stays_under_80_kb() {
    let size = builtin::find("default").unwrap().component.len();
    assert!(size <= 80_000, "the default policy's component is {size} bytes");
}

/// How both builds of `name` refuse `params`: the same kind and message (the native
/// build's error is returned).
fn refusal(name: &str, params: &str) -> switchyard_guest_sdk::PolicyError {
    let builtin = builtin::find(name).unwrap();
    let native = builtin.native(params).err().unwrap_or_else(|| panic!("{name} {params}: accepted"));
    assert_eq!(native.kind, switchyard_guest_sdk::ErrorKind::InvalidParameters, "{name} {params}");
    let guest = GuestScorer::new(name, component(builtin.component), params)
        .err()
        .unwrap_or_else(|| panic!("{name} guest {params}: accepted"));
    assert_eq!(guest.kind, switchyard::LoadErrorKind::ConfigureFailed, "{name} {params}");
    assert_eq!(
        guest.message,
        native.to_string(),
        "{name} {params}: the guest says what the native build does"
    );
    native
}
