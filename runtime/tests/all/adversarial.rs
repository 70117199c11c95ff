//! Hostile guests (policies/adversarial, built from source): each is classified exactly,
//! and the selection is still answered.
//!
//! - Faults at run time: the guard falls back to the native default policy (fail-open)
//!   and reports the kind; fail-closed returns it; the next call gets a fresh instance.
//! - Refusals at load: the exact `LoadErrorKind` (and the fault, when the guest ran), and
//!   the same engine keeps serving selections afterwards.

use switchyard::{
    Budget, Decider, FailMode, FaultKind, GuardConfig, GuestScorer, Limits, LoadErrorKind, PolicyComponent,
    PolicyEngine,
};

use switchyard_test_util::fixtures::{
    DEFAULT_POLICY, assert_contained, engine, engine_with, hostile, native_default_pick, noise, sample,
};

/// After a refusal, the same engine still loads and runs a good policy.
fn assert_engine_still_serves(engine: &PolicyEngine) {
    let (table, request) = sample();
    let component = PolicyComponent::load(engine, DEFAULT_POLICY).expect("the default guest loads");
    let guest = GuestScorer::new("default", component, "{}").expect("instantiates");
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    let decision = selector.select(&table, &request).expect("answers");
    assert_eq!(decision.decided_by, Decider::Policy);
    assert_eq!(decision.selection.chosen, native_default_pick(&table, &request));
}

/// Loads and instantiates `bytes` expecting refusal with `kind` (and `fault` if it ran).
fn assert_refused(
    engine: &PolicyEngine,
    bytes: &[u8],
    kind: LoadErrorKind,
    fault: Option<FaultKind>,
) -> String {
    let err = PolicyComponent::load(engine, bytes)
        .and_then(|c| GuestScorer::new("hostile", c, "{}"))
        .err()
        .expect("refused");
    assert_eq!(err.kind, kind, "{err}");
    assert_eq!(err.fault, fault, "{err}");
    assert_eq!(err.to_string().lines().count(), 1, "one line: {err}");
    assert_engine_still_serves(engine);
    err.message
}

#[test]
fn an_infinite_loop_runs_out_of_fuel_within_its_budget() {
    let (table, request) = sample();
    let limits = Limits::default();
    let guest =
        GuestScorer::new("iloop", PolicyComponent::load(engine(), hostile::ILOOP).unwrap(), "{}").unwrap();
    let stats = guest.stats();
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    let decision = selector.select(&table, &request).unwrap();
    assert_eq!(decision.fallback.map(|f| f.kind), Some(FaultKind::Fuel));
    // Fuel is deterministic: the loop is stopped exactly when its budget is spent. A fresh
    // instance has saved no fuel from earlier calls, so the budget is this call's allowance,
    // which scales with its work units: candidates plus prefix hashes.
    let units = switchyard::WorkUnits {
        candidates: request_rows(&table, &request),
        prefix_hashes: request.prefix_hashes().map_or(0, <[u64]>::len),
    };
    let budget = limits.fuel_for(units);
    let used = stats.last_fuel();
    assert_eq!(used, budget, "used {used} fuel of a {budget} budget");
    assert_contained(engine(), hostile::ILOOP, "{}", FaultKind::Fuel);
}

/// Candidates of the sample (every worker rank is eligible).
fn request_rows(table: &switchyard::WorkerTable, request: &switchyard::SelectionRequest) -> usize {
    let scorer = switchyard_builtins::find("default").unwrap().native("{}").unwrap();
    switchyard::Selector::new(scorer).select(table, request).unwrap().candidates
}

#[test]
fn an_infinite_loop_passes_its_epoch_deadline() {
    let engine = engine_with(Limits { budget: Budget::Epoch, ..Limits::default() });
    assert_contained(&engine, hostile::ILOOP, "{}", FaultKind::Deadline);
}

