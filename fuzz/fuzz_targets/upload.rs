//! A tenant's upload through the whole `switchyard policy check` path: size, parse,
//! world, imports, compile (under a small limit), instantiate, configure; then, for a
//! component that passes, one selection of the sample request, as the service's first
//! would be. Never a panic: a component, or a refusal of a documented kind.
//!
//! Input: bytes that start with the wasm magic number are the upload itself (the seeds
//! are the real policies' components, which libFuzzer mutates); other bytes make a
//! component with `wasm-smith` (`switchyard_fuzz::smith`) and parameters.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use switchyard::selection::wire::{RequestJson, SAMPLE_REQUEST};
use switchyard::{GuestScorer, Limits, LoadErrorKind, PolicyComponent, PolicyEngine, Selector};
use switchyard_fuzz::params::params;
use switchyard_fuzz::smith;

/// The default limits, but compiling for at most a second: an upload that takes longer is
/// `compile-timeout`, never a hung fuzzer.
fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        PolicyEngine::new(Limits { compile_timeout_ms: 1_000, ..Limits::default() }).expect("an engine")
    })
}

fn upload(bytes: &[u8], parameters: &str) {
    let component = match PolicyComponent::load(engine(), bytes) {
        Ok(c) => c,
        Err(e) => {
            // Configure and instantiate come later; `load` refuses only for what it checks.
            assert!(
                !matches!(e.kind, LoadErrorKind::ConfigureFailed | LoadErrorKind::InstantiateFailed),
                "load refused with a later stage's kind: {e}"
            );
            return;
        }
    };
    let scorer = match GuestScorer::new("upload", component, parameters) {
        Ok(s) => s,
        Err(e) => {
            assert!(
                matches!(e.kind, LoadErrorKind::ConfigureFailed | LoadErrorKind::InstantiateFailed),
                "instantiate/configure refused with an earlier stage's kind: {e}"
            );
            return;
        }
    };
    let (table, request) = RequestJson::parse(SAMPLE_REQUEST).unwrap().into_parts().unwrap();
    let mut selector = Selector::new(Box::new(scorer));
    // Any answer (a pick, no eligible worker, a fault) is fine; a panic is not.
    if let Ok(selection) = selector.select(&table, &request) {
        assert!(selection.cost.is_finite());
        let _ = selector.commit(&table, &request, selection.chosen);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"\0asm") {
        upload(data, "{}");
        return;
    }
    let mut u = Unstructured::new(data);
    let Ok(parameters) = params(&mut u) else { return };
    if let Ok(Some(component)) = smith::component(&mut u) {
        upload(&component, &parameters);
    }
});
