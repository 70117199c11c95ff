//! A policy component as a [`Scorer`]: one Store per instance, budgets on every call,
//! and a fresh instance after any trap.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchyard_guest_sdk::{ErrorKind, Facts, InputGroups, PolicyInfo, Pool, WorkerRank};
use wasmtime::component::{ComponentExportIndex, ComponentType, Func, Instance, Lower, TypedFunc};
use wasmtime::{Store, StoreLimitsBuilder, Trap};

use crate::component::{ExportIndices, LoadError, LoadErrorKind, PolicyComponent, WORLD};
use crate::engine::{Limits, PER_COMPONENT, WorkUnits};
use crate::lists::{EmptyList, PackedColumns};
use crate::selection::{Call, CallReport, Fault, FaultKind, Scorer};

use crate::host::{HostState, IMPORTS, wit};

/// Largest error message (or other string/list answer beyond the costs) lifted from a
/// guest, bytes: anything longer is refused before it is copied. Messages are then cut to
/// [`MESSAGE_BYTES`].
const MAX_LIFTED_MESSAGE_BYTES: usize = 4 << 10;

/// Longest error message kept from a guest, bytes.
const MESSAGE_BYTES: usize = 1 << 10;

/// The `candidates` record, lowered straight from the host's columns (borrowed, so the
/// only copy is the one into guest memory; one guest `realloc` per non-empty list).
#[derive(ComponentType, Lower)]
#[component(record)]
struct CandidatesRef<'a> {
    #[component(name = "worker-id")]
    worker_id: EmptyList<'a, u64>,
    columns: PackedColumns<'a>,
    #[component(name = "preferred-multiplier")]
    preferred_multiplier: EmptyList<'a, f64>,
}

type ConfigureParams<'a> = (&'a str,);
type ConfigureResults = (Result<(), wit::PolicyError>,);
type DescribeResults = (wit::PolicyInfo,);
type ScoreParams<'a> = (wit::RequestFacts, CandidatesRef<'a>);
type ScoreResults = (Result<Vec<f64>, wit::PolicyError>,);
type FilterResults = (Result<Vec<bool>, wit::PolicyError>,);
type OnSelectedParams = (wit::RequestFacts, wit::WorkerRank);

/// One instance's policy functions.
#[derive(Clone, Copy)]
struct Funcs {
    configure: Func,
    describe: Func,
    score: Func,
    filter: Func,
    on_selected: Func,
}

impl Funcs {
    fn of(store: &mut Store<HostState>, instance: &Instance, at: &ExportIndices) -> Result<Self, Fault> {
        let mut func = |index: &ComponentExportIndex| {
            instance
                .get_func(&mut *store, index)
                .ok_or_else(|| Fault::new(FaultKind::Trap, "a policy export is not a function"))
        };
        Ok(Self {
            configure: func(&at.configure)?,
            describe: func(&at.describe)?,
            score: func(&at.score)?,
            filter: func(&at.filter)?,
            on_selected: func(&at.on_selected)?,
        })
    }

    /// Checks every function's type against the contract's, so that calls can use
    /// `TypedFunc::new_unchecked` with borrowed parameters. The types are the
    /// component's: one check holds for all its instances.
    fn typecheck(&self, store: &Store<HostState>) -> Result<(), Fault> {
        let wrong = |name: &str, e: wasmtime::Error| Fault::new(FaultKind::Trap, format!("`{name}`: {e:#}"));
        self.configure
            .typed::<ConfigureParams<'static>, ConfigureResults>(store)
            .map_err(|e| wrong("configure", e))?;
        self.describe.typed::<(), DescribeResults>(store).map_err(|e| wrong("describe", e))?;
        self.score.typed::<ScoreParams<'static>, ScoreResults>(store).map_err(|e| wrong("score", e))?;
        self.filter.typed::<ScoreParams<'static>, FilterResults>(store).map_err(|e| wrong("filter", e))?;
        self.on_selected.typed::<OnSelectedParams, ()>(store).map_err(|e| wrong("on-selected", e))?;
        Ok(())
    }
}

/// One live instance.
struct Live {
    store: Store<HostState>,
    funcs: Funcs,
    /// Fuel this instance's earlier calls left unused, which a later call may spend (never
    /// past `max_fuel_per_call`): state that grows by amortised steps (a hash table that
    /// doubles and rehashes) pays for the step from what the cheap calls saved.
    saved_fuel: u64,
}

/// A guest policy: a component, its parameters, and (after the first call) a live instance.
pub struct GuestScorer {
    name: String,
    component: PolicyComponent,
    parameters: String,
    info: PolicyInfo,
    live: Option<Live>,
    stats: Arc<GuestStats>,
}

