//! Hostile guest: `score` allocates 1 MiB chunks and keeps them, until the host refuses
//! to grow its memory (`trap_on_grow_failure`: the refusal is a trap, not a null).
//! Chunks are reserved, not filled: filling 64 MiB would run out of fuel first.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// The hostile policy (see the crate's documentation).
pub struct MemoryBomb {
    hoard: Vec<Vec<u8>>,
}

impl Policy for MemoryBomb {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(MemoryBomb { hoard: Vec::new() })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }
    fn score(&mut self, _r: &Request<'_>, _c: &Candidates<'_>, costs: &mut [f64]) -> Result<(), PolicyError> {
        loop {
            let mut chunk = Vec::with_capacity(1 << 20);
            chunk.push(0xA5u8);
            self.hoard.push(chunk);
            if self.hoard.len() == usize::MAX {
                costs.fill(0.0);
                return Ok(());
            }
        }
    }
}

switchyard_guest_sdk::export_policy!(MemoryBomb);
