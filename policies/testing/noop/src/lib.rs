//! Benchmark guest: reads nothing, costs all zero. Measures the fixed cost of a guest
//! call and the per-candidate cost of lowering the id columns and returning costs.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// Declares nothing and returns zero costs.
pub struct Noop;

impl Policy for Noop {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(Noop)
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: false }
    }
    fn score(&mut self, _: &Request<'_>, _: &Candidates<'_>, _: &mut [f64]) -> Result<(), PolicyError> {
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(Noop);
