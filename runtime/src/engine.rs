//! All engine configuration, in one place. Every limit says why it has its value; all
//! are overridable from a config file (`[limits]` in `switchyard.toml`) or flags.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::artifact_cache::ArtifactCache;
use crate::compile_worker::{CompileWorkers, Tier, WorkerCommand};
use crate::function_cache::{FunctionCache, FunctionCacheStats};
use serde::{Deserialize, Serialize};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig, Strategy};

/// How a guest call's CPU time is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Budget {
    /// Fuel only: a deterministic count of wasm operations (see [`Limits::fuel_for`]).
    /// Same call sequence, same verdict, on any machine; but work wasm counts as one
    /// operation (a `memory.fill` of the whole memory) is bounded only by the memory size.
    Fuel,
    /// Epoch interruption only: a wall-clock deadline (`call_deadline_ms`), checked at
    /// loop headers and function entries. Cheaper than fuel, but load-dependent.
    Epoch,
    /// Both, the default: fuel decides deterministically, and the deadline is the
    /// backstop for what fuel does not count (host stalls, page faults).
    #[default]
    Both,
    /// No CPU bound. Only for benchmarks of the bound's own cost; never for tenants.
    None,
}

impl Budget {
    /// Whether calls are metered in fuel (`fuel` or `both`).
    pub fn uses_fuel(self) -> bool {
        matches!(self, Budget::Fuel | Budget::Both)
    }
    /// Whether calls have a wall-clock deadline (`epoch` or `both`).
    pub fn uses_epoch(self) -> bool {
        matches!(self, Budget::Epoch | Budget::Both)
    }
}

/// Which of wasmtime's compilers turns uploads into machine code. Either compiles in
/// parallel on all cores (`parallel-compilation`; docs/benchmarks-history.md, "Two
/// compilers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Compiler {
    /// Cranelift, optimising, the default: the fastest selections, the slowest uploads
    /// (BENCHMARKS.md, "Compilers: Cranelift, Winch, tiered").
    #[default]
    Cranelift,
    /// Winch, wasmtime's baseline compiler: one pass, no optimisation. The default policy
    /// compiles several times faster and selects slower; its costs are bit-identical. Fuel
    /// still stops its loops, but counts less of its work: somewhat less on the default
    /// policy's calls, a sliver on a byte-copy loop (`huge-error`'s 1 MB message), and a
    /// spinning guest takes several times longer to spend `max_fuel_per_call`
    /// (BENCHMARKS.md, "Compilers: Cranelift, Winch, tiered"). So with Winch keep the
    /// deadline (`budget = "both"`, the default): it is what bounds a call's time.
    Winch,
    /// Both, in tiers: an upload is compiled by Winch and serves at once; Cranelift
    /// compiles it again in the background, and its code replaces Winch's for every
    /// selection after that (the service does the swap; anything else loading through
    /// this engine gets Cranelift's code). What is cached and loaded after an eviction or
    /// a restart is Cranelift's. While a version runs on Winch's code, Winch's fuel caveat
    /// above applies, so this needs the deadline: `budget = "both"` or `"epoch"`.
    Tiered,
}

impl Compiler {
    /// The compiler of the code this engine setting loads and caches: Winch for `winch`,
    /// Cranelift for `cranelift` and `tiered` (whose first tier is a separate engine, see
    /// [`PolicyEngine::first_tier`]).
    pub fn of_code(self) -> Compiler {
        match self {
            Compiler::Winch => Compiler::Winch,
            Compiler::Cranelift | Compiler::Tiered => Compiler::Cranelift,
        }
    }

    /// Its name in configuration and answers (as serialised): `cranelift`, `winch`, `tiered`.
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Cranelift => "cranelift",
            Compiler::Winch => "winch",
            Compiler::Tiered => "tiered",
        }
    }
}

