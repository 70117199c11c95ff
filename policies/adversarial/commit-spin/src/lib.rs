//! Hostile guest: `on_selected` never returns; `score` answers normally (finite costs:
//! the decode blocks). The commit must be stopped by its own CPU budget (fuel or epoch
//! deadline) like any call, the commit must report the fault rather than hang, and the
//! instance cut off mid-commit must not be reused.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, WorkerRank};

/// The hostile policy (see the crate's documentation).
pub struct CommitSpin;

impl Policy for CommitSpin {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(CommitSpin)
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
        // `black_box` keeps the optimiser from proving the loop side-effect free.
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
            if spins == u64::MAX {
                return;
            }
        }
    }
}

switchyard_guest_sdk::export_policy!(CommitSpin);
