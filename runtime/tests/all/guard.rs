//! The fault-containment layer on real guests: quarantine with exponential backoff, a
//! success closes the breaker, counters per fault kind, policy errors, recovery, and the
//! artifact cache.

use switchyard::guard::BreakerState;
use switchyard::{
    ArtifactCache, Decider, FailMode, FaultKind, GuardConfig, GuardedSelector, GuestScorer, PolicyComponent,
    PolicyEngine, SelectError,
};

use switchyard_test_util::fixtures::{
    DEFAULT_POLICY, PROBE, component, hostile, native_default_pick, sample,
};

fn guarded(bytes: &'static [u8], params: &str, mode: FailMode, config: GuardConfig) -> GuardedSelector {
    let guest = GuestScorer::new("tenant", component(bytes), params).expect("instantiates");
    switchyard_builtins::guarded(Box::new(guest), mode, config)
}

#[test]
fn a_policy_that_keeps_faulting_is_quarantined_with_exponential_backoff() {
    let (table, request) = sample();
    let config = GuardConfig { quarantine_after: 3, backoff_initial: 4, backoff_max: 8 };
    let mut selector = guarded(hostile::PANIC, "{}", FailMode::Open, config);
    let kinds: Vec<FaultKind> = (0..30)
        .map(|_| {
            let d = selector.select(&table, &request).expect("always answered");
            assert_eq!(d.decided_by, Decider::Fallback);
            assert_eq!(d.selection.chosen, native_default_pick(&table, &request));
            d.fallback.expect("a fault").kind
        })
        .collect();
    use FaultKind::{Quarantined as Q, Trap as T};
    let expected: Vec<FaultKind> = [
        vec![T, T, T], // three faults open the breaker
        vec![Q; 4],    // backoff 4
        vec![T],       // the probe faults: backoff doubles
        vec![Q; 8],    // 8
        vec![T],       // and is capped at backoff_max
        vec![Q; 8],
        vec![T],
        vec![Q; 4],
    ]
    .concat();
    assert_eq!(kinds, expected);
    let counters = selector.counters();
    assert_eq!(counters.selections, 30);
    assert_eq!(counters.fallbacks, 30);
    assert_eq!(counters.faults.get(&FaultKind::Trap), Some(&6));
    assert_eq!(counters.quarantined, 24);
    assert_eq!(counters.breaker_trips, 4);
    assert_eq!(selector.breaker(), BreakerState::Open { remaining: 4, trips: 4 });
}

