//! KV-capacity-aware decode selection: prefer the worker with the most KV room, measured
//! against what it advertises (`worker-capacity`), never one the request would overfill.
//! Sources: Dynamo's KV-aware decode worker selection (ai-dynamo/dynamo, `docs/router`)
//! and Llumnix's `kv_blocks_ratio` (AlibabaPAI/llumnix), the load metric that uses
//! capacity directly.
//!
//! ```text
//! usage_w = decode_blocks_w / total_kv_blocks_w        (blocks it would hold with this request)
//! cost_w  = usage_w                        if usage_w ≤ max_usage
//!         = max_usage + 1 + usage_w        otherwise (the capacity guard: after every worker with room)
//! unknown capacity: cost_w = mean cost of the known workers within the guard (0 if none)
//! ```
//!
//! Scoring unknown capacity at the mean keeps such a worker neither favoured nor avoided
//! among workers that have room: its load cannot be put on the same scale.

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
};

/// The tenant-settable parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// The usage above which a worker is guarded (ranked last), > 0. Default 1.0: the
    /// request's blocks must fit in the worker's KV cache. Lower values keep headroom.
    pub max_usage: f64,
}

impl Default for Parameters {
    fn default() -> Self {
        Self { max_usage: 1.0 }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        check::finite_positive("max_usage", self.max_usage)
    }
}

/// Capacity-aware decode.
#[derive(Debug, Clone)]
pub struct CapacityAware {
    params: Parameters,
}

impl CapacityAware {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params })
    }
}

impl Policy for CapacityAware {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: false }
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let capacities = request.candidate_capacities();
        if capacities.len() != costs.len() {
            return Err(PolicyError::invalid_input(format!(
                "{} capacities for {} candidates",
                capacities.len(),
                costs.len()
            )));
        }
        let max_usage = self.params.max_usage;
        let (mut sum, mut count) = (0.0, 0u32);
        let rows = capacities.iter().zip(candidates.decode_blocks());
        for (cost, (capacity, &decode)) in costs.iter_mut().zip(rows) {
            let Some(capacity) = capacity else { continue };
            let usage = f64::from(decode) / f64::from(capacity.total_kv_blocks);
            *cost = if usage <= max_usage {
                sum += usage;
                count += 1;
                usage
            } else {
                max_usage + 1.0 + usage
            };
        }
        let neutral = if count == 0 { 0.0 } else { sum / f64::from(count) };
        for (cost, capacity) in costs.iter_mut().zip(capacities.iter()) {
            if capacity.is_none() {
                *cost = neutral;
            }
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(CapacityAware);

#[cfg(test)]
mod tests {
    use switchyard_guest_sdk::Column;
    use switchyard_guest_sdk::testing::Case;
    use switchyard_guest_sdk::{Capacity, Policy};

    use super::CapacityAware;

    fn cap(total_kv_blocks: u32) -> Option<Capacity> {
        Some(Capacity { total_kv_blocks, max_num_batched_tokens: None })
    }

    fn policy(params: &str) -> CapacityAware {
        CapacityAware::configure(params).unwrap()
    }

    #[test]
    fn the_emptier_worker_wins_relative_to_its_own_capacity() {
        let mut case = Case::new(2);
        // More blocks, but a far larger cache: 30 % against 50 %.
        case[Column::DecodeBlocks] = vec![3000, 1000];
        case.lazy.capacities = vec![cap(10_000), cap(2000)];
        assert_eq!(case.costs(&mut policy("{}")).unwrap(), vec![0.3, 0.5]);
        assert_eq!(case.best(&mut policy("{}")), 0);
    }

    #[test]
    fn the_capacity_guard_ranks_overfull_workers_after_every_worker_with_room() {
        let mut case = Case::new(3);
        case[Column::DecodeBlocks] = vec![1001, 990, 1000];
        case.lazy.capacities = vec![cap(1000), cap(1000), cap(1000)];
        let costs = case.costs(&mut policy("{}")).unwrap();
        assert_eq!(costs, vec![1.0 + 1.0 + 1.001, 0.99, 1.0]);
        // With 10 % headroom, 0.99 and 1.0 are guarded too; the least over wins.
        let costs = case.costs(&mut policy(r#"{"max_usage": 0.9}"#)).unwrap();
        assert!(costs.iter().all(|&c| c > 1.9), "{costs:?}");
        assert_eq!(case.best(&mut policy(r#"{"max_usage": 0.9}"#)), 1);
    }

    #[test]
    fn unknown_capacity_is_scored_at_the_mean_of_known_workers() {
        let mut case = Case::new(4);
        case[Column::DecodeBlocks] = vec![200, 600, 5, 5000];
        case.lazy.capacities = vec![cap(1000), cap(1000), None, cap(1000)];
        // Known within the guard: 0.2, 0.6 → neutral 0.4; worker 3 is guarded.
        assert_eq!(case.costs(&mut policy("{}")).unwrap(), vec![0.2, 0.6, 0.4, 2.0 + 5.0]);
        case.lazy.capacities = vec![None; 4];
        assert_eq!(case.costs(&mut policy("{}")).unwrap(), vec![0.0; 4], "nothing known: all neutral");
    }

    #[test]
    fn parameters_are_checked_by_name() {
        let err = CapacityAware::configure(r#"{"max_usage": 0}"#).unwrap_err();
        assert!(err.message.contains("max_usage"), "{err}");
    }
}
