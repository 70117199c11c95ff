//! SGLang router's `cache_aware` policy (sgl-project/sglang `sgl-router`, successor smg;
//! see `shared/reference/routing-policies.md` §2), stateful: an approximate prefix tree
//! per worker, kept in the policy's own memory across requests.
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

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use serde::Deserialize;
use switchyard_guest_sdk::hash::mix64;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, WorkerRank, parse_parameters,
};

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
        if !(self.cache_threshold.is_finite() && (0.0..=1.0).contains(&self.cache_threshold)) {
            return Err(PolicyError::invalid_parameters(format!(
                "field `cache_threshold`: {} is out of range 0..=1",
                self.cache_threshold
            )));
        }
        if !(self.balance_rel_threshold.is_finite() && self.balance_rel_threshold >= 0.0) {
            return Err(PolicyError::invalid_parameters(format!(
                "field `balance_rel_threshold`: {} must be a finite number ≥ 0",
                self.balance_rel_threshold
            )));
        }
        if self.max_tree_size == 0 {
            return Err(PolicyError::invalid_parameters("field `max_tree_size`: must be at least 1"));
        }
        Ok(())
    }
}

/// "No entry" in the LRU lists.
const NIL: u32 = u32::MAX;

/// One block held by one worker, a link in that worker's LRU list.
#[derive(Debug, Clone)]
struct Entry {
    hash: u64,
    worker: u32,
    /// The commit that last used it.
    tick: u64,
    /// Towards the most recently used end.
    newer: u32,
    /// Towards the least recently used end.
    older: u32,
    /// The next holder of the same block (another worker), or `NIL`.
    next_holder: u32,
}

/// One worker's tree: its LRU list and size.
#[derive(Debug, Clone)]
struct WorkerTree {
    rank: WorkerRank,
    newest: u32,
    oldest: u32,
    size: u64,
}

/// A fixed-key hasher (a `HashMap` with std's random keys would still be deterministic
/// here, as nothing iterates one, but SipHash costs more than the whole lookup).
#[derive(Default)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

/// The per-worker trees. Each (block, worker) is one entry, linked twice: into its
/// worker's doubly linked LRU list (a touch and an eviction are O(1)) and into the chain
/// of the block's holders (a few workers at most). No allocation per block but the entry.
#[derive(Debug, Default, Clone)]
struct Trees {
    /// Commits so far: the clock of `Entry::tick`.
    tick: u64,
    workers: Vec<WorkerTree>,
    worker_index: BTreeMap<WorkerRank, u32>,
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Block hash → its most recently added holder's entry (the head of the chain).
    holders: Map<u64, u32>,
}

impl Trees {
    fn size(&self, worker: WorkerRank) -> u64 {
        self.worker_index.get(&worker).map_or(0, |&w| self.workers[w as usize].size)
    }

    fn worker(&mut self, rank: WorkerRank) -> u32 {
        if let Some(&w) = self.worker_index.get(&rank) {
            return w;
        }
        let w = self.workers.len() as u32;
        self.workers.push(WorkerTree { rank, newest: NIL, oldest: NIL, size: 0 });
        self.worker_index.insert(rank, w);
        w
    }

    fn unlink(&mut self, e: u32) {
        let Entry { worker, newer, older, .. } = self.entries[e as usize];
        let tree = &mut self.workers[worker as usize];
        if newer == NIL {
            tree.newest = older
        } else {
            self.entries[newer as usize].older = older
        }
        let tree = &mut self.workers[worker as usize];
        if older == NIL { tree.oldest = newer } else { self.entries[older as usize].newer = newer }
    }

    fn push_newest(&mut self, e: u32) {
        let worker = self.entries[e as usize].worker as usize;
        let head = self.workers[worker].newest;
        self.entries[e as usize].newer = NIL;
        self.entries[e as usize].older = head;
        if head == NIL {
            self.workers[worker].oldest = e;
        } else {
            self.entries[head as usize].newer = e;
        }
        self.workers[worker].newest = e;
    }

    /// Inserts the prompt under `rank`, then evicts its least recently used blocks
    /// beyond `limit`. Blocks go in deepest first, so within one commit the deepest is
    /// the oldest: a prefix outlives its extensions.
    fn insert(&mut self, hashes: &[u64], rank: WorkerRank, limit: u64) {
        self.tick += 1;
        let tick = self.tick;
        let w = self.worker(rank);
        // One hash lookup per block: the entry API, and room reserved up front.
        self.holders.reserve(hashes.len());
        for &hash in hashes.iter().rev() {
            let slot = self.holders.entry(hash).or_insert(NIL);
            let mut e = *slot;
            while e != NIL && self.entries[e as usize].worker != w {
                e = self.entries[e as usize].next_holder;
            }
            if e != NIL {
                self.entries[e as usize].tick = tick;
                self.unlink(e);
            } else {
                let entry = Entry { hash, worker: w, tick, newer: NIL, older: NIL, next_holder: *slot };
                e = match self.free.pop() {
                    Some(free) => {
                        self.entries[free as usize] = entry;
                        free
                    }
                    None => {
                        self.entries.push(entry);
                        (self.entries.len() - 1) as u32
                    }
                };
                *slot = e;
                self.workers[w as usize].size += 1;
            }
            self.push_newest(e);
        }
        while self.workers[w as usize].size > limit {
            let e = self.workers[w as usize].oldest;
            self.unlink(e);
            self.unchain(e);
            self.free.push(e);
            self.workers[w as usize].size -= 1;
        }
    }

    /// Removes entry `e` from its block's chain of holders.
    fn unchain(&mut self, e: u32) {
        let Entry { hash, next_holder, .. } = self.entries[e as usize];
        let MapEntry::Occupied(mut head) = self.holders.entry(hash) else { return };
        if *head.get() == e {
            if next_holder == NIL {
                head.remove();
            } else {
                head.insert(next_holder);
            }
            return;
        }
        let mut p = *head.get();
        while p != NIL {
            let next = self.entries[p as usize].next_holder;
            if next == e {
                self.entries[p as usize].next_holder = next_holder;
                return;
            }
            p = next;
        }
    }

    /// (blocks matched, owner row) of the longest prefix a candidate holds; the owner is
    /// the holder of the deepest matched block that used it last.
    fn longest_match(&self, hashes: &[u64], candidates: &Candidates<'_>) -> (usize, Option<usize>) {
        let mut best = (0, None);
        for (i, hash) in hashes.iter().enumerate() {
            let mut owner: Option<(u64, usize)> = None;
            let mut e = self.holders.get(hash).copied().unwrap_or(NIL);
            while e != NIL {
                let entry = &self.entries[e as usize];
                e = entry.next_holder;
                let Some(row) = row_of(candidates, self.workers[entry.worker as usize].rank) else {
                    continue;
                };
                // The newest use wins; on a tie (never within one worker) the later holder.
                if owner.is_none_or(|(newest, _)| entry.tick > newest) {
                    owner = Some((entry.tick, row));
                }
            }
            match owner {
                Some((_, row)) => best = (i + 1, Some(row)),
                None => break,
            }
        }
        best
    }
}

/// The row of `worker` among the candidates (rows ascend by worker id, then rank).
fn row_of(candidates: &Candidates<'_>, worker: WorkerRank) -> Option<usize> {
    let (ids, ranks) = (candidates.worker_ids(), candidates.dp_ranks());
    let (mut lo, mut hi) = (0, ids.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match (ids[mid], ranks[mid]).cmp(&(worker.worker_id, worker.dp_rank)) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    None
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
