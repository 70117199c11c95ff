//! LMetric (Zhang et al., arXiv:2603.15202, OSDI'26): the product of the two things a new
//! request waits for, with no tunables (the weights of a linear mix cancel out).
//!
//! ```text
//! uncached_prefill_tokens_w = max(prompt_tokens − cached_tokens_w, 0)     tokens
//! batch_size_w              = active_requests_w                          requests
//! cost_w                    = uncached_prefill_tokens_w × batch_size_w   (f64 product)
//! ```
//!
//! `cached_tokens_w` is the host's effective cached-token count for the prompt on w (the
//! paper's `ov_w · B`); `active_requests_w` is the requests in flight on w *before* this
//! one (the batch this request joins). An idle worker therefore costs 0, whatever its
//! cache: the product is degenerate only when a factor is 0, and ties between such
//! workers go to the host's seeded tie-break.

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, parse_parameters,
};

/// LMetric has no tunables: only `{}` is accepted.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {}

/// LMetric's cost.
#[derive(Debug, Clone, Default)]
pub struct LMetric;

impl Policy for LMetric {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let Parameters {} = parse_parameters(parameters)?;
        Ok(Self)
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
        let isl = request.facts().prompt_tokens;
        let rows = candidates.cached_tokens().iter().zip(candidates.active_requests());
        for (cost, (&cached, &batch)) in costs.iter_mut().zip(rows) {
            *cost = f64::from(isl.saturating_sub(cached)) * f64::from(batch);
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(LMetric);

#[cfg(test)]
mod tests {
    use switchyard_guest_sdk::Column;
    use switchyard_guest_sdk::Policy;
    use switchyard_guest_sdk::testing::Case;

    use super::LMetric;

    #[test]
    fn cost_is_uncached_tokens_times_batch_size() {
        let mut case = Case::new(4).prompt(1000);
        case[Column::CachedTokens] = vec![800, 0, 1200, 500];
        case[Column::ActiveRequests] = vec![10, 1, 7, 3];
        // 200 × 10, 1000 × 1, 0 × 7 (fully cached), 500 × 3.
        assert_eq!(case.costs(&mut LMetric).unwrap(), vec![2000.0, 1000.0, 0.0, 1500.0]);
        assert_eq!(case.best(&mut LMetric), 2);
    }

    #[test]
    fn a_deep_cache_hit_loses_to_a_short_batch_when_the_product_says_so() {
        let mut case = Case::new(2).prompt(4096);
        case[Column::CachedTokens] = vec![3072, 0];
        case[Column::ActiveRequests] = vec![8, 2];
        // 1024 × 8 = 8192 > 4096 × 2 = 8192? equal: then a deeper batch tips it.
        assert_eq!(case.costs(&mut LMetric).unwrap(), vec![8192.0, 8192.0]);
        case[Column::ActiveRequests][0] = 9;
        assert_eq!(case.best(&mut LMetric), 1);
        case[Column::ActiveRequests][0] = 7;
        assert_eq!(case.best(&mut LMetric), 0);
    }

    #[test]
    fn accepts_only_empty_parameters() {
        assert!(LMetric::configure("{}").is_ok());
        let err = LMetric::configure(r#"{"alpha": 1}"#).unwrap_err();
        assert!(err.message.contains("alpha"), "{err}");
    }
}
