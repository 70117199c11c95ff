//! Consistent hashing with bounded loads (CHWBL; Mirrokni, Thorup, Zadimoghaddam,
//! SODA'18, arXiv:1608.01350; as KubeAI runs it, `internal/loadbalancer/balance_chwbl.go`).
//!
//! The key is the prompt's prefix (the SDK's `placement::prefix_key`): with chained block
//! hashes, the hash of the first K blocks is simply `prefix-hashes[min(K, n) − 1]`. The
//! ring holds `replication` points per candidate (worker, dp rank) at `hash2(endpoint, i)`.
//! From the key, walk clockwise and take the first candidate whose requests in flight are
//! within the bound (`placement::LoadBound`)
//!
//! ```text
//! in_flight_w ≤ (Σ in_flight + 1) / N × load_factor          (N = candidates)
//! ```
//!
//! and if none is (only possible with `load_factor` < 1), the first candidate the walk
//! meets, as KubeAI does.
//!
//! The walk order needs no materialised ring: a clockwise walk meets candidate w first at
//! its replica point closest clockwise to the key, so walk order = order of `d_w = min_i
//! (point_w,i − key) mod 2^64`. Each candidate's points are a pure function of (endpoint,
//! replication), so they are hashed and sorted once and kept: `d_w` is then a binary
//! search, O(N log replication) per call instead of N × replication hashes (BENCHMARKS.md,
//! "Ported policies"; docs/benchmarks-history.md, "A ported policy"). The kept points are
//! bounded (see `PointCache`); past the bound a call hashes afresh, with the same answer.
//! At 4,096+ workers the kept points (8+ MB) outgrow the caches and each binary search is a
//! few cache misses: a single sorted ring walked from the key would be sequential, at 12
//! bytes per point, which is why it is not kept in a 64 MiB guest.
//!
//! Costs tell the host's picker the choice: 0 for the chosen candidate, `1 + d_w / 2^64`
//! (1 ≤ cost < 2, in walk order) for the others, so argmin takes the chosen one and a
//! softmax picker prefers candidates the walk would meet next.
//!
//! Without prefix hashes (a prefill pool) the key is the request's seed: load is still
//! bounded, and requests spread over the ring.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

use serde::Deserialize;
use switchyard_guest_sdk::hash::{endpoint, hash2, mix64};
use switchyard_guest_sdk::placement::{LoadBound, prefix_key};
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
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
        check::at_least("prefix_blocks", self.prefix_blocks, 1)?;
        check::in_range("replication", self.replication, 1..=4096)?;
        check::finite_positive("load_factor", self.load_factor)
    }
}

/// CHWBL over the candidates of each request.
#[derive(Debug, Clone)]
pub struct Chwbl {
    params: Parameters,
    points: PointCache,
}

/// Each endpoint's ring points, sorted, kept across calls.
///
/// Bounds: never more than [`PointCache::MAX_POINTS`] points in all (32 MiB; 16,384
/// endpoints at the default replication) — a batch larger than that is hashed per call —
/// and at most one new endpoint in eight of the batch kept per call. Departed workers
/// cannot accumulate: when more than the batch plus 1,024 kept endpoints are not in it,
/// or they crowd out endpoints of the batch, the cache starts over from the next batch.
#[derive(Debug, Clone, Default)]
struct PointCache {
    by_endpoint: HashMap<(u64, u32), Box<[u64]>, BuildHasherDefault<EndpointHasher>>,
    /// Set by a call that found too many departed endpoints kept.
    start_over: bool,
}

/// The endpoint hash (SplitMix64 finaliser) as the map's hasher: keys are worker ids the
/// host chose, not attacker-chosen strings. SipHash would be a large share of a call
/// (`cargo bench --bench ratio`, "Ported policies").
#[derive(Debug, Default, Clone, Copy)]
struct EndpointHasher(u64);

impl Hasher for EndpointHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
}

