//! One scenario in a tight loop, for a profiler: where does a guest call's time go?
//!
//! ```text
//! cargo bench --bench profile --no-run
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/deps/profile-* empty 20000
//! callgrind_annotate --inclusive=yes /tmp/cg.out | head -60
//! ```
//!
//! Scenarios: `empty` / `one` (noop guest, 0 / 1 candidates), `imports` (reads all three imports,
//! 1 candidate), `score-native` / `score-guest` (default policy's score call, 1,024
//! candidates), `select-native` / `select-guest` / `select-guest-c` (full selection, 1,024 workers; the
//! last the C default policy);
//! `trap` (every call panics: trap + fresh instance), `fresh` (the default policy, a fresh
//! instance per call), `fresh-many N K [busy]` (as `fresh`, cycling over K distinct components;
//! `busy`: another thread spins meanwhile, and the TLB shootdowns a round are printed);
//! all three print the median time to a fresh instance ready. `load-cached N [K] [FILE.wasm] [busy]`
//! prints the median and p99 load of a component from the artifact cache (as an evicted
//! version's is, its MAC known), cycling over K distinct ones. `idle-rss K` prints the
//! resident memory of an idle default-policy instance. `warm-many N K` prints the median
//! 64-worker selection on one instance, then cycling over K instances kept between calls
//! (as a server's idle instances of K tenants' versions: each call's instance is the one
//! used longest ago), then picking one of the K at random each call (as a server's
//! tenants come); `guarded` after K: in guarded selectors, as the service runs them;
//! `distinct=D`: the K instances spread over D distinct components; `c`: the C default
//! policy; `PROFILE_RESERVATION_MIB` sets each pool slot's memory reservation
//! for these two. `compile N [c | FILE.wasm] [winch] [cached] [worker]`
//! prints the median compile of the default policy (or its C version); `worker`: in a
//! compile worker process, as `switchyard serve` compiles. `code <file> [c]` writes the
//! default policy's (or its C version's) compiled code (an ELF object) for `objdump -d`.

mod common;

use std::hint::black_box;

