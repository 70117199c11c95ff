//! Hostile guest: `score` never returns. The CPU budget (fuel or epoch deadline) must
//! stop it, and the selection must still be answered.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct InfiniteLoop;

impl Policy for InfiniteLoop {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(InfiniteLoop)
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, _c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        // `black_box` keeps the optimiser from proving the loop side-effect free.
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
            if spins == u64::MAX {
                costs.fill(0.0);
                return Ok(());
            }
        }
    }
}

switchyard_guest_sdk::export_policy!(InfiniteLoop);
