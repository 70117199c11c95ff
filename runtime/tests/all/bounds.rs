//! Every guest call has a hard bound, whatever the request: hostile guests
//! against ordinary and hostile requests, each selection answered (fail-open) within the
//! configured bound.
//!
//! The bound asserted is fuel (`last_fuel ≤ max_fuel_per_call`), which is exact; the
//! wall-clock checks are two orders of magnitude above what a bounded call takes here
//! (tens of ms), so they only catch an unbounded one (seconds to hours).

use std::time::{Duration, Instant};

use switchyard::{
    Budget, Decider, FailMode, FaultKind, GuardConfig, GuardedSelector, GuestScorer, GuestStats, Limits,
    PolicyComponent, PolicyEngine, SelectionRequest, WorkerTable,
};
use switchyard_test_util::requests::fleet;

use switchyard_test_util::fixtures::{component, engine, engine_with, hostile, native_default_pick, sample};

/// Far above any bounded call, far below an unbounded one.
const UNBOUNDED: Duration = Duration::from_secs(10);

/// The requests every hostile guest meets: the sample, and the tenant's own hostile
/// ones (`switchyard_test_util::requests`, which `--bench hostile` times).
fn requests() -> Vec<(&'static str, (WorkerTable, SelectionRequest))> {
    let mut all = vec![("sample", sample())];
    all.extend(switchyard_test_util::requests::hostile());
    all
}

/// An engine with fuel alone, for verdicts that must be the fuel's and not the deadline's
/// (this test's host code is unoptimised and the machine may be loaded).
fn fuel_only() -> &'static PolicyEngine {
    static ENGINE: std::sync::OnceLock<PolicyEngine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| engine_with(Limits { budget: Budget::Fuel, ..Limits::default() }))
}

fn fuel_only_guest(bytes: &[u8]) -> PolicyComponent {
    PolicyComponent::load(fuel_only(), bytes).unwrap()
}

fn guarded(bytes: &'static [u8], params: &str) -> (GuardedSelector, std::sync::Arc<GuestStats>) {
    guarded_on(component(bytes), params)
}

fn guarded_on(component: PolicyComponent, params: &str) -> (GuardedSelector, std::sync::Arc<GuestStats>) {
    let guest = GuestScorer::new("hostile", component, params).expect("instantiates");
    let stats = guest.stats();
    (switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default()), stats)
}

/// One selection (and its commit) of `component` on `request`: answered, by the fallback
/// with a fault of one of `kinds` (none: by the policy), its commit faulting with one of
/// `commits` (none: not at all), within the bound.
fn assert_bounded_on(
    what: &str,
    component: PolicyComponent,
    params: &str,
    (table, request): &(WorkerTable, SelectionRequest),
    kinds: &[FaultKind],
    commits: &[FaultKind],
) {
    let limits = component.engine().limits().clone();
    let (mut selector, stats) = guarded_on(component, params);
    let started = Instant::now();
    let decision = selector.select(table, request).unwrap_or_else(|e| panic!("{what}: not answered: {e}"));
    let kind = decision.fallback.as_ref().map(|f| f.kind);
    match kind {
        Some(kind) => assert!(kinds.contains(&kind), "{what}: {:?}", decision.fallback),
        None => assert!(kinds.is_empty(), "{what}: the policy answered"),
    }
    if kind.is_some() {
        assert_eq!(decision.decided_by, Decider::Fallback, "{what}");
        assert_eq!(decision.selection.chosen, native_default_pick(table, request), "{what}");
    }
    assert!(stats.last_fuel() <= limits.max_fuel_per_call, "{what}: {} fuel", stats.last_fuel());
    let commit_fault = selector.commit(table, request, decision.selection.chosen).expect("fail-open commit");
    match &commit_fault {
        Some(fault) => assert!(commits.contains(&fault.kind), "{what}: {fault:?}"),
        None => assert!(commits.is_empty(), "{what}: the commit ran"),
    }
    assert!(stats.last_fuel() <= limits.max_fuel_per_call, "{what}: commit {} fuel", stats.last_fuel());
    let took = started.elapsed();
    assert!(took < UNBOUNDED, "{what}: one selection took {took:?}");
}

/// [`assert_bounded_on`] with the default engine, whose budget is fuel and the deadline:
/// where fuel is expected, a loaded machine may see the deadline first (both are bounds).
fn assert_bounded(
    what: &str,
    bytes: &'static [u8],
    params: &str,
    case: &(WorkerTable, SelectionRequest),
    kinds: &[FaultKind],
    commits: &[FaultKind],
) {
    let widen = |kinds: &[FaultKind]| {
        let mut kinds = kinds.to_vec();
        if kinds.contains(&FaultKind::Fuel) {
            kinds.push(FaultKind::Deadline);
        }
        kinds
    };
    assert_bounded_on(what, component(bytes), params, case, &widen(kinds), &widen(commits));
}

