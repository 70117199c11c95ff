//! Hostile guest: `configure` never returns. It must be stopped at load like any call.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct ConfigureSpin;

impl Policy for ConfigureSpin {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let mut spins = parameters.len() as u64;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
            if spins == 0 {
                return Ok(ConfigureSpin);
            }
        }
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, _c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        costs.fill(0.0);
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(ConfigureSpin);
