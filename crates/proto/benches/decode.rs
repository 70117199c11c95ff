//! Decoding a select request, and encoding its answer, as JSON and as protobuf, into and
//! from the same types (`RequestJson`, `TenantAnswer`): what the encoding saves the service
//! per request. Two requests: one against a held table (a 2,048-token prompt's 128 prefix
//! hashes and 32 rows of overlaps: what a router that put its table sends per request),
//! and a whole 1,024-worker table with every column (a router that keeps no table on the
//! server). Prints each body's size first.
//!
//! `cargo bench -p switchyard-proto --bench decode`; the medians are in
//! `target/criterion/<group>/<name>/new/estimates.json` (`median.point_estimate`, ns).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{Value, json};
use switchyard_guest_sdk::Column;
use switchyard_proto::{decode_request, encode_answer, encode_request};
use switchyard_selection::wire::{RequestJson, TenantAnswer};

const WORKERS: u64 = 1024;

/// A request against the held table `fleet`: 128 prefix hashes, and the 32 workers (of
/// 1,024) with cached blocks, sorted, as a radix-tree lookup returns them.
fn held_request(rng: &mut ChaCha8Rng) -> RequestJson {
    let mut ids: Vec<u64> = Vec::new();
    while ids.len() < 32 {
        let id = u64::from(rng.next_u32()) % WORKERS;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    let overlaps: Vec<u32> = ids.iter().map(|_| 1 + rng.next_u32() % 128).collect();
    let cached: Vec<u32> = overlaps.iter().map(|b| b * 16).collect();
    serde_json::from_value(json!({
        "tenant": "acme",
        "prompt_tokens": 2048,
        "block_size": 16,
        "expected_output_tokens": 256,
        "pool": "aggregated",
        "seed": rng.next_u64(),
        "temperature": 0.0,
        "prefix_hashes": (0..128).map(|_| rng.next_u64()).collect::<Vec<_>>(),
        "policy_class": "latency",
        "table": "fleet",
        "table_version": 42,
        "inputs": {
            "worker_id": ids,
            "dp_rank": vec![0; 32],
            "device_overlap_blocks": overlaps,
            "cached_tokens": cached,
        }
    }))
    .unwrap()
}

/// The whole table in the request: 1,024 single-rank workers, every column (as the wire
/// bench's request at the root, benches/wire.rs).
fn whole_request(rng: &mut ChaCha8Rng) -> RequestJson {
    let n = WORKERS as usize;
    let workers: Vec<Value> = (0..n).map(|id| json!({ "id": id, "total_kv_blocks": 131_072 })).collect();
    let mut inputs = json!({ "worker_id": (0..WORKERS).collect::<Vec<_>>() });
    for (column, bound) in Column::ALL.into_iter().zip([1, 64, 16, 1, 1024, 8192, 1000, 16]) {
        inputs[column.snake_name()] = json!((0..n).map(|_| rng.next_u32() % bound).collect::<Vec<_>>());
    }
    serde_json::from_value(json!({
        "tenant": "acme",
        "policy_class": "latency",
        "prompt_tokens": 2048,
        "block_size": 16,
        "expected_output_tokens": 256,
        "pool": "aggregated",
        "seed": rng.next_u64(),
        "temperature": 0.0,
        "workers": workers,
        "inputs": inputs,
    }))
    .unwrap()
}

/// A guest's answer, the class routed by its assignment; with every candidate's cost when
/// `costs` (a request that asks for them).
fn answer(costs: usize) -> TenantAnswer {
    let costs: Vec<Value> =
        (0..costs).map(|i| json!({ "worker_id": i, "dp_rank": 0, "cost": 0.5 + i as f64 / 7.0 })).collect();
    serde_json::from_value(json!({
        "tenant": "acme",
        "policy_class": "latency",
        "class": { "requested": "latency", "assigned": true, "reason": null },
        "table_version": 42,
        "worker_id": 517,
        "dp_rank": 0,
        "cost": 0.731_25,
        "policy": "mine",
        "build": "guest",
        "version": "v3",
        "fallback": null,
        "commit_fault": null,
        "candidates": WORKERS,
        "costs": costs,
    }))
    .unwrap()
}

fn decode(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(47);
    let requests = [("held", held_request(&mut rng)), ("whole-1024", whole_request(&mut rng))];
    let mut group = c.benchmark_group("decode");
    for (name, request) in &requests {
        let json = serde_json::to_vec(request).unwrap();
        let proto = encode_request(request);
        assert_eq!(&decode_request(&proto).unwrap(), request);
        println!("request {name}: JSON {} bytes, protobuf {} bytes", json.len(), proto.len());
        group.bench_function(format!("{name}/json"), |b| {
            b.iter(|| serde_json::from_slice::<RequestJson>(black_box(&json)).unwrap())
        });
        group.bench_function(format!("{name}/protobuf"), |b| {
            b.iter(|| decode_request(black_box(&proto)).unwrap())
        });
    }
    group.finish();

    let mut group = c.benchmark_group("encode");
    for (name, answer) in [("answer", answer(0)), ("answer-1024-costs", answer(WORKERS as usize))] {
        let (json, proto) = (serde_json::to_vec(&answer).unwrap(), encode_answer(&answer));
        println!("{name}: JSON {} bytes, protobuf {} bytes", json.len(), proto.len());
        group.bench_function(format!("{name}/json"), |b| {
            b.iter(|| serde_json::to_vec(black_box(&answer)).unwrap())
        });
        group.bench_function(format!("{name}/protobuf"), |b| b.iter(|| encode_answer(black_box(&answer))));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short: the spread between the encodings is several times, not a few percent.
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = decode
}
criterion_main!(benches);