/// The sandbox's limits. Defaults suit policies like those in `policies/`.
///
/// Every bound on a guest call holds whatever the request says: the fuel a call gets
/// grows with what the host really passes (candidates and prefix hashes, each counted up
/// to a cap), never beyond `max_fuel_per_call`, and the deadline bounds wall-clock time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest component accepted, bytes. 4 MiB: real policies are 15–300 KB; this leaves
    /// room for large lookup tables but refuses payloads that only cost compile time.
    pub max_component_bytes: usize,
    /// Linear memory per instance, bytes. 64 MiB: a stateful policy's prefix tree for
    /// thousands of workers fits in a few MB; a memory bomb stops here.
    pub max_memory_bytes: usize,
    /// Elements per table. 20,000: Rust guests use a few hundred function-table slots;
    /// more is table growth as an attack.
    pub max_table_elements: usize,
    /// Wasm stack per call, bytes. 512 KiB: deep enough for recursive tree walks, small
    /// enough that unbounded recursion traps within microseconds.
    pub max_wasm_stack_bytes: usize,
    /// How CPU time per call is bounded.
    pub budget: Budget,
    /// Fuel for a call regardless of batch size. 2,000,000: a fraction of a millisecond
    /// of a plain wasm loop (BENCHMARKS.md, "Hostile guests": the calibration);
    /// covers `configure` parsing JSON, a start function's setup, and copying the data
    /// segments into a new instance (a bulk copy, which wasmtime charges 1 fuel a byte:
    /// ~2 MB of data fit).
    pub fuel_base: u64,
    /// Extra fuel per unit of work the host passes: per candidate row and per prefix hash.
    /// 20,000 is an estimate of ample room, not a measurement: the default policy's loop
    /// is a few dozen wasm instructions a candidate.
    #[serde(alias = "fuel_per_candidate")]
    pub fuel_per_unit: u64,
    /// Candidate rows counted towards a call's fuel, at most. 16,384: more than the
    /// largest fleet a request routes over; a larger batch gets no more fuel.
    pub max_candidates_per_call: u64,
    /// Prefix hashes counted towards a call's fuel, at most. 16,384: a 1M-token prompt
    /// in 64-token blocks; a longer hash list gets no more fuel.
    pub max_prefix_hashes_per_call: u64,
    /// The hard ceiling on one call's fuel, whatever the request and whatever the
    /// instance saved (see [`Limits::fuel_for`]). 200,000,000: the allowance of 10,000
    /// candidates (CHWBL's first call over a new fleet needs most of it); a plain loop
    /// spends it in milliseconds (BENCHMARKS.md, "Hostile guests").
    pub max_fuel_per_call: u64,
    /// Fuel charged for each import call, before the host does any work for it. 6,000:
    /// calibrated so a loop of small imports (`policy-class`, `worker-capacity`) costs no
    /// more time per unit of fuel than a plain wasm loop (BENCHMARKS.md, "Hostile guests").
    pub fuel_per_import_call: u64,
    /// Fuel charged per byte an import copies into the guest (a prefix hash is 8 bytes, a
    /// capacity 12; `candidate-capacities` counts 512 per candidate, its lookup included).
    /// 2: the host's clone, lowering and the guest's `realloc`, calibrated as above.
    pub fuel_per_import_byte: u64,
    /// Wall-clock deadline per call (with the epoch or both budgets), ms. 150 ms: several
    /// times what `max_fuel_per_call` takes on an idle core (BENCHMARKS.md, "Hostile
    /// guests"), so fuel decides first (and
    /// deterministically) but on a badly overloaded host; the deadline stops what fuel
    /// does not count (host stalls, a miscalibrated import charge).
    pub call_deadline_ms: u64,
    /// Epoch tick, ms: the deadline's resolution. A loop stops within deadline + one tick.
    pub epoch_tick_ms: u64,
    /// Compile time allowed for an upload, ms. 10 s: a 4 MiB component compiles in < 2 s
    /// on 2 cores; pathological inputs that take longer are refused. In a compile worker
    /// ([`PolicyEngine::with_compile_workers`]) the compile stops there; in-process it
    /// runs on until Cranelift returns (it cannot be interrupted), its caller answered.
    pub compile_timeout_ms: u64,
    /// Memory a compile worker may allocate, bytes (its `RLIMIT_DATA`; a worker over it
    /// dies and the upload is refused `compile-failed`). 2 GiB: Cranelift takes tens of
    /// MB for real policies; the bound is for inputs built to blow it up. Only compiles in
    /// a worker process are bounded (`switchyard serve` compiles in one).
    pub compile_memory_bytes: u64,
    /// Instances the pooling allocator holds at once (policies × threads). 256 keeps the
    /// reserved address space modest (each slot reserves `max_memory_bytes` + guards).
    pub max_instances: u32,
    /// Address space reserved for each instance's linear memory, bytes (at least
    /// `max_memory_bytes`). 4 GiB, wasmtime's default on 64-bit hosts: with its guard
    /// region it covers every 32-bit address, so compiled code needs no bounds checks.
    /// Every pool slot reserves this plus a 32 MiB guard (address space, not memory), so
    /// about 30,000 slots fit a 47-bit address space at 4 GiB. Smaller, a slot reserves
    /// less and every load and store is checked, which slows the default guest's
    /// per-candidate slope (BENCHMARKS.md, "Guest call overhead").
    pub memory_reservation_bytes: u64,
    /// The compiler uploads are compiled with (see [`Compiler`]). An artifact cached by
    /// one is never loaded by the other (the cache's key includes the engine's settings;
    /// `tiered` caches Cranelift's code, under `cranelift`'s key): switching recompiles
    /// each version once, in the background.
    pub compiler: Compiler,
    /// Functions Cranelift compiled, kept in memory for later compiles that contain them
    /// (see [`FunctionCache`]), bytes. 64 MiB: the default policy's ~270–300 functions
    /// take 0.5–0.6 MB, and more than half of a Rust policy's functions are the SDK's,
    /// shared by every one; so the functions of ~100 policies fit, more as they share. 0
    /// turns the cache off. Winch's compiles do not use it.
    pub function_cache_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_component_bytes: 4 << 20,
            max_memory_bytes: 64 << 20,
            max_table_elements: 20_000,
            max_wasm_stack_bytes: 512 << 10,
            budget: Budget::Both,
            fuel_base: 2_000_000,
            fuel_per_unit: 20_000,
            max_candidates_per_call: 16_384,
            max_prefix_hashes_per_call: 16_384,
            max_fuel_per_call: 200_000_000,
            fuel_per_import_call: 6_000,
            fuel_per_import_byte: 2,
            call_deadline_ms: 150,
            epoch_tick_ms: 1,
            compile_timeout_ms: 10_000,
            compile_memory_bytes: 2 << 30,
            max_instances: 256,
            memory_reservation_bytes: 4 << 30,
            compiler: Compiler::Cranelift,
            function_cache_bytes: 64 << 20,
        }
    }
}

