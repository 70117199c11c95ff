//! The sandbox's own costs, on a real policy (the default policy's guest build):
//!
//! - `budget/{none,fuel,epoch}`: one selection over 256 candidates with each CPU bound
//!   (none is for this comparison only; tenants always get a bound);
//! - `recovery/{healthy-call,trap-and-fresh-instance}`: a call on a live instance vs. a
//!   call that must first instantiate afresh (the previous call trapped) and then traps;
//! - `fresh-instance/{pooled,one-module,modules-alternating,modules-cycling}`: the
//!   default policy's selection on an instance kept from the last one vs. on a fresh
//!   sibling (instantiate + configure + the selection), what `serve` does when a version
//!   has no idle instance: of one module, of two modules alternating, and of 24 modules in
//!   turn through 8 pool slots (many tenants' versions share the pool's slots, so a
//!   slot's last module is mostly another's).
//!
//! `cargo bench --bench sandbox -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard::selection::wire::RequestJson;
use switchyard::{
    Budget, GuestScorer, Limits, PolicyComponent, PolicyEngine, SelectionRequest, Selector, WorkerTable,
};

/// The default policy's component build, as embedded in the runtime.
fn default_policy() -> &'static [u8] {
    switchyard_builtins::find("default").expect("the default builtin").component
}
use switchyard_test_util::hostile::PANIC;

/// A request over `n` workers with varied load and cache columns.
fn request(n: u64) -> (WorkerTable, SelectionRequest) {
    let ids: Vec<u64> = (0..n).collect();
    let col = |f: &dyn Fn(u64) -> u64| ids.iter().map(|&i| f(i)).collect::<Vec<_>>();
    let json = serde_json::json!({
        "prompt_tokens": 4096, "block_size": 16, "seed": 7,
        "workers": ids.iter().map(|&i| serde_json::json!({"id": i, "total_kv_blocks": 65536})).collect::<Vec<_>>(),
        "inputs": {
            "worker_id": ids,
            "dp_rank": col(&|_| 0),
            "device_overlap_blocks": col(&|i| (i * 37) % 200),
            "host_overlap_blocks": col(&|i| (i * 11) % 50),
            "cached_tokens": col(&|i| (i * 37) % 200 * 16),
            "active_prefill_tokens": col(&|i| (i * 131) % 8192),
            "decode_blocks": col(&|i| (i * 71) % 4000),
            "active_requests": col(&|i| i % 17),
        }
    });
    RequestJson::parse(&json.to_string()).and_then(RequestJson::into_parts).expect("valid request")
}

fn guest(budget: Budget, bytes: &[u8], params: &str) -> GuestScorer {
    let engine = PolicyEngine::new(Limits { budget, ..Limits::default() }).expect("engine");
    let component = PolicyComponent::load(&engine, bytes).expect("loads");
    GuestScorer::new("bench", component, params).expect("instantiates")
}

fn budgets(c: &mut Criterion) {
    let (table, request) = request(256);
    let mut group = c.benchmark_group("budget");
    for (name, budget) in
        [("none", Budget::None), ("fuel", Budget::Fuel), ("epoch", Budget::Epoch), ("both", Budget::Both)]
    {
        let mut selector = Selector::new(Box::new(guest(budget, default_policy(), "{}")));
        group.bench_function(name, |b| b.iter(|| black_box(selector.select(&table, &request).unwrap())));
    }
    group.finish();
}

fn recovery(c: &mut Criterion) {
    let (table, request) = request(256);
    let mut group = c.benchmark_group("recovery");
    // The same guest code on both sides; only the trap (and so the fresh instance) differs.
    let mut healthy = Selector::new(Box::new(guest(Budget::Fuel, PANIC, r#"{"every": 1000000000000}"#)));
    group.bench_function("healthy-call", |b| b.iter(|| black_box(healthy.select(&table, &request).unwrap())));
    let mut trapping = Selector::new(Box::new(guest(Budget::Fuel, PANIC, r#"{"every": 1}"#)));
    group.bench_function("trap-and-fresh-instance", |b| {
        b.iter(|| black_box(trapping.select(&table, &request).unwrap_err()))
    });
    group.finish();
}

fn fresh_instance(c: &mut Criterion) {
    let (table, request) = request(256);
    let mut group = c.benchmark_group("fresh-instance");
    let params = r#"{"prefill_load_scale": 1.5}"#;
    let mut pooled = Selector::new(Box::new(guest(Budget::Fuel, default_policy(), params)));
    group.bench_function("pooled", |b| b.iter(|| black_box(pooled.select(&table, &request).unwrap())));
    let one = guest(Budget::Fuel, default_policy(), params).sibling();
    group.bench_function("one-module", |b| {
        b.iter(|| black_box(Selector::new(Box::new(one.sibling())).select(&table, &request).unwrap()))
    });
    // Two components of one engine (different bytes: a custom section appended).
    let engine = PolicyEngine::new(Limits { budget: Budget::Fuel, ..Limits::default() }).expect("engine");
    let other = switchyard_test_util::variant(default_policy(), 1);
    let templates: Vec<GuestScorer> = [default_policy(), &other[..]]
        .iter()
        .map(|bytes| {
            let component = PolicyComponent::load(&engine, bytes).expect("loads");
            GuestScorer::new("bench", component, params).expect("instantiates").sibling()
        })
        .collect();
    let mut turn = 0;
    group.bench_function("modules-alternating", |b| {
        b.iter(|| {
            turn ^= 1;
            black_box(Selector::new(Box::new(templates[turn].sibling())).select(&table, &request).unwrap())
        })
    });
    // More modules than the pool has slots, in turn: a slot's last module is never the
    // next one's (what `serve` sees with thousands of tenants' versions), so each
    // instantiation lands in a slot another module used last.
    let engine = PolicyEngine::new(Limits { budget: Budget::Fuel, max_instances: 8, ..Limits::default() })
        .expect("engine");
    let templates: Vec<GuestScorer> = (0..24)
        .map(|i| {
            let bytes = switchyard_test_util::variant(default_policy(), i);
            let component = PolicyComponent::load(&engine, &bytes).expect("loads");
            GuestScorer::new("bench", component, params).expect("instantiates").sibling()
        })
        .collect();
    let mut turn = 0;
    group.bench_function("modules-cycling", |b| {
        b.iter(|| {
            turn = (turn + 1) % templates.len();
            black_box(Selector::new(Box::new(templates[turn].sibling())).select(&table, &request).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, budgets, recovery, fresh_instance);
criterion_main!(benches);
