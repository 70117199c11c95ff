//! Candidate columns, materialised per selection into reused buffers, or read in place.

use std::sync::Arc;

use switchyard_guest_sdk::{Candidates, Column, ColumnLengthError, Columns, InputGroups, WorkerRank};

use crate::request::{SelectionRequest, WorkerInputs};
use crate::workers::WorkerTable;

/// The candidate columns of one selection: worker ids, the u32 columns of the declared
/// groups, and the multipliers (empty when no preference applies).
///
/// When every slot is a candidate and has a row, in slot order (a router that keeps its
/// table sends exactly that), the request's own rows are the columns: they are shared, not
/// copied, and a guest call copies each straight into guest memory. Otherwise eligible rows
/// are gathered into reused buffers, the u32 columns packed one after another
/// ([`Column::present`]), so a steady-state selection allocates nothing.
#[derive(Debug, Default)]
pub struct ColumnBuffers {
    groups: InputGroups,
    /// The request's rows, when they are the candidates (the buffers below are then
    /// unused, the multipliers aside).
    shared: Option<Arc<WorkerInputs>>,
    worker_id: Vec<u64>,
    packed: Vec<u32>,
    preferred_multiplier: Vec<f64>,
    /// Merge path scratch: the eligible slots and their input rows (`None`: no row).
    rows: Vec<(usize, Option<usize>)>,
    /// Scratch for [`SelectionRequest::preferred_multiplier`].
    taint_matches: Vec<usize>,
}

impl ColumnBuffers {
    /// Fills the columns of `groups` for every eligible slot, in slot order.
    pub fn materialise(&mut self, table: &WorkerTable, request: &SelectionRequest, groups: InputGroups) {
        self.groups = groups;
        self.shared = None;
        self.worker_id.clear();
        self.packed.clear();
        self.preferred_multiplier.clear();
        let inputs = request.inputs();
        let tainted = groups.contains(InputGroups::AFFINITY) && request.has_preferences();
        if request.is_dense_for(table) {
            // Every slot is a candidate and has a row: the columns are the request's.
            self.shared = Some(request.shared_inputs());
            if tainted {
                self.multipliers(table, request, 0..table.slots().len());
            }
            return;
        }
        // Rows and slots are both sorted by (worker, rank): merge them in one pass, then
        // fill column by column.
        self.rows.clear();
        let mut row = 0;
        let rows = inputs.len();
        let ranks = &inputs[Column::DpRank];
        for (slot_index, &slot) in table.slots().iter().enumerate() {
            while row < rows && key(inputs.worker_id[row], ranks[row]) < key_of(slot) {
                row += 1;
            }
            if !request.eligible(slot) {
                continue;
            }
            let hit = row < rows && key(inputs.worker_id[row], ranks[row]) == key_of(slot);
            self.rows.push((slot_index, hit.then_some(row)));
        }
        let slots = table.slots();
        self.worker_id.extend(self.rows.iter().map(|&(slot, _)| slots[slot].worker_id));
        for column in Column::present(groups) {
            if column == Column::DpRank {
                self.packed.extend(self.rows.iter().map(|&(slot, _)| slots[slot].dp_rank));
            } else {
                let values = &inputs[column];
                self.packed.extend(self.rows.iter().map(|&(_, row)| row.map_or(0, |r| values[r])));
            }
        }
        if tainted {
            let rows = std::mem::take(&mut self.rows);
            self.multipliers(table, request, rows.iter().map(|&(slot, _)| slot));
            self.rows = rows;
        }
    }

    /// Appends the preferred-taint multiplier of each of `slots`, computing each worker's
    /// once (a worker's ranks share it).
    fn multipliers(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        slots: impl Iterator<Item = usize>,
    ) {
        // Slots come in ascending order, so a worker's ranks are adjacent: remembering the
        // last worker's multiplier computes each once.
        let mut last: Option<(usize, f64)> = None;
        for slot in slots {
            let worker = table.slot_worker_index(slot);
            let m = match last {
                Some((w, m)) if w == worker => m,
                _ => {
                    let taints = table.workers()[worker].taints();
                    let m = request.preferred_multiplier(worker, taints, &mut self.taint_matches);
                    last = Some((worker, m));
                    m
                }
            };
            self.preferred_multiplier.push(m);
        }
    }

