//! Worker state held between requests: a router registers its worker table and the
//! per-worker load once, then sends changes, and each request carries only what it adds
//! (its prefix overlaps, say) rather than every worker's state.
//!
//! A [`HeldTable`] is immutable: a change makes a new one (the service swaps it in under
//! the version it names), so a selection reads one consistent state without a lock.

use std::sync::Arc;

use switchyard_guest_sdk::{Column, RequestFacts, WorkerRank};

use crate::error::InputError;
use crate::request::{RequestOptions, SelectionRequest, WorkerInputs};
use crate::wire::request::{RequestJson, RequestLimits, WorkerJson};
use crate::wire::table::TableDelta;
use crate::workers::{Worker, WorkerTable};

/// One version of a held worker table: the workers, and every slot's inputs.
#[derive(Debug)]
pub struct HeldTable {
    table: WorkerTable,
    /// A row per slot of `table`, in slot order, every column full.
    inputs: Arc<WorkerInputs>,
    version: u64,
}

impl HeldTable {
    /// The table of `workers`, with `inputs` (rows for workers with any; the rest zeros),
    /// as version `version`. `limits` bound the table as they bound a request's.
    pub fn new(
        workers: Vec<WorkerJson>,
        inputs: WorkerInputs,
        version: u64,
        limits: &RequestLimits,
    ) -> Result<Self, InputError> {
        limits.check_workers(&workers)?;
        check_rows(&inputs, limits)?;
        let table = WorkerTable::new(workers.into_iter().map(WorkerJson::into_worker).collect())?;
        let mut dense = zeros(&table);
        overlay(&table, &mut dense, inputs)?;
        Ok(Self { table, inputs: Arc::new(dense), version })
    }

    /// This table changed by `delta` (workers removed, then added, then rows set), as
    /// version `version`. The delta's `base_version` is the caller's to check. A worker
    /// added starts with zeros; a worker kept keeps its rows.
    pub fn apply(&self, delta: TableDelta, version: u64, limits: &RequestLimits) -> Result<Self, InputError> {
        check_rows(&delta.inputs, limits)?;
        let mut removed = delta.remove;
        removed.sort_unstable();
        removed.dedup();
        if let Some(id) = removed.iter().find(|&&id| self.table.worker(id).is_none()) {
            return Err(InputError::new(format!("remove: worker {id} is not in the table")));
        }
        let kept = self.table.workers().iter().filter(|w| removed.binary_search(&w.id()).is_err());
        let kept_count = self.table.workers().len() - removed.len();
        if let Some(w) = delta
            .add
            .iter()
            .find(|w| self.table.worker(w.id).is_some() && removed.binary_search(&w.id).is_err())
        {
            return Err(InputError::new(format!(
                "add: worker {} is already in the table (remove it in the same delta to replace it)",
                w.id
            )));
        }
        let shape = kept
            .clone()
            .map(|w| (w.id(), w.dp_size(), w.taints().len()))
            .chain(delta.add.iter().map(|w| (w.id, w.dp_size, w.taints.len())));
        limits.check_shape(kept_count + delta.add.len(), shape)?;
        let workers: Vec<Worker> =
            kept.cloned().chain(delta.add.into_iter().map(WorkerJson::into_worker)).collect();
        let table = WorkerTable::new(workers)?;
        // Every slot kept keeps its row: both slot lists are ascending, so one merge.
        let mut dense = zeros(&table);
        let old = self.table.slots();
        let mut from = 0;
        for (to, slot) in table.slots().iter().enumerate() {
            while from < old.len() && key(old[from]) < key(*slot) {
                from += 1;
            }
            // A worker removed and added again in this delta is a new worker: zeros.
            if from < old.len() && old[from] == *slot && removed.binary_search(&slot.worker_id).is_err() {
                for column in Column::ALL {
                    dense[column][to] = self.inputs[column][from];
                }
            }
        }
        overlay(&table, &mut dense, delta.inputs)?;
        Ok(Self { table, inputs: Arc::new(dense), version })
    }

    /// The request with facts `facts` and `options` on this table, `rows` replacing the
    /// held values of the columns it gives for the slots it lists.
    pub(crate) fn request(
        &self,
        facts: RequestFacts,
        options: RequestOptions,
        rows: WorkerInputs,
    ) -> Result<SelectionRequest, InputError> {
        let inputs = if rows.is_empty() && Column::ALL.iter().all(|&c| rows[c].is_empty()) {
            Arc::clone(&self.inputs)
        } else {
            let mut dense = WorkerInputs::clone(&self.inputs);
            overlay(&self.table, &mut dense, rows)?;
            Arc::new(dense)
        };
        SelectionRequest::from_dense(&self.table, facts, options, inputs)
    }

    /// The workers.
    pub fn table(&self) -> &WorkerTable {
        &self.table
    }

    /// Every slot's inputs, in slot order.
    pub fn inputs(&self) -> &WorkerInputs {
        &self.inputs
    }

    /// The version the service gave this state.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The workers as a table's JSON lists them.
    pub fn workers_json(&self) -> Vec<WorkerJson> {
        self.table.workers().iter().map(WorkerJson::from_worker).collect()
    }
}

fn key(slot: WorkerRank) -> (u64, u32) {
    (slot.worker_id, slot.dp_rank)
}

