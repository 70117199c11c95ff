//! Hostile guest: `score` recurses without end; `max_wasm_stack` must stop it.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct Recursion;

/// The result of the call goes through `black_box` before it is used, so the recursion
/// is not a tail call and LLVM cannot turn it into a loop (not even with an accumulator).
#[inline(never)]
#[allow(unconditional_recursion)] // The point of this guest.
fn descend(depth: u64) -> u64 {
    std::hint::black_box(descend(depth + 1)).wrapping_add(depth)
}

impl Policy for Recursion {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(Recursion)
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, _c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        let depth = descend(0);
        costs.fill(depth as f64);
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(Recursion);
