//! Consistent hashing with bounded loads (CHWBL; Mirrokni, Thorup, Zadimoghaddam,
//! SODA'18; KubeAI `balance_chwbl.go`), see `shared/reference/routing-policies.md` §3.
//!
//! The key is the prompt's prefix: with chained block hashes, the hash of the first K
//! blocks is simply `prefix-hashes[min(K, n) − 1]`. The ring holds `replication` points
//! per candidate (worker, dp rank) at `hash2(endpoint, i)`. From the key, walk clockwise
//! and take the first candidate whose requests in flight are within the bound
//!
//! ```text
//! in_flight_w ≤ (Σ in_flight + 1) / N × load_factor          (N = candidates)
//! ```
//!
//! and if none is (only possible with `load_factor` < 1), the first candidate the walk
//! meets, as KubeAI does.
//!
//! The walk order needs no materialised ring: a clockwise walk meets candidate w first at
//! its replica point closest clockwise to the key, so walk order = order of
//! `d_w = min_i (point_w,i − key) mod 2^64`. That is N × replication hashes per call with
//! no state and no allocation (a ring cached per worker set would trade memory and a sort
//! on every membership change for the same answer).
//!
//! Costs tell the host's picker the choice: 0 for the chosen candidate, `1 + d_w / 2^64`
//! (1 ≤ cost < 2, in walk order) for the others, so argmin takes the chosen one and a
//! softmax picker prefers candidates the walk would meet next.
//!
//! Without prefix hashes (a prefill pool) the key is the request's seed: load is still
//! bounded, and requests spread over the ring.

use serde::Deserialize;
use switchyard_guest_sdk::hash::{endpoint, hash2, mix64};
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, parse_parameters,
};

/// The tenant-settable parameters, with KubeAI's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// K: blocks of the prompt that form the key, ≥ 1. Default 16 (256 tokens of
    /// 16-token blocks: smg `prefix_hash`'s `prefix_token_count`; KubeAI keys on 100
    /// characters of the first message, which chained block hashes cannot express).
    pub prefix_blocks: u32,
    /// Ring points per candidate, 1..=4096. Default 256 (KubeAI `replication`).
    pub replication: u32,
    /// Bound on a candidate's load relative to the mean, > 0. Default 1.25 (KubeAI
    /// `meanLoadFactor` 125 %; the paper's 1 + ε).
    pub load_factor: f64,
}

impl Default for Parameters {
    fn default() -> Self {
        Self { prefix_blocks: 16, replication: 256, load_factor: 1.25 }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.prefix_blocks == 0 {
            return Err(PolicyError::invalid_parameters("field `prefix_blocks`: must be at least 1"));
        }
        if !(1..=4096).contains(&self.replication) {
            return Err(PolicyError::invalid_parameters(format!(
                "field `replication`: {} is out of range 1..=4096",
                self.replication
            )));
        }
        if !(self.load_factor.is_finite() && self.load_factor > 0.0) {
            return Err(PolicyError::invalid_parameters(format!(
                "field `load_factor`: {} must be a finite number > 0",
                self.load_factor
            )));
        }
        Ok(())
    }
}

/// CHWBL over the candidates of each request.
#[derive(Debug, Clone)]
pub struct Chwbl {
    params: Parameters,
}

impl Chwbl {
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params })
    }

    /// The ring position of the request's key.
    fn key(&self, request: &Request<'_>) -> u64 {
        match request.prefix_hashes() {
            Some(h) if !h.is_empty() => {
                let k = (self.params.prefix_blocks as usize).min(h.len());
                mix64(h[k - 1])
            }
            _ => mix64(request.facts().seed),
        }
    }
}

/// Clockwise distance from `key` to the nearest of a candidate's `replication` points.
fn distance(worker_id: u64, dp_rank: u32, replication: u32, key: u64) -> u64 {
    let e = endpoint(worker_id, dp_rank);
    (0..u64::from(replication)).map(|i| hash2(e, i).wrapping_sub(key)).min().unwrap_or(u64::MAX)
}

/// 2^-64: maps a ring distance into [0, 1).
const RING_FRACTION: f64 = 1.0 / 18_446_744_073_709_551_616.0;

impl Policy for Chwbl {
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
        if candidates.is_empty() {
            return Ok(());
        }
        let key = self.key(request);
        let load = candidates.active_requests();
        let total: u64 = load.iter().map(|&r| u64::from(r)).sum();
        let bound = (total + 1) as f64 / candidates.len() as f64 * self.params.load_factor;
        // (distance, row) of the first candidate met overall and of the first within bound.
        let mut first: Option<(u64, usize)> = None;
        let mut first_ok: Option<(u64, usize)> = None;
        let rows = candidates.worker_ids().iter().zip(candidates.dp_ranks()).enumerate();
        for (row, (&worker_id, &dp_rank)) in rows {
            let d = distance(worker_id, dp_rank, self.params.replication, key);
            costs[row] = 1.0 + d as f64 * RING_FRACTION;
            if first.is_none_or(|(best, _)| d < best) {
                first = Some((d, row));
            }
            if f64::from(load[row]) <= bound && first_ok.is_none_or(|(best, _)| d < best) {
                first_ok = Some((d, row));
            }
        }
        if let Some((_, row)) = first_ok.or(first) {
            costs[row] = 0.0;
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(Chwbl);

#[cfg(test)]
mod tests;