/// A guest's counters, shared so they stay readable once the scorer is boxed into a
/// selector.
#[derive(Debug, Default)]
pub struct GuestStats {
    /// Instances created, the first included: each one after the first is a recovery.
    instantiations: AtomicU64,
    /// Fuel the last call consumed, import charges included (0 without a fuel budget).
    last_fuel: AtomicU64,
    /// The imports the last call called, a bit each (`host::IMPORTS`).
    last_imports: AtomicU8,
    /// How long the latest instantiation took, ns (start function, `configure` and
    /// `describe` included): after a fault, the cost of recovering.
    last_instantiation_ns: AtomicU64,
}

impl GuestStats {
    /// Instances created so far (1 + recoveries after faults).
    pub fn instantiations(&self) -> u64 {
        self.instantiations.load(Ordering::Relaxed)
    }
    /// Fuel consumed by the last call (the whole budget if it ran out).
    pub fn last_fuel(&self) -> u64 {
        self.last_fuel.load(Ordering::Relaxed)
    }
    /// Duration of the latest instantiation: after a fault, the recovery cost.
    pub fn last_instantiation(&self) -> Duration {
        Duration::from_nanos(self.last_instantiation_ns.load(Ordering::Relaxed))
    }
}

/// Where instantiation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Instantiate,
    /// The policy functions' types (checked on a component's first instance).
    Types,
    Configure,
}

