//! Dynamo's default worker-selection cost (`DefaultWorkerSelector` in ai-dynamo/dynamo,
//! current form; `docs/router`), written once: linked natively into the
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
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Pool, Request, check, parse_parameters,
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
        check::in_range_f64("overlap_score_credit", self.overlap_score_credit, 0.0..=1.0)?;
        check::finite_non_negative("overlap_score_credit_decay", self.overlap_score_credit_decay)?;
        check::finite_non_negative("prefill_load_scale", self.prefill_load_scale)?;
        check::finite_non_negative("decode_active_request_weight", self.decode_active_request_weight)?;
        check::finite_non_negative("host_cache_hit_weight", self.host_cache_hit_weight)?;
        check::finite_non_negative("disk_cache_hit_weight", self.disk_cache_hit_weight)?;
        match self.overlap_score_weight {
            Some(w) => check::finite_non_negative("overlap_score_weight", w),
            None => Ok(()),
        }
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
    /// The policy with `params`, checked (each bad field named).
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
        let tracks_prefill = facts.pool.tracks_prefill();
        let decays = tracks_prefill && p.overlap_score_credit_decay > 0.0;
        let decode_branch = facts.pool == Pool::Decode && p.overlap_score_credit > 0.0;
        let rows = Rows::new(candidates, costs.len());
        let k = Constants {
            p,
            block_size: f64::from(facts.block_size),
            per_block: 1.0 / f64::from(facts.block_size),
            request_blocks: f64::from(facts.request_blocks.max(1)),
            isl: facts.prompt_tokens,
            min_pf: if decays { rows.pf.iter().copied().min().unwrap_or(0) } else { 0 },
        };
        // Every branch is decided once per batch: each specialisation's loop body is
        // straight-line arithmetic, which vectorises natively and with +simd128. Dynamo's
        // defaults (no decay, no request weight) with a power-of-two block have a loop of
        // their own, with less to do ([`score_rows`]'s `COMMON`); each specialisation is
        // code a guest ships, so the others share the general loops.
        let common = !decays && facts.block_size.is_power_of_two() && p.decode_active_request_weight == 0.0;
        match (decode_branch, tracks_prefill, decays, common) {
            (true, _, true, _) => score_rows::<true, true, false>(&k, &rows, costs),
            (true, _, false, _) => score_rows::<true, false, false>(&k, &rows, costs),
            (false, true, true, _) => score_rows::<false, true, false>(&k, &rows, costs),
            (false, true, false, true) => score_rows::<false, false, true>(&k, &rows, costs),
            (false, true, false, false) => score_rows::<false, false, false>(&k, &rows, costs),
            (false, false, _, _) => score_rows_untracked(&k, &rows, costs),
        }
        if let (None, Some(multipliers)) = (facts.pinned, candidates.preferred_multiplier()) {
            for (cost, m) in costs.iter_mut().zip(multipliers) {
                *cost *= m;
            }
        }
        Ok(())
    }
}

/// The per-batch constants of the cost.
struct Constants<'a> {
    p: &'a Parameters,
    block_size: f64,
    /// 1 / B: exact when B is a power of two (see [`score_rows`]).
    per_block: f64,
    request_blocks: f64,
    isl: u32,
    min_pf: u32,
}

/// The columns the cost reads, each re-sliced to `n` rows so the compiler drops the
/// bounds checks.
struct Rows<'a> {
    pf: &'a [u32],
    dev: &'a [u32],
    host: &'a [u32],
    disk: &'a [u32],
    cached: &'a [u32],
    decode: &'a [u32],
    requests: &'a [u32],
}

impl<'a> Rows<'a> {
    fn new(c: &Candidates<'a>, n: usize) -> Self {
        Self {
            pf: &c.active_prefill_tokens()[..n],
            dev: &c.device_overlap_blocks()[..n],
            host: &c.host_overlap_blocks()[..n],
            disk: &c.disk_overlap_blocks()[..n],
            cached: &c.cached_tokens()[..n],
            decode: &c.decode_blocks()[..n],
            requests: &c.active_requests()[..n],
        }
    }
}

