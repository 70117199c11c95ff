//! The contract: Dynamo's own `DefaultWorkerSelector` and a `WorkerSelectionPolicy`
//! whose picker is the Switchyard default policy's guest build choose the same worker
//! and rank, on randomised fixtures at temperature 0.
//!
//! Where Dynamo's costs tie, its selector breaks the tie with an unseeded RNG and
//! Switchyard with the request's seed, so the two may pick different members of the tied
//! set: such a fixture counts as agreeing only if Switchyard's pick is one Dynamo itself
//! makes on that fixture: Dynamo's selector is re-run with tie seeds 0, 1, … (its
//! reservoir draws each tied row uniformly) until it picks Switchyard's row, up to 4,096
//! seeds. Large tied sets are common in the decode pool, where Dynamo clamps
//! `decode − credit` at 0 and every worker whose cache covers its decode load costs 0.

use std::collections::BTreeSet;

use crate::common::{Rng, component_file, policy, random_fixture, resolve};
use dynamo_kv_router::{DefaultWorkerSelector, KvRouterConfig, WorkerType};

/// Fixtures checked: enough random ones that a disagreement in a rare case shows.
const FIXTURES: usize = 10_000;

#[test]
fn switchyard_default_guest_picks_what_dynamo_default_picks() {
    contract("contract", "{}", KvRouterConfig::default(), FIXTURES, 0x5eed_d1a0);
}

/// Every weight of the cost away from its default (decay on), set the same on both sides:
/// Dynamo's through its router config, Switchyard's through the instance's `params`.
#[test]
fn the_same_with_every_weight_changed() {
    let config = KvRouterConfig {
        overlap_score_credit: 0.75,
        overlap_score_credit_decay: 0.5,
        prefill_load_scale: 1.5,
        decode_active_request_weight: 0.25,
        host_cache_hit_weight: 0.5,
        disk_cache_hit_weight: 0.125,
        ..KvRouterConfig::default()
    };
    let params = "{overlap_score_credit: 0.75, overlap_score_credit_decay: 0.5, prefill_load_scale: 1.5, \
                  decode_active_request_weight: 0.25, host_cache_hit_weight: 0.5, disk_cache_hit_weight: 0.125}";
    contract("contract-weights", params, config, 2_000, 0x00de_c0de);
}

fn contract(name: &str, params: &str, config: KvRouterConfig, fixtures: usize, seed: u64) {
    let file = component_file(name, switchyard_test_util::DEFAULT_POLICY);
    let parameters = format!(
        "        policy: {{file: {}}}\n        params: {params}\n        on_fault: closed\n        temperature: 0",
        file.display()
    );
    let factory = resolve(name, &parameters).expect("the default guest loads");
    let types = [WorkerType::Aggregated, WorkerType::Prefill, WorkerType::Decode];
    let ours: Vec<_> = types.iter().map(|&t| policy(&factory, t)).collect();
    let theirs: Vec<_> =
        types.iter().map(|&t| DefaultWorkerSelector::new(Some(config.clone()), t.as_str())).collect();

    let mut rng = Rng::new(seed);
    let (mut exact, mut tied, mut errors_both) = (0, 0, 0);
    let mut mismatches = Vec::new();
    for i in 0..fixtures {
        let fixture = random_fixture(&mut rng);
        let k = types.iter().position(|&t| t == fixture.worker_type).unwrap();
        let dynamo = fixture.select(&theirs[k]);
        let switchyard = fixture.select(&ours[k]);
        match (&dynamo, &switchyard) {
            (Ok(d), Ok(s)) if d == s => exact += 1,
            (Ok(d), Ok(s)) => {
                // Dynamo's tied set on this fixture, from its own seeded selector.
                let mut picks = BTreeSet::new();
                for seed in 0..4096 {
                    let seeded = DefaultWorkerSelector::new_seeded(
                        Some(config.clone()),
                        fixture.worker_type.as_str(),
                        seed,
                    );
                    if let Ok(w) = fixture.select(&seeded) {
                        picks.insert((w.worker_id, w.dp_rank));
                    }
                    if picks.contains(&(s.worker_id, s.dp_rank)) {
                        break;
                    }
                }
                if picks.contains(&(s.worker_id, s.dp_rank)) {
                    tied += 1;
                } else {
                    mismatches.push(format!(
                        "fixture {i} ({:?}): dynamo {d:?}, switchyard {s:?}, dynamo's picks {picks:?}",
                        fixture.worker_type
                    ));
                }
            }
            (Err(_), Err(_)) => errors_both += 1,
            _ => mismatches.push(format!("fixture {i}: dynamo {dynamo:?}, switchyard {switchyard:?}")),
        }
    }
    eprintln!(
        "{name}: {fixtures} fixtures: {exact} same worker and rank, {tied} ties (Switchyard's pick in Dynamo's tied set), \
         {errors_both} refused by both, {} mismatches",
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches, the first:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    assert!(exact > fixtures / 2, "too few fixtures picked alike to mean anything: {exact}");
}