impl GuestScorer {
    /// Instantiates and configures the component; a configure error or a trap in the
    /// start function or `configure` refuses it.
    pub fn new(
        name: impl Into<String>,
        component: PolicyComponent,
        parameters: &str,
    ) -> Result<Self, LoadError> {
        let mut scorer = Self {
            name: name.into(),
            component,
            parameters: parameters.to_string(),
            info: PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: false },
            live: None,
            stats: Arc::default(),
        };
        let live = scorer.instantiate().map_err(|(stage, fault)| match (stage, fault.kind) {
            (_, FaultKind::PolicyError) => LoadError::new(LoadErrorKind::ConfigureFailed, fault.message),
            // `configure` ran and faulted (spun, trapped, allocated without bound).
            (Stage::Configure, _) => LoadError::faulted(LoadErrorKind::ConfigureFailed, fault),
            // The start function (or instantiation itself) faulted.
            (Stage::Instantiate, _) => LoadError::faulted(LoadErrorKind::InstantiateFailed, fault),
            // The interface's names are right but not its types: nothing of it was called.
            (Stage::Types, _) => LoadError::new(
                LoadErrorKind::WrongWorld,
                format!("does not match `{WORLD}`: {}", fault.message),
            ),
        })?;
        scorer.live = Some(live);
        Ok(scorer)
    }

    /// Another scorer of the same component and parameters with counters of its own and
    /// no instance yet: it instantiates on its first call, and a failure then is that
    /// call's fault. For pools of instances of a version that [`GuestScorer::new`] has
    /// already accepted.
    pub fn sibling(&self) -> Self {
        Self {
            name: self.name.clone(),
            component: self.component.clone(),
            parameters: self.parameters.clone(),
            info: self.info,
            live: None,
            stats: Arc::default(),
        }
    }

    /// Instances created so far (1 + recoveries after faults).
    pub fn instantiations(&self) -> u64 {
        self.stats.instantiations()
    }

    /// Fuel consumed by the last call (the budget itself if it ran out).
    pub fn last_fuel(&self) -> u64 {
        self.stats.last_fuel()
    }

    /// The counters, shared: still readable after the scorer moves into a selector.
    pub fn stats(&self) -> Arc<GuestStats> {
        Arc::clone(&self.stats)
    }

    /// The component it instantiates.
    pub fn component(&self) -> &PolicyComponent {
        &self.component
    }

    fn instantiate(&mut self) -> Result<Live, (Stage, Fault)> {
        let started = Instant::now();
        let live = self.instantiate_inner();
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.last_instantiation_ns.store(ns, Ordering::Relaxed);
        live
    }

    fn instantiate_inner(&mut self) -> Result<Live, (Stage, Fault)> {
        let at = |stage: Stage| move |fault: Fault| (stage, fault);
        let engine = self.component.engine();
        let limits = engine.limits();
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.max_memory_bytes)
            .table_elements(limits.max_table_elements)
            // One component per Store: its caps are the pool's (`PER_COMPONENT`).
            .instances(PER_COMPONENT.core_instances as usize)
            .memories(PER_COMPONENT.memories as usize)
            .tables(PER_COMPONENT.tables as usize)
            // An out-of-memory guest traps cleanly instead of seeing `memory.grow` fail.
            .trap_on_grow_failure(true)
            .build();
        let state = HostState {
            limits: store_limits,
            facts: None,
            candidates: 0,
            engine_limits: engine.shared_limits(),
            imports_read: 0,
        };
        let mut store = Store::new(engine.engine(), state);
        store.limiter(|s| &mut s.limits);
        // What `configure` and `describe` may hand back: an error message, bounded.
        store.set_hostcall_fuel(MAX_LIFTED_MESSAGE_BYTES);
        self.stats.instantiations.fetch_add(1, Ordering::Relaxed);
        // The budget is armed before instantiating: a start function is a call like any other.
        arm(&mut store, limits, limits.fuel_base_call()).map_err(at(Stage::Instantiate))?;
        let instance = self
            .component
            .instance_pre()
            .instantiate(&mut store)
            .map_err(|e| (Stage::Instantiate, classify(e)))?;
        let funcs = Funcs::of(&mut store, &instance, self.component.export_indices())
            .map_err(at(Stage::Instantiate))?;
        self.component.types_checked(|| funcs.typecheck(&store)).map_err(at(Stage::Types))?;
        arm(&mut store, limits, limits.fuel_base_call()).map_err(at(Stage::Configure))?;
        // SAFETY: `types_checked` checked these functions' types against exactly these
        // parameter and result types (with the 'static lifetime) on this component.
        let configure: TypedFunc<ConfigureParams<'_>, ConfigureResults> =
            unsafe { TypedFunc::new_unchecked(funcs.configure) };
        configure
            .call(&mut store, (&self.parameters,))
            .map_err(|e| (Stage::Configure, classify(e)))?
            .0
            .map_err(|e| (Stage::Configure, Fault::new(FaultKind::PolicyError, policy_error(&e))))?;
        arm(&mut store, limits, limits.fuel_base_call()).map_err(at(Stage::Configure))?;
        // SAFETY: as above.
        let describe: TypedFunc<(), DescribeResults> = unsafe { TypedFunc::new_unchecked(funcs.describe) };
        let (info,) = describe.call(&mut store, ()).map_err(|e| (Stage::Configure, classify(e)))?;
        self.info = PolicyInfo {
            inputs: input_groups(info.inputs),
            filters: info.filters,
            wants_commits: info.wants_commits,
        };
        Ok(Live { store, funcs, saved_fuel: 0 })
    }

    /// Runs `f` on the live instance with `allowance` fuel (plus what the instance saved,
    /// never past `max_fuel_per_call`) and at most `answer_bytes` lifted back; after any
    /// fault the instance is dropped (a trapped Store is poisoned) and the next call
    /// instantiates afresh.
    fn with_live<R>(
        &mut self,
        call: &Call<'_>,
        allowance: u64,
        answer_bytes: usize,
        f: impl FnOnce(&mut Live) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        if self.live.is_none() {
            self.live = Some(self.instantiate().map_err(|(_stage, fault)| fault)?);
        }
        // Disjoint field borrows: no per-call copy of the limits on the hot path.
        let limits = self.component.engine().limits();
        let live = self.live.as_mut().expect("just ensured");
        let budget = allowance.saturating_add(live.saved_fuel).min(limits.max_fuel_per_call);
        if let Err(fault) = arm(&mut live.store, limits, budget) {
            self.live = None;
            return Err(fault);
        }
        live.store.set_hostcall_fuel(answer_bytes.max(MAX_LIFTED_MESSAGE_BYTES));
        let ptr = NonNull::from(&call.facts as &dyn Facts);
        // SAFETY: only the lifetime is erased. The pointer is cleared right after the call,
        // while `call.facts` is still borrowed, and only imports called during `f` read it.
        let ptr: NonNull<dyn Facts + 'static> = unsafe { std::mem::transmute(ptr) };
        let state = live.store.data_mut();
        state.facts = Some(ptr);
        state.candidates = call.columns.len();
        state.imports_read = 0;
        let result = f(live);
        let state = live.store.data_mut();
        state.facts = None;
        self.stats.last_imports.store(state.imports_read, Ordering::Relaxed);
        let used = budget.saturating_sub(live.store.get_fuel().unwrap_or(budget));
        self.stats.last_fuel.store(used, Ordering::Relaxed);
        live.saved_fuel =
            live.saved_fuel.saturating_add(allowance).saturating_sub(used).min(limits.max_fuel_per_call);
        let result = result.map_err(|e| classify_call(e, answer_bytes));
        if result.is_err() {
            // The Store is poisoned after a trap: drop it; the next call starts afresh.
            self.live = None;
        }
        result
    }
}

