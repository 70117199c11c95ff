//! Hostile guests inside Dynamo's selector: fail-open answers every selection (with
//! Switchyard's native default deciding), fail-closed returns Dynamo's policy error;
//! nothing panics, and each selection stays within the sandbox's bound.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dynamo_kv_router::{WorkerSelectionPolicy, WorkerType};

use crate::common::{Rng, component_file, policy, random_fixture, resolve};
use switchyard_test_util::hostile;

/// Selections per guest.
const SELECTIONS: usize = 40;

fn params(file: &std::path::Path, on_fault: &str) -> String {
    format!(
        "        policy: {{file: {}}}\n        on_fault: {on_fault}\n        temperature: 0",
        file.display()
    )
}

/// One policy per pool, built once and kept: a picker recovers from its guest's faults
/// across selections, as inside a running router.
struct Pools {
    factory: dynamo_kv_router::WorkerSelectionPolicyFactory,
    built: HashMap<WorkerType, WorkerSelectionPolicy>,
}

impl Pools {
    fn new(factory: dynamo_kv_router::WorkerSelectionPolicyFactory) -> Self {
        Self { factory, built: HashMap::new() }
    }
    fn get(&mut self, worker_type: WorkerType) -> &WorkerSelectionPolicy {
        self.built.entry(worker_type).or_insert_with(|| policy(&self.factory, worker_type))
    }
}

/// What a hostile guest's selections are, fail-open.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// Every selection faults: the fallback's pick, always.
    Fallback,
    /// Its score may stand on some selections (it misbehaves elsewhere: in its commit,
    /// once, over time): every selection is answered, in bound.
    Answered,
}

#[test]
fn hostile_guests_fail_open_every_selection_answered() {
    let guests: [(&str, &[u8], Expect); 15] = [
        ("iloop", hostile::ILOOP, Expect::Fallback),
        ("panic", hostile::PANIC, Expect::Fallback),
        ("recursion", hostile::RECURSION, Expect::Fallback),
        ("memory-bomb", hostile::MEMORY_BOMB, Expect::Fallback),
        ("wrong-length", hostile::WRONG_LENGTH, Expect::Fallback),
        ("bad-costs", hostile::BAD_COSTS, Expect::Fallback),
        ("huge-result", hostile::HUGE_RESULT, Expect::Fallback),
        ("huge-error", hostile::HUGE_ERROR, Expect::Fallback),
        ("import-loop", hostile::IMPORT_LOOP, Expect::Fallback),
        ("memory-fill", hostile::MEMORY_FILL, Expect::Fallback),
        ("table-growth", hostile::TABLE_GROWTH, Expect::Answered),
        ("commit-spin", hostile::COMMIT_SPIN, Expect::Answered),
        ("commit-leak", hostile::COMMIT_LEAK, Expect::Answered),
        ("nan-once", hostile::NAN_ONCE, Expect::Answered),
        ("secret", hostile::SECRET, Expect::Answered),
    ];
    // What the native default (the fallback) picks: the default policy's guest build,
    // which picks the same (`contract.rs`), with the same derived seed.
    let default_file = component_file("hostile-reference", switchyard_test_util::DEFAULT_POLICY);
    let reference = resolve("hostile-reference", &params(&default_file, "closed")).expect("loads");
    let mut reference = Pools::new(reference);
    for (name, bytes, expect) in guests {
        let file = component_file(&format!("hostile-{name}"), bytes);
        let factory = resolve(&format!("hostile-{name}"), &params(&file, "open")).expect("loads");
        let mut ours = Pools::new(factory);
        let mut rng = Rng::new(17);
        let mut slowest = Duration::ZERO;
        for i in 0..SELECTIONS {
            let fixture = random_fixture(&mut rng);
            let started = Instant::now();
            let picked = fixture.select(ours.get(fixture.worker_type));
            slowest = slowest.max(started.elapsed());
            let picked = picked.unwrap_or_else(|e| panic!("{name}: selection {i} not answered: {e}"));
            assert!(fixture.workers.contains_key(&picked.worker_id), "{name}: picked an unknown worker");
            if expect == Expect::Fallback {
                let expected =
                    fixture.select(reference.get(fixture.worker_type)).expect("the default answers");
                assert_eq!(picked, expected, "{name}: selection {i} was not the fallback's");
            }
        }
        // Three guest calls at most per selection, each cut at the deadline (150 ms).
        assert!(slowest < Duration::from_millis(3 * 150 + 100), "{name}: a selection took {slowest:?}");
        eprintln!("{name}: {SELECTIONS} selections answered, slowest {slowest:?}");
    }
}

/// Guests the sandbox refuses before they run a selection: Dynamo's start-up is refused,
/// naming the policy file and the reason, in bounded time.
#[test]
fn hostile_guests_refused_at_start_up_name_the_reason() {
    let guests: [(&str, &[u8], &str); 6] = [
        ("huge-data", hostile::HUGE_DATA, "too-large"),
        ("configure-spin", hostile::CONFIGURE_SPIN, "params:"),
        ("start-spin", hostile::START_SPIN, "policy.file:"),
        ("wasi-import", hostile::WASI_IMPORT, "forbidden-import"),
        ("other-world", hostile::OTHER_WORLD, "wrong-world"),
        ("core-module", hostile::CORE_MODULE, "core-module"),
    ];
    for (name, bytes, reason) in guests {
        let file = component_file(&format!("refused-{name}"), bytes);
        let started = Instant::now();
        let refused = match resolve(&format!("refused-{name}"), &params(&file, "open")) {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => e,
        };
        let took = started.elapsed();
        assert!(refused.contains(reason), "{name}: {refused}");
        assert!(took < Duration::from_secs(10), "{name}: refused after {took:?}");
        eprintln!("{name}: refused in {took:?}: {refused}");
    }
}

#[test]
fn hostile_guest_fail_closed_is_dynamos_policy_error() {
    let file = component_file("hostile-closed-panic", hostile::PANIC);
    let factory = resolve("hostile-closed-panic", &params(&file, "closed")).expect("loads");
    let mut rng = Rng::new(3);
    for _ in 0..8 {
        let fixture = random_fixture(&mut rng);
        let ours = policy(&factory, fixture.worker_type);
        let e = fixture.select(&ours).expect_err("fail-closed refuses");
        assert!(e.contains("switchyard policy") && (e.contains("trap") || e.contains("quarantined")), "{e}");
    }
}
