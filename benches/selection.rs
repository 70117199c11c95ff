//! Full selection (columns → score → pick) native vs guest vs Dynamo, call overhead and
//! per-candidate slope, instantiate, compile and artifact-cache load costs; two ported
//! policies guest vs native. `cargo bench --bench selection`.

mod common;

use std::hint::black_box;
use std::time::Duration;

use common::{DynamoFixture, IMPORTS, NOOP, PORTED, SIZES, ScoreOnly, switchyard_fixture};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchyard::artifact_cache::ArtifactKey;
use switchyard::{ArtifactCache, GuestScorer, Limits, PolicyComponent, PolicyEngine, Selector};
use switchyard_builtins as builtin;

fn engine() -> PolicyEngine {
    PolicyEngine::new(Limits::default()).expect("engine")
}

/// One group per temperature: native vs guest (and Dynamo, for the default policy) at
/// every size.
fn full_selection(c: &mut Criterion) {
    let engine = engine();
    // Two ported policies beside the default (Dynamo has no equivalent of them).
    for name in std::iter::once("default").chain(PORTED) {
        let policy = builtin::find(name).unwrap();
        let with_dynamo = name == "default";
        for temperature in [0.0, 0.7] {
            let mut group = c.benchmark_group(format!("selection/{name}/temperature_{temperature}"));
            let (measure, samples) = if with_dynamo { (3, 30) } else { (2, 20) };
            group
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(measure))
                .sample_size(samples);
            for &n in &SIZES {
                let (table, request) = switchyard_fixture(n, temperature);
                group.throughput(Throughput::Elements(n as u64));
                let mut native = Selector::new(policy.native("{}").unwrap());
                group.bench_with_input(BenchmarkId::new("native", n), &n, |b, _| {
                    b.iter(|| black_box(native.select(&table, &request).unwrap()))
                });
                let mut guest = Selector::new(Box::new(policy.guest(&engine, "{}").unwrap()));
                group.bench_with_input(BenchmarkId::new("guest", n), &n, |b, _| {
                    b.iter(|| black_box(guest.select(&table, &request).unwrap()))
                });
                if with_dynamo {
                    let dynamo = DynamoFixture::new(n, temperature);
                    group.bench_with_input(BenchmarkId::new("dynamo", n), &n, |b, _| {
                        b.iter(|| black_box(dynamo.select()))
                    });
                }
            }
            group.finish();
        }
    }
}

fn call_overhead(c: &mut Criterion) {
    let engine = engine();
    let mut group = c.benchmark_group("guest_call");
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(50);
    let noop = PolicyComponent::load(&engine, NOOP).unwrap();
    let imports = PolicyComponent::load(&engine, IMPORTS).unwrap();
    let mut noop = GuestScorer::new("noop", noop, "{}").unwrap();
    let mut imports = GuestScorer::new("imports", imports, "{}").unwrap();
    let mut empty = ScoreOnly::new(0, &noop);
    group.bench_function("empty_batch", |b| b.iter(|| empty.run(&mut noop)));
    // One candidate, so the batched capacity import has a row to return.
    let mut one = ScoreOnly::new(1, &noop);
    group.bench_function("noop_1", |b| b.iter(|| one.run(&mut noop)));
    group.bench_function("read_all_imports_1", |b| b.iter(|| one.run(&mut imports)));
    group.finish();

    // Per-candidate slope of the default policy's score call: guest vs native.
    let default = builtin::find("default").unwrap();
    let mut group = c.benchmark_group("score_only/default");
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(50);
    for n in [1_024, 4_096] {
        let mut native = default.native("{}").unwrap();
        let mut guest = default.guest(&engine, "{}").unwrap();
        let mut fixture = ScoreOnly::new(n, native.as_ref());
        group.bench_with_input(BenchmarkId::new("native", n), &n, |b, _| {
            b.iter(|| fixture.run(native.as_mut()))
        });
        group.bench_with_input(BenchmarkId::new("guest", n), &n, |b, _| b.iter(|| fixture.run(&mut guest)));
    }
    group.finish();
}

fn lifecycle(c: &mut Criterion) {
    let engine = engine();
    let default = builtin::find("default").unwrap();
    let component = PolicyComponent::load(&engine, default.component).unwrap();
    let mut group = c.benchmark_group("lifecycle/default");
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
    group.bench_function("instantiate_configure_describe", |b| {
        b.iter(|| black_box(GuestScorer::new("default", component.clone(), "{}").unwrap()))
    });
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.bench_function("compile", |b| {
        b.iter(|| black_box(PolicyComponent::load(&engine, default.component).unwrap()))
    });
    // The same component from our artifact cache: what a restart or a re-upload costs.
    let dir = std::env::temp_dir().join(format!("switchyard-bench-cache-{}", std::process::id()));
    let key = ArtifactKey::generate().unwrap();
    let cached = engine.clone().with_artifact_cache(ArtifactCache::open(&dir, key).unwrap());
    PolicyComponent::load(&cached, default.component).unwrap();
    group.sample_size(30).measurement_time(Duration::from_secs(3));
    group.bench_function("load_from_artifact_cache", |b| {
        b.iter(|| {
            let component = PolicyComponent::load(&cached, default.component).unwrap();
            assert!(component.from_cache());
            black_box(component)
        })
    });
    // By the blob's name, without its bytes: how the service loads an evicted version.
    let digest = PolicyComponent::load(&cached, default.component).unwrap().digest().to_string();
    group.bench_function("load_cached_by_name", |b| {
        b.iter(|| {
            let size = default.component.len();
            black_box(PolicyComponent::load_cached(&cached, &digest, size).unwrap().unwrap())
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, full_selection, call_overhead, lifecycle);
criterion_main!(benches);
