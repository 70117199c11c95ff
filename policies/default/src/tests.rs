//! The cost rule on hand-made cases.

use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::testing::Case;
use switchyard_guest_sdk::{Policy, Pool, RequestFacts, WorkerRank};

use super::{DefaultPolicy, Parameters};

/// The default policy's costs for `case` under `facts` and JSON `params`.
fn costs_of(mut case: Case, params: &str, facts: RequestFacts) -> Vec<f64> {
    case.facts = facts;
    case.costs(&mut DefaultPolicy::configure(params).unwrap()).unwrap()
}

fn facts(prompt_tokens: u32, pool: Pool) -> RequestFacts {
    facts_in_blocks_of(16, prompt_tokens, pool)
}

fn facts_in_blocks_of(block_size: u32, prompt_tokens: u32, pool: Pool) -> RequestFacts {
    RequestFacts {
        prompt_tokens,
        block_size,
        request_blocks: prompt_tokens.div_ceil(block_size),
        expected_output_tokens: None,
        pinned: None,
        pool,
        seed: 0,
    }
}

#[test]
fn cache_credit_offsets_prefill_and_tiers_weigh_less() {
    let mut case = Case::new(4);
    case[Column::DeviceOverlapBlocks] = vec![0, 32, 0, 0];
    case[Column::CachedTokens] = vec![0, 512, 0, 0];
    case[Column::HostOverlapBlocks] = vec![0, 0, 32, 0];
    case[Column::DiskOverlapBlocks] = vec![0, 0, 0, 32];
    // 1024 tokens = 64 blocks raw prefill everywhere.
    let costs = costs_of(case.clone(), "{}", facts(1024, Pool::Aggregated));
    assert_eq!(costs, vec![64.0, 32.0, 64.0 - 24.0, 64.0 - 8.0]);
}

#[test]
fn load_and_requests_add_and_scale_applies_to_prefill_only() {
    let mut case = Case::new(2);
    case[Column::ActivePrefillTokens] = vec![160, 0];
    case[Column::DecodeBlocks] = vec![10, 30];
    case[Column::ActiveRequests] = vec![1, 3];
    let params = r#"{"prefill_load_scale": 2.0, "decode_active_request_weight": 0.5}"#;
    let costs = costs_of(case.clone(), params, facts(160, Pool::Aggregated));
    assert_eq!(costs, vec![2.0 * 20.0 + 10.0 + 0.5, 2.0 * 10.0 + 30.0 + 1.5]);
}