/// What a call's fuel allowance is computed from: what the host really passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkUnits {
    /// Candidate rows passed to the call.
    pub candidates: usize,
    /// Prefix hashes the request carries (what `prefix-hashes()` would deliver).
    pub prefix_hashes: usize,
}

impl Limits {
    /// A call's fuel allowance: `fuel_base + fuel_per_unit × (candidates + hashes)`, each
    /// count capped (`max_candidates_per_call`, `max_prefix_hashes_per_call`), and the
    /// whole never above `max_fuel_per_call`. An instance may add what its earlier calls
    /// left unused (see `GuestScorer`), still never above `max_fuel_per_call`.
    pub fn fuel_for(&self, units: WorkUnits) -> u64 {
        let capped = |n: usize, cap: u64| (n as u64).min(cap);
        let units = capped(units.candidates, self.max_candidates_per_call)
            .saturating_add(capped(units.prefix_hashes, self.max_prefix_hashes_per_call));
        self.fuel_base.saturating_add(self.fuel_per_unit.saturating_mul(units)).min(self.max_fuel_per_call)
    }

    /// Fuel for a call with no batch (instantiation, `configure`, `describe`).
    pub fn fuel_base_call(&self) -> u64 {
        self.fuel_base.min(self.max_fuel_per_call)
    }

    /// Fuel an import answer costs: the fixed charge plus `bytes` copied into the guest.
    pub fn import_fuel(&self, bytes: usize) -> u64 {
        self.fuel_per_import_call.saturating_add(self.fuel_per_import_byte.saturating_mul(bytes as u64))
    }