use common::{IMPORTS, NOOP, ScoreOnly, median_compile, switchyard_fixture};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use switchyard::{Budget, GuestScorer, Limits, PolicyComponent, PolicyEngine, Selector};
use switchyard_builtins as builtin;
use switchyard_test_util::variant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    // `cargo bench` runs every bench target with `--bench`: do nothing then.
    let Some(scenario) = args.first() else { return };
    let iterations: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(10_000);
    // Few pool slots: each reserves 4 GiB of address space, and valgrind cannot map 256.
    // No compile timeout: under callgrind compiling is ~50× slower.
    // `PROFILE_BUDGET=none|fuel|epoch|both` picks the CPU bound (default: fuel).
    let budget = match std::env::var("PROFILE_BUDGET").as_deref() {
        Ok("none") => Budget::None,
        Ok("epoch") => Budget::Epoch,
        Ok("both") => Budget::Both,
        _ => Budget::Fuel,
    };
    let limits = Limits { max_instances: 4, compile_timeout_ms: 3_600_000, budget, ..Limits::default() };
    let engine = PolicyEngine::new(limits).expect("engine");
    let default = builtin::find("default").expect("default builtin");
    let guest = |bytes: &[u8]| {
        GuestScorer::new("profile", PolicyComponent::load(&engine, bytes).expect("loads"), "{}")
            .expect("instantiates")
    };
    match scenario.as_str() {
        "empty" | "one" | "imports" => {
            let mut scorer = guest(if scenario == "imports" { IMPORTS } else { NOOP });
            let mut call = ScoreOnly::new(usize::from(scenario != "empty"), &scorer);
            for _ in 0..iterations {
                call.run(&mut scorer);
            }
        }
        "score-native" => {
            let mut scorer = default.native("{}").expect("native");
            let mut call = ScoreOnly::new(1_024, scorer.as_ref());
            for _ in 0..iterations {
                call.run(scorer.as_mut());
            }
        }
        "score-guest" => {
            let mut scorer = default.guest(&engine, "{}").expect("guest");
            let mut call = ScoreOnly::new(1_024, &scorer);
            for _ in 0..iterations {
                call.run(&mut scorer);
            }
        }
        "select-native" | "select-guest" | "select-guest-c" => {
            let (table, request) = switchyard_fixture(1_024, 0.0);
            let scorer = match scenario.as_str() {
                "select-native" => default.native("{}").expect("native"),
                "select-guest" => Box::new(default.guest(&engine, "{}").expect("guest")),
                _ => Box::new(guest(switchyard_test_util::DEFAULT_POLICY_C)),
            };
            let mut selector = Selector::new(scorer);
            for _ in 0..iterations {
                black_box(selector.select(&table, &request).expect("selects"));
            }
        }
        "trap" => {
            // Every call panics: the cost of a trap and the fresh instance after it.
            let panic = switchyard_test_util::hostile::PANIC;
            let component = PolicyComponent::load(&engine, panic).expect("loads");
            let mut scorer = GuestScorer::new("trap", component, r#"{"every": 1}"#).expect("instantiates");
            let stats = scorer.stats();
            let mut call = ScoreOnly::new(64, &scorer);
            // Each call after the first starts with a fresh instance (instantiate,
            // `configure`, `describe`): its duration is the recovery proper, without the
            // trap and the poisoned Store's drop around it.
            let mut ready = Vec::with_capacity(iterations as usize);
            for _ in 0..iterations {
                call.try_run(&mut scorer).expect_err("traps");
                ready.push(stats.last_instantiation());
            }
            ready.sort();
            if let Some(median) = ready.get(ready.len() / 2) {
                eprintln!("fresh instance ready (instantiate + configure + describe): median {median:?}");
            }
        }
        "fresh" | "fresh-many" => {
            // The default policy with parameters, a fresh instance per call (what a
            // recovery or a version's first selection pays before its call).
            // `fresh-many N K` (K = 8 unless given): each call's instance is of the next of
            // K distinct components (the default policy with a custom section appended),
            // so with K over the pool's 4 slots a slot is always one another component
            // used last, as in a server whose cold selections are of many tenants'
            // components. `fresh` is the same loop on the default policy alone.
            // `busy` (anywhere after N): another thread of the process spins meanwhile, as
            // a server's other threads run on its other cores; then every change to the
            // process's mappings (an image mapped into a slot, a memory reset) interrupts
            // that core to flush its TLB. The rounds' TLB shootdowns are printed.
            let kinds: u32 = match scenario.as_str() {
                "fresh" => 1,
                _ => args.get(2).and_then(|k| k.parse().ok()).unwrap_or(8),
            };
            let templates: Vec<GuestScorer> = (0..kinds)
                .map(|tag| {
                    let bytes = if scenario == "fresh-many" {
                        variant(default.component, tag)
                    } else {
                        default.component.to_vec()
                    };
                    let component = PolicyComponent::load(&engine, &bytes).expect("loads");
                    GuestScorer::new("fresh", component, r#"{"prefill_load_scale": 1.5}"#)
                        .expect("instantiates")
                        .sibling()
                })
                .collect();
            let mut call = ScoreOnly::new(64, &templates[0]);
            let watch = Watch::start(&args);
            let mut ready = Vec::with_capacity(iterations as usize);
            let started = std::time::Instant::now();
            for i in 0..iterations {
                let mut scorer = templates[i as usize % templates.len()].sibling();
                call.run(&mut scorer);
                ready.push(scorer.stats().last_instantiation());
            }
            let per_round = started.elapsed() / iterations.max(1) as u32;
            let shootdowns = watch.stop();
            ready.sort();
            if let Some(median) = ready.get(ready.len() / 2) {
                eprintln!(
                    "fresh instance ready (instantiate + configure + describe): median {median:?}; \
                     whole round (instance, call, drop) {per_round:?}"
                );
            }
            print_shootdowns(shootdowns, iterations, "a round");
        }
        "idle-rss" => {
            // `idle-rss K`: K instances of the default policy (with parameters), each
            // after one 64-candidate call, kept alive as a server keeps idle ones; prints
            // the resident memory they added, per instance (`/proc/self/status`).
            let kept: usize = args.get(1).and_then(|k| k.parse().ok()).unwrap_or(1_000);
            let engine = engine_for(kept);
            let component = PolicyComponent::load(&engine, default.component).expect("loads");
            let template =
                GuestScorer::new("idle", component, r#"{"prefill_load_scale": 1.5}"#).expect("instantiates");
            let mut call = ScoreOnly::new(64, &template);
            let before = resident_kib();
            let idle: Vec<GuestScorer> = (0..kept)
                .map(|_| {
                    let mut scorer = template.sibling();
                    call.run(&mut scorer);
                    scorer
                })
                .collect();
            if let (Some(before), Some(after)) = (before, resident_kib()) {
                eprintln!(
                    "{kept} idle instances: resident memory +{} KiB, {:.1} KiB each",
                    after - before,
                    (after - before) as f64 / kept as f64
                );
            }
            drop(black_box(idle));
        }
        "warm-many" => {
            // `warm-many N K`: K instances of the default policy, each with its own
            // parameters, all configured and called once first; then N calls on the first
            // alone and N cycling over all K. What a warm selection costs when its
            // instance's state (Store, guest memory, tables) is not in the caches.
            // `distinct=D` (after K): the K instances spread over D distinct components
            // (the policy with a custom section appended; instance k of component k % D),
            // as a server's tenants' versions are, so what is per component (its machine
            // code, wasmtime's tables for it) is out of the caches too. `c`: the C default
            // policy instead of the Rust one.
            let kept: usize = args.get(2).and_then(|k| k.parse().ok()).unwrap_or(1_000);
            let distinct: usize = args
                .iter()
                .find_map(|a| a.strip_prefix("distinct=")?.parse().ok())
                .unwrap_or(1)
                .clamp(1, kept);
            let policy = if args.iter().skip(3).any(|a| a == "c") {
                switchyard_test_util::DEFAULT_POLICY_C
            } else {
                default.component
            };
            let engine = engine_for(kept);
            let components: Vec<PolicyComponent> = (0..distinct)
                .map(|d| {
                    let bytes = if distinct == 1 { policy.to_vec() } else { variant(policy, d as u32) };
                    PolicyComponent::load(&engine, &bytes).expect("loads")
                })
                .collect();
            let mut scorers: Vec<GuestScorer> = (0..kept)
                .map(|k| {
                    let params = format!(r#"{{"prefill_load_scale": {}}}"#, 1.0 + k as f64 / 1e5);
                    GuestScorer::new("warm", components[k % distinct].clone(), &params).expect("instantiates")
                })
                .collect();
            // Each in a selector, as a server's idle instances are: its own column buffers.
            // `guarded` (after K): the service's shape instead, each in a guarded selector
            // (containment, fallback) selecting for the sample request and committing.
            let guarded = args.iter().skip(3).any(|a| a == "guarded");
            let (table, request) = if guarded {
                let parsed: switchyard::selection::wire::RequestJson =
                    serde_json::from_str(switchyard::selection::wire::SAMPLE_REQUEST)
                        .expect("the sample parses");
                parsed.into_parts_within(&Default::default()).expect("the sample is valid")
            } else {
                switchyard_fixture(64, 0.0)
            };
            let mut selectors: Vec<Box<dyn FnMut() -> u64>> = scorers
                .drain(..)
                .map(|scorer| -> Box<dyn FnMut() -> u64> {
                    let (table, request) = (table.clone(), request.clone());
                    if guarded {
                        let config = switchyard::GuardConfig::default();
                        let mut g = builtin::guarded(Box::new(scorer), switchyard::FailMode::Open, config);
                        Box::new(move || {
                            let decision = g.select(&table, &request).expect("selects");
                            g.commit(&table, &request, decision.selection.chosen).expect("commits");
                            decision.selection.chosen.worker_id
                        })
                    } else {
                        let mut selector = Selector::new(Box::new(scorer));
                        Box::new(move || selector.select(&table, &request).expect("selects").chosen.worker_id)
                    }
                })
                .collect();
            for select in &mut selectors {
                black_box(select());
            }
            let mut timed = |pick: &mut dyn FnMut(u64) -> usize| {
                let mut took: Vec<std::time::Duration> = (0..iterations)
                    .map(|i| {
                        let select = &mut selectors[pick(i)];
                        let started = std::time::Instant::now();
                        black_box(select());
                        started.elapsed()
                    })
                    .collect();
                took.sort();
                (took[took.len() / 2], took[took.len() * 99 / 100])
            };
            let one = timed(&mut |_| 0);
            let many = timed(&mut |i| i as usize % kept);
            // In the order they were made, neighbours in memory follow each other (the
            // caches' and the TLB's best case); a server's tenants come in any order.
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            let random = timed(&mut |_| (rng.next_u64() % kept as u64) as usize);
            eprintln!(
                "warm 64-worker selection ({distinct} component(s)), median / p99: one instance {:?} / {:?}; cycling over {kept} {:?} / {:?}; {kept} in random order {:?} / {:?}",
                one.0, one.1, many.0, many.1, random.0, random.1
            );
        }
        "load-cached" => {
            // `load-cached N [K] [FILE.wasm] [busy]`: loads the default policy (or FILE)
            // from the artifact cache
            // (as a version evicted and selected again does: mapped, its MAC known from
            // an earlier load) N times, cycling over K distinct components (8 unless
            // given), each dropped before the next; prints the median load. `busy`:
            // another thread spins meanwhile (see `fresh-many`).
            let dir = std::env::temp_dir().join(format!("switchyard-profile-cache-{}", std::process::id()));
            let key = switchyard::artifact_cache::ArtifactKey::generate().expect("a key");
            let cache = switchyard::ArtifactCache::open(&dir, key).expect("opens the cache");
            let engine = PolicyEngine::new(Limits { max_instances: 4, ..Limits::default() })
                .expect("engine")
                .with_artifact_cache(cache);
            let kinds: u32 = args.get(2).and_then(|k| k.parse().ok()).unwrap_or(8);
            let read = file_arg(&args);
            let original = read.as_deref().unwrap_or(default.component);
            let components: Vec<(String, usize)> = (0..kinds)
                .map(|tag| {
                    let bytes = variant(original, tag);
                    let loaded = PolicyComponent::load(&engine, &bytes).expect("compiles and caches");
                    (loaded.digest().to_string(), bytes.len())
                })
                .collect();
            // The artifacts settle (the cache remembers a file's MAC check only once its last
            // change is a second old), then each is loaded once: from here on a load skips
            // the MAC, as a server's load of a version evicted and selected again does.
            std::thread::sleep(std::time::Duration::from_millis(1_100));
            for (digest, size) in &components {
                drop(PolicyComponent::load_cached(&engine, digest, *size));
            }
            let watch = Watch::start(&args);
            let mut took = Vec::with_capacity(iterations as usize);
            for i in 0..iterations as usize {
                let (digest, size) = &components[i % components.len()];
                let started = std::time::Instant::now();
                let loaded = PolicyComponent::load_cached(&engine, digest, *size)
                    .expect("in the cache")
                    .expect("loads");
                took.push(started.elapsed());
                drop(black_box(loaded));
            }
            let shootdowns = watch.stop();
            let _ = std::fs::remove_dir_all(&dir);
            took.sort();
            if let (Some(p50), Some(p99)) = (took.get(took.len() / 2), took.get(took.len() * 99 / 100)) {
                eprintln!("load from the artifact cache: median {p50:?}, p99 {p99:?}");
            }
            print_shootdowns(shootdowns, iterations, "a load");
        }
        "compile-worker" => {
            switchyard::compile_worker_main::serve_worker().expect("serves");
        }
        "compile" => {
            // `compile N [c | FILE.wasm] [winch] [cached | after=FILE.wasm]`: compiles the
            // default policy (its C version, or any component file) N times, with
            // Cranelift or Winch, and prints the median. Every function compiled each
            // time, unless `cached`: one engine's function cache, filled by a first
            // compile (the median is of compiles whose every function is cached); or
            // `after=FILE.wasm`: each compile on a fresh engine whose cache holds FILE's
            // functions (what an upload shares with another policy compiled before it).
            let read = file_arg(&args);
            let bytes = match (&read, args.iter().any(|a| a == "c")) {
                (Some(read), _) => read.as_slice(),
                (None, true) => switchyard_test_util::DEFAULT_POLICY_C,
                (None, false) => default.component,
            };
            let compiler = if args.iter().any(|a| a == "winch") {
                switchyard::Compiler::Winch
            } else {
                Limits::default().compiler
            };
            let cached = args.iter().any(|a| a == "cached");
            let after =
                args.iter().find_map(|a| a.strip_prefix("after=")).map(|f| std::fs::read(f).expect("reads"));
            let function_cache_bytes =
                if cached || after.is_some() { Limits::default().function_cache_bytes } else { 0 };
            // `worker`: in a compile worker process (this program, `profile compile-worker`),
            // as `switchyard serve` compiles; the first compile starts it and is printed apart.
            let worker = args.iter().any(|a| a == "worker");
            let engine = || {
                let engine =
                    PolicyEngine::new(Limits { compiler, function_cache_bytes, ..Limits::default() })
                        .expect("engine");
                match worker {
                    true => engine.with_compile_workers(
                        switchyard::WorkerCommand::current_exe(["compile-worker"]).expect("this program"),
                    ),
                    false => engine,
                }
            };
            let median = match &after {
                None => {
                    let engine = engine();
                    if cached || worker {
                        let first = PolicyComponent::load(&engine, bytes).expect("compiles").compile_time();
                        eprintln!("first compile: {first:?}");
                    }
                    let median = median_compile(&engine, bytes, iterations as usize);
                    if let Some(stats) = engine.function_cache_stats() {
                        eprintln!("function cache: {stats:?}");
                    }
                    median
                }
                Some(first) => {
                    let mut took: Vec<_> = (0..iterations.max(1))
                        .map(|_| {
                            let engine = engine();
                            PolicyComponent::load(&engine, first).expect("compiles");
                            let before = engine.function_cache_stats().unwrap_or_default();
                            let took =
                                PolicyComponent::load(&engine, bytes).expect("compiles").compile_time();
                            let after = engine.function_cache_stats().unwrap_or_default();
                            eprintln!(
                                "functions found compiled {} of {}",
                                after.hits - before.hits,
                                after.hits + after.misses - before.hits - before.misses
                            );
                            took
                        })
                        .collect();
                    took.sort();
                    took[took.len() / 2]
                }
            };
            eprintln!("compile: median {median:?} of {iterations}");
        }
        "code" => {
            // The default policy as Cranelift compiles it here (an ELF object), for
            // `objdump -d`: what the guest's per-candidate loop became.
            // `code <file> c`: the C default policy's instead.
            let out = args.get(1).expect("code <output file> [c]");
            let bytes = match args.get(2).map(String::as_str) {
                Some("c") => switchyard_test_util::DEFAULT_POLICY_C,
                _ => default.component,
            };
            let code = engine.engine().precompile_component(bytes).expect("compiles");
            std::fs::write(out, code).expect("writes the object");
        }
        other => panic!("unknown scenario {other:?}"),
    }
}

/// The TLB shootdowns the kernel has counted on all cores (`/proc/interrupts`, Linux).
fn tlb_shootdowns() -> Option<u64> {
    let table = std::fs::read_to_string("/proc/interrupts").ok()?;
    let row = table.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
    // "TLB: <one count per core> TLB shootdowns"
    Some(row.split_whitespace().skip(1).map_while(|n| n.parse::<u64>().ok()).sum())
}

/// What a timed loop is watched for: while it runs, another thread of this process spins
/// (with `busy`), as a server's other threads run on its other cores, so that every change
/// to the process's mappings interrupts that core to flush its TLB; and the TLB
/// shootdowns counted meanwhile.
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    spinner: Option<std::thread::JoinHandle<()>>,
    shootdowns: Option<u64>,
}

impl Watch {
    fn start(args: &[String]) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner = args.iter().any(|a| a == "busy").then(|| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        });
        Self { stop, spinner, shootdowns: tlb_shootdowns() }
    }

    /// Stops the spinning thread; the TLB shootdowns since [`Watch::start`], where Linux
    /// counts them.
    fn stop(mut self) -> Option<u64> {
        let shootdowns = tlb_shootdowns().zip(self.shootdowns).map(|(after, before)| after - before);
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(spinner) = self.spinner.take() {
            spinner.join().expect("the spinning thread");
        }
        shootdowns
    }
}