    /// Lets go of the last selection's rows: the request's own (when they were shared),
    /// and the buffers they were gathered into, capacity and all.
    ///
    /// Why: a selector kept idle between selections (one per tenant version, thousands in
    /// a server) would otherwise keep its last request's rows resident until its next
    /// selection, and its buffers sized for its largest request for good: up to
    /// `max_slots` rows of every column (~400 KB at the default 10,000), pinned outside
    /// any guest's memory by each idle instance, whatever size the tenant's requests
    /// chose. Released here, the shared rows are freed with the request; the buffers are
    /// allocated again by the next selection that gathers rows.
    pub fn release(&mut self) {
        *self = Self::default();
    }

    /// Keeps only the rows where `keep` is true (after a policy's filter).
    pub fn retain(&mut self, keep: &[bool]) {
        if let Some(inputs) = self.shared.take() {
            // Shared rows are the caller's: gather them into the buffers first.
            self.worker_id.extend_from_slice(&inputs.worker_id);
            for column in Column::present(self.groups) {
                self.packed.extend_from_slice(&inputs[column]);
            }
        }
        let n = self.len();
        let kept = keep.iter().filter(|&&k| k).count();
        // Column by column, moving rows down: a row's new place never lies after its old
        // one (`c × kept + i ≤ c × n + j`), so one forward pass is safe.
        let mut to = 0;
        for c in 0..self.packed.len() / n.max(1) {
            for (j, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
                self.packed[to] = self.packed[c * n + j];
                to += 1;
            }
        }
        self.packed.truncate(to);
        retain(&mut self.worker_id, keep);
        retain(&mut self.preferred_multiplier, keep);
        debug_assert_eq!(self.worker_id.len(), kept);
    }

    /// Rows (candidates) of the last materialisation.
    pub fn len(&self) -> usize {
        self.worker_ids().len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The worker id column.
    pub fn worker_ids(&self) -> &[u64] {
        match &self.shared {
            Some(inputs) => &inputs.worker_id,
            None => &self.worker_id,
        }
    }

    /// The (worker, rank) of `row`.
    pub fn worker_rank(&self, row: usize) -> WorkerRank {
        let dp_rank = match &self.shared {
            Some(inputs) => inputs[Column::DpRank][row],
            // `dp-rank` is always the first packed column.
            None => self.packed[row],
        };
        WorkerRank { worker_id: self.worker_ids()[row], dp_rank }
    }

    /// The u32 columns of the declared groups, in wire order ([`Column::present`]): what
    /// a guest's one packed list carries, gathered from wherever they lie.
    pub fn packed_columns(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let n = self.len();
        let shared = self.shared.as_deref();
        Column::present(self.groups).enumerate().map(move |(i, column)| match shared {
            Some(inputs) => inputs[column].as_slice(),
            None => &self.packed[i * n..(i + 1) * n],
        })
    }

    /// The preferred-taint multiplier of each row, or none (no preference applies).
    pub fn preferred_multiplier(&self) -> &[f64] {
        &self.preferred_multiplier
    }

    /// The view a native policy reads.
    pub fn view(&self) -> Result<Candidates<'_>, ColumnLengthError> {
        match &self.shared {
            Some(inputs) => {
                let columns = Column::ALL.map(|c| inputs[c].as_slice());
                Candidates::from_columns(&inputs.worker_id, columns, &self.preferred_multiplier, self.groups)
            }
            None => {
                let columns = Columns {
                    worker_ids: &self.worker_id,
                    packed: &self.packed,
                    preferred_multiplier: &self.preferred_multiplier,
                };
                Candidates::new(columns, self.groups)
            }
        }
    }
}

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

fn key(worker_id: u64, dp_rank: u32) -> (u64, u32) {
    (worker_id, dp_rank)
}

