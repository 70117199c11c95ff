//! Dynamo's default worker-selection cost (`DefaultWorkerSelector`, current form; see
//! `shared/reference/routing-policies.md` §1), written once: linked natively into the
//! host and exported as a component.
//!
//! Per candidate w, in blocks (lower is better):
//! ```text
//! decay_w  = 1 / (1 + d · ((pf_w − min pf) / B) / max(request_blocks, 1))   (1 if d = 0 or no prefill tracking)
//! credit_w = c · decay_w · dev_w + h · host_w + k · disk_w
//! prefill  = ((pf_w + max(isl − cached_w, 0)) + cached_w) / B               (0 in a decode pool)
//! logit_w  = scale · max(0, prefill − credit_w) + decode_w + a · req_w
//! decode pool with c > 0:  logit_w = max(0, decode_w − credit_w) + a · req_w
//! cost_w   = logit_w · preferred_multiplier_w                               (not for a pinned request)
//! ```

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Pool, Request, parse_parameters,
};

/// The tenant-settable parameters, with Dynamo's defaults (`KvRouterConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// c: credit per device-cached block, 0..=1. Default 1.0.
    pub overlap_score_credit: f64,
    /// d: how fast the device credit decays with prefill backlog above the least-loaded
    /// candidate, ≥ 0. Default 0 (no decay).
    pub overlap_score_credit_decay: f64,
    /// Weight of the uncredited prefill blocks, ≥ 0. Default 1.0.
    pub prefill_load_scale: f64,
    /// a: cost per request in flight, in blocks, ≥ 0. Default 0.
    pub decode_active_request_weight: f64,
    /// h: credit per host-cached block, ≥ 0. Default 0.75.
    pub host_cache_hit_weight: f64,
    /// k: credit per disk-cached block, ≥ 0. Default 0.25.
    pub disk_cache_hit_weight: f64,
    /// Deprecated Dynamo knob: sets `prefill_load_scale`; 0 also sets the credit to 0.
    pub overlap_score_weight: Option<f64>,
}

impl Default for Parameters {
    fn default() -> Self {
        Self {
            overlap_score_credit: 1.0,
            overlap_score_credit_decay: 0.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            host_cache_hit_weight: 0.75,
            disk_cache_hit_weight: 0.25,
            overlap_score_weight: None,
        }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let check = |name: &str, value: f64, max: f64| {
            if value.is_finite() && (0.0..=max).contains(&value) {
                Ok(())
            } else {
                Err(PolicyError::invalid_parameters(format!(
                    "field `{name}`: {value} is out of range 0..={max}"
                )))
            }
        };
        check("overlap_score_credit", self.overlap_score_credit, 1.0)?;
        check("overlap_score_credit_decay", self.overlap_score_credit_decay, f64::MAX)?;
        check("prefill_load_scale", self.prefill_load_scale, f64::MAX)?;
        check("decode_active_request_weight", self.decode_active_request_weight, f64::MAX)?;
        check("host_cache_hit_weight", self.host_cache_hit_weight, f64::MAX)?;
        check("disk_cache_hit_weight", self.disk_cache_hit_weight, f64::MAX)?;
        if let Some(w) = self.overlap_score_weight {
            check("overlap_score_weight", w, f64::MAX)?;
        }
        Ok(())
    }

    /// Applies the deprecated `overlap_score_weight` the way Dynamo does.
    fn effective(&self) -> Self {
        let mut p = self.clone();
        if let Some(w) = p.overlap_score_weight.take() {
            p.prefill_load_scale = w;
            if w == 0.0 {
                p.overlap_score_credit = 0.0;
            }
        }
        p
    }
}

/// Dynamo's default cost function.
#[derive(Debug, Clone)]
pub struct DefaultPolicy {
    params: Parameters,
}

impl DefaultPolicy {
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params: params.effective() })
    }

    /// The parameters in force (the deprecated knob already applied).
    pub fn parameters(&self) -> &Parameters {
        &self.params
    }
}

impl Policy for DefaultPolicy {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo {
            inputs: InputGroups::CACHE | InputGroups::LOAD | InputGroups::AFFINITY,
            filters: false,
            wants_commits: false,
        }
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let facts = request.facts();
        let p = &self.params;
        let block_size = f64::from(facts.block_size);
        let tracks_prefill = facts.pool.tracks_prefill();
        // Every column re-sliced to `n` rows: the compiler then drops the bounds checks,
        // and the loops below vectorise (natively and with +simd128).
        let n = costs.len();
        let pf = &candidates.active_prefill_tokens()[..n];

        // Per-candidate device credit, c · decay_w. With no decay it is c for everyone
        // (c · 1.0 is c exactly), which keeps the common loop free of divisions.
        let decays = tracks_prefill && p.overlap_score_credit_decay > 0.0;
        let min_pf = if decays { pf.iter().copied().min().unwrap_or(0) } else { 0 };
        let request_blocks = f64::from(facts.request_blocks.max(1));
        let device_credit = |i: usize| {
            if decays {
                let excess = f64::from(pf[i].saturating_sub(min_pf)) / block_size;
                let decay = 1.0 / (1.0 + p.overlap_score_credit_decay * (excess / request_blocks));
                p.overlap_score_credit * decay
            } else {
                p.overlap_score_credit
            }
        };

        let dev = &candidates.device_overlap_blocks()[..n];
        let host = &candidates.host_overlap_blocks()[..n];
        let disk = &candidates.disk_overlap_blocks()[..n];
        let cached = &candidates.cached_tokens()[..n];
        let decode = &candidates.decode_blocks()[..n];
        let requests = &candidates.active_requests()[..n];
        let isl = facts.prompt_tokens;
        let decode_branch = facts.pool == Pool::Decode && p.overlap_score_credit > 0.0;

        for (i, cost) in costs.iter_mut().enumerate() {
            let credit = device_credit(i) * f64::from(dev[i])
                + p.host_cache_hit_weight * f64::from(host[i])
                + p.disk_cache_hit_weight * f64::from(disk[i]);
            let decode_blocks = f64::from(decode[i]);
            let request_cost = p.decode_active_request_weight * f64::from(requests[i]);
            *cost = if decode_branch {
                (decode_blocks - credit).max(0.0) + request_cost
            } else {
                // Sums of u32 values are exact in f64, so this equals Dynamo's integer sum.
                let raw_prefill_tokens = if tracks_prefill {
                    let uncached = isl.saturating_sub(cached[i]);
                    (f64::from(pf[i]) + f64::from(uncached)) + f64::from(cached[i])
                } else {
                    0.0
                };
                let prefill_blocks = (raw_prefill_tokens / block_size - credit).max(0.0);
                p.prefill_load_scale * prefill_blocks + decode_blocks + request_cost
            };
        }
        // Dynamo applies no taint preference to a pinned request.
        if let (None, Some(multipliers)) = (facts.pinned, candidates.preferred_multiplier()) {
            for (cost, m) in costs.iter_mut().zip(multipliers) {
                *cost *= m;
            }
        }
        Ok(())
    }
}

#[cfg(feature = "export")]
switchyard_guest_sdk::export_policy!(DefaultPolicy);

#[cfg(test)]
mod tests;
