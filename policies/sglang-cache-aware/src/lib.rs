//! SGLang router's `cache_aware` policy (sgl-project/sglang
//! `sgl-router/src/policies/cache_aware.rs`, successor lightseekorg/smg), stateful: an
//! approximate prefix tree per worker, kept in the policy's own memory across requests.
//!
//! ```text
//! load_w     = active_requests_w
//! imbalanced = max load − min load > balance_abs_threshold  AND  max load > balance_rel_threshold · min load
//! if imbalanced:                  chosen = argmin load
//! else: (matched, owner) = longest prefix of the prompt held by a candidate's tree
//!       chosen = owner                          if matched / prompt blocks > cache_threshold
//!              = the candidate with the smallest tree   otherwise
//! cost = 0 for the chosen candidate, 1 for the others
//! on commit: insert the prompt under the worker the host accepted; evict that worker's
//!            least recently used blocks down to max_tree_size
//! ```
//!
//! The "tree" holds the prompt's chained block hashes (`prefix-hashes`, the stand-in for
//! the token sequence): since hash i names blocks 0..=i, a node is a hash, and a worker's
//! tree is the set of hashes it was given, each with the tick of its last use. Matching
//! walks the prompt's hashes until one is held by no candidate; the owner is the holder
//! of the deepest matched hash that used it last. Sizes are counted in blocks; the limit
//! is given in tokens like smg's token tree and divided by the block size.
//!
//! The tree changes **only** in `on_selected`: the host calls it once it accepts a pick,
//! so dry runs and abandoned retries leave no trace. Eviction runs on each commit instead
//! of on SGLang's timer (a guest has no clock), for the worker whose tree grew.

mod tree;

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, WorkerRank, check, parse_parameters,
};

use tree::Trees;

/// The tenant-settable parameters, with smg's CLI defaults (`router_args.py`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// Match rate above which the owner of the longest match is chosen, 0..=1. Default 0.3.
    pub cache_threshold: f64,
    /// Absolute load spread (requests) above which the load is imbalanced. Default 64.
    pub balance_abs_threshold: u32,
    /// Relative load spread (max / min) above which the load is imbalanced, ≥ 0. Default 1.5.
    pub balance_rel_threshold: f64,
    /// Most tokens a worker's tree holds before its least recently used blocks are
    /// evicted, ≥ 1. Default 2^26.
    pub max_tree_size: u64,
}

impl Default for Parameters {
    fn default() -> Self {
        Self {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            max_tree_size: 1 << 26,
        }
    }
}

impl Parameters {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        check::in_range_f64("cache_threshold", self.cache_threshold, 0.0..=1.0)?;
        check::finite_non_negative("balance_rel_threshold", self.balance_rel_threshold)?;
        check::at_least("max_tree_size", self.max_tree_size, 1)
    }
}

/// The first row minimising `key`.
fn argmin(n: usize, key: impl Fn(usize) -> u64) -> usize {
    (0..n).fold(0, |best, row| if key(row) < key(best) { row } else { best })
}

/// SGLang's cache-aware policy.
#[derive(Debug, Clone)]
pub struct SglangCacheAware {
    params: Parameters,
    trees: Trees,
}

impl SglangCacheAware {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params, trees: Trees::default() })
    }

    /// Blocks held in `worker`'s tree.
    pub fn tree_size(&self, worker: WorkerRank) -> u64 {
        self.trees.size(worker)
    }

    /// Commits accepted so far.
    pub fn commits(&self) -> u64 {
        self.trees.tick
    }

    /// The row SGLang's rule chooses.
    fn choose(&self, request: &Request<'_>, candidates: &Candidates<'_>) -> usize {
        let load = candidates.active_requests();
        let (min, max) = load.iter().fold((u32::MAX, 0), |(lo, hi), &l| (lo.min(l), hi.max(l)));
        let p = &self.params;
        let imbalanced =
            max - min > p.balance_abs_threshold && f64::from(max) > p.balance_rel_threshold * f64::from(min);
        if imbalanced {
            return argmin(candidates.len(), |row| u64::from(load[row]));
        }
        let hashes = request.prefix_hashes();
        let hashes = hashes.as_deref().unwrap_or(&[]);
        let (matched, owner) = self.trees.longest_match(hashes, candidates);
        let rate = if hashes.is_empty() { 0.0 } else { matched as f64 / hashes.len() as f64 };
        match owner {
            Some(row) if rate > p.cache_threshold => row,
            _ => {
                let (ids, ranks) = (candidates.worker_ids(), candidates.dp_ranks());
                argmin(candidates.len(), |row| {
                    self.trees.size(WorkerRank { worker_id: ids[row], dp_rank: ranks[row] })
                })
            }
        }
    }
}

impl Policy for SglangCacheAware {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::LOAD, filters: false, wants_commits: true }
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
        costs.fill(1.0);
        costs[self.choose(request, candidates)] = 0.0;
        Ok(())
    }

    fn on_selected(&mut self, request: &Request<'_>, chosen: WorkerRank) {
        let Some(hashes) = request.prefix_hashes() else { return };
        let block_size = u64::from(request.facts().block_size.max(1));
        let limit = (self.params.max_tree_size / block_size).max(1);
        self.trees.insert(&hashes, chosen, limit);
    }
}

switchyard_guest_sdk::export_policy!(SglangCacheAware);

#[cfg(test)]
mod tests;
