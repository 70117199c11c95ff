//! Benchmark guest: reads all three lazy facts (prefix hashes, policy class, the batched
//! capacities) once per call and nothing else. Measures what the imports add.

use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// Calls every import once per `score` (see the crate's documentation).
pub struct ReadImports;

impl Policy for ReadImports {
    fn configure(_parameters: &str) -> Result<Self, PolicyError> {
        Ok(ReadImports)
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: false }
    }
    fn score(
        &mut self,
        request: &Request<'_>,
        _: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let hashes = request.prefix_hashes().map_or(0, |h| h.len());
        let class = request.policy_class().map_or(0, |c| c.len());
        let known = request.candidate_capacities().iter().filter(|c| c.is_some()).count();
        if let Some(first) = costs.first_mut() {
            *first = (hashes + class + known) as f64 * 0.0;
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(ReadImports);
