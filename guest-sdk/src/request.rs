//! Facts about the request being routed.

use std::borrow::Cow;

/// One data-parallel rank of one worker: the unit a selection picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerRank {
    /// The worker's id, as in the host's worker table.
    pub worker_id: u64,
    /// Its data-parallel rank: one of the worker's ranks (`0..dp_size` unless the host lists them).
    pub dp_rank: u32,
}

/// Which pool of a (possibly disaggregated) deployment is being routed. In JSON (the
/// request format of `switchyard select` and the service): `"aggregated"`, `"prefill"`,
/// `"decode"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pool {
    /// Prefill and decode on one worker.
    #[default]
    Aggregated,
    /// Prefill-only pool: no prefix hashes are tracked.
    Prefill,
    /// Decode-only pool: hashes are unique per request, prefill load is not tracked.
    Decode,
}

impl Pool {
    /// Whether prefill tokens in flight are tracked for this pool (all but decode).
    pub fn tracks_prefill(self) -> bool {
        self != Pool::Decode
    }
}

/// Small per-request facts, passed with every call (the WIT record `request-facts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts {
    /// Prompt length, tokens.
    pub prompt_tokens: u32,
    /// KV block size, tokens per block; never zero.
    pub block_size: u32,
    /// Blocks the prompt needs: ceil(prompt_tokens / block_size).
    pub request_blocks: u32,
    /// Expected output length, tokens, when the caller supplied one.
    pub expected_output_tokens: Option<u32>,
    /// The worker the request is pinned to, if any.
    pub pinned: Option<WorkerRank>,
    /// The pool being routed.
    pub pool: Pool,
    /// Deterministic per-request seed: the only randomness a policy may use.
    pub seed: u64,
}

/// A worker's advertised capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capacity {
    /// Total KV-cache blocks; never zero.
    pub total_kv_blocks: u32,
    /// Maximum tokens batched per step, when advertised.
    pub max_num_batched_tokens: Option<u32>,
}

/// Facts fetched on demand (the WIT interface `request`). In a guest each call crosses into
/// the host (BENCHMARKS.md, "Guest call overhead"), so a policy asks only for what it uses.
pub trait Facts {
    /// Chained per-block prefix hashes: entry i names blocks 0..=i. `None` where the
    /// host tracks no blocks (prefill pool).
    fn prefix_hashes(&self) -> Option<Cow<'_, [u64]>>;
    /// The request's policy class (a classifier's override wins).
    fn policy_class(&self) -> Option<Cow<'_, str>>;
    /// A worker's capacity; `None` if unknown or advertised as zero.
    fn worker_capacity(&self, worker_id: u64) -> Option<Capacity>;
    /// `worker_capacity` for every candidate, in row order.
    fn candidate_capacities(&self) -> Cow<'_, [Option<Capacity>]>;
}

/// Facts of a request that has none: no hashes, no class, no capacities.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFacts;

impl Facts for NoFacts {
    fn prefix_hashes(&self) -> Option<Cow<'_, [u64]>> {
        None
    }
    fn policy_class(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn worker_capacity(&self, _worker_id: u64) -> Option<Capacity> {
        None
    }
    fn candidate_capacities(&self) -> Cow<'_, [Option<Capacity>]> {
        Cow::Borrowed(&[])
    }
}

/// The request a policy is scoring for: the facts passed by value, and the lazily
/// fetched ones.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    facts: &'a RequestFacts,
    lazy: &'a dyn Facts,
}

impl<'a> Request<'a> {
    /// The view a policy is called with: `facts` as passed, `lazy` answering the imports.
    pub fn new(facts: &'a RequestFacts, lazy: &'a dyn Facts) -> Self {
        Self { facts, lazy }
    }
    /// The facts passed by value.
    pub fn facts(&self) -> &'a RequestFacts {
        self.facts
    }
    /// See [`Facts::prefix_hashes`].
    pub fn prefix_hashes(&self) -> Option<Cow<'a, [u64]>> {
        self.lazy.prefix_hashes()
    }
    /// See [`Facts::policy_class`].
    pub fn policy_class(&self) -> Option<Cow<'a, str>> {
        self.lazy.policy_class()
    }
    /// See [`Facts::worker_capacity`].
    pub fn worker_capacity(&self, worker_id: u64) -> Option<Capacity> {
        self.lazy.worker_capacity(worker_id)
    }
    /// See [`Facts::candidate_capacities`].
    pub fn candidate_capacities(&self) -> Cow<'a, [Option<Capacity>]> {
        self.lazy.candidate_capacities()
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("facts", self.facts).finish_non_exhaustive()
    }
}