/// What a call's fuel scales with: the candidates passed and the prefix hashes the
/// request carries (a policy that walks them, like a prefix tree's insert on commit, does
/// work per hash) — what the host really hands over, not what the request claims.
fn work_units(call: &Call<'_>) -> WorkUnits {
    WorkUnits {
        candidates: call.columns.len(),
        prefix_hashes: call.request.prefix_hashes().map_or(0, <[u64]>::len),
    }
}

/// Sets the call's budget: `fuel` and/or the epoch deadline.
fn arm(store: &mut Store<HostState>, limits: &Limits, fuel: u64) -> Result<(), Fault> {
    if limits.budget.uses_fuel() {
        store.set_fuel(fuel).map_err(|e| Fault::new(FaultKind::Trap, format!("{e:#}")))?;
    }
    if limits.budget.uses_epoch() {
        store.set_epoch_deadline(limits.deadline_ticks());
        store.epoch_deadline_trap();
    }
    Ok(())
}

fn input_groups(flags: wit::InputGroups) -> InputGroups {
    let mut groups = InputGroups::NONE;
    for (flag, group) in [
        (wit::InputGroups::CACHE, InputGroups::CACHE),
        (wit::InputGroups::LOAD, InputGroups::LOAD),
        (wit::InputGroups::AFFINITY, InputGroups::AFFINITY),
    ] {
        if flags.contains(flag) {
            groups = groups | group;
        }
    }
    groups
}