#[test]
fn credit_decays_with_prefill_backlog_above_the_least_loaded() {
    let mut case = Case::new(2);
    case[Column::DeviceOverlapBlocks] = vec![10, 10];
    case[Column::CachedTokens] = vec![160, 160];
    case[Column::ActivePrefillTokens] = vec![0, 320]; // 20 blocks above the minimum
    // request_blocks 10: normalised load 2; d = 1 → decay 1/3.
    let costs =
        costs_of(case.clone(), r#"{"overlap_score_credit_decay": 1.0}"#, facts(160, Pool::Aggregated));
    assert_eq!(costs[0], 10.0 - 10.0);
    assert_eq!(costs[1], (320.0 + 160.0) / 16.0 - 10.0 / 3.0);
}

#[test]
fn decode_pool_is_load_only_or_overlap_adjusted_decode() {
    let mut case = Case::new(2);
    case[Column::DeviceOverlapBlocks] = vec![5, 0];
    case[Column::DecodeBlocks] = vec![20, 12];
    case[Column::ActivePrefillTokens] = vec![999, 999]; // not tracked in a decode pool
    let costs = costs_of(case.clone(), "{}", facts(160, Pool::Decode));
    assert_eq!(costs, vec![15.0, 12.0], "credit > 0: max(0, decode − credit)");
    let costs = costs_of(case.clone(), r#"{"overlap_score_credit": 0}"#, facts(160, Pool::Decode));
    assert_eq!(costs, vec![20.0, 12.0], "credit 0: load only");
}

#[test]
fn preferred_multiplier_scales_cost_but_not_for_a_pinned_request() {
    let mut case = Case::new(2);
    case[Column::DecodeBlocks] = vec![10, 10];
    case.preferred_multiplier = vec![0.5, 2.0];
    assert_eq!(costs_of(case.clone(), "{}", facts(0, Pool::Aggregated)), vec![5.0, 20.0]);
    let mut pinned = facts(0, Pool::Aggregated);
    pinned.pinned = Some(WorkerRank { worker_id: 0, dp_rank: 0 });
    assert_eq!(costs_of(case.clone(), "{}", pinned), vec![10.0, 10.0]);
}

#[test]
fn deprecated_overlap_score_weight_maps_to_scale_and_zero_drops_credit() {
    let p = DefaultPolicy::configure(r#"{"overlap_score_weight": 0.5}"#).unwrap();
    assert_eq!(p.parameters().prefill_load_scale, 0.5);
    assert_eq!(p.parameters().overlap_score_credit, 1.0);
    let p = DefaultPolicy::configure(r#"{"overlap_score_weight": 0}"#).unwrap();
    assert_eq!((p.parameters().prefill_load_scale, p.parameters().overlap_score_credit), (0.0, 0.0));
}

#[test]
fn parameters_have_dynamo_defaults_and_errors_name_the_field() {
    assert_eq!(DefaultPolicy::configure("{}").unwrap().parameters(), &Parameters::default());
    assert_eq!(Parameters::default().host_cache_hit_weight, 0.75);
    assert_eq!(Parameters::default().disk_cache_hit_weight, 0.25);
    for (json, field) in [
        (r#"{"overlap_score_credit": 1.5}"#, "overlap_score_credit"),
        (r#"{"prefill_load_scale": -1}"#, "prefill_load_scale"),
        (r#"{"typo_field": 1}"#, "typo_field"),
        (r#"{"disk_cache_hit_weight": "high"}"#, "disk_cache_hit_weight"),
    ] {
        let err = DefaultPolicy::configure(json).unwrap_err();
        assert!(err.message.contains(field), "{json}: {err}");
    }
    assert!(DefaultPolicy::configure("[1]").is_err());
    assert!(DefaultPolicy::configure("not json").is_err());
}

/// Dynamo's formula as the module docs write it, one row at a time, with its divisions and
/// its sum order: what the vectorised loops must equal bit for bit.
fn reference(p: &Parameters, f: &RequestFacts, case: &Case, row: usize) -> f64 {
    let b = f64::from(f.block_size);
    let col = |c: Column| case[c][row];
    let credit_of = |decay: f64| {
        p.overlap_score_credit * decay * f64::from(col(Column::DeviceOverlapBlocks))
            + p.host_cache_hit_weight * f64::from(col(Column::HostOverlapBlocks))
            + p.disk_cache_hit_weight * f64::from(col(Column::DiskOverlapBlocks))
    };
    let decode = f64::from(col(Column::DecodeBlocks));
    let requests = p.decode_active_request_weight * f64::from(col(Column::ActiveRequests));
    let tracks_prefill = f.pool != Pool::Decode;
    let decay = if tracks_prefill && p.overlap_score_credit_decay > 0.0 {
        let min_pf = case[Column::ActivePrefillTokens].iter().copied().min().unwrap();
        let excess = f64::from(col(Column::ActivePrefillTokens) - min_pf) / b;
        1.0 / (1.0 + p.overlap_score_credit_decay * (excess / f64::from(f.request_blocks.max(1))))
    } else {
        1.0
    };
    let credit = credit_of(decay);
    let max0 = |x: f64| if x > 0.0 { x } else { 0.0 };
    if f.pool == Pool::Decode && p.overlap_score_credit > 0.0 {
        return max0(decode - credit) + requests;
    }
    let prefill = if tracks_prefill {
        let cached = col(Column::CachedTokens);
        let uncached = f.prompt_tokens.saturating_sub(cached);
        let raw = (f64::from(col(Column::ActivePrefillTokens)) + f64::from(uncached)) + f64::from(cached);
        max0(raw / b - credit)
    } else {
        max0(0.0 - credit)
    };
    p.prefill_load_scale * prefill + decode + requests
}

#[test]
fn costs_equal_dynamos_formula_bit_for_bit_for_every_block_size_and_parameter_case() {
    // The common loop multiplies by 1/B and skips the request term, and every loop adds
    // pf + max(isl, cached) in one step: all must round exactly as the formula does.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Dynamo's defaults (the loop that multiplies and skips the request term), decay, a
    // request weight without decay, and a scale of −0 (the request term's +0 must still
    // not show).
    let params = [
        "{}",
        r#"{"overlap_score_credit_decay": 0.7, "decode_active_request_weight": 0.3}"#,
        r#"{"overlap_score_credit": 0.4, "prefill_load_scale": 1.7, "host_cache_hit_weight": 0.1, "decode_active_request_weight": 0.2}"#,
        r#"{"prefill_load_scale": -0.0, "overlap_score_credit": 0}"#,
    ];
    let mut checked = 0;
    for block_size in [1, 2, 7, 16, 24, 64, 100, 1 << 20, 1 << 31, 3_000_000_001] {
        for pool in [Pool::Aggregated, Pool::Prefill, Pool::Decode] {
            for json in params {
                let n = 37;
                let mut case = Case::new(n);
                // Small values (ties, cached above and below the prompt) and huge ones.
                for column in Column::ALL.into_iter().skip(1) {
                    case[column] = (0..n)
                        .map(|_| if next() % 2 == 0 { (next() % 5_000) as u32 } else { next() as u32 })
                        .collect();
                }
                let prompt_tokens = if next() % 2 == 0 { (next() % 5_000) as u32 } else { next() as u32 };
                let facts = facts_in_blocks_of(block_size, prompt_tokens, pool);
                let policy = DefaultPolicy::configure(json).unwrap();
                let costs = costs_of(case.clone(), json, facts);
                for (row, cost) in costs.iter().enumerate() {
                    let expected = reference(policy.parameters(), &facts, &case, row);
                    assert_eq!(
                        cost.to_bits(),
                        expected.to_bits(),
                        "B {block_size}, {pool:?}, {json}, row {row}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 10 * 3 * params.len() * 37);
}
