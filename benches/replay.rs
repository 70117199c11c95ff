//! The whole conversation trace (12,031 rows) through 16 simulated workers with the
//! default policy as a guest: the replay's speed goal is under 2 s.
//!
//! `cargo bench --bench replay`

use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard::{FailMode, GuardConfig, GuestScorer, Limits, PolicyComponent, PolicyEngine};
use switchyard_replay::{PolicyLabel, ReplayConfig, Trace, replay};

fn trace() -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/conversation_trace.jsonl");
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("the benchmark needs the conversation trace at {}: {e}", path.display()));
    Trace::parse(&bytes, Some(512), None).expect("the conversation trace parses")
}

fn full_trace(c: &mut Criterion) {
    let trace = trace();
    assert_eq!(trace.rows().len(), 12_031);
    let engine = PolicyEngine::new(Limits::default()).expect("engine");
    let builtin = switchyard_builtins::find("default").expect("default builtin");
    let component = PolicyComponent::load(&engine, builtin.component).expect("the default component loads");
    let label =
        PolicyLabel { name: "default".into(), parameters: serde_json::json!({}), component_sha256: None };
    let config = ReplayConfig { workers: 16, ..ReplayConfig::default() };
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.bench_function("conversation_trace_12031_rows_16_workers_default_guest", |b| {
        b.iter(|| {
            // A fresh guest instance per run, as a `switchyard replay --guest` would have;
            // the component is compiled once (its cost is the loader's, not the replay's).
            let scorer = GuestScorer::new("default", component.clone(), "{}").expect("guest");
            let mut selector =
                switchyard_builtins::guarded(Box::new(scorer), FailMode::Open, GuardConfig::default());
            replay(&trace, &mut selector, &label, &config, &mut |_| {}).expect("replays")
        })
    });
    group.finish();
}

criterion_group!(benches, full_trace);
criterion_main!(benches);