/// A guest's own error as one bounded line (the message cut to [`MESSAGE_BYTES`]).
fn policy_error(e: &wit::PolicyError) -> String {
    let kind = match e.kind {
        wit::ErrorKind::InvalidParameters => ErrorKind::InvalidParameters,
        wit::ErrorKind::InvalidInput => ErrorKind::InvalidInput,
        wit::ErrorKind::Internal => ErrorKind::Internal,
    };
    let message = truncated(e.message.lines().next().unwrap_or(""), MESSAGE_BYTES);
    switchyard_guest_sdk::PolicyError { kind, message }.to_string()
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Wasmtime's refusal to lift more than the call's `hostcall_fuel` (its error type is
/// private; its text is stable).
const ANSWER_TOO_LARGE: &str = "too much data is being copied between the host and the guest";

/// Maps the error of a call that may hand back `answer_bytes` to a fault: an answer
/// larger than that was refused before it was copied.
fn classify_call(error: wasmtime::Error, answer_bytes: usize) -> Fault {
    // A trap is never the refusal, and its chain (a backtrace) is costly to format: only
    // `classify` formats it, once.
    if error.downcast_ref::<Trap>().is_none() && format!("{error:#}").contains(ANSWER_TOO_LARGE) {
        let max = answer_bytes.max(MAX_LIFTED_MESSAGE_BYTES);
        return Fault::new(
            FaultKind::InvalidOutput,
            format!(
                "the policy's answer is larger than {max} bytes (a list longer than the candidates, or an error message over {MAX_LIFTED_MESSAGE_BYTES} bytes); refused before copying"
            ),
        );
    }
    classify(error)
}

/// Maps a wasmtime error from a guest call to a fault kind.
fn classify(error: wasmtime::Error) -> Fault {
    if error.downcast_ref::<wasmtime::PoolConcurrencyLimitError>().is_some() {
        // The engine's pool is full: the host's condition, not the policy's fault.
        return Fault::new(FaultKind::Overloaded, one_line(&format!("instantiating: {error:#}")));
    }
    let kind = match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => FaultKind::Fuel,
        Some(Trap::Interrupt) => FaultKind::Deadline,
        Some(Trap::StackOverflow) => FaultKind::Stack,
        Some(_) => FaultKind::Trap,
        None => {
            // `trap_on_grow_failure` reports a refused memory/table growth as an error
            // whose text names the growth ("forcing trap when growing memory to …"); the
            // pooling allocator refuses a memory or table whose minimum exceeds the limit
            // ("… exceeds …"). Everything else is a plain trap.
            let text = format!("{error:#}");
            let resource = text.contains("memory") || text.contains("table");
            if resource && (text.contains("grow") || text.contains("exceeds")) {
                FaultKind::Memory
            } else {
                FaultKind::Trap
            }
        }
    };
    Fault::new(kind, one_line(&format!("{error:#}")))
}

/// Error chains with wasm backtraces span lines; operators get one line (`policy
/// check` and `select` print exactly one), frames separated by `; `, capped at 1 KiB.
fn one_line(text: &str) -> String {
    let line = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    truncated(&line, MESSAGE_BYTES)
}

fn facts_abi(request: &crate::selection::SelectionRequest) -> wit::RequestFacts {
    let f = request.facts();
    wit::RequestFacts {
        prompt_tokens: f.prompt_tokens,
        block_size: f.block_size,
        request_blocks: f.request_blocks,
        expected_output_tokens: f.expected_output_tokens,
        pinned: f.pinned.map(|w| wit::WorkerRank { worker_id: w.worker_id, dp_rank: w.dp_rank }),
        pool: match f.pool {
            Pool::Aggregated => wit::Pool::Aggregated,
            Pool::Prefill => wit::Pool::Prefill,
            Pool::Decode => wit::Pool::Decode,
        },
        seed: f.seed,
    }
}

fn candidates_abi<'a>(call: &'a Call<'_>) -> CandidatesRef<'a> {
    CandidatesRef {
        worker_id: EmptyList(call.columns.worker_ids()),
        columns: PackedColumns(call.columns),
        preferred_multiplier: EmptyList(call.columns.preferred_multiplier()),
    }
}

impl Scorer for GuestScorer {
    fn name(&self) -> &str {
        &self.name
    }

    fn info(&self) -> PolicyInfo {
        self.info
    }

    fn last_call(&self) -> Option<CallReport> {
        let read = self.stats.last_imports.load(Ordering::Relaxed);
        let imports = IMPORTS.iter().enumerate().filter(|(bit, _)| read & (1 << bit) != 0);
        Some(CallReport {
            fuel: self.stats.last_fuel(),
            imports: imports.map(|(_, name)| name.to_string()).collect(),
        })
    }

    fn score(&mut self, call: &Call<'_>, costs: &mut Vec<f64>) -> Result<(), Fault> {
        let params = (facts_abi(call.request), candidates_abi(call));
        let allowance = self.component.engine().limits().fuel_for(work_units(call));
        // At most one cost per candidate is lifted: a longer list is refused uncopied.
        let answer_bytes = call.columns.len().saturating_mul(size_of::<f64>());
        let out = self.with_live(call, allowance, answer_bytes, |live| {
            // SAFETY: `score` was type-checked against exactly these parameter and result
            // types (with the 'static lifetime) on this component (`Funcs::typecheck`).
            let typed: TypedFunc<ScoreParams<'_>, ScoreResults> =
                unsafe { TypedFunc::new_unchecked(live.funcs.score) };
            typed.call(&mut live.store, params).map(|(r,)| r)
        })?;
        match out {
            Ok(v) => {
                *costs = v;
                Ok(())
            }
            Err(e) => {
                // After any fault the instance goes, its own errors included.
                self.live = None;
                Err(Fault::new(FaultKind::PolicyError, policy_error(&e)))
            }
        }
    }

    fn filter(&mut self, call: &Call<'_>, keep: &mut Vec<bool>) -> Result<(), Fault> {
        let params = (facts_abi(call.request), candidates_abi(call));
        let allowance = self.component.engine().limits().fuel_for(work_units(call));
        let answer_bytes = call.columns.len();
        let out = self.with_live(call, allowance, answer_bytes, |live| {
            // SAFETY: as in `score`.
            let typed: TypedFunc<ScoreParams<'_>, FilterResults> =
                unsafe { TypedFunc::new_unchecked(live.funcs.filter) };
            typed.call(&mut live.store, params).map(|(r,)| r)
        })?;
        match out {
            Ok(v) => {
                *keep = v;
                Ok(())
            }
            Err(e) => {
                // After any fault the instance goes, its own errors included.
                self.live = None;
                Err(Fault::new(FaultKind::PolicyError, policy_error(&e)))
            }
        }
    }

    fn reset(&mut self) {
        self.live = None;
    }

    fn on_selected(&mut self, call: &Call<'_>, chosen: WorkerRank) -> Result<(), Fault> {
        let facts = facts_abi(call.request);
        let chosen = wit::WorkerRank { worker_id: chosen.worker_id, dp_rank: chosen.dp_rank };
        // A commit is a call like any other: its own allowance plus what the instance
        // saved, never past `max_fuel_per_call`.
        let allowance = self.component.engine().limits().fuel_for(work_units(call));
        self.with_live(call, allowance, 0, |live| {
            // SAFETY: as in `score`.
            let typed: TypedFunc<OnSelectedParams, ()> =
                unsafe { TypedFunc::new_unchecked(live.funcs.on_selected) };
            typed.call(&mut live.store, (facts, chosen))
        })
    }
}
