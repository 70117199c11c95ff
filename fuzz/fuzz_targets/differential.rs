//! Every builtin, native and guest build, over the same arbitrary parameters and a
//! sequence of arbitrary requests, each selected and (for a stateful policy) committed:
//! both builds configure alike (both accept, or both refuse), and each selection has
//! bit-identical costs and the same pick, or the same error; each commit succeeds or
//! fails alike. The guest runs in the sandbox: a fault of its limits (fuel, deadline,
//! memory, stack) is the sandbox's answer, not a difference, and ends the case.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use switchyard::selection::Scorer;
use switchyard::selection::wire::RequestJson;
use switchyard::{FaultKind, GuestScorer, Limits, PolicyComponent, PolicyEngine, SelectError, Selector};
use switchyard_builtins::BUILTINS;
use switchyard_fuzz::RequestLimits;
use switchyard_fuzz::params::params;
use switchyard_fuzz::request::{Shape, request};

/// Small tables: each selection runs in a guest too.
const SHAPE: Shape = Shape { max_workers: 24, max_dp: 4, max_hashes: 64 };

/// Each builtin's component, compiled once for the whole run.
fn components() -> &'static [PolicyComponent] {
    static COMPONENTS: OnceLock<Vec<PolicyComponent>> = OnceLock::new();
    COMPONENTS.get_or_init(|| {
        let engine = PolicyEngine::new(Limits::default()).expect("the default engine");
        BUILTINS
            .iter()
            .map(|b| PolicyComponent::load(&engine, b.component).expect("a builtin loads"))
            .collect()
    })
}

/// Whether a guest fault is the sandbox's limit rather than the policy's logic.
fn sandbox_limit(result: &Result<switchyard::Selection, SelectError>) -> bool {
    matches!(result, Err(SelectError::Fault { fault, .. })
        if matches!(fault.kind, FaultKind::Fuel | FaultKind::Deadline | FaultKind::Memory | FaultKind::Stack))
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let index = u.choose_index(BUILTINS.len())?;
    let builtin = &BUILTINS[index];
    let parameters = params(u)?;
    let native = builtin.native(&parameters);
    let guest = GuestScorer::new(builtin.name, components()[index].clone(), &parameters);
    let (native, guest) = match (native, guest) {
        (Ok(n), Ok(g)) => (n, Box::new(g) as Box<dyn Scorer>),
        (Err(_), Err(_)) => return Ok(()),
        (n, g) => panic!(
            "{}: configure with {parameters:?} differs: native {:?}, guest {:?}",
            builtin.name,
            n.err(),
            g.err()
        ),
    };
    let (mut native, mut guest) = (Selector::new(native), Selector::new(guest));
    for step in 0..u.int_in_range(1..=6)? {
        let text = request(u, SHAPE, None)?.to_string();
        let Ok(parsed) = RequestJson::parse(&text) else { continue };
        let Ok((table, req)) = parsed.into_parts_within(&RequestLimits::default()) else { continue };
        let n = native.select(&table, &req);
        let g = guest.select(&table, &req);
        if sandbox_limit(&g) {
            return Ok(());
        }
        let context = || format!("{} with {parameters:?}, step {step}: {text}", builtin.name);
        let chosen = match (&n, &g) {
            (Ok(n), Ok(g)) => {
                let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&native), bits(&guest), "costs differ: {}", context());
                assert_eq!(n.chosen, g.chosen, "picks differ: {}", context());
                n.chosen
            }
            (Err(SelectError::NoEligibleWorker), Err(SelectError::NoEligibleWorker)) => continue,
            (Err(SelectError::Fault { fault: nf, .. }), Err(SelectError::Fault { fault: gf, .. })) => {
                assert_eq!(nf.kind, gf.kind, "fault kinds differ ({nf} / {gf}): {}", context());
                // A fault drops the guest's instance (and its state); start over alike.
                native.reset();
                guest.reset();
                continue;
            }
            _ => panic!("outcomes differ: native {n:?}, guest {g:?}: {}", context()),
        };
        if !native.wants_commits() {
            continue;
        }
        // Commit the pick, or (as a router that decides itself may) another candidate.
        let candidates: Vec<_> = native.last_candidates().collect();
        let committed = if u.ratio(3, 4)? { chosen } else { candidates[u.choose_index(candidates.len())?] };
        let nc = native.commit(&table, &req, committed);
        let gc = guest.commit(&table, &req, committed);
        if matches!(&gc, Err(SelectError::Fault { fault, .. }) if matches!(fault.kind, FaultKind::Fuel | FaultKind::Deadline | FaultKind::Memory | FaultKind::Stack))
        {
            return Ok(());
        }
        assert_eq!(nc.is_ok(), gc.is_ok(), "commits differ: native {nc:?}, guest {gc:?}: {}", context());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