#[test]
fn no_request_raises_a_spinning_guest_above_the_fuel_ceiling() {
    for (name, case) in requests() {
        assert_bounded(&format!("iloop, {name}"), hostile::ILOOP, "{}", &case, &[FaultKind::Fuel], &[]);
    }
}

#[test]
fn a_loop_on_any_import_is_charged_and_runs_out_of_fuel() {
    // Fuel alone, so the verdict is the charge's and not the deadline's (this test's host
    // code is unoptimised, so its imports are several times slower than a release build's).
    let component = fuel_only_guest(hostile::IMPORT_LOOP);
    let requests = requests();
    for import in ["prefix-hashes", "policy-class", "worker-capacity", "candidate-capacities"] {
        let params = format!(r#"{{"import": "{import}"}}"#);
        for (name, case) in &requests {
            let what = format!("import loop on {import}, {name}");
            assert_bounded_on(&what, component.clone(), &params, case, &[FaultKind::Fuel], &[]);
        }
    }
}

#[test]
fn with_the_default_budget_an_import_loop_is_stopped_by_fuel_or_the_deadline() {
    let case = fleet(1024, 131_072, 16, 8192);
    for import in ["prefix-hashes", "candidate-capacities"] {
        let params = format!(r#"{{"import": "{import}"}}"#);
        let kinds = [FaultKind::Fuel, FaultKind::Deadline];
        assert_bounded(
            &format!("{import}, default budget"),
            hostile::IMPORT_LOOP,
            &params,
            &case,
            &kinds,
            &[],
        );
    }
}

#[test]
fn a_long_loop_in_on_selected_is_bounded_like_any_call_and_contained() {
    for (name, case) in requests() {
        let what = format!("commit spin, {name}");
        assert_bounded(&what, hostile::COMMIT_SPIN, "{}", &case, &[], &[FaultKind::Fuel]);
    }
}

#[test]
fn a_leak_in_on_selected_is_stopped_by_the_memory_limit_and_every_selection_answered() {
    let (table, request) = sample();
    let (mut selector, stats) = guarded(hostile::COMMIT_LEAK, "{}");
    let mut memory_faults = 0;
    for i in 0..24 {
        let decision = selector.select(&table, &request).unwrap_or_else(|e| panic!("selection {i}: {e}"));
        assert_eq!(decision.decided_by, Decider::Policy, "selection {i}: the pick is the policy's");
        if let Some(fault) = selector.commit(&table, &request, decision.selection.chosen).unwrap() {
            assert_eq!(fault.kind, FaultKind::Memory, "{}", fault.message);
            memory_faults += 1;
        }
    }
    // 8 MiB a commit in a 64 MiB memory: a fault every few commits, then a fresh instance.
    assert!((3..=12).contains(&memory_faults), "{memory_faults} memory faults in 24 commits");
    assert_eq!(selector.counters().commit_faults, memory_faults);
    selector.select(&table, &request).unwrap();
    assert_eq!(stats.instantiations(), 1 + memory_faults, "a fresh instance after each fault");
}

/// Guests that build their huge answer need the fuel to build it: over a small batch
/// they run out first; over 1,024 workers they finish and the host refuses the answer.
const BUILDS_OR_REFUSED: [FaultKind; 2] = [FaultKind::Fuel, FaultKind::InvalidOutput];

#[test]
fn a_huge_error_message_is_refused_before_copying_and_a_long_one_cut_to_1_kib() {
    for (name, case) in requests() {
        let what = format!("huge error, {name}");
        assert_bounded(&what, hostile::HUGE_ERROR, "{}", &case, &BUILDS_OR_REFUSED, &[]);
    }
    let (table, request) = fleet(1024, 131_072, 16, 8192);
    let (mut selector, _) = guarded_on(fuel_only_guest(hostile::HUGE_ERROR), "{}");
    let fault = selector.select(&table, &request).unwrap().fallback.unwrap();
    assert_eq!(fault.kind, FaultKind::InvalidOutput, "{}", fault.message);
    assert!(fault.message.contains("refused before copying"), "{}", fault.message);

    let (mut selector, _) = guarded(hostile::HUGE_ERROR, r#"{"bytes": 3000}"#);
    let fault = selector.select(&table, &request).unwrap().fallback.unwrap();
    assert_eq!(fault.kind, FaultKind::PolicyError);
    assert!(fault.message.len() <= 1100, "{} bytes", fault.message.len());
    assert!(fault.message.ends_with("x…"), "cut, and says so: {}", &fault.message[fault.message.len() - 8..]);
}

#[test]
fn a_huge_result_list_is_refused_before_copying_and_a_wrong_length_one_named() {
    for (name, case) in requests() {
        let what = format!("huge result, {name}");
        assert_bounded(&what, hostile::HUGE_RESULT, "{}", &case, &BUILDS_OR_REFUSED, &[]);
    }
    let (table, request) = fleet(1024, 131_072, 16, 8192);
    let (mut selector, _) = guarded_on(fuel_only_guest(hostile::HUGE_RESULT), "{}");
    let fault = selector.select(&table, &request).unwrap().fallback.unwrap();
    assert_eq!(fault.kind, FaultKind::InvalidOutput, "{}", fault.message);
    assert!(fault.message.contains("refused before copying"), "{}", fault.message);
    let (table, request) = sample();
    let (mut selector, _) = guarded(hostile::HUGE_RESULT, r#"{"len": 10}"#);
    let fault = selector.select(&table, &request).unwrap().fallback.unwrap();
    assert_eq!(fault.kind, FaultKind::InvalidOutput);
    assert_eq!(fault.message, "returned 10 costs for 9 candidates");
}

#[test]
fn invalid_output_drops_the_instance_so_nan_on_the_sixth_call_faults_every_sixth_call() {
    let (table, request) = sample();
    let (mut selector, stats) = guarded(hostile::NAN_ONCE, r#"{"at": 6}"#);
    let mut faulted = Vec::new();
    for i in 1..=60 {
        let decision = selector.select(&table, &request).unwrap();
        if let Some(fault) = decision.fallback {
            assert_eq!(fault.kind, FaultKind::InvalidOutput, "{}", fault.message);
            faulted.push(i);
        }
    }
    assert_eq!(faulted, (1..=10).map(|k| 6 * k).collect::<Vec<_>>());
    selector.select(&table, &request).unwrap();
    assert_eq!(stats.instantiations(), 11, "a fresh instance after each of the 10 faults");
}

#[test]
fn bulk_memory_work_is_metered_by_the_byte() {
    // Wasmtime charges `memory.fill` and `memory.copy` fuel per byte, so a loop filling
    // the whole memory runs out of fuel like any loop (and the deadline stands behind it).
    for (name, case) in requests() {
        let what = format!("memory fill, {name}");
        assert_bounded(&what, hostile::MEMORY_FILL, "{}", &case, &[FaultKind::Fuel], &[]);
    }
}

#[test]
fn the_fuel_of_a_call_grows_with_what_the_host_passes_up_to_the_ceiling() {
    let limits = Limits::default();
    let units = |candidates, prefix_hashes| switchyard::WorkUnits { candidates, prefix_hashes };
    let base = limits.fuel_for(units(0, 0));
    assert_eq!(base, limits.fuel_base);
    assert_eq!(limits.fuel_for(units(10, 5)), base + 15 * limits.fuel_per_unit);
    // Caps: a bigger batch or a longer hash list gets no more, and nothing passes the ceiling.
    let capped = limits.max_candidates_per_call as usize;
    assert_eq!(limits.fuel_for(units(capped + 1, 0)), limits.fuel_for(units(capped, 0)));
    assert_eq!(limits.fuel_for(units(usize::MAX, usize::MAX)), limits.max_fuel_per_call);
    // The engine in use applies exactly these limits.
    assert_eq!(engine().limits(), &limits);
    let tight =
        engine_with(Limits { budget: Budget::Fuel, max_fuel_per_call: 3_000_000, ..Limits::default() });
    let guest =
        GuestScorer::new("iloop", PolicyComponent::load(&tight, hostile::ILOOP).unwrap(), "{}").unwrap();
    let stats = guest.stats();
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    let (table, request) = fleet(1024, 131_072, 16, 8192);
    let decision = selector.select(&table, &request).unwrap();
    assert_eq!(decision.fallback.map(|f| f.kind), Some(FaultKind::Fuel));
    assert_eq!(stats.last_fuel(), 3_000_000, "spent exactly the ceiling");
}

/// The instance pool's totals are `max_instances` times what one component may hold, so
/// a component shaped to hold more (here five core instances, where a policy built by
/// `wit-component` needs three) is refused on its own account; it can never take
/// other tenants' share of the pool and leave them `overloaded`.
#[test]
fn a_component_holding_more_than_its_share_of_the_pool_is_refused() {
    let instances = "(core instance (instantiate $m))".repeat(5);
    let bytes = wat::parse_str(format!("(component (core module $m) {instances})")).expect("valid WAT");
    let engine = engine().engine();
    let refused = wasmtime::component::Component::new(engine, &bytes).and_then(|component| {
        let mut store = wasmtime::Store::new(engine, ());
        wasmtime::component::Linker::new(engine).instantiate(&mut store, &component).map(drop)
    });
    let error = format!("{:#}", refused.expect_err("five core instances exceed the per-component cap"));
    assert!(error.contains("core module instances"), "{error}");
    // Four fit.
    let four = wat::parse_str(format!(
        "(component (core module $m) {})",
        "(core instance (instantiate $m))".repeat(4)
    ))
    .expect("valid WAT");
    let component = wasmtime::component::Component::new(engine, &four).expect("four core instances compile");
    let mut store = wasmtime::Store::new(engine, ());
    wasmtime::component::Linker::new(engine).instantiate(&mut store, &component).expect("four fit");
}
