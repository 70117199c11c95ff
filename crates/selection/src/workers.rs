//! The worker table: which (worker, dp rank) slots exist, and what each worker advertises.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use switchyard_guest_sdk::{Capacity, WorkerRank};

use crate::error::InputError;

/// One worker as the router knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Worker {
    id: u64,
    dp_size: u32,
    /// The ranks, when they are not `0..dp_size` (ascending, unique; `dp_size` of them).
    ranks: Option<Box<[u32]>>,
    capacity: Option<Capacity>,
    taints: Vec<String>,
}

impl Worker {
    /// `dp_size` data-parallel ranks (at least 1). `total_kv_blocks` 0 means unknown.
    pub fn new(id: u64, dp_size: u32, total_kv_blocks: u32, max_num_batched_tokens: Option<u32>) -> Self {
        let capacity = (total_kv_blocks > 0).then_some(Capacity { total_kv_blocks, max_num_batched_tokens });
        Self { id, dp_size: dp_size.max(1), ranks: None, capacity, taints: Vec::new() }
    }

    /// Exactly these data-parallel ranks, not `0..dp_size`: for a router whose ranks start
    /// above 0, or that hands over only some of a worker's ranks. Sorted and deduplicated;
    /// `dp_size` becomes their number. Empty: unchanged.
    pub fn with_ranks(mut self, mut ranks: Vec<u32>) -> Self {
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.is_empty() {
            return self;
        }
        self.dp_size = ranks.len() as u32;
        // `0..dp_size` is the default shape: no list to keep.
        self.ranks = (!ranks.iter().copied().eq(0..self.dp_size)).then(|| ranks.into());
        self
    }

    /// Labels a request's preferred taints can match.
    pub fn with_taints(mut self, taints: Vec<String>) -> Self {
        self.taints = taints;
        self
    }

    /// The worker's id, unique in its table.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Data-parallel ranks (at least 1): the worker has one slot per rank.
    pub fn dp_size(&self) -> u32 {
        self.dp_size
    }
    /// Its ranks, ascending: `0..dp_size` unless given ([`Worker::with_ranks`]).
    pub fn ranks(&self) -> impl Iterator<Item = u32> + '_ {
        let listed = self.ranks.as_deref();
        let counted = if listed.is_some() { 0 } else { self.dp_size };
        (0..counted).chain(listed.into_iter().flatten().copied())
    }
    /// Whether `rank` is one of its ranks.
    pub fn has_rank(&self, rank: u32) -> bool {
        match &self.ranks {
            Some(ranks) => ranks.binary_search(&rank).is_ok(),
            None => rank < self.dp_size,
        }
    }
    /// Advertised capacity; `None` when unknown or advertised as zero.
    pub fn capacity(&self) -> Option<Capacity> {
        self.capacity
    }
    /// Its labels (zone, GPU model, adapters served), for `preferred_taints`.
    pub fn taints(&self) -> &[String] {
        &self.taints
    }
}

/// All workers, and their (worker, dp rank) slots in ascending order: the order of
/// candidate rows and of the picker's tie-breaking.
#[derive(Debug, Clone, Default)]
pub struct WorkerTable {
    workers: Vec<Worker>,
    slots: Vec<WorkerRank>,
    /// For each slot, its worker's index in `workers`.
    slot_worker: Vec<u32>,
    by_id: HashMap<u64, u32>,
    /// Unique per table built, so a request can tell whether it was validated against it.
    identity: u64,
}

impl WorkerTable {
    /// Builds the table; worker ids must be unique.
    pub fn new(mut workers: Vec<Worker>) -> Result<Self, InputError> {
        workers.sort_by_key(|w| w.id);
        if let Some(pair) = workers.windows(2).find(|p| p[0].id == p[1].id) {
            return Err(InputError::new(format!("worker {} is listed twice", pair[0].id)));
        }
        let mut slots = Vec::new();
        let mut slot_worker = Vec::new();
        let mut by_id = HashMap::with_capacity(workers.len());
        for (index, worker) in workers.iter().enumerate() {
            by_id.insert(worker.id, index as u32);
            for dp_rank in worker.ranks() {
                slots.push(WorkerRank { worker_id: worker.id, dp_rank });
                slot_worker.push(index as u32);
            }
        }
        static NEXT_IDENTITY: AtomicU64 = AtomicU64::new(1);
        let identity = NEXT_IDENTITY.fetch_add(1, Ordering::Relaxed);
        Ok(Self { workers, slots, slot_worker, by_id, identity })
    }

    /// Every (worker, rank), ascending.
    pub fn slots(&self) -> &[WorkerRank] {
        &self.slots
    }

    /// Every worker, ascending by id.
    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// The worker with id `id`, if the table has one.
    pub fn worker(&self, id: u64) -> Option<&Worker> {
        self.worker_index(id).map(|i| &self.workers[i])
    }

    /// The index in [`WorkerTable::workers`] of the worker with id `id`.
    pub fn worker_index(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).map(|&i| i as usize)
    }

    /// The worker owning slot `slot`.
    pub fn slot_worker(&self, slot: usize) -> &Worker {
        &self.workers[self.slot_worker_index(slot)]
    }

    /// The index in [`WorkerTable::workers`] of the worker owning slot `slot`.
    pub fn slot_worker_index(&self, slot: usize) -> usize {
        self.slot_worker[slot] as usize
    }

    /// Whether the table has no slot (no worker).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Identifies this table (not its contents): requests remember the table they were
    /// validated against.
    pub(super) fn identity(&self) -> u64 {
        self.identity
    }
}
