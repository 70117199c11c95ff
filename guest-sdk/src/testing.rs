//! Hand-made cases for a policy's unit tests: owned columns and facts, so a test states
//! only what its rule reads. Native only; not part of a guest.

use std::borrow::Cow;
use std::ops::{Index, IndexMut};

use crate::{
    Candidates, Capacity, Column, Columns, Facts, InputGroups, Policy, PolicyError, Pool, Request,
    RequestFacts, WorkerRank,
};

/// Lazily fetched facts, held by value.
#[derive(Debug, Clone, Default)]
pub struct StaticFacts {
    /// What `prefix-hashes` answers.
    pub prefix_hashes: Option<Vec<u64>>,
    /// What `policy-class` answers.
    pub policy_class: Option<String>,
    /// One per candidate, in row order; `worker_capacity` looks them up by worker id.
    pub capacities: Vec<Option<Capacity>>,
    /// The worker ids the capacities belong to (filled by [`Case::new`]).
    pub capacity_ids: Vec<u64>,
}

impl Facts for StaticFacts {
    fn prefix_hashes(&self) -> Option<Cow<'_, [u64]>> {
        self.prefix_hashes.as_deref().map(Cow::Borrowed)
    }
    fn policy_class(&self) -> Option<Cow<'_, str>> {
        self.policy_class.as_deref().map(Cow::Borrowed)
    }
    fn worker_capacity(&self, worker_id: u64) -> Option<Capacity> {
        let row = self.capacity_ids.iter().position(|&id| id == worker_id)?;
        self.capacities.get(row).copied().flatten()
    }
    fn candidate_capacities(&self) -> Cow<'_, [Option<Capacity>]> {
        Cow::Borrowed(&self.capacities)
    }
}

/// A batch of candidates with every column owned; all zero (multiplier 1) until set.
/// The u32 columns are indexed by [`Column`]: `case[Column::CachedTokens] = vec![…]`.
#[derive(Debug, Clone)]
pub struct Case {
    /// The worker of each row (0..n by default).
    pub worker_ids: Vec<u64>,
    /// Indexed by `Column as usize`, each `worker_ids.len()` rows.
    columns: [Vec<u32>; Column::COUNT],
    /// The preferred-taint multiplier of each row (1.0: no preference).
    pub preferred_multiplier: Vec<f64>,
    /// The request's facts.
    pub facts: RequestFacts,
    /// What the lazy imports answer.
    pub lazy: StaticFacts,
}

impl Index<Column> for Case {
    type Output = Vec<u32>;
    fn index(&self, column: Column) -> &Vec<u32> {
        &self.columns[column as usize]
    }
}

impl IndexMut<Column> for Case {
    fn index_mut(&mut self, column: Column) -> &mut Vec<u32> {
        &mut self.columns[column as usize]
    }
}

impl Case {
    /// `n` candidates with worker ids 0..n, rank 0; a 1024-token prompt in 16-token blocks.
    pub fn new(n: usize) -> Self {
        Self {
            worker_ids: (0..n as u64).collect(),
            columns: std::array::from_fn(|_| vec![0; n]),
            preferred_multiplier: vec![1.0; n],
            facts: RequestFacts {
                prompt_tokens: 1024,
                block_size: 16,
                request_blocks: 64,
                expected_output_tokens: None,
                pinned: None,
                pool: Pool::Aggregated,
                seed: 0,
            },
            lazy: StaticFacts { capacity_ids: (0..n as u64).collect(), ..Default::default() },
        }
    }

    /// Sets the prompt length (and its block count).
    pub fn prompt(mut self, tokens: u32) -> Self {
        self.facts.prompt_tokens = tokens;
        self.facts.request_blocks = tokens.div_ceil(self.facts.block_size);
        self
    }

    /// The candidate of row `row`.
    pub fn rank(&self, row: usize) -> WorkerRank {
        WorkerRank { worker_id: self.worker_ids[row], dp_rank: self[Column::DpRank][row] }
    }

    /// Runs `f` on this case's columns as a policy sees them: every group declared, the
    /// u32 columns packed as they travel, and the multipliers left out when all are 1.0
    /// (as the host does when no preference applies). For testing helpers that take
    /// the candidates rather than a whole policy.
    pub fn with_candidates<R>(&self, f: impl FnOnce(&Candidates<'_>) -> R) -> R {
        let mut packed = Vec::with_capacity(self.worker_ids.len() * Column::ALL.len());
        for column in Column::present(InputGroups::ALL) {
            packed.extend_from_slice(&self[column]);
        }
        let neutral = self.preferred_multiplier.iter().all(|&m| m == 1.0);
        let columns = Columns {
            worker_ids: &self.worker_ids,
            packed: &packed,
            preferred_multiplier: if neutral { &[] } else { &self.preferred_multiplier },
        };
        f(&Candidates::new(columns, InputGroups::ALL).expect("a Case's columns line up"))
    }

    /// Runs `f` on this case's request (its facts and lazily fetched facts).
    pub fn with_request<R>(&self, f: impl FnOnce(&Request<'_>) -> R) -> R {
        f(&Request::new(&self.facts, &self.lazy))
    }

    /// The policy's costs for this case.
    pub fn costs<P: Policy>(&self, policy: &mut P) -> Result<Vec<f64>, PolicyError> {
        let mut costs = vec![0.0; self.worker_ids.len()];
        self.with_candidates(|view| policy.score(&Request::new(&self.facts, &self.lazy), view, &mut costs))?;
        Ok(costs)
    }

    /// The row of the lowest cost (the first on ties), as the host's argmin would see it
    /// before its seeded tie-break.
    pub fn best<P: Policy>(&self, policy: &mut P) -> usize {
        let costs = self.costs(policy).expect("the policy scores the case");
        (0..costs.len()).fold(0, |best, i| if costs[i] < costs[best] { i } else { best })
    }

    /// The policy's keep mask for this case.
    pub fn keep<P: Policy>(&self, policy: &mut P) -> Result<Vec<bool>, PolicyError> {
        let mut keep = vec![true; self.worker_ids.len()];
        self.with_candidates(|view| policy.filter(&Request::new(&self.facts, &self.lazy), view, &mut keep))?;
        Ok(keep)
    }

    /// Commits `row` to the policy, as the host does after accepting a pick.
    pub fn commit<P: Policy>(&self, policy: &mut P, row: usize) {
        policy.on_selected(&Request::new(&self.facts, &self.lazy), self.rank(row));
    }
}
