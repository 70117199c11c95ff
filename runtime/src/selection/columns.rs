//! Candidate columns, materialised per selection into reused buffers.

use switchyard_guest_sdk::{Candidates, ColumnLengthError, Columns, InputGroups, WorkerRank};

use super::{SelectionRequest, WorkerTable};

/// The candidate columns of one selection. Buffers are reused across selections, so a
/// steady-state selection allocates nothing here.
#[derive(Debug, Default)]
pub struct ColumnBuffers {
    groups: InputGroups,
    pub(super) worker_id: Vec<u64>,
    pub(super) dp_rank: Vec<u32>,
    pub(super) device_overlap_blocks: Vec<u32>,
    pub(super) host_overlap_blocks: Vec<u32>,
    pub(super) disk_overlap_blocks: Vec<u32>,
    pub(super) cached_tokens: Vec<u32>,
    pub(super) active_prefill_tokens: Vec<u32>,
    pub(super) decode_blocks: Vec<u32>,
    pub(super) active_requests: Vec<u32>,
    pub(super) preferred_multiplier: Vec<f64>,
}

impl ColumnBuffers {
    /// Fills the columns of `groups` for every eligible slot, in slot order.
    pub fn materialise(&mut self, table: &WorkerTable, request: &SelectionRequest, groups: InputGroups) {
        self.groups = groups;
        self.clear();
        let cache = groups.contains(InputGroups::CACHE);
        let load = groups.contains(InputGroups::LOAD);
        let affinity = groups.contains(InputGroups::AFFINITY);
        let inputs = request.inputs();
        let tainted = affinity && request.has_preferred_taints();
        if request.is_dense_for(table) {
            // Every slot is a candidate and has a row: the columns are copies.
            self.worker_id.extend_from_slice(&inputs.worker_id);
            self.dp_rank.extend_from_slice(&inputs.dp_rank);
            if cache {
                self.device_overlap_blocks.extend_from_slice(&inputs.device_overlap_blocks);
                self.host_overlap_blocks.extend_from_slice(&inputs.host_overlap_blocks);
                self.disk_overlap_blocks.extend_from_slice(&inputs.disk_overlap_blocks);
                self.cached_tokens.extend_from_slice(&inputs.cached_tokens);
            }
            if load {
                self.active_prefill_tokens.extend_from_slice(&inputs.active_prefill_tokens);
                self.decode_blocks.extend_from_slice(&inputs.decode_blocks);
                self.active_requests.extend_from_slice(&inputs.active_requests);
            }
            if affinity {
                if tainted {
                    let slots = 0..table.slots().len();
                    self.preferred_multiplier
                        .extend(slots.map(|i| request.preferred_multiplier(table.slot_worker(i).taints())));
                } else {
                    self.preferred_multiplier.resize(inputs.len(), 1.0);
                }
            }
            return;
        }
        // Rows and slots are both sorted by (worker, rank): merge them in one pass.
        let mut row = 0;
        let rows = inputs.len();
        for (slot_index, &slot) in table.slots().iter().enumerate() {
            while row < rows && key(inputs.worker_id[row], inputs.dp_rank[row]) < key_of(slot) {
                row += 1;
            }
            if !request.eligible(slot) {
                continue;
            }
            let hit = row < rows && key(inputs.worker_id[row], inputs.dp_rank[row]) == key_of(slot);
            let at = |column: &[u32]| if hit { column[row] } else { 0 };
            self.worker_id.push(slot.worker_id);
            self.dp_rank.push(slot.dp_rank);
            if cache {
                self.device_overlap_blocks.push(at(&inputs.device_overlap_blocks));
                self.host_overlap_blocks.push(at(&inputs.host_overlap_blocks));
                self.disk_overlap_blocks.push(at(&inputs.disk_overlap_blocks));
                self.cached_tokens.push(at(&inputs.cached_tokens));
            }
            if load {
                self.active_prefill_tokens.push(at(&inputs.active_prefill_tokens));
                self.decode_blocks.push(at(&inputs.decode_blocks));
                self.active_requests.push(at(&inputs.active_requests));
            }
            if affinity {
                let m = if tainted {
                    request.preferred_multiplier(table.slot_worker(slot_index).taints())
                } else {
                    1.0
                };
                self.preferred_multiplier.push(m);
            }
        }
    }

    fn clear(&mut self) {
        self.worker_id.clear();
        self.dp_rank.clear();
        self.device_overlap_blocks.clear();
        self.host_overlap_blocks.clear();
        self.disk_overlap_blocks.clear();
        self.cached_tokens.clear();
        self.active_prefill_tokens.clear();
        self.decode_blocks.clear();
        self.active_requests.clear();
        self.preferred_multiplier.clear();
    }

