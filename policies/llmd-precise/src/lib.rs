//! llm-d's precise-prefix scheduling profile (llm-d/llm-d-inference-scheduler, on the
//! Gateway API Inference Extension's scorers): a weighted sum of three scorers, each in
//! [0, 1] with higher better, turned into a lower-is-better cost.
//!
//! ```text
//! prefix_w = min(device_overlap_blocks_w / request_blocks, 1)      (0 if the prompt has no blocks)
//! kv_w     = clamp(1 − decode_blocks_w / total_kv_blocks_w, 0, 1)  (0.5 if capacity is unknown)
//! queue_w  = (max q − q_w) / (max q − min q), 1 if all equal;  q = active_requests
//! cost_w   = 2 · (1 − prefix_w) + 1 · (1 − kv_w) + 1 · (1 − queue_w)
//! ```
//!
//! Weights 2/1/1 are the profile's (precise-prefix-cache-scorer 2, kv-cache-utilization 1,
//! queue 1). llm-d's max-score picker takes the highest Σ weight · score; the cost is
//! Σ weight · (1 − score), which orders candidates the same way.
//!
//! Usage is the decode blocks the candidate would hold with this request against its
//! advertised total KV blocks (`candidate-capacities`). llm-d reads usage from the
//! server's metrics; a worker that advertises no capacity gets the neutral 0.5, neither
//! favoured nor avoided. The queue scorer reads the waiting queue; Switchyard knows
//! requests in flight, which stand in for it.

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
};

/// The KV score of a worker whose capacity is unknown: the middle of the range.
const UNKNOWN_KV_SCORE: f64 = 0.5;

/// The tenant-settable parameters, with the precise profile's weights.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// Weight of the prefix-cache score (matched / total blocks), ≥ 0. Default 2.
    pub prefix_cache_weight: f64,
    /// Weight of the KV-utilisation score (1 − usage), ≥ 0. Default 1.
    pub kv_cache_utilization_weight: f64,
    /// Weight of the queue score (min-max normalised), ≥ 0. Default 1.
    pub queue_weight: f64,
}

impl Default for Parameters {
    fn default() -> Self {
        Self { prefix_cache_weight: 2.0, kv_cache_utilization_weight: 1.0, queue_weight: 1.0 }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        check::finite_non_negative("prefix_cache_weight", self.prefix_cache_weight)?;
        check::finite_non_negative("kv_cache_utilization_weight", self.kv_cache_utilization_weight)?;
        check::finite_non_negative("queue_weight", self.queue_weight)
    }
}

/// The precise-prefix profile as a cost.
#[derive(Debug, Clone)]
pub struct LlmdPrecise {
    params: Parameters,
}

impl LlmdPrecise {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params })
    }
}

impl Policy for LlmdPrecise {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::CACHE | InputGroups::LOAD, filters: false, wants_commits: false }
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let p = &self.params;
        let queue = candidates.active_requests();
        let (min_q, max_q) = queue.iter().fold((u32::MAX, 0), |(lo, hi), &q| (lo.min(q), hi.max(q)));
        let spread = f64::from(max_q.saturating_sub(min_q));
        let total_blocks = request.facts().request_blocks;
        // One host call for the whole batch; skipped when the weight makes it moot.
        let capacities = (p.kv_cache_utilization_weight > 0.0).then(|| request.candidate_capacities());
        let dev = candidates.device_overlap_blocks();
        let decode = candidates.decode_blocks();
        for (row, cost) in costs.iter_mut().enumerate() {
            let prefix = if total_blocks == 0 {
                0.0
            } else {
                (f64::from(dev[row]) / f64::from(total_blocks)).min(1.0)
            };
            let kv = match capacities.as_ref().and_then(|c| c.get(row).copied().flatten()) {
                Some(cap) => (1.0 - f64::from(decode[row]) / f64::from(cap.total_kv_blocks)).clamp(0.0, 1.0),
                None => UNKNOWN_KV_SCORE,
            };
            let queue_score = if spread == 0.0 { 1.0 } else { f64::from(max_q - queue[row]) / spread };
            *cost = p.prefix_cache_weight * (1.0 - prefix)
                + p.kv_cache_utilization_weight * (1.0 - kv)
                + p.queue_weight * (1.0 - queue_score);
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(LlmdPrecise);

#[cfg(test)]
mod tests {
    use switchyard_guest_sdk::Column;
    use switchyard_guest_sdk::testing::Case;
    use switchyard_guest_sdk::{Capacity, Policy};

    use super::LlmdPrecise;

    fn cap(total_kv_blocks: u32) -> Option<Capacity> {
        Some(Capacity { total_kv_blocks, max_num_batched_tokens: None })
    }

    #[test]
    fn weighted_sum_of_prefix_kv_and_queue_scores() {
        // 64-block prompt.
        let mut case = Case::new(3);
        case[Column::DeviceOverlapBlocks] = vec![64, 32, 100];
        case[Column::DecodeBlocks] = vec![500, 0, 1000];
        case[Column::ActiveRequests] = vec![4, 0, 8];
        case.lazy.capacities = vec![cap(1000), cap(1000), None];
        let costs = case.costs(&mut LlmdPrecise::configure("{}").unwrap()).unwrap();
        // w0: prefix 1 → 0; kv 0.5 → 0.5; queue (8−4)/8 = 0.5 → 0.5.   total 1.0
        // w1: prefix 0.5 → 1.0; kv 1 → 0; queue 1 → 0.                  total 1.0
        // w2: prefix capped at 1 → 0; unknown capacity 0.5 → 0.5; queue 0 → 1. total 1.5
        assert_eq!(costs, vec![1.0, 1.0, 1.5]);
        // Doubling the prefix weight's pull (4/1/1) makes the full hit win.
        let mut heavy = LlmdPrecise::configure(r#"{"prefix_cache_weight": 4}"#).unwrap();
        assert_eq!(case.best(&mut heavy), 0);
        // Without prefix weight, the idle, empty worker wins.
        let mut load_only = LlmdPrecise::configure(r#"{"prefix_cache_weight": 0}"#).unwrap();
        assert_eq!(case.best(&mut load_only), 1);
    }

    #[test]
    fn over_full_workers_score_zero_kv_and_equal_queues_score_one() {
        let mut case = Case::new(2);
        case[Column::DecodeBlocks] = vec![3000, 10];
        case[Column::ActiveRequests] = vec![5, 5];
        case.lazy.capacities = vec![cap(1000), cap(1000)];
        let costs = case.costs(&mut LlmdPrecise::configure("{}").unwrap()).unwrap();
        // Prefix 0 → 2 each; kv 0 (over full) → 1 and 0.99 → 0.01; queue all equal → 0.
        assert_eq!(costs, vec![2.0 + 1.0, 2.0 + (1.0 - (1.0 - 10.0 / 1000.0))]);
    }

    #[test]
    fn parameters_are_checked_by_name() {
        let err = LlmdPrecise::configure(r#"{"queue_weight": -1}"#).unwrap_err();
        assert!(err.message.contains("queue_weight"), "{err}");
        let err = LlmdPrecise::configure(r#"{"prefix_weight": 1}"#).unwrap_err();
        assert!(err.message.contains("prefix_weight"), "{err}");
    }
}
