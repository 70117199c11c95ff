//! The simulated workers of one pool: what each holds (prefix cache, active blocks,
//! prefill backlog, decode batch) and the candidate columns the router derives from it.

use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::Pool;

use super::cache::{IdMap, PrefixCache};
use switchyard::selection::{InputError, Worker, WorkerInputs, WorkerTable};

/// One simulated worker.
#[derive(Debug, Clone)]
pub(super) struct SimWorker {
    pub cache: PrefixCache,
    /// Prompt-block ids held by admitted, unfinished requests → how many requests hold each.
    active_ids: IdMap<u32>,
    /// Output blocks reserved by admitted, unfinished requests.
    reserved_output_blocks: u64,
    /// Uncached prompt tokens of requests whose prefill has not ended.
    pub prefill_tokens: u64,
    /// When the prefill slot is next free, ms.
    pub prefill_free_at: f64,
    /// Requests decoding now.
    pub decoding: u32,
    /// Admitted, unfinished requests.
    pub active: u32,
    /// Requests routed here so far.
    pub routed: u64,
}

impl SimWorker {
    fn new(total_kv_blocks: u32) -> Self {
        Self {
            cache: PrefixCache::new(total_kv_blocks as usize),
            active_ids: IdMap::default(),
            reserved_output_blocks: 0,
            prefill_tokens: 0,
            prefill_free_at: 0.0,
            decoding: 0,
            active: 0,
            routed: 0,
        }
    }

    /// A request is admitted: it holds its prompt blocks and reserves its output blocks.
    pub fn admit(&mut self, ids: &[u64], output_blocks: u64) {
        for &id in ids {
            *self.active_ids.entry(id).or_insert(0) += 1;
        }
        self.reserved_output_blocks += output_blocks;
        self.active += 1;
        self.routed += 1;
    }

    /// A request admitted with [`SimWorker::admit`] leaves.
    pub fn release(&mut self, ids: &[u64], output_blocks: u64) {
        for id in ids {
            if let Some(n) = self.active_ids.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    self.active_ids.remove(id);
                }
            }
        }
        self.reserved_output_blocks -= output_blocks;
        self.active -= 1;
    }

    /// Distinct prompt blocks of active requests plus their reserved output blocks.
    fn active_blocks(&self) -> u64 {
        self.active_ids.len() as u64 + self.reserved_output_blocks
    }
}

/// The workers of one pool and the router's table of them.
pub(super) struct PoolState {
    pub pool: Pool,
    pub table: WorkerTable,
    pub workers: Vec<SimWorker>,
    /// The id of `workers[0]`; ids are consecutive.
    first_id: u64,
}

impl PoolState {
    pub fn new(pool: Pool, first_id: u64, count: u32, total_kv_blocks: u32) -> Result<Self, InputError> {
        let ids = first_id..first_id + u64::from(count);
        // max_num_batched_tokens as a vLLM default would advertise it; no builtin reads it yet.
        let table =
            WorkerTable::new(ids.map(|id| Worker::new(id, 1, total_kv_blocks, Some(8192))).collect())?;
        let workers = (0..count).map(|_| SimWorker::new(total_kv_blocks)).collect();
        Ok(Self { pool, table, workers, first_id })
    }

    /// The index of worker `id` in `workers`, if it is one of this pool's.
    pub fn index(&self, id: u64) -> Option<usize> {
        id.checked_sub(self.first_id).map(|i| i as usize).filter(|&i| i < self.workers.len())
    }

    pub fn id(&self, index: usize) -> u64 {
        self.first_id + index as u64
    }

    /// The candidate columns for a request, as a KV-aware router would read them from its
    /// indexes: overlap from the (visible) hashes, prefill backlog (none in a decode
    /// pool), decode blocks including the request's blocks not already active there.
    pub fn inputs(
        &self,
        visible_hashes: Option<&[u64]>,
        prompt_tokens: u32,
        block_size: u32,
    ) -> WorkerInputs {
        let n = self.workers.len();
        let mut inputs = WorkerInputs::new((0..n).map(|i| self.id(i)).collect())
            .with(Column::DpRank, vec![0; n])
            .with(Column::HostOverlapBlocks, vec![0; n])
            .with(Column::DiskOverlapBlocks, vec![0; n]);
        let request_blocks = u64::from(prompt_tokens.div_ceil(block_size));
        for worker in &self.workers {
            let (overlap, new_blocks) = match visible_hashes {
                Some(h) => {
                    let new = h.iter().filter(|id| !worker.active_ids.contains_key(id)).count() as u64;
                    (worker.cache.overlap(h), new)
                }
                None => (0, request_blocks),
            };
            let cached = (overlap as u64 * u64::from(block_size)).min(u64::from(prompt_tokens));
            let prefill = if self.pool.tracks_prefill() { worker.prefill_tokens } else { 0 };
            inputs[Column::DeviceOverlapBlocks].push(clamp(overlap as u64));
            inputs[Column::CachedTokens].push(clamp(cached));
            inputs[Column::ActivePrefillTokens].push(clamp(prefill));
            inputs[Column::DecodeBlocks].push(clamp(worker.active_blocks() + new_blocks));
            inputs[Column::ActiveRequests].push(worker.active);
        }
        inputs
    }
}

/// Columns are u32; a simulated backlog beyond that saturates.
fn clamp(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}