/// Prints the TLB shootdowns `counted` over `n` of `what` (a round, a load).
fn print_shootdowns(counted: Option<u64>, n: u64, what: &str) {
    if let Some(counted) = counted {
        eprintln!(
            "TLB shootdowns (all cores, all processes) {what}: {:.2}",
            counted as f64 / n.max(1) as f64
        );
    }
}

/// The component file named among `args` (the first ending in `.wasm` that is not a
/// `name=value` option, such as `after=FILE.wasm`), read.
fn file_arg(args: &[String]) -> Option<Vec<u8>> {
    let file = args.iter().find(|a| a.ends_with(".wasm") && !a.contains('='))?;
    Some(std::fs::read(file).expect("reads the component"))
}

/// This process's resident memory, KiB (`VmRSS` of `/proc/self/status`, Linux).
fn resident_kib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// An engine whose pool holds `kept` instances and a few more, each slot's memory
/// reservation `PROFILE_RESERVATION_MIB` (default 4 GiB): how far apart the instances'
/// memories lie in the address space. A value that is not a number of MiB is refused,
/// not read as the default (its figures would be printed as the value's).
fn engine_for(kept: usize) -> PolicyEngine {
    let reservation = std::env::var("PROFILE_RESERVATION_MIB").ok().map_or(
        Limits::default().memory_reservation_bytes,
        |m| {
            m.parse::<u64>()
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
                .unwrap_or_else(|| panic!("PROFILE_RESERVATION_MIB={m}: not a number of MiB"))
        },
    );
    let limits =
        Limits { max_instances: kept as u32 + 4, memory_reservation_bytes: reservation, ..Limits::default() };
    PolicyEngine::new(limits).expect("engine")
}