#[test]
fn a_successful_probe_closes_the_breaker() {
    let (table, request) = sample();
    // Panics on every 2nd call of an instance; a fresh instance after each trap, so the
    // probe (the first call of a new instance) succeeds.
    let config = GuardConfig { quarantine_after: 1, backoff_initial: 2, backoff_max: 64 };
    let mut selector = guarded(hostile::PANIC, r#"{"every": 2}"#, FailMode::Open, config);
    let deciders: Vec<(Decider, Option<FaultKind>)> = (0..5)
        .map(|_| {
            let d = selector.select(&table, &request).unwrap();
            (d.decided_by, d.fallback.map(|f| f.kind))
        })
        .collect();
    assert_eq!(
        deciders,
        [
            (Decider::Policy, None),
            (Decider::Fallback, Some(FaultKind::Trap)),
            (Decider::Fallback, Some(FaultKind::Quarantined)),
            (Decider::Fallback, Some(FaultKind::Quarantined)),
            (Decider::Policy, None),
        ]
    );
    assert_eq!(selector.breaker(), BreakerState::Closed { consecutive_faults: 0 });
    assert_eq!(selector.counters().answered, 2);
}

#[test]
fn fail_closed_returns_the_kind_and_quarantine_too() {
    let (table, request) = sample();
    let config = GuardConfig { quarantine_after: 1, backoff_initial: 1, backoff_max: 1 };
    let mut selector = guarded(hostile::PANIC, "{}", FailMode::Closed, config);
    let kind = |r: Result<_, SelectError>| match r {
        Err(SelectError::Fault { fault, .. }) => fault.kind,
        other => panic!("expected a fault, got {other:?}"),
    };
    assert_eq!(kind(selector.select(&table, &request)), FaultKind::Trap);
    assert_eq!(kind(selector.select(&table, &request)), FaultKind::Quarantined);
    assert_eq!(kind(selector.select(&table, &request)), FaultKind::Trap);
    assert_eq!(selector.counters().refused, 3);
    assert_eq!(selector.counters().fallbacks, 0);
}

#[test]
fn a_policy_error_is_reported_and_counted_as_its_own_kind() {
    let (table, request) = sample();
    // The probe always fails with its own `internal` error.
    let mut selector = guarded(PROBE, "{}", FailMode::Open, GuardConfig::default());
    let fault = selector.select(&table, &request).unwrap().fallback.expect("fell back");
    assert_eq!(fault.kind, FaultKind::PolicyError);
    assert!(fault.message.starts_with("internal error: "), "{}", fault.message);
    assert_eq!(selector.counters().faults.get(&FaultKind::PolicyError), Some(&1));
    assert_eq!(selector.counters().faults.get(&FaultKind::InvalidOutput), None);
}

/// A selector kept idle (the service's, between a version's selections) lets go of its
/// last request at check-in: it answers nothing of it afterwards, its instance is kept,
/// and its next selection is the same as the first.
#[test]
fn a_released_selector_holds_nothing_of_its_last_request_and_selects_alike() {
    let (table, request) = sample();
    let guest = GuestScorer::new("tenant", component(DEFAULT_POLICY), "{}").expect("instantiates");
    let stats = guest.stats();
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    let first = selector.select(&table, &request).unwrap();
    let costs = selector.last_costs().to_vec();
    assert_eq!(selector.last_candidates().count(), costs.len());
    assert!(!costs.is_empty());
    selector.release();
    assert_eq!(selector.last_candidates().count(), 0, "no candidate kept");
    assert!(selector.last_costs().is_empty(), "no cost kept");
    let again = selector.select(&table, &request).unwrap();
    assert_eq!((again.selection, again.decided_by), (first.selection, Decider::Policy));
    assert_eq!(selector.last_costs(), costs.as_slice());
    assert_eq!(stats.instantiations(), 1, "the instance itself is kept");
}

#[test]
fn recovery_after_a_trap_is_a_fresh_instance_whose_cost_is_measured() {
    let (table, request) = sample();
    let guest = GuestScorer::new("panic", component(hostile::PANIC), r#"{"every": 2}"#).unwrap();
    let stats = guest.stats();
    let mut selector = switchyard_builtins::guarded(Box::new(guest), FailMode::Open, GuardConfig::default());
    assert_eq!(selector.select(&table, &request).unwrap().decided_by, Decider::Policy);
    assert_eq!(stats.instantiations(), 1);
    assert_eq!(selector.select(&table, &request).unwrap().decided_by, Decider::Fallback);
    assert_eq!(stats.instantiations(), 1, "instantiated lazily, on the next call");
    assert_eq!(selector.select(&table, &request).unwrap().decided_by, Decider::Policy);
    assert_eq!(stats.instantiations(), 2);
    assert!(stats.last_instantiation() > std::time::Duration::ZERO);
}

#[test]
fn the_artifact_cache_holds_our_compiled_output_keyed_by_content_and_settings() {
    let dir = std::env::temp_dir().join(format!("switchyard-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache =
        ArtifactCache::open(&dir, switchyard::artifact_cache::ArtifactKey::generate().unwrap()).unwrap();
    let engine = PolicyEngine::new(switchyard::Limits::default()).unwrap().with_artifact_cache(cache.clone());
    let first = PolicyComponent::load(&engine, DEFAULT_POLICY).unwrap();
    assert!(!first.from_cache());
    let path = cache.path_for(engine.engine(), DEFAULT_POLICY);
    assert!(path.is_file(), "stored at {}", path.display());
    assert!(path.file_name().unwrap().to_string_lossy().starts_with(first.digest()), "keyed by content");
    let second = PolicyComponent::load(&engine, DEFAULT_POLICY).unwrap();
    assert!(second.from_cache());
    // The cached build behaves as the compiled one.
    let (table, request) = sample();
    let pick = |c: PolicyComponent| {
        let guest = GuestScorer::new("default", c, "{}").unwrap();
        switchyard::Selector::new(Box::new(guest)).select(&table, &request).unwrap()
    };
    assert_eq!(pick(first), pick(second));
    // Other engine settings, another key: no artifact is shared across settings.
    let epoch =
        PolicyEngine::new(switchyard::Limits { budget: switchyard::Budget::Epoch, ..Default::default() })
            .unwrap()
            .with_artifact_cache(cache.clone());
    assert_ne!(cache.path_for(epoch.engine(), DEFAULT_POLICY), path);
    assert!(!PolicyComponent::load(&epoch, DEFAULT_POLICY).unwrap().from_cache());
    // A damaged entry is a miss, recompiled and rewritten, never an error.
    std::fs::write(&path, b"not an artifact").unwrap();
    let third = PolicyComponent::load(&engine, DEFAULT_POLICY).unwrap();
    assert!(!third.from_cache());
    assert!(PolicyComponent::load(&engine, DEFAULT_POLICY).unwrap().from_cache());
    // Validation runs on every load: a forbidden import is refused from the cache too.
    for _ in 0..2 {
        let err = PolicyComponent::load(&engine, hostile::WASI_IMPORT).err().unwrap();
        assert_eq!(err.kind, switchyard::LoadErrorKind::ForbiddenImport);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
