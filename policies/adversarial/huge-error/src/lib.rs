//! Hostile guest: `score` fails with an `internal` error whose message is
//! `{"bytes": n}` bytes of ASCII `x` (default 40,000,000). The host must lift it without
//! trouble (within its limits) and must not carry it whole into its fault, logs or
//! replies: the message it keeps is bounded.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct HugeError {
    bytes: usize,
}

impl Policy for HugeError {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let bytes = value.get("bytes").and_then(Value::as_u64).unwrap_or(40_000_000);
        let bytes = usize::try_from(bytes)
            .map_err(|e| PolicyError::invalid_parameters(format!("field `bytes`: {e}")))?;
        Ok(HugeError { bytes })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(
        &mut self,
        _r: &Request<'_>,
        _c: &Candidates<'_>,
        _costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        Err(PolicyError::internal("x".repeat(self.bytes)))
    }
}

switchyard_guest_sdk::export_policy!(HugeError);
