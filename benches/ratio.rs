//! The one-run ratio table: native, guest and Dynamo selections interleaved in one
//! process (native, guest, Dynamo, native, guest, Dynamo, …), medians per selection, and
//! the ratios. Prints markdown. `cargo bench --bench ratio` (about a minute on 2 cores).
//! "Inside Dynamo" times Dynamo's default selector against a `WorkerSelectionPolicy` from
//! the `switchyard` plugin (`switchyard-dynamo`) whose picker is the default guest.

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{
    Crossing, DynamoFixture, IMPORTS, NOOP, PORTED, SIZES, ScoreOnly, median_compile, switchyard_fixture,
    switchyard_fixture_in,
};
use dynamo_kv_router::{
    KvRouterConfig, RoutingPartitionRef, WorkerInputView, WorkerInputs, WorkerPicker, WorkerSelectionContext,
    WorkerSelectionPolicy, WorkerSelectionPolicyError, WorkerType,
};
use switchyard::{Budget, Compiler, GuestScorer, Limits, PolicyComponent, PolicyEngine, Selector};
use switchyard_builtins as builtin;
use switchyard_dynamo::{LoadedPolicy, SwitchyardConfig};
use switchyard_guest_sdk::Pool;
use switchyard_test_util::{DEFAULT_POLICY, DEFAULT_POLICY_C};

const ROUNDS: usize = 31;
/// Each timed batch runs about this long, so timer overhead is negligible.
const BATCH: Duration = Duration::from_millis(2);

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Times `fs` interleaved over ROUNDS rounds; returns the median ns per call of each.
fn interleaved(fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    // Warm up and size the batches.
    let mut per_batch = Vec::new();
    for f in fs.iter_mut() {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            f();
            calls += 1;
        }
        let ns = start.elapsed().as_nanos() as f64 / calls as f64;
        per_batch.push(((BATCH.as_nanos() as f64 / ns) as u64).max(5));
    }
    let mut samples = vec![Vec::with_capacity(ROUNDS); fs.len()];
    for _ in 0..ROUNDS {
        for (i, f) in fs.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..per_batch[i] {
                f();
            }
            samples[i].push(start.elapsed().as_nanos() as f64 / per_batch[i] as f64);
        }
    }
    samples.into_iter().map(median).collect()
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1_000.0 { format!("{:.2} µs", ns / 1_000.0) } else { format!("{ns:.0} ns") }
}

fn selection_table(engine: &PolicyEngine, temperature: f64) {
    let default = builtin::find("default").unwrap();
    println!("\n### Full selection, default policy, temperature {temperature}\n");
    println!("| workers | native | guest | guest/native | Dynamo | guest/Dynamo |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for &n in &SIZES {
        let (table, request) = switchyard_fixture(n, temperature);
        let mut native = Selector::new(default.native("{}").unwrap());
        let mut guest = Selector::new(Box::new(default.guest(engine, "{}").unwrap()));
        let dynamo = DynamoFixture::new(n, temperature);
        if temperature == 0.0 {
            // Same fixture, same answer: Dynamo's pick has our minimum cost.
            let ours = native.select(&table, &request).unwrap();
            let theirs = dynamo.select();
            let costs: Vec<f64> = native.last_costs().to_vec();
            assert_eq!(costs[theirs as usize], ours.cost, "Dynamo's pick is one of our argmins");
        }
        let mut run_native = || {
            black_box(native.select(&table, &request).unwrap());
        };
        let mut run_guest = || {
            black_box(guest.select(&table, &request).unwrap());
        };
        let mut run_dynamo = || {
            black_box(dynamo.select());
        };
        let t = interleaved(&mut [&mut run_native, &mut run_guest, &mut run_dynamo]);
        println!(
            "| {n} | {} | {} | {:.2} | {} | {:.3} |",
            fmt_ns(t[0]),
            fmt_ns(t[1]),
            t[1] / t[0],
            fmt_ns(t[2]),
            t[1] / t[2]
        );
    }
}