fn key_of(slot: WorkerRank) -> (u64, u32) {
    (slot.worker_id, slot.dp_rank)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use switchyard_guest_sdk::{Column, InputGroups, Pool, RequestFacts, WorkerRank};

    use super::ColumnBuffers;
    use crate::{RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable};

    /// A 64-token prompt in four 16-token blocks.
    fn facts() -> RequestFacts {
        RequestFacts {
            prompt_tokens: 64,
            block_size: 16,
            request_blocks: 4,
            expected_output_tokens: None,
            pinned: None,
            pool: Pool::Aggregated,
            seed: 1,
        }
    }

    fn columns(table: &WorkerTable, options: RequestOptions) -> ColumnBuffers {
        let inputs = WorkerInputs::new(vec![1, 2, 2, 5])
            .with(Column::DpRank, vec![0, 0, 1, 0])
            .with(Column::DeviceOverlapBlocks, vec![1, 2, 3, 4])
            .with(Column::HostOverlapBlocks, vec![5, 6, 7, 8])
            .with(Column::CachedTokens, vec![16, 32, 48, 64])
            .with(Column::ActivePrefillTokens, vec![9, 10, 11, 12])
            .with(Column::DecodeBlocks, vec![13, 14, 15, 16])
            .with(Column::ActiveRequests, vec![17, 18, 19, 20]);
        let request = SelectionRequest::new(table, facts(), options, inputs).unwrap();
        let mut buffers = ColumnBuffers::default();
        buffers.materialise(table, &request, InputGroups::ALL);
        buffers
    }

    #[test]
    fn dense_shared_and_merge_paths_give_the_same_columns_before_and_after_a_filter() {
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
        assert!(dense.shared.is_some() && merged.shared.is_none(), "one path each");
        assert_eq!(format!("{:?}", dense.view().unwrap()), format!("{:?}", merged.view().unwrap()));
        assert_eq!(dense.worker_ids(), &[1, 2, 2, 5]);
        let multipliers = dense.view().unwrap().preferred_multiplier().unwrap();
        assert_eq!(multipliers[1], (-(0.5f64).tanh()).exp());
        assert_eq!(multipliers[0], 1.0);
        let packed = |b: &ColumnBuffers| b.packed_columns().flatten().copied().collect::<Vec<u32>>();
        assert_eq!(packed(&dense), packed(&merged));
        assert_eq!(packed(&dense).len(), 4 * Column::COUNT);

        // A filter keeps three rows: the shared rows are gathered, then kept alike.
        let (mut dense, mut merged) = (dense, merged);
        let keep = [true, false, true, true];
        dense.retain(&keep);
        merged.retain(&keep);
        assert!(dense.shared.is_none(), "a retained selection owns its rows");
        assert_eq!(format!("{:?}", dense.view().unwrap()), format!("{:?}", merged.view().unwrap()));
        assert_eq!(packed(&dense), packed(&merged));
        assert_eq!(dense.worker_ids(), &[1, 2, 5]);
        assert_eq!(dense.worker_rank(1), WorkerRank { worker_id: 2, dp_rank: 1 });
        assert_eq!(dense.view().unwrap().cached_tokens(), &[16, 48, 64]);
    }

    #[test]
    fn released_columns_hold_nothing_of_the_request() {
        let table = WorkerTable::new(vec![Worker::new(1, 1, 0, None), Worker::new(2, 1, 0, None)]).unwrap();
        let inputs = WorkerInputs::new(vec![1, 2]).with(Column::DecodeBlocks, vec![3, 4]);
        let request = SelectionRequest::new(&table, facts(), RequestOptions::default(), inputs).unwrap();
        let rows = request.shared_inputs();
        let mut buffers = ColumnBuffers::default();
        buffers.materialise(&table, &request, InputGroups::ALL);
        // The request, `rows` and the shared columns.
        assert_eq!(std::sync::Arc::strong_count(&rows), 3, "dense: the request's rows are shared");
        buffers.release();
        assert_eq!(std::sync::Arc::strong_count(&rows), 2, "released: no longer held");
        assert!(buffers.is_empty() && buffers.worker_ids().is_empty());
        // Gathered rows (the merge path) are let go of too, with the buffers' memory (a
        // large request's capacity would otherwise stay), and gathered again after.
        let options = RequestOptions { allowed_workers: Some(vec![2]), ..Default::default() };
        let inputs = WorkerInputs::new(vec![1, 2]).with(Column::DecodeBlocks, vec![3, 4]);
        let allowed = SelectionRequest::new(&table, facts(), options, inputs).unwrap();
        buffers.materialise(&table, &allowed, InputGroups::ALL);
        assert_eq!(buffers.worker_ids(), &[2]);
        buffers.release();
        assert!(buffers.is_empty());
        let held = [buffers.worker_id.capacity(), buffers.packed.capacity(), buffers.rows.capacity()];
        assert_eq!(held, [0; 3], "no gathered row's memory kept");
        buffers.materialise(&table, &allowed, InputGroups::ALL);
        assert_eq!(buffers.view().unwrap().decode_blocks(), &[4]);
    }

    /// The multiplier computed the quadratic way: a scan of the worker's
    /// taints for each preferred taint, in the map's order.
    fn reference(preferred: &BTreeMap<String, f64>, taints: &[String]) -> f64 {
        let sum: f64 = preferred.iter().filter(|(t, _)| taints.contains(t)).map(|(_, w)| *w).sum();
        (-sum.tanh()).exp()
    }

    #[test]
    fn multipliers_are_bit_identical_to_the_scan_in_map_order() {
        // Weights of mixed magnitudes and signs, so the summation order shows in the bits;
        // workers list taints out of order and some twice.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let preferred: BTreeMap<String, f64> = (0..40)
            .map(|i| (format!("t{i}"), (next() % 2001) as f64 / 7.0 * if i % 3 == 0 { -1e-3 } else { 1.0 }))
            .collect();
        let workers: Vec<Worker> = (0..50)
            .map(|id| {
                let taints = (0..(next() % 30)).map(|_| format!("t{}", next() % 60)).collect();
                Worker::new(id, 1 + (next() % 3) as u32, 0, None).with_taints(taints)
            })
            .collect();
        let table = WorkerTable::new(workers).unwrap();
        let options = RequestOptions { preferred_taints: preferred.clone(), ..Default::default() };
        let request = SelectionRequest::new(&table, facts(), options, WorkerInputs::default()).unwrap();
        let mut buffers = ColumnBuffers::default();
        buffers.materialise(&table, &request, InputGroups::ALL);
        let multipliers = buffers.view().unwrap().preferred_multiplier().unwrap().to_vec();
        assert_eq!(multipliers.len(), table.slots().len());
        for (slot, m) in multipliers.iter().enumerate() {
            let expected = reference(&preferred, table.slot_worker(slot).taints());
            assert_eq!(m.to_bits(), expected.to_bits(), "slot {slot}");
        }
    }

    #[test]
    fn a_callers_own_multipliers_are_used_as_given_for_every_rank() {
        let table = WorkerTable::new(vec![Worker::new(1, 2, 0, None), Worker::new(4, 1, 0, None)]).unwrap();
        let given = 0.736_257_851_882_003_6;
        let options = RequestOptions { worker_multipliers: Some(vec![(1, given)]), ..Default::default() };
        let request = SelectionRequest::new(&table, facts(), options, WorkerInputs::default()).unwrap();
        let mut buffers = ColumnBuffers::default();
        buffers.materialise(&table, &request, InputGroups::ALL);
        let multipliers = buffers.view().unwrap().preferred_multiplier().unwrap().to_vec();
        assert_eq!(
            multipliers.iter().map(|m| m.to_bits()).collect::<Vec<_>>(),
            [given, given, 1.0].map(f64::to_bits)
        );

        let refused = |options: RequestOptions| {
            SelectionRequest::new(&table, facts(), options, WorkerInputs::default()).unwrap_err().to_string()
        };
        let both = RequestOptions {
            worker_multipliers: Some(vec![(1, 0.5)]),
            preferred_taints: BTreeMap::from([("a".to_string(), 1.0)]),
            ..Default::default()
        };
        assert!(refused(both).contains("not both"));
        for m in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let bad = RequestOptions { worker_multipliers: Some(vec![(4, m)]), ..Default::default() };
            assert!(refused(bad).contains("must be finite and > 0"), "{m}");
        }
        let unknown = RequestOptions { worker_multipliers: Some(vec![(9, 0.5)]), ..Default::default() };
        assert!(refused(unknown).contains("worker 9"));
    }

    #[test]
    fn a_worker_with_listed_ranks_has_exactly_those_slots() {
        let table = WorkerTable::new(vec![
            Worker::new(3, 1, 0, None).with_ranks(vec![6, 2, 4, 2]),
            Worker::new(5, 2, 0, None),
        ])
        .unwrap();
        let slots: Vec<(u64, u32)> = table.slots().iter().map(|s| (s.worker_id, s.dp_rank)).collect();
        assert_eq!(slots, [(3, 2), (3, 4), (3, 6), (5, 0), (5, 1)]);
        assert_eq!(table.worker(3).unwrap().dp_size(), 3);
        // Ranks 0..n listed are the default shape.
        assert_eq!(Worker::new(7, 1, 0, None).with_ranks(vec![1, 0]), Worker::new(7, 2, 0, None));
        let inputs = |rank: u32| WorkerInputs::new(vec![3]).with(Column::DpRank, vec![rank]);
        let request =
            |rank: u32| SelectionRequest::new(&table, facts(), RequestOptions::default(), inputs(rank));
        assert!(request(4).is_ok());
        let e = request(0).unwrap_err().to_string();
        assert!(e.contains("rank 0 does not exist"), "{e}");
        let mut pinned = facts();
        pinned.pinned = Some(WorkerRank { worker_id: 3, dp_rank: 3 });
        assert!(
            SelectionRequest::new(&table, pinned, RequestOptions::default(), WorkerInputs::default())
                .is_err()
        );
    }
}