    /// Refuses the limits a zero would break (every instantiation refused, every call out
    /// of budget at once, no ticking clock), naming the field: the engine's callers (the
    /// CLI, `serve`, an embedding router) all get the same refusal.
    pub fn validate(&self) -> Result<(), String> {
        let positive: [(&str, u64); 7] = [
            ("max_component_bytes", self.max_component_bytes as u64),
            ("max_memory_bytes", self.max_memory_bytes as u64),
            ("max_wasm_stack_bytes", self.max_wasm_stack_bytes as u64),
            ("max_fuel_per_call", self.max_fuel_per_call),
            ("call_deadline_ms", self.call_deadline_ms),
            ("epoch_tick_ms", self.epoch_tick_ms),
            ("max_instances", u64::from(self.max_instances)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("limits.{name}: must be at least 1"));
        }
        if self.compiler == Compiler::Tiered && !self.budget.uses_epoch() {
            return Err(format!(
                "limits.compiler: `tiered` first runs uploads on Winch's code, whose fuel counts less \
                 of its work; it needs the deadline (budget = \"both\" or \"epoch\", not {:?})",
                self.budget
            ));
        }
        if self.memory_reservation_bytes < self.max_memory_bytes as u64 {
            return Err(format!(
                "limits.memory_reservation_bytes: {} is under max_memory_bytes ({}); a memory cannot grow past its reservation",
                self.memory_reservation_bytes, self.max_memory_bytes
            ));
        }
        Ok(())
    }

    /// Deadline in epoch ticks (at least one).
    pub fn deadline_ticks(&self) -> u64 {
        (self.call_deadline_ms / self.epoch_tick_ms).max(1)
    }
}

/// What one component instance may hold. Every shipped and test guest built by
/// `wit-component` fits (the test suite instantiates each); the pool's totals and each
/// Store's limits both come from here.
pub(crate) struct PerComponent {
    pub(crate) core_instances: u32,
    pub(crate) memories: u32,
    pub(crate) tables: u32,
}

/// How much of a dropped instance's table is zeroed in place rather than decommitted:
/// one page. At most one page per table slot ever used stays resident, whatever a guest
/// grows its table to: with two table slots per instance slot, ≤ 8 KiB per instance slot
/// (~81 MiB at the service's default pool of 10,305: 64 selections, 10,240 idle, 1 compile).
const TABLE_KEEP_RESIDENT_BYTES: usize = 4096;

/// The caps of [`PerComponent`].
pub(crate) const PER_COMPONENT: PerComponent = PerComponent { core_instances: 4, memories: 1, tables: 2 };

/// The wasmtime engine with Switchyard's settings, and its epoch ticker.
#[derive(Clone)]
pub struct PolicyEngine {
    engine: Engine,
    limits: Arc<Limits>,
    cache: Option<ArtifactCache>,
    /// Cranelift's compiled functions, shared by this engine's compiles.
    function_cache: Option<Arc<FunctionCache>>,
    /// With `compiler = "tiered"`: the Winch engine uploads are first compiled by. Its own
    /// pool of `max_instances` slots (an engine's instances live in its own pool), no
    /// artifact cache (its code is never kept past the swap).
    first_tier: Option<Arc<PolicyEngine>>,
    /// Where this engine compiles, when not in-process: worker processes, and which of
    /// their engine's tiers is this one.
    workers: Option<(Arc<CompileWorkers>, Tier)>,
}