/// Inside Dynamo: Dynamo's own `DefaultWorkerSelector` against the
/// `WorkerSelectionPolicy` the `switchyard` plugin's factory builds (picker mode, the
/// default policy's guest, fail-closed, temperature 0), both driven the same way on the
/// same `DynamoFixture` (one workers map, one request). The policy's time includes
/// Dynamo's own plugin path (eligibility, candidate rows) and the adapter's per-selection
/// work (sorting the rows, a fresh `WorkerTable` and columns, the guest's score and
/// `on-selected`).
fn inside_dynamo_table(engine: &PolicyEngine) {
    // The config names a file (the provider's path reads it); `from_bytes` takes the
    // same bytes directly.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("switchyard-ratio-default.wasm");
    std::fs::write(&file, DEFAULT_POLICY).expect("writing the component");
    let config = SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"file": file},
        "on_fault": "closed",
        "temperature": 0,
    }))
    .expect("a valid configuration");
    let loaded = LoadedPolicy::from_bytes(&config, engine, DEFAULT_POLICY, "default".into())
        .expect("the default guest loads");
    let factory = loaded.factory();
    let router_config = KvRouterConfig { router_temperature: 0.0, ..Default::default() };
    let default = builtin::find("default").unwrap();
    println!(
        "\n### Inside Dynamo: Dynamo's default selector vs the Switchyard default guest as its picker, temperature 0\n"
    );
    println!(
        "| workers | Dynamo default | plugin floor (a native picker, same inputs) | Switchyard picker (guest) | guest/Dynamo | floor/Dynamo |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for &n in &SIZES {
        let dynamo = DynamoFixture::new(n, 0.0);
        // As Dynamo's fixture labels its selector: the prefill pool (the default policy
        // costs prefill and aggregated alike).
        let policy =
            factory(&router_config, WorkerType::Prefill, RoutingPartitionRef::new("model", "default"));
        let floor =
            WorkerSelectionPolicy::new(router_config.clone(), "prefill", Vec::new(), Box::new(FirstRow))
                .with_exclusive_affinity(true);
        // Same fixture, same answer. Dynamo breaks ties with an unseeded RNG, Switchyard
        // with the request's seed, so where costs tie the two may pick different members
        // of the tied set: then both picks must have the minimum cost (Switchyard's native
        // default on the same fixture gives the costs, as `selection_table` checks); where
        // the minimum is unique they must be the same worker.
        let theirs = dynamo.select();
        let ours = dynamo.select_with(&policy);
        let (table, request) = switchyard_fixture(n, 0.0);
        let mut native = Selector::new(default.native("{}").unwrap());
        let best = native.select(&table, &request).unwrap().cost;
        let costs = native.last_costs();
        assert_eq!(costs[theirs as usize], best, "Dynamo's pick is one of the argmins");
        assert_eq!(costs[ours as usize], best, "the picker's pick is one of the argmins");
        if costs.iter().filter(|&&c| c == best).count() == 1 {
            assert_eq!(ours, theirs, "a unique argmin: the same worker");
        }
        let mut run_dynamo = || {
            black_box(dynamo.select());
        };
        let mut run_guest = || {
            black_box(dynamo.select_with(&policy));
        };
        let mut run_floor = || {
            black_box(dynamo.select_with(&floor));
        };
        let t = interleaved(&mut [&mut run_dynamo, &mut run_floor, &mut run_guest]);
        println!(
            "| {n} | {} | {} | {} | {:.3} | {:.3} |",
            fmt_ns(t[0]),
            fmt_ns(t[1]),
            fmt_ns(t[2]),
            t[2] / t[0],
            t[1] / t[0]
        );
    }
}

/// The floor of any plugin inside Dynamo 1.6.1: a native picker that declares what the
/// default guest reads (cache, load, preferred taints) and returns row 0, so a selection
/// is Dynamo's eligibility and candidate rows alone.
struct FirstRow;

