//! Hostile guest: `score` calls one of the host's imports in an endless loop and never
//! returns. `{"import": …}` picks which: `"prefix-hashes"` (the default), `"policy-class"`,
//! `"worker-capacity"` (asked for each candidate's worker id in turn) or
//! `"candidate-capacities"`; any other name is an invalid-parameters error.
//!
//! Most of its time is spent inside the host (each call builds a result and copies it
//! into the guest), where fuel is not charged, so the CPU budget (the epoch deadline,
//! checked when the guest's loop comes round again) must still stop the call, the
//! results it keeps asking for must not pile up anywhere, and the selection must still
//! be answered. The raw generated imports are called, not the SDK's `Request` view, so
//! that no cache in the guest can answer in the host's place.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The import `score` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Import {
    PrefixHashes,
    PolicyClass,
    WorkerCapacity,
    CandidateCapacities,
}

/// The hostile policy (see the crate's documentation).
pub struct ImportLoop {
    import: Import,
}

impl Policy for ImportLoop {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let import = match value.get("import").and_then(Value::as_str).unwrap_or("prefix-hashes") {
            "prefix-hashes" => Import::PrefixHashes,
            "policy-class" => Import::PolicyClass,
            "worker-capacity" => Import::WorkerCapacity,
            "candidate-capacities" => Import::CandidateCapacities,
            other => return Err(PolicyError::invalid_parameters(format!("field `import`: `{other}`"))),
        };
        Ok(ImportLoop { import })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: false }
    }
    fn score(&mut self, r: &Request<'_>, c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        let ids = c.worker_ids();
        // `black_box` keeps the optimiser from proving anything about the counter.
        let mut calls: u64 = 0;
        loop {
            let worker = match ids.len() {
                0 => calls,
                n => ids[(calls % n as u64) as usize],
            };
            call(self.import, r, worker);
            calls = std::hint::black_box(calls.wrapping_add(1));
            if calls == u64::MAX {
                costs.fill(0.0);
                return Ok(());
            }
        }
    }
}

/// Calls `import` once through the raw generated binding, keeping its result alive with
/// `black_box` until it is dropped.
#[cfg(target_arch = "wasm32")]
fn call(import: Import, _r: &Request<'_>, worker: u64) {
    use switchyard_guest_sdk::guest::switchyard::policy::request as imports;
    match import {
        Import::PrefixHashes => drop(std::hint::black_box(imports::prefix_hashes())),
        Import::PolicyClass => drop(std::hint::black_box(imports::policy_class())),
        Import::WorkerCapacity => drop(std::hint::black_box(imports::worker_capacity(worker))),
        Import::CandidateCapacities => drop(std::hint::black_box(imports::candidate_capacities())),
    }
}

/// Natively there are no generated imports: the `Request` view is the only way in.
#[cfg(not(target_arch = "wasm32"))]
fn call(import: Import, r: &Request<'_>, worker: u64) {
    match import {
        Import::PrefixHashes => drop(std::hint::black_box(r.prefix_hashes())),
        Import::PolicyClass => drop(std::hint::black_box(r.policy_class())),
        Import::WorkerCapacity => drop(std::hint::black_box(r.worker_capacity(worker))),
        Import::CandidateCapacities => drop(std::hint::black_box(r.candidate_capacities())),
    }
}

switchyard_guest_sdk::export_policy!(ImportLoop);