impl PointCache {
    const MAX_POINTS: usize = 1 << 22;
    /// Keeping an endpoint (hashing and sorting its `replication` points) costs about
    /// four times what hashing them for one call does, so a call keeps at most one new
    /// endpoint in eight of its batch (and hashes the others as a stateless call would):
    /// a call costs at most 1.5× a stateless one, which stays within the sandbox's fuel
    /// per candidate even when every batch brings new workers, and a 1,024-worker set is
    /// fully kept after 8 calls.
    fn new_per_call(n: usize) -> usize {
        n / 8 + 1
    }

    /// Calls `each(row, d)` with each candidate's clockwise distance from `key`, in row
    /// order: from its kept points (one map lookup per row), keeping up to
    /// [`Self::new_per_call`] new endpoints, and hashing the rest as a stateless call would.
    fn distances(
        &mut self,
        candidates: &Candidates<'_>,
        replication: u32,
        key: u64,
        mut each: impl FnMut(usize, u64),
    ) {
        let n = candidates.len();
        let per_endpoint = replication as usize;
        let rows = candidates.worker_ids().iter().zip(candidates.dp_ranks()).enumerate();
        if n.saturating_mul(per_endpoint) > Self::MAX_POINTS {
            rows.for_each(|(row, (&worker_id, &dp_rank))| {
                each(row, distance(worker_id, dp_rank, replication, key))
            });
            return;
        }
        if std::mem::take(&mut self.start_over) {
            self.by_endpoint.clear();
        }
        let mut budget = Self::new_per_call(n);
        let mut kept = 0;
        for (row, (&worker_id, &dp_rank)) in rows {
            let room = (self.by_endpoint.len() + 1) * per_endpoint <= Self::MAX_POINTS;
            let d = match self.by_endpoint.entry((worker_id, dp_rank)) {
                Entry::Occupied(points) => {
                    kept += 1;
                    nearest(points.get(), key)
                }
                Entry::Vacant(slot) if budget > 0 && room => {
                    budget -= 1;
                    kept += 1;
                    let e = endpoint(worker_id, dp_rank);
                    let mut points: Vec<u64> = (0..u64::from(replication)).map(|i| hash2(e, i)).collect();
                    points.sort_unstable();
                    nearest(slot.insert(points.into_boxed_slice()), key)
                }
                Entry::Vacant(_) => distance(worker_id, dp_rank, replication, key),
            };
            each(row, d);
        }
        let departed = self.by_endpoint.len() - kept;
        let crowded = kept < n && (self.by_endpoint.len() + 1) * per_endpoint > Self::MAX_POINTS;
        self.start_over = departed > n + 1024 || (departed > 0 && crowded);
    }
}

/// Clockwise distance from `key` to the nearest of `sorted` points: the first point at or
/// after the key, else (wrapping) the first point of all. Equal to [`distance`].
fn nearest(sorted: &[u64], key: u64) -> u64 {
    let i = sorted.partition_point(|&p| p < key);
    sorted.get(i).or(sorted.first()).map_or(u64::MAX, |p| p.wrapping_sub(key))
}

impl Chwbl {
    /// The policy with `params`, checked (each bad field named).
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        params.validate()?;
        Ok(Self { params, points: PointCache::default() })
    }

    /// The ring position of the request's key: its prefix's hash, or its seed without one,
    /// scrambled so that keys spread over the ring.
    fn key(&self, request: &Request<'_>) -> u64 {
        mix64(prefix_key(request, self.params.prefix_blocks).unwrap_or(request.facts().seed))
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
        let bound = LoadBound::new(candidates, self.params.load_factor);
        // (distance, row) of the first candidate met overall and of the first within bound.
        let mut first: Option<(u64, usize)> = None;
        let mut first_ok: Option<(u64, usize)> = None;
        self.points.distances(candidates, self.params.replication, key, |row, d| {
            costs[row] = 1.0 + d as f64 * RING_FRACTION;
            if first.is_none_or(|(best, _)| d < best) {
                first = Some((d, row));
            }
            if bound.admits(load[row]) && first_ok.is_none_or(|(best, _)| d < best) {
                first_ok = Some((d, row));
            }
        });
        if let Some((_, row)) = first_ok.or(first) {
            costs[row] = 0.0;
        }
        Ok(())
    }
}

switchyard_guest_sdk::export_policy!(Chwbl);

#[cfg(test)]
mod tests;