/// `max(0, x)` as a compare and select (what `f64::max` means for the finite values
/// here): one vector instruction on every target, where `f64::max`'s NaN rule is not.
#[inline(always)]
fn positive_part(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

impl Constants<'_> {
    /// c · decay_w: the device credit per cached block. Without decay it is c for
    /// everyone (c · 1.0 is c exactly), which keeps the common loop free of divisions.
    #[inline(always)]
    fn device_credit<const DECAYS: bool>(&self, pf: u32) -> f64 {
        if DECAYS {
            let excess = f64::from(pf.saturating_sub(self.min_pf)) / self.block_size;
            let decay = 1.0 / (1.0 + self.p.overlap_score_credit_decay * (excess / self.request_blocks));
            self.p.overlap_score_credit * decay
        } else {
            self.p.overlap_score_credit
        }
    }

    #[inline(always)]
    fn credit<const DECAYS: bool>(&self, r: &Rows<'_>, i: usize) -> f64 {
        self.device_credit::<DECAYS>(r.pf[i]) * f64::from(r.dev[i])
            + self.p.host_cache_hit_weight * f64::from(r.host[i])
            + self.p.disk_cache_hit_weight * f64::from(r.disk[i])
    }
}

/// The aggregated or prefill pool (`DECODE` false), or the decode pool with credit.
///
/// `COMMON` (no decay, B a power of two, a = 0) does less, bit-identically:
/// - `tokens / B` is `tokens · (1/B)`: 1/B is exact, so the product is the same real
///   number as the quotient, rounded once the same way; a multiplication where the
///   division would be the loop's slowest instruction;
/// - the request term `0 · r` is +0 for every row, and adding +0 leaves every cost as it
///   is (a cost here is never −0: `positive_part` answers +0, and the terms are ≥ +0), so
///   it is not computed and the column not read.
fn score_rows<const DECODE: bool, const DECAYS: bool, const COMMON: bool>(
    k: &Constants<'_>,
    r: &Rows<'_>,
    costs: &mut [f64],
) {
    let p = k.p;
    for (i, cost) in costs.iter_mut().enumerate() {
        let credit = k.credit::<DECAYS>(r, i);
        let decode_blocks = f64::from(r.decode[i]);
        let request_cost = || p.decode_active_request_weight * f64::from(r.requests[i]);
        *cost = if DECODE {
            positive_part(decode_blocks - credit) + request_cost()
        } else {
            // Dynamo's (pf + max(isl − cached, 0)) + cached is pf + max(isl, cached): the
            // terms are integers below 2^53, which f64 adds exactly in any order.
            let raw_prefill_tokens = f64::from(r.pf[i]) + f64::from(k.isl.max(r.cached[i]));
            if COMMON {
                let prefill_blocks = positive_part(raw_prefill_tokens * k.per_block - credit);
                p.prefill_load_scale * prefill_blocks + decode_blocks
            } else {
                let prefill_blocks = positive_part(raw_prefill_tokens / k.block_size - credit);
                p.prefill_load_scale * prefill_blocks + decode_blocks + request_cost()
            }
        };
    }
}

/// A pool that tracks no prefill (the decode pool without credit): the prefill term is 0.
fn score_rows_untracked(k: &Constants<'_>, r: &Rows<'_>, costs: &mut [f64]) {
    let p = k.p;
    for (i, cost) in costs.iter_mut().enumerate() {
        let credit = k.credit::<false>(r, i);
        let decode_blocks = f64::from(r.decode[i]);
        let request_cost = p.decode_active_request_weight * f64::from(r.requests[i]);
        *cost = p.prefill_load_scale * positive_part(0.0 - credit) + decode_blocks + request_cost;
    }
}

#[cfg(feature = "export")]
switchyard_guest_sdk::export_policy!(DefaultPolicy);

#[cfg(test)]
mod tests;