impl PolicyEngine {
    /// An engine enforcing `limits` (its pooling allocator sized from them), with a thread
    /// ticking its epoch every `epoch_tick_ms` when the budget has a deadline. Fails if
    /// wasmtime refuses the configuration.
    pub fn new(limits: Limits) -> Result<Self> {
        limits.validate().map_err(anyhow::Error::msg)?;
        let mut config = Config::new();
        // Cranelift at speed: policies are small, scoring is the hot path. Or Winch, when
        // uploads must serve within milliseconds.
        config.strategy(match limits.compiler.of_code() {
            Compiler::Winch => Strategy::Winch,
            Compiler::Cranelift | Compiler::Tiered => Strategy::Cranelift,
        });
        config.cranelift_opt_level(OptLevel::Speed);
        let function_cache = (limits.compiler.of_code() == Compiler::Cranelift
            && limits.function_cache_bytes > 0)
            .then(|| {
                Arc::new(FunctionCache::new(
                    usize::try_from(limits.function_cache_bytes).unwrap_or(usize::MAX),
                ))
            });
        if let Some(cache) = &function_cache {
            config
                .enable_incremental_compilation(Arc::clone(cache) as Arc<dyn wasmtime::CacheStore>)
                .map_err(|e| anyhow::anyhow!("enabling the function cache: {e:#}"))?;
        }
        // Functions compile on all cores: faster on 2 (docs/benchmarks-history.md, "Two
        // compilers"). But not the tier-ups of `tiered`: they run in the background in the
        // idle CPU class ([`lower_thread_priority`]) on their own thread, and rayon's
        // shared threads would run them at normal priority, ahead of the uploads' Winch
        // compiles.
        config.parallel_compilation(limits.compiler != Compiler::Tiered);
        // `+simd128` guests vectorise the per-candidate loops.
        config.wasm_simd(true);
        // No component-model async: it makes every call dearer, and no guest needs it.
        config.concurrency_support(false);
        config.consume_fuel(limits.budget.uses_fuel());
        config.epoch_interruption(limits.budget.uses_epoch());
        config.max_wasm_stack(limits.max_wasm_stack_bytes);
        config.memory_reservation(limits.memory_reservation_bytes);
        // A linear memory starts as a copy of the data segments, not as a copy-on-write
        // mapping of an image. With an image, each first write to a data page is a
        // copy-on-write fault that flushes the old mapping from every core running one of
        // our threads (an interrupt each), and an instance in a slot another component used
        // last maps its image again. In a server's process, whose other cores run its other
        // threads, a fresh instance of the default policy is ready sooner without the image
        // (docs/benchmarks-history.md, "TLB shootdowns on a fresh instance"); our guests'
        // data segments are a few KiB to copy, and the copy is charged to the guest's fuel.
        config.memory_init_cow(false);
        // Four frames: the innermost locate a trap for the tenant (the fault message lists
        // their offsets). Capturing and symbolising wasmtime's default 20 is much of the
        // work of recovering from a trap (`cargo bench --bench sandbox -- recovery`;
        // docs/benchmarks-history.md, "Recovery after a trap").
        config.wasm_backtrace_max_frames(std::num::NonZeroUsize::new(4));
        // Pooling: instantiation is a few µs (slots are pre-reserved and reused), which is
        // what makes "drop the Store after a trap, instantiate fresh" cheap.
        // Each total is `max_instances` times what one component instance may hold, so
        // `max_instances` instances always fit, whatever their shape: a component bigger
        // than the caps is refused when it is loaded, never a cause of another tenant's
        // `overloaded`.
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances.saturating_mul(PER_COMPONENT.core_instances))
            .total_memories(limits.max_instances.saturating_mul(PER_COMPONENT.memories))
            .total_tables(limits.max_instances.saturating_mul(PER_COMPONENT.tables))
            .max_core_instances_per_component(PER_COMPONENT.core_instances)
            .max_memories_per_component(PER_COMPONENT.memories)
            .max_tables_per_component(PER_COMPONENT.tables)
            .max_memory_size(limits.max_memory_bytes)
            .table_elements(limits.max_table_elements)
            // A dropped instance's table is zeroed in place up to one page (512 elements;
            // our guests' tables are far smaller), not given back with `madvise`, which
            // flushes the TLB of every core running one of our threads.
            .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine =
            Engine::new(&config).map_err(|e| anyhow::anyhow!("configuring the wasmtime engine: {e:#}"))?;
        if limits.budget.uses_epoch() {
            spawn_epoch_ticker(&engine, Duration::from_millis(limits.epoch_tick_ms));
        }
        let first_tier = match limits.compiler {
            Compiler::Tiered => {
                Some(Arc::new(PolicyEngine::new(Limits { compiler: Compiler::Winch, ..limits.clone() })?))
            }
            Compiler::Cranelift | Compiler::Winch => None,
        };
        Ok(Self { engine, limits: Arc::new(limits), cache: None, function_cache, first_tier, workers: None })
    }

    /// Compiles in worker processes started by `command` (this program serving
    /// [`crate::compile_worker_main::serve_worker`]) instead of on a thread of this process,
    /// its first tier's compiles too: a compile past `compile_timeout_ms` is killed there,
    /// and its CPU and memory are bounded (see [`crate::compile_worker`]).
    pub fn with_compile_workers(mut self, command: WorkerCommand) -> Self {
        // `Limits` always serialises (plain numbers and names).
        let limits = serde_json::to_value(&*self.limits).unwrap_or_default();
        let workers = Arc::new(CompileWorkers::new(command, limits, self.limits.compile_memory_bytes));
        if let Some(first) = &self.first_tier {
            let mut first = (**first).clone();
            first.workers = Some((Arc::clone(&workers), Tier::First));
            self.first_tier = Some(Arc::new(first));
        }
        self.workers = Some((workers, Tier::Main));
        self
    }

    /// The worker processes this engine compiles in, if any.
    pub fn compile_workers(&self) -> Option<&CompileWorkers> {
        self.workers.as_ref().map(|(w, _)| &**w)
    }

    pub(crate) fn compile_in(&self) -> Option<(&CompileWorkers, Tier)> {
        self.workers.as_ref().map(|(w, tier)| (&**w, *tier))
    }

    /// What the cache of Cranelift's compiled functions holds and how often it answered
    /// (the compile workers' caches, when it compiles in workers); `None` when it is off
    /// (`function_cache_bytes = 0`, or Winch's code).
    pub fn function_cache_stats(&self) -> Option<FunctionCacheStats> {
        let own = self.own_function_cache_stats()?;
        Some(self.compile_workers().map_or(own, CompileWorkers::function_cache_stats))
    }

    /// This process's own function cache.
    pub(crate) fn own_function_cache_stats(&self) -> Option<FunctionCacheStats> {
        self.function_cache.as_ref().map(|c| c.stats())
    }

    /// With `compiler = "tiered"`, the engine that compiles an upload first (Winch),
    /// for its first selections until this engine's compilation replaces it.
    pub fn first_tier(&self) -> Option<&PolicyEngine> {
        self.first_tier.as_deref()
    }

    /// The limits, shared (a Store's state keeps them for the import charges).
    pub(crate) fn shared_limits(&self) -> Arc<Limits> {
        Arc::clone(&self.limits)
    }

    /// Caches compiled components in `cache` (see [`ArtifactCache`]).
    pub fn with_artifact_cache(mut self, cache: ArtifactCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Where compiled components are cached, if anywhere.
    pub fn artifact_cache(&self) -> Option<&ArtifactCache> {
        self.cache.as_ref()
    }

    /// The wasmtime engine itself.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The limits every component and call of this engine runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// Gives the calling thread (and the threads it starts after this, which inherit it)
/// Linux's idle scheduling class, `SCHED_IDLE`, or failing that the lowest priority, nice
/// 19: for background compiles, which should take only the CPU that uploads and
/// selections leave (an idle-class thread runs only when no other thread wants the CPU,
/// and yields to one that wakes at once). Both are per-thread on Linux. Whether either
/// took.
pub fn lower_thread_priority() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` that sched_setscheduler only reads; pid 0
    // is the calling thread. gettid and setpriority have no memory preconditions. Moving
    // the calling thread to a lower class or priority needs no privilege.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
            || libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) == 0
    }
}

/// Advances the engine's epoch every `tick` until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("switchyard-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .expect("spawning the epoch thread");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_that_would_break_the_engine_is_refused_by_name() {
        assert!(Limits::default().validate().is_ok());
        let zero = Limits { max_instances: 0, ..Limits::default() };
        let e = PolicyEngine::new(zero).err().expect("no pool slot at all");
        assert_eq!(e.to_string(), "limits.max_instances: must be at least 1");
        let zero = Limits { epoch_tick_ms: 0, ..Limits::default() };
        assert_eq!(zero.validate().unwrap_err(), "limits.epoch_tick_ms: must be at least 1");
        let small = Limits { memory_reservation_bytes: 1 << 20, ..Limits::default() };
        assert!(
            small.validate().unwrap_err().starts_with("limits.memory_reservation_bytes: 1048576 is under")
        );
    }
}