#[test]
fn unbounded_recursion_overflows_the_stack() {
    assert_contained(engine(), hostile::RECURSION, "{}", FaultKind::Stack);
}

#[test]
fn a_memory_bomb_is_refused_memory() {
    let message = assert_contained(engine(), hostile::MEMORY_BOMB, "{}", FaultKind::Memory);
    assert!(message.contains("memory"), "{message}");
}

#[test]
fn table_growth_is_refused_memory() {
    let message = assert_contained(engine(), hostile::TABLE_GROWTH, "{}", FaultKind::Memory);
    assert!(message.contains("table"), "{message}");
}

#[test]
fn a_panic_is_a_trap() {
    assert_contained(engine(), hostile::PANIC, "{}", FaultKind::Trap);
}

#[test]
fn a_c_buffer_overrun_is_a_trap() {
    // A hostile guest in C: writes past its cost array until it leaves its memory.
    let message = assert_contained(engine(), hostile::C_OVERRUN, "{}", FaultKind::Trap);
    assert!(message.contains("out of bounds"), "{message}");
}

#[test]
fn the_wrong_number_of_costs_is_invalid_output() {
    let message = assert_contained(engine(), hostile::WRONG_LENGTH, "{}", FaultKind::InvalidOutput);
    assert!(message.contains("8 costs for 9 candidates"), "{message}");
}

