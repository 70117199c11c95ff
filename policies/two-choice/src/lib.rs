//! Two-choice prefix hashing, DualMap-style (Yuan et al., arXiv:2602.06502, ICLR 2026).
//!
//! Two independent hashes of the prompt's prefix name two candidates: `a`, the
//! cache-affinity choice, and `b`, its alternative. Each is a rendezvous (highest random
//! weight) pick over the candidates, salted differently, so it is consistent as workers
//! come and go, like DualMap's dual ring, and needs no state. `b` is never `a`.
//!
//! ```text
//! key      = prefix-hashes[min(K, n) − 1]              (the seed without hashes)
//! a        = argmax_w hash2(key ⊕ SALT_A, w),  b = argmax_{w ≠ a} hash2(key ⊕ SALT_B, w)
//! bound    = (Σ in_flight + 1) / N × load_factor
//! choose a if in_flight_a ≤ bound                        (keep affinity)
//! else the one of a, b with fewer requests in flight (a on ties)      (the switch)
//! ```
//!
//! DualMap's own switch compares an estimated TTFT with the request's SLO; the reference
//! marks its estimator unverified, so the bound here is the bounded-load test of smg's
//! `prefix_hash` and CHWBL (requests in flight against the mean), with the same default.
//!
//! Costs: 0 for the chosen candidate, 1 for the other of the two, 2 for everyone else.

use serde::Deserialize;
use switchyard_guest_sdk::hash::{endpoint, hash2, mix64};
use switchyard_guest_sdk::placement::{LoadBound, prefix_key};
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
};

/// Salts that make the two choices independent hashes of the same key.
const SALT_A: u64 = 0x243f_6a88_85a3_08d3;
const SALT_B: u64 = 0x1319_8a2e_0370_7344;

/// The tenant-settable parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// K: blocks of the prompt that form the key, ≥ 1. Default 16 (256 tokens of
    /// 16-token blocks, smg `prefix_token_count`).
    pub prefix_blocks: u32,
    /// The affinity candidate is kept while its load is at most this multiple of the
    /// mean load (with the new request), > 0. Default 1.25 (smg `load_factor`).
    pub load_factor: f64,
}

impl Default for Parameters {
    fn default() -> Self {
        Self { prefix_blocks: 16, load_factor: 1.25 }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        check::at_least("prefix_blocks", self.prefix_blocks, 1)?;
        check::finite_positive("load_factor", self.load_factor)
    }
}

/// Two-choice prefix hashing.
#[derive(Debug, Clone)]
pub struct TwoChoice {
    params: Parameters,
}

impl TwoChoice {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params })
    }

    /// The request's prefix hash (salted per choice before use), or its scrambled seed
    /// without one.
    fn key(&self, request: &Request<'_>) -> u64 {
        prefix_key(request, self.params.prefix_blocks).unwrap_or_else(|| mix64(request.facts().seed))
    }
}

/// The row with the highest rendezvous weight for `salted_key`, skipping `except`.
fn rendezvous(candidates: &Candidates<'_>, salted_key: u64, except: Option<usize>) -> Option<usize> {
    let rows = candidates.worker_ids().iter().zip(candidates.dp_ranks()).enumerate();
    rows.filter(|&(row, _)| Some(row) != except)
        .map(|(row, (&w, &r))| (hash2(salted_key, endpoint(w, r)), row))
        .max()
        .map(|(_, row)| row)
}

impl Policy for TwoChoice {
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
        let key = self.key(request);
        let Some(a) = rendezvous(candidates, key ^ SALT_A, None) else {
            return Ok(());
        };
        costs.fill(2.0);
        let Some(b) = rendezvous(candidates, key ^ SALT_B, Some(a)) else {
            costs[a] = 0.0;
            return Ok(());
        };
        let load = candidates.active_requests();
        let bound = LoadBound::new(candidates, self.params.load_factor);
        let keep_affinity = bound.admits(load[a]) || load[a] <= load[b];
        let (chosen, other) = if keep_affinity { (a, b) } else { (b, a) };
        costs[chosen] = 0.0;
        costs[other] = 1.0;
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(TwoChoice);

#[cfg(test)]
mod tests;
