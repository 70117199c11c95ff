//! In-flight request limit: a filter that never selects a worker already at its request
//! limit (Dynamo's open problem), then Dynamo's default cost over the rest. A filter, not
//! a penalty: if every worker is at its limit, the selection has no eligible worker and
//! the router queues or rejects, instead of overfilling one.
//!
//! ```text
//! keep_w = active_requests_w < max_in_flight_requests
//! cost_w = Dynamo default cost (the `default` policy, parameters under `cost`)
//! ```
//!
//! The default limit, 256, is vLLM's default `max_num_seqs`: the most sequences a worker
//! schedules at once, so a request beyond it only waits in that worker's queue.

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
};
use switchyard_policy_default::{DefaultPolicy, Parameters as CostParameters};

/// The tenant-settable parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// Requests in flight at which a worker is excluded, ≥ 1. Default 256.
    pub max_in_flight_requests: u32,
    /// The default policy's parameters for scoring the workers kept.
    pub cost: CostParameters,
}

impl Default for Parameters {
    fn default() -> Self {
        Self { max_in_flight_requests: 256, cost: CostParameters::default() }
    }
}

/// Filter at the request limit, then score with Dynamo's cost.
#[derive(Debug, Clone)]
pub struct RequestLimit {
    limit: u32,
    cost: DefaultPolicy,
}

impl RequestLimit {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        check::at_least("max_in_flight_requests", params.max_in_flight_requests, 1)?;
        let cost = DefaultPolicy::new(params.cost).map_err(|e| check::nested("cost", e))?;
        Ok(Self { limit: params.max_in_flight_requests, cost })
    }
}

impl Policy for RequestLimit {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo {
            inputs: self.cost.info().inputs | InputGroups::LOAD,
            filters: true,
            wants_commits: false,
        }
    }

    fn filter(
        &mut self,
        _request: &Request<'_>,
        candidates: &Candidates<'_>,
        keep: &mut [bool],
    ) -> Result<(), PolicyError> {
        for (keep, &requests) in keep.iter_mut().zip(candidates.active_requests()) {
            *keep = requests < self.limit;
        }
        Ok(())
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        self.cost.score(request, candidates, costs)
    }
}

switchyard_guest_sdk::export_policy!(RequestLimit);

#[cfg(test)]
mod tests {
    use switchyard_guest_sdk::Column;
    use switchyard_guest_sdk::Policy;
    use switchyard_guest_sdk::testing::Case;

    use super::RequestLimit;

    #[test]
    fn workers_at_their_limit_are_filtered_out_below_it_kept() {
        let mut case = Case::new(4);
        case[Column::ActiveRequests] = vec![255, 256, 300, 0];
        let mut policy = RequestLimit::configure("{}").unwrap();
        assert!(policy.info().filters);
        assert_eq!(case.keep(&mut policy).unwrap(), vec![true, false, false, true]);
        let mut tight = RequestLimit::configure(r#"{"max_in_flight_requests": 1}"#).unwrap();
        assert_eq!(case.keep(&mut tight).unwrap(), vec![false, false, false, true]);
    }

    #[test]
    fn the_kept_workers_are_scored_with_the_default_cost() {
        let mut case = Case::new(2).prompt(160);
        case[Column::DecodeBlocks] = vec![30, 20];
        let mut policy = RequestLimit::configure(r#"{"cost": {"prefill_load_scale": 0.5}}"#).unwrap();
        // 0.5 × 160 / 16 + decode.
        assert_eq!(case.costs(&mut policy).unwrap(), vec![35.0, 25.0]);
    }

    #[test]
    fn parameters_are_checked_by_name() {
        let err = RequestLimit::configure(r#"{"max_in_flight_requests": 0}"#).unwrap_err();
        assert!(err.message.contains("max_in_flight_requests"), "{err}");
        let err = RequestLimit::configure(r#"{"cost": {"prefill_load_scale": -2}}"#).unwrap_err();
        assert!(err.message.contains("cost") && err.message.contains("prefill_load_scale"), "{err}");
        let err = RequestLimit::configure(r#"{"max_in_flight_requests": "many"}"#).unwrap_err();
        assert!(err.message.contains("max_in_flight_requests"), "{err}");
    }
}
