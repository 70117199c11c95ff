//! Hostile guest: `score` panics (with `panic = "abort"`, an `unreachable` trap). With
//! `{"every": n}` it panics only on every n-th call, for the breaker tests.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct Panic {
    every: u64,
    calls: u64,
}

impl Policy for Panic {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let every = value.get("every").and_then(Value::as_u64).unwrap_or(1).max(1);
        Ok(Panic { every, calls: 0 })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        self.calls += 1;
        if self.calls.is_multiple_of(self.every) {
            panic!("the tenant's policy panicked on call {}", self.calls);
        }
        for (cost, load) in costs.iter_mut().zip(c.decode_blocks()) {
            *cost = f64::from(*load);
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(Panic);