    /// Keeps only the rows where `keep` is true (after a policy's filter).
    pub fn retain(&mut self, keep: &[bool]) {
        fn retain<T: Copy>(column: &mut Vec<T>, keep: &[bool]) {
            if column.is_empty() {
                return;
            }
            let mut i = 0;
            column.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
        retain(&mut self.worker_id, keep);
        retain(&mut self.dp_rank, keep);
        retain(&mut self.device_overlap_blocks, keep);
        retain(&mut self.host_overlap_blocks, keep);
        retain(&mut self.disk_overlap_blocks, keep);
        retain(&mut self.cached_tokens, keep);
        retain(&mut self.active_prefill_tokens, keep);
        retain(&mut self.decode_blocks, keep);
        retain(&mut self.active_requests, keep);
        retain(&mut self.preferred_multiplier, keep);
    }

    pub fn len(&self) -> usize {
        self.worker_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.worker_id.is_empty()
    }

    /// The worker id column.
    pub fn worker_ids(&self) -> &[u64] {
        &self.worker_id
    }

    pub fn worker_rank(&self, row: usize) -> WorkerRank {
        WorkerRank { worker_id: self.worker_id[row], dp_rank: self.dp_rank[row] }
    }

    /// The raw columns, as the guest boundary lowers them.
    pub fn columns(&self) -> Columns<'_> {
        Columns {
            worker_ids: &self.worker_id,
            dp_ranks: &self.dp_rank,
            device_overlap_blocks: &self.device_overlap_blocks,
            host_overlap_blocks: &self.host_overlap_blocks,
            disk_overlap_blocks: &self.disk_overlap_blocks,
            cached_tokens: &self.cached_tokens,
            active_prefill_tokens: &self.active_prefill_tokens,
            decode_blocks: &self.decode_blocks,
            active_requests: &self.active_requests,
            preferred_multiplier: &self.preferred_multiplier,
        }
    }

    /// The view a native policy reads.
    pub fn view(&self) -> Result<Candidates<'_>, ColumnLengthError> {
        Candidates::new(self.columns(), self.groups)
    }
}

fn key(worker_id: u64, dp_rank: u32) -> (u64, u32) {
    (worker_id, dp_rank)
}

fn key_of(slot: WorkerRank) -> (u64, u32) {
    (slot.worker_id, slot.dp_rank)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use switchyard_guest_sdk::{InputGroups, Pool, RequestFacts};

    use super::ColumnBuffers;
    use crate::selection::{RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable};

    fn columns(table: &WorkerTable, options: RequestOptions) -> ColumnBuffers {
        let facts = RequestFacts {
            prompt_tokens: 64,
            block_size: 16,
            request_blocks: 4,
            expected_output_tokens: None,
            pinned: None,
            pool: Pool::Aggregated,
            seed: 1,
        };
        let inputs = WorkerInputs {
            worker_id: vec![1, 2, 2, 5],
            dp_rank: vec![0, 0, 1, 0],
            device_overlap_blocks: vec![1, 2, 3, 4],
            host_overlap_blocks: vec![5, 6, 7, 8],
            cached_tokens: vec![16, 32, 48, 64],
            active_prefill_tokens: vec![9, 10, 11, 12],
            decode_blocks: vec![13, 14, 15, 16],
            active_requests: vec![17, 18, 19, 20],
            ..Default::default()
        };
        let request = SelectionRequest::new(table, facts, options, inputs).unwrap();
        let mut buffers = ColumnBuffers::default();
        buffers.materialise(table, &request, InputGroups::ALL);
        buffers
    }

    #[test]
    fn dense_copy_and_merge_paths_build_the_same_columns() {
        let table = WorkerTable::new(vec![
            Worker::new(1, 1, 0, None),
            Worker::new(2, 2, 0, None).with_taints(vec!["a".into()]),
            Worker::new(5, 1, 0, None),
        ])
        .unwrap();
        let taints = BTreeMap::from([("a".to_string(), 0.5)]);
        let dense =
            columns(&table, RequestOptions { preferred_taints: taints.clone(), ..Default::default() });
        // Allowing every worker forces the merge path without changing the candidates.
        let allowed = RequestOptions {
            preferred_taints: taints,
            allowed_workers: Some(vec![1, 2, 5]),
            ..Default::default()
        };
        let merged = columns(&table, allowed);
        assert_eq!(format!("{:?}", dense.columns()), format!("{:?}", merged.columns()));
        assert_eq!(dense.worker_ids(), &[1, 2, 2, 5]);
        assert_eq!(dense.preferred_multiplier[1], (-(0.5f64).tanh()).exp());
        assert_eq!(dense.preferred_multiplier[0], 1.0);
    }
}
