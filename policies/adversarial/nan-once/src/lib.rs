//! Hostile guest: `score` returns NaN for row 0 on the `{"at": n}`-th call of an
//! instance (default 6, counted from 1 after `configure`) and finite costs (the decode
//! blocks) on every other call. A host that drops the instance after a fault sees a
//! fault on calls n, 2n, 3n, …; a host that keeps the faulted instance sees only one.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct NanOnce {
    at: u64,
    calls: u64,
}

impl Policy for NanOnce {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let at = value.get("at").and_then(Value::as_u64).unwrap_or(6).max(1);
        Ok(NanOnce { at, calls: 0 })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        self.calls += 1;
        for (cost, load) in costs.iter_mut().zip(c.decode_blocks()) {
            *cost = f64::from(*load);
        }
        if self.calls == self.at
            && let Some(first) = costs.first_mut()
        {
            *first = f64::NAN;
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(NanOnce);
