//! Hostile guest: `score` returns a non-finite cost for the first candidate:
//! `{"value": "nan"}` (the default), `"inf"` or `"-inf"`.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct BadCosts {
    value: f64,
}

impl Policy for BadCosts {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let parsed: Value =
            serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
                .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let value = match parsed.get("value").and_then(Value::as_str).unwrap_or("nan") {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => return Err(PolicyError::invalid_parameters(format!("field `value`: `{other}`"))),
        };
        Ok(BadCosts { value })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        for (cost, load) in costs.iter_mut().zip(c.decode_blocks()) {
            *cost = f64::from(*load);
        }
        if let Some(first) = costs.first_mut() {
            *first = self.value;
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(BadCosts);
