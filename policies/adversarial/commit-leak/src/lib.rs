//! Hostile guest: `on_selected` leaks memory on every commit; `score` answers normally
//! (finite costs: the decode blocks). Each commit allocates `{"bytes_per_commit": n}`
//! bytes (default 8 MiB), writes one byte in every 4 KiB page so the memory is really
//! used, and forgets the allocation. The host's memory limit (64 MiB) must stop it after
//! a few commits: the refused growth traps inside `on-selected`, the commit reports the
//! fault, and the instance, its memory full, must not be reused.

use serde_json::Value;
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, WorkerRank};

/// One byte is written per page of this size.
const PAGE: usize = 4096;

/// The hostile policy (see the crate's documentation).
pub struct CommitLeak {
    bytes_per_commit: usize,
}

impl Policy for CommitLeak {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let bytes = value.get("bytes_per_commit").and_then(Value::as_u64).unwrap_or(8 << 20);
        let bytes_per_commit = usize::try_from(bytes)
            .map_err(|e| PolicyError::invalid_parameters(format!("field `bytes_per_commit`: {e}")))?;
        Ok(CommitLeak { bytes_per_commit })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: true }
    }
    fn score(&mut self, _r: &Request<'_>, c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        for (cost, load) in costs.iter_mut().zip(c.decode_blocks()) {
            *cost = f64::from(*load);
        }
        Ok(())
    }
    fn on_selected(&mut self, _r: &Request<'_>, _chosen: WorkerRank) {
        let mut leak: Vec<u8> = Vec::with_capacity(self.bytes_per_commit);
        let pages = leak.spare_capacity_mut();
        for byte in pages.iter_mut().step_by(PAGE) {
            byte.write(0xA5);
        }
        // `black_box` keeps the writes: the optimiser must assume the bytes are read.
        std::hint::black_box(pages);
        std::mem::forget(leak);
    }
}

switchyard_guest_sdk::export_policy!(CommitLeak);
