//! Hostile guests inside Dynamo's selector: fail-open answers every selection (with
//! Switchyard's native default deciding), fail-closed returns Dynamo's policy error;
//! nothing panics, and each selection stays within the sandbox's bound.

use std::time::{Duration, Instant};

use crate::common::{Rng, component_file, policy, random_fixture, resolve};
use switchyard_test_guests::hostile;

/// Selections per guest.
const SELECTIONS: usize = 40;

fn params(file: &std::path::Path, on_fault: &str) -> String {
    format!("        policy: {{file: {}}}\n        on_fault: {on_fault}", file.display())
}

#[test]
fn hostile_guests_fail_open_every_selection_answered() {
    let guests: [(&str, &[u8]); 8] = [
        ("iloop", hostile::ILOOP),
        ("panic", hostile::PANIC),
        ("recursion", hostile::RECURSION),
        ("memory-bomb", hostile::MEMORY_BOMB),
        ("wrong-length", hostile::WRONG_LENGTH),
        ("bad-costs", hostile::BAD_COSTS),
        ("huge-result", hostile::HUGE_RESULT),
        ("commit-spin", hostile::COMMIT_SPIN),
    ];
    for (name, bytes) in guests {
        let file = component_file(&format!("hostile-{name}"), bytes);
        let factory = resolve(&format!("hostile-{name}"), &params(&file, "open")).expect("loads");
        let mut rng = Rng::new(17);
        let mut slowest = Duration::ZERO;
        for i in 0..SELECTIONS {
            let fixture = random_fixture(&mut rng);
            let ours = policy(&factory, fixture.worker_type);
            let started = Instant::now();
            let picked = fixture.select(&ours);
            slowest = slowest.max(started.elapsed());
            let picked = picked.unwrap_or_else(|e| panic!("{name}: selection {i} not answered: {e}"));
            assert!(fixture.workers.contains_key(&picked.worker_id), "{name}: picked an unknown worker");
        }
        // Three guest calls at most per selection, each cut at the deadline (150 ms).
        assert!(slowest < Duration::from_millis(3 * 150 + 100), "{name}: a selection took {slowest:?}");
        eprintln!("{name}: {SELECTIONS} selections answered, slowest {slowest:?}");
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