impl WorkerPicker for FirstRow {
    fn required_worker_inputs(&self) -> WorkerInputs {
        WorkerInputs::CACHE | WorkerInputs::LOAD | WorkerInputs::PREFERRED_TAINT
    }
    fn pick(
        &mut self,
        _context: &WorkerSelectionContext<'_>,
        input: WorkerInputView<'_>,
    ) -> Result<usize, WorkerSelectionPolicyError> {
        black_box(input.candidates().len());
        Ok(0)
    }
}

/// The default policy written in C (policies/default-c) beside the Rust guest: the same
/// costs (asserted), each component's size and compile time, and selections interleaved.
fn c_guest_table(engine: &PolicyEngine) {
    let default = builtin::find("default").unwrap();
    let rust = PolicyComponent::load(engine, DEFAULT_POLICY).unwrap();
    let c = PolicyComponent::load(engine, DEFAULT_POLICY_C).unwrap();
    println!("\n### The default policy in C vs the Rust guest, temperature 0\n");
    println!("| component | size | compile, Cranelift (the default) | compile, Winch |");
    println!("| --- | ---: | ---: | ---: |");
    let winch = PolicyEngine::new(Limits { compiler: Compiler::Winch, ..Limits::default() }).unwrap();
    // Every function compiled each time: no function cache (it would answer the second
    // compile of the same bytes from the first's functions).
    let cranelift = PolicyEngine::new(Limits { function_cache_bytes: 0, ..Limits::default() }).unwrap();
    // Median of 5 compiles each (both cores; no artifact cache).
    let compile_ms =
        |engine: &PolicyEngine, bytes: &[u8]| median_compile(engine, bytes, 5).as_secs_f64() * 1e3;
    for (name, bytes) in [("Rust guest", DEFAULT_POLICY), ("C guest", DEFAULT_POLICY_C)] {
        let (cranelift, winch) = (compile_ms(&cranelift, bytes), compile_ms(&winch, bytes));
        println!("| {name} | {} bytes | {cranelift:.2} ms | {winch:.2} ms |", bytes.len());
    }
    // Native, the Rust guest and the C guest with `params`, interleaved; the costs asserted
    // equal first.
    let times = |n: usize, params: &str, pool: Pool| {
        let (table, request) = switchyard_fixture_in(pool, n, 0.0);
        let mut native = Selector::new(default.native(params).unwrap());
        let mut rust_guest =
            Selector::new(Box::new(GuestScorer::new("default", rust.clone(), params).unwrap()));
        let mut c_guest = Selector::new(Box::new(GuestScorer::new("default-c", c.clone(), params).unwrap()));
        rust_guest.select(&table, &request).unwrap();
        c_guest.select(&table, &request).unwrap();
        let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&c_guest), bits(&rust_guest), "C and Rust guests: the same costs ({params})");
        let mut run_native = || {
            black_box(native.select(&table, &request).unwrap());
        };
        let mut run_rust = || {
            black_box(rust_guest.select(&table, &request).unwrap());
        };
        let mut run_c = || {
            black_box(c_guest.select(&table, &request).unwrap());
        };
        interleaved(&mut [&mut run_native, &mut run_rust, &mut run_c])
    };
    println!("\n| workers | native | Rust guest | C guest | C/Rust |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for &n in &SIZES {
        let t = times(n, "{}", Pool::Aggregated);
        println!("| {n} | {} | {} | {} | {:.3} |", fmt_ns(t[0]), fmt_ns(t[1]), fmt_ns(t[2]), t[2] / t[1]);
    }
    // The C policy has fewer loops than the Rust one (a smaller component): what that
    // costs where the two differ.
    println!("\nOther parameters and pools, 1,024 workers:\n");
    println!("| parameters | pool | native | Rust guest | C guest | C/Rust |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for (params, pool) in [
        (r#"{"overlap_score_credit_decay": 1}"#, Pool::Aggregated),
        (r#"{"decode_active_request_weight": 1}"#, Pool::Aggregated),
        ("{}", Pool::Decode),
        (r#"{"overlap_score_credit": 0}"#, Pool::Decode),
    ] {
        let t = times(1_024, params, pool);
        println!(
            "| `{params}` | {pool:?} | {} | {} | {} | {:.3} |",
            fmt_ns(t[0]),
            fmt_ns(t[1]),
            fmt_ns(t[2]),
            t[2] / t[1]
        );
    }
}

/// Guest vs native for the ported policies (Dynamo has no equivalent to compare with).
fn ported_table(engine: &PolicyEngine) {
    println!("\n### Full selection, ported policies, temperature 0\n");
    println!("| policy | workers | native | guest | guest/native |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for name in PORTED {
        let policy = builtin::find(name).unwrap();
        for &n in &SIZES {
            let (table, request) = switchyard_fixture(n, 0.0);
            let mut native = Selector::new(policy.native("{}").unwrap());
            let mut guest = Selector::new(Box::new(policy.guest(engine, "{}").unwrap()));
            assert_eq!(
                native.select(&table, &request).unwrap().chosen,
                guest.select(&table, &request).unwrap().chosen,
                "{name}: guest and native agree"
            );
            let mut run_native = || {
                black_box(native.select(&table, &request).unwrap());
            };
            let mut run_guest = || {
                black_box(guest.select(&table, &request).unwrap());
            };
            let t = interleaved(&mut [&mut run_native, &mut run_guest]);
            println!("| {name} | {n} | {} | {} | {:.2} |", fmt_ns(t[0]), fmt_ns(t[1]), t[1] / t[0]);
        }
    }
}

fn overhead_table(engine: &PolicyEngine) {
    let noop_component = PolicyComponent::load(engine, NOOP).unwrap();
    let mut noop = GuestScorer::new("noop", noop_component.clone(), "{}").unwrap();
    let mut noop_1 = GuestScorer::new("noop", noop_component, "{}").unwrap();
    let mut imports =
        GuestScorer::new("imports", PolicyComponent::load(engine, IMPORTS).unwrap(), "{}").unwrap();
    let default = builtin::find("default").unwrap();
    let mut native = default.native("{}").unwrap();
    let mut native_4 = default.native("{}").unwrap();
    let mut guest = default.guest(engine, "{}").unwrap();
    let mut guest_4 = default.guest(engine, "{}").unwrap();
    let mut empty = ScoreOnly::new(0, &noop);
    let mut one_noop = ScoreOnly::new(1, &noop);
    let mut one_imports = ScoreOnly::new(1, &imports);
    let mut n1 = ScoreOnly::new(1_024, native.as_ref());
    let mut n4 = ScoreOnly::new(4_096, native.as_ref());
    let mut g1 = ScoreOnly::new(1_024, &guest);
    let mut g4 = ScoreOnly::new(4_096, &guest);
    // The same call under the other CPU bounds: what fuel's checks cost.
    let unbounded_engine = PolicyEngine::new(Limits { budget: Budget::None, ..Limits::default() }).unwrap();
    let epoch_engine = PolicyEngine::new(Limits { budget: Budget::Epoch, ..Limits::default() }).unwrap();
    let fuel_engine = PolicyEngine::new(Limits { budget: Budget::Fuel, ..Limits::default() }).unwrap();
    let mut guest_unbounded = default.guest(&unbounded_engine, "{}").unwrap();
    let mut guest_epoch = default.guest(&epoch_engine, "{}").unwrap();
    let mut guest_fuel = default.guest(&fuel_engine, "{}").unwrap();
    let mut g1_unbounded = ScoreOnly::new(1_024, &guest_unbounded);
    let mut g1_epoch = ScoreOnly::new(1_024, &guest_epoch);
    let mut g1_fuel = ScoreOnly::new(1_024, &guest_fuel);
    // The same call with a memory reservation no larger than the memory: every load and
    // store bounds-checked, for slots that reserve 96 MiB of address space, not 4 GiB.
    let small =
        Limits { memory_reservation_bytes: Limits::default().max_memory_bytes as u64, ..Limits::default() };
    let small_engine = PolicyEngine::new(small).unwrap();
    let mut guest_small = default.guest(&small_engine, "{}").unwrap();
    let mut guest_small_4 = default.guest(&small_engine, "{}").unwrap();
    let mut g1_small = ScoreOnly::new(1_024, &guest_small);
    let mut g4_small = ScoreOnly::new(4_096, &guest_small);
    // The same call compiled by Winch (`[limits] compiler = "winch"`): uploads compile
    // faster (BENCHMARKS.md, "Compilers: Cranelift, Winch, tiered"); what do selections pay?
    let winch_engine = PolicyEngine::new(Limits { compiler: Compiler::Winch, ..Limits::default() }).unwrap();
    let mut guest_winch = default.guest(&winch_engine, "{}").unwrap();
    let mut guest_winch_4 = default.guest(&winch_engine, "{}").unwrap();
    let mut g1_winch = ScoreOnly::new(1_024, &guest_winch);
    let mut g4_winch = ScoreOnly::new(4_096, &guest_winch);
    // The floor: what crosses the boundary, copied by `memcpy` and nothing else.
    let (mut crossing_1, mut crossing_4) = (Crossing::new(1_024), Crossing::new(4_096));
    let (copy_1, copy_4) = (ScoreOnly::new(1_024, &guest), ScoreOnly::new(4_096, &guest));
    let (mut least_1, mut least_4) = (Crossing::new(1_024), Crossing::new(4_096));
    let (mut back_1, mut back_4) = (Crossing::new(1_024), Crossing::new(4_096));
    let t = interleaved(&mut [
        &mut || empty.run(&mut noop),
        &mut || one_noop.run(&mut noop_1),
        &mut || one_imports.run(&mut imports),
        &mut || n1.run(native.as_mut()),
        &mut || n4.run(native_4.as_mut()),
        &mut || g1.run(&mut guest),
        &mut || g4.run(&mut guest_4),
        &mut || g1_unbounded.run(&mut guest_unbounded),
        &mut || g1_epoch.run(&mut guest_epoch),
        &mut || g1_fuel.run(&mut guest_fuel),
        &mut || g1_small.run(&mut guest_small),
        &mut || g4_small.run(&mut guest_small_4),
        &mut || g1_winch.run(&mut guest_winch),
        &mut || g4_winch.run(&mut guest_winch_4),
        &mut || copy_1.copy_what_crosses(&mut crossing_1),
        &mut || copy_4.copy_what_crosses(&mut crossing_4),
        &mut || copy_1.copy_what_the_default_policy_reads(&mut least_1),
        &mut || copy_4.copy_what_the_default_policy_reads(&mut least_4),
        &mut || copy_1.copy_costs_back(&mut back_1),
        &mut || copy_4.copy_costs_back(&mut back_4),
    ]);
    let native_slope = (t[4] - t[3]) / 3_072.0;
    let guest_slope = (t[6] - t[5]) / 3_072.0;
    println!("\n### Guest call overhead (score call only, no selection around it)\n");
    println!("| what | median |");
    println!("| --- | ---: |");
    println!("| empty batch (noop guest, 0 candidates) | {} |", fmt_ns(t[0]));
    println!("| noop guest, 1 candidate | {} |", fmt_ns(t[1]));
    println!("| reading all three imports, 1 candidate | {} (+{}) |", fmt_ns(t[2]), fmt_ns(t[2] - t[1]));
    println!("| default policy score, 1,024 / 4,096: native | {} / {} |", fmt_ns(t[3]), fmt_ns(t[4]));
    println!("| default policy score, 1,024 / 4,096: guest | {} / {} |", fmt_ns(t[5]), fmt_ns(t[6]));
    println!(
        "| per-candidate slope: native / guest / ratio | {native_slope:.2} ns / {guest_slope:.2} ns / {:.2} |",
        guest_slope / native_slope
    );
    println!(
        "| guest score, 1,024, CPU bound: both (the default) / fuel / epoch / none (none: comparison only) | {} / {} / {} / {} |",
        fmt_ns(t[5]),
        fmt_ns(t[9]),
        fmt_ns(t[8]),
        fmt_ns(t[7])
    );
    let small_slope = (t[11] - t[10]) / 3_072.0;
    println!(
        "| memory reservation 64 MiB (bounds-checked) vs 4 GiB: guest score 1,024 / 4,096, slope | {} / {}, {small_slope:.2} ns ({:+.0} %) |",
        fmt_ns(t[10]),
        fmt_ns(t[11]),
        (small_slope / guest_slope - 1.0) * 100.0
    );
    println!(
        "| compiled by Winch vs Cranelift: guest score 1,024 / 4,096, ratio at 1,024 | {} / {}, {:.2} |",
        fmt_ns(t[12]),
        fmt_ns(t[13]),
        t[12] / t[5]
    );
    // A guest receives a copy of what it reads and hands its costs back; native reads the
    // host's buffers in place. Native + those copies (memcpy alone) + an empty call's fixed
    // cost is what no copying boundary can beat.
    let floor = |n: f64, copy: f64| (n + copy + t[0]) / n;
    println!(
        "| what crosses, copied by memcpy alone (ids and columns in, costs out), 1,024 / 4,096 | {} / {} |",
        fmt_ns(t[14]),
        fmt_ns(t[15])
    );
    println!(
        "| floor of guest/native for the score call: (native + that copy + empty batch) / native, 1,024 / 4,096; measured | {:.2} / {:.2}; {:.2} / {:.2} |",
        floor(t[3], t[14]),
        floor(t[4], t[15]),
        t[5] / t[3],
        t[6] / t[4]
    );
    // Whatever the contract: the policy's own columns must cross in and its costs back.
    for (what, at) in [
        ("the least any copying contract carries: the six columns the default cost reads in, costs out", 16),
        ("costs out alone (no column crossing at all)", 18),
    ] {
        println!(
            "| {what}, 1,024 / 4,096; floor as above | {} / {}; {:.2} / {:.2} |",
            fmt_ns(t[at]),
            fmt_ns(t[at + 1]),
            floor(t[3], t[at]),
            floor(t[4], t[at + 1])
        );
    }
}

fn concurrency(engine: &PolicyEngine) {
    println!("\n### Throughput, guest default policy, 1,024 workers, each thread its own instance\n");
    println!("| threads | selections/s (total) |");
    println!("| ---: | ---: |");
    for threads in [1, 2] {
        let window = Duration::from_secs(2);
        let total: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let (table, request) = switchyard_fixture(1_024, 0.0);
                        let guest = builtin::find("default").unwrap().guest(engine, "{}").unwrap();
                        let mut selector = Selector::new(Box::new(guest));
                        let start = Instant::now();
                        let mut count = 0u64;
                        while start.elapsed() < window {
                            black_box(selector.select(&table, &request).unwrap());
                            count += 1;
                        }
                        count
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        println!("| {threads} | {:.0} |", total as f64 / window.as_secs_f64());
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let engine = PolicyEngine::new(Limits::default()).expect("engine");
    let started = Instant::now();
    println!("## Switchyard ratio table\n");
    println!(
        "Fixture: Dynamo's bench fixture (prompt 2,048 tokens, block 16, one dp rank). Guest budget: both (the default: fuel, with the epoch deadline as backstop)."
    );
    println!("Medians of {ROUNDS} interleaved rounds of ~{} ms batches.", BATCH.as_millis());
    // `-- inside-dynamo`, `-- c`, `-- ported` or `-- overhead`: that section alone.
    if std::env::args().any(|a| a == "overhead") {
        overhead_table(&engine);
        return;
    }
    if std::env::args().any(|a| a == "inside-dynamo") {
        inside_dynamo_table(&engine);
        return;
    }
    if std::env::args().any(|a| a == "c") {
        c_guest_table(&engine);
        return;
    }
    if std::env::args().any(|a| a == "ported") {
        ported_table(&engine);
        return;
    }
    selection_table(&engine, 0.0);
    selection_table(&engine, 0.7);
    inside_dynamo_table(&engine);
    c_guest_table(&engine);
    ported_table(&engine);
    overhead_table(&engine);
    concurrency(&engine);
    println!("\n(took {:.0} s)", started.elapsed().as_secs_f64());
}