/// A row count over `max_slots` is refused before anything is built from the rows.
fn check_rows(rows: &WorkerInputs, limits: &RequestLimits) -> Result<(), InputError> {
    let max = limits.config().max_slots;
    if rows.len() > max {
        return Err(InputError::new(format!("inputs: {} rows exceed max_slots {max}", rows.len())));
    }
    Ok(())
}

/// A row per slot of `table`, ranks filled in, every other column zero.
fn zeros(table: &WorkerTable) -> WorkerInputs {
    let slots = table.slots();
    let mut inputs = WorkerInputs::new(slots.iter().map(|s| s.worker_id).collect());
    for column in Column::ALL {
        inputs[column] = match column {
            Column::DpRank => slots.iter().map(|s| s.dp_rank).collect(),
            _ => vec![0; slots.len()],
        };
    }
    inputs
}

/// Sets, in `dense` (a row per slot of `table`), each column `rows` gives for the slots it
/// lists. Rows naming a slot the table does not have, or one slot twice, are refused.
fn overlay(table: &WorkerTable, dense: &mut WorkerInputs, mut rows: WorkerInputs) -> Result<(), InputError> {
    // No early return for no rows: a column given without `worker_id` is refused, as a
    // whole request's is.
    let given: Vec<Column> =
        Column::ALL.into_iter().filter(|&c| c != Column::DpRank && !rows[c].is_empty()).collect();
    rows.normalise(table)?;
    let slots = table.slots();
    for (row, (&worker_id, &dp_rank)) in rows.worker_id.iter().zip(&rows[Column::DpRank]).enumerate() {
        let slot = slots
            .binary_search_by_key(&(worker_id, dp_rank), |&s| key(s))
            .map_err(|_| InputError::new(format!("worker {worker_id} rank {dp_rank} is not in the table")))?;
        for &column in &given {
            dense[column][slot] = rows[column][row];
        }
    }
    Ok(())
}

impl WorkerJson {
    /// `worker` as the table's JSON lists it.
    pub fn from_worker(worker: &Worker) -> Self {
        let capacity = worker.capacity();
        Self {
            id: worker.id(),
            dp_size: worker.dp_size(),
            total_kv_blocks: capacity.map_or(0, |c| c.total_kv_blocks),
            max_num_batched_tokens: capacity.and_then(|c| c.max_num_batched_tokens),
            taints: worker.taints().to_vec(),
        }
    }
}

impl RequestJson {
    /// The validated request against a table the service holds: `inputs` are the rows the
    /// request changes. `limits` are checked first.
    pub fn into_held_request(
        mut self,
        held: &HeldTable,
        limits: &RequestLimits,
    ) -> Result<SelectionRequest, InputError> {
        if !self.workers.is_empty() {
            return Err(InputError::new("give `workers` or a held `table`, not both"));
        }
        if self.block_size == 0 {
            return Err(InputError::new("block_size must be at least 1 token"));
        }
        limits.check(&self)?;
        let rows = std::mem::take(&mut self.inputs);
        let (facts, options) = self.into_facts();
        held.request(facts, options, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(ids: &[(u64, u32)]) -> Vec<WorkerJson> {
        ids.iter()
            .map(|&(id, dp_size)| WorkerJson {
                id,
                dp_size,
                total_kv_blocks: 0,
                max_num_batched_tokens: None,
                taints: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_worker_removed_and_added_in_one_delta_starts_at_zeros() {
        let limits = RequestLimits::default();
        let rows = WorkerInputs::new(vec![10, 10])
            .with(Column::DpRank, vec![0, 1])
            .with(Column::CachedTokens, vec![5, 7]);
        let held = HeldTable::new(workers(&[(10, 2), (11, 1)]), rows, 1, &limits).unwrap();
        let delta =
            TableDelta { base_version: 1, remove: vec![10], add: workers(&[(10, 3)]), ..Default::default() };
        let replaced = held.apply(delta, 2, &limits).unwrap();
        assert_eq!(replaced.table().slots().len(), 4);
        assert_eq!(
            replaced.inputs()[Column::CachedTokens],
            vec![0, 0, 0, 0],
            "a new worker's rows are zeros"
        );
        // Kept workers keep theirs.
        let delta = TableDelta { base_version: 1, add: workers(&[(12, 1)]), ..Default::default() };
        assert_eq!(held.apply(delta, 2, &limits).unwrap().inputs()[Column::CachedTokens], vec![5, 7, 0, 0]);
    }

    #[test]
    fn a_column_without_worker_ids_is_refused_as_a_whole_requests_is() {
        let limits = RequestLimits::default();
        let held = HeldTable::new(workers(&[(1, 1)]), WorkerInputs::default(), 1, &limits).unwrap();
        let stray = WorkerInputs::default().with(Column::CachedTokens, vec![5]);
        let delta = TableDelta { base_version: 1, inputs: stray.clone(), ..Default::default() };
        let e = held.apply(delta, 2, &limits).unwrap_err();
        assert!(e.to_string().contains("`cached_tokens` has 1 rows but `worker_id` has 0"), "{e}");
        let facts = RequestFacts {
            prompt_tokens: 16,
            block_size: 16,
            request_blocks: 1,
            expected_output_tokens: None,
            pinned: None,
            pool: Default::default(),
            seed: 0,
        };
        let e = held.request(facts, RequestOptions::default(), stray).unwrap_err();
        assert!(e.to_string().contains("has 0"), "{e}");
    }
}