#[test]
fn nan_and_infinite_costs_are_invalid_output() {
    for (value, shown) in [("nan", "NaN"), ("inf", "inf"), ("-inf", "-inf")] {
        let params = format!(r#"{{"value": "{value}"}}"#);
        let message = assert_contained(engine(), hostile::BAD_COSTS, &params, FaultKind::InvalidOutput);
        assert!(message.ends_with(&format!("is {shown}")), "{message}");
    }
}

#[test]
fn a_start_function_that_spins_is_stopped_at_load() {
    let message = assert_refused(
        engine(),
        hostile::START_SPIN,
        LoadErrorKind::InstantiateFailed,
        Some(FaultKind::Fuel),
    );
    assert!(message.starts_with("fuel:"), "{message}");
}

#[test]
fn a_configure_that_spins_is_stopped_at_load() {
    assert_refused(engine(), hostile::CONFIGURE_SPIN, LoadErrorKind::ConfigureFailed, Some(FaultKind::Fuel));
    let engine = engine_with(Limits { budget: Budget::Epoch, ..Limits::default() });
    assert_refused(
        &engine,
        hostile::CONFIGURE_SPIN,
        LoadErrorKind::ConfigureFailed,
        Some(FaultKind::Deadline),
    );
}

#[test]
fn a_huge_data_segment_is_too_large_over_the_memory_limit_or_out_of_fuel_to_copy() {
    assert!(hostile::HUGE_DATA.len() > 5 << 20, "the data segment is in the file");
    assert_refused(engine(), hostile::HUGE_DATA, LoadErrorKind::TooLarge, None);
    // Allowed through the size check, it still cannot fit a 4 MiB memory.
    let engine =
        engine_with(Limits { max_component_bytes: 16 << 20, max_memory_bytes: 4 << 20, ..Limits::default() });
    let message = assert_refused(&engine, hostile::HUGE_DATA, LoadErrorKind::TooLarge, None);
    assert!(message.contains("over the memory or table limits"), "{message}");
    // Allowed through both, its data is copied into each new instance (not mapped), a
    // copy charged to its own fuel: 5 MiB is over the default base of 2,000,000.
    let sized = engine_with(Limits { max_component_bytes: 16 << 20, ..Limits::default() });
    assert_refused(&sized, hostile::HUGE_DATA, LoadErrorKind::InstantiateFailed, Some(FaultKind::Fuel));
    // With room and fuel for it, it is an ordinary (if fat) policy.
    let roomy =
        engine_with(Limits { max_component_bytes: 16 << 20, fuel_base: 8 << 20, ..Limits::default() });
    let (table, request) = sample();
    let guest =
        GuestScorer::new("huge", PolicyComponent::load(&roomy, hostile::HUGE_DATA).unwrap(), "{}").unwrap();
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    assert_eq!(selector.select(&table, &request).unwrap().decided_by, Decider::Policy);
}

#[test]
fn a_wasi_import_is_forbidden() {
    let message = assert_refused(engine(), hostile::WASI_IMPORT, LoadErrorKind::ForbiddenImport, None);
    assert!(message.contains("wasi:cli/environment@0.2.0"), "{message}");
    assert!(message.contains("no WASI"), "{message}");
}

#[test]
fn a_core_module_is_not_a_component() {
    assert!(wasmparser::Parser::is_core_wasm(hostile::CORE_MODULE));
    assert_refused(engine(), hostile::CORE_MODULE, LoadErrorKind::CoreModule, None);
}

#[test]
fn a_component_of_another_world_is_the_wrong_world() {
    let message = assert_refused(engine(), hostile::OTHER_WORLD, LoadErrorKind::WrongWorld, None);
    assert!(message.contains("[run]"), "{message}");
}

/// The policy interface's name and function names, every function of the wrong type: the
/// types are checked once per component and calls then skip the check, so a component
/// whose functions do not match must never get as far as a call.
#[test]
fn policy_functions_of_the_wrong_types_are_refused_before_any_call() {
    let wat = r#"
        (component
          (core module $m (func (export "f") (result i32) i32.const 7))
          (core instance $i (instantiate $m))
          (func $f (result u32) (canon lift (core func $i "f")))
          (instance $policy
            (export "describe" (func $f))
            (export "configure" (func $f))
            (export "score" (func $f))
            (export "filter" (func $f))
            (export "on-selected" (func $f)))
          (export "switchyard:policy/policy@0.2.0" (instance $policy)))
    "#;
    let bytes = wat::parse_str(wat).unwrap();
    let message = assert_refused(engine(), &bytes, LoadErrorKind::WrongWorld, None);
    assert!(message.contains("does not match"), "{message}");
}

#[test]
fn random_bytes_are_not_wasm_and_a_random_body_does_not_compile() {
    assert_refused(engine(), &noise(64 << 10, 7), LoadErrorKind::NotWasm, None);
    let mut body = b"\0asm\x0d\0\x01\0".to_vec();
    body.extend(noise(64 << 10, 8));
    assert_refused(engine(), &body, LoadErrorKind::CompileFailed, None);
}

#[test]
fn an_oversized_file_is_too_large() {
    // A valid component padded with a custom section to one byte over the limit.
    let limit = Limits::default().max_component_bytes;
    let mut bytes = DEFAULT_POLICY.to_vec();
    let name = b"padding";
    let payload = limit + 1 - bytes.len() - 1 - 5 - 1 - name.len();
    let size = (1 + name.len() + payload) as u32;
    bytes.push(0); // custom section id
    bytes.extend([
        (size & 0x7f) as u8 | 0x80,
        ((size >> 7) & 0x7f) as u8 | 0x80,
        ((size >> 14) & 0x7f) as u8 | 0x80,
        ((size >> 21) & 0x7f) as u8 | 0x80,
        (size >> 28) as u8,
    ]);
    bytes.push(name.len() as u8);
    bytes.extend(name);
    bytes.resize(bytes.len() + payload, 0);
    assert_eq!(bytes.len(), limit + 1);
    let message = assert_refused(engine(), &bytes, LoadErrorKind::TooLarge, None);
    assert!(message.contains(&format!("{} bytes", limit + 1)), "{message}");
    // With a limit one byte higher, the same bytes load: the size alone refused them.
    let roomy = engine_with(Limits { max_component_bytes: limit + 1, ..Limits::default() });
    PolicyComponent::load(&roomy, &bytes).expect("the padding is a valid custom section");
}
