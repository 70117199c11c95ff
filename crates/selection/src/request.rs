//! One request to route: its facts, and per-worker inputs as the router's indexes return them.

use std::collections::{BTreeMap, HashMap};

use std::ops::{Index, IndexMut};
use std::sync::Arc;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use switchyard_guest_sdk::{Column, Pool, RequestFacts, WorkerRank};

use crate::error::InputError;
use crate::workers::WorkerTable;

/// Per-worker inputs for one request, as columns over the workers that have any (the
/// rows a radix-tree lookup and the load tracker return). Workers of the table without a
/// row have zeros. Every present column has as many rows as `worker_id`; an absent
/// (empty) column is all zeros. Units as in the WIT `candidates` record.
///
/// The u32 columns are indexed by [`Column`] (`inputs[Column::CachedTokens]`), so the
/// column set is [`Column`]'s; in JSON each is a field named by its
/// [`Column::snake_name`] (`"cached_tokens": [...]`), beside `"worker_id"`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerInputs {
    /// The worker of each row.
    pub worker_id: Vec<u64>,
    /// Indexed by `Column as usize`; `dp_rank` absent means rank 0 everywhere.
    columns: [Vec<u32>; Column::COUNT],
}

impl Index<Column> for WorkerInputs {
    type Output = Vec<u32>;
    fn index(&self, column: Column) -> &Vec<u32> {
        &self.columns[column as usize]
    }
}

impl IndexMut<Column> for WorkerInputs {
    fn index_mut(&mut self, column: Column) -> &mut Vec<u32> {
        &mut self.columns[column as usize]
    }
}

impl WorkerInputs {
    /// Rows for `worker_id`, every column absent (zeros) until set.
    pub fn new(worker_id: Vec<u64>) -> Self {
        Self { worker_id, columns: Default::default() }
    }

    /// The same inputs with `column` set to `rows`.
    pub fn with(mut self, column: Column, rows: Vec<u32>) -> Self {
        self[column] = rows;
        self
    }

    /// Checks lengths, sorts rows by (worker, rank) and refuses duplicates and workers
    /// that the table does not have. `true`: the rows are exactly the table's slots.
    pub(crate) fn normalise(&mut self, table: &WorkerTable) -> Result<bool, InputError> {
        let n = self.worker_id.len();
        for column in Column::ALL {
            let len = self[column].len();
            if len != n && len != 0 {
                return Err(InputError::new(format!(
                    "column `{}` has {len} rows but `worker_id` has {n} (give all rows, or omit the column)",
                    column.snake_name()
                )));
            }
            if len == 0 {
                self[column].resize(n, 0);
            }
        }
        let dp_rank = &self[Column::DpRank];
        // Every slot of the table, in slot order (what a router that keeps its table
        // sends): valid and sorted by construction, with no lookup per row.
        if self.is_dense_for(table) {
            return Ok(true);
        }
        for (row, (&id, &rank)) in self.worker_id.iter().zip(dp_rank).enumerate() {
            let worker = table.worker(id).ok_or_else(|| {
                InputError::new(format!("row {row}: worker {id} is not in the worker table"))
            })?;
            if !worker.has_rank(rank) {
                return Err(InputError::new(format!(
                    "row {row}: worker {id} has {} dp ranks, rank {rank} does not exist",
                    worker.dp_size()
                )));
            }
        }
        let key = |i: usize| (self.worker_id[i], dp_rank[i]);
        if !(1..n).all(|i| key(i - 1) < key(i)) {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| key(i));
            if let Some(w) = order.windows(2).find(|w| key(w[0]) == key(w[1])) {
                let (id, rank) = key(w[0]);
                return Err(InputError::new(format!("worker {id} rank {rank} has two rows")));
            }
            fn permute<T: Copy>(column: &mut Vec<T>, order: &[usize]) {
                *column = order.iter().map(|&i| column[i]).collect();
            }
            permute(&mut self.worker_id, &order);
            for column in &mut self.columns {
                permute(column, &order);
            }
        }
        Ok(self.is_dense_for(table))
    }

    /// Whether the rows are exactly `table`'s slots, in slot order.
    pub(crate) fn is_dense_for(&self, table: &WorkerTable) -> bool {
        let slots = table.slots();
        self.worker_id.len() == slots.len()
            && slots
                .iter()
                .zip(self.worker_id.iter().zip(&self[Column::DpRank]))
                .all(|(s, (&id, &rank))| s.worker_id == id && s.dp_rank == rank)
    }

    /// Rows given (workers with any input).
    pub fn len(&self) -> usize {
        self.worker_id.len()
    }

    /// Whether no row was given.
    pub fn is_empty(&self) -> bool {
        self.worker_id.is_empty()
    }
}

/// One request to route.
#[derive(Debug, Clone)]
pub struct SelectionRequest {
    facts: RequestFacts,
    prefix_hashes: Option<Vec<u64>>,
    policy_class: Option<String>,
    /// Each preferred taint's position in the caller's map (its order, which is the
    /// order the weights are summed in), for one lookup per worker taint.
    preferred_position: HashMap<String, usize>,
    /// The preferred taints' weights, in the map's order.
    preferred_weights: Vec<f64>,
    /// The caller's own multiplier per worker of the table, by index (empty: none given).
    worker_multipliers: Vec<f64>,
    allowed_workers: Option<Vec<u64>>,
    temperature: Option<f64>,
    /// Shared (not copied) with the selector's columns when its rows are the candidates.
    inputs: Arc<WorkerInputs>,
    /// The table this request was validated against, if its rows are exactly that
    /// table's slots in order (the common case): its rows are then the candidates' columns.
    dense_for: Option<u64>,
}

/// The optional parts of a request; `Default` is a request with none of them.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Chained per-block hashes; `None` where no blocks are tracked (prefill pool).
    pub prefix_hashes: Option<Vec<u64>>,
    /// The caller's policy class.
    pub policy_class: Option<String>,
    /// A request classifier's class, which replaces the caller's.
    pub classifier_class: Option<String>,
    /// Taint label → weight; a worker's multiplier is exp(−tanh(Σ matching weights)).
    pub preferred_taints: BTreeMap<String, f64>,
    /// Each worker's multiplier as the caller computed it, `(worker id, multiplier)`,
    /// finite and > 0 (a router such as Dynamo hands over the multiplier, not the taints
    /// it came from); a worker not listed gets 1. Instead of `preferred_taints`, not with
    /// them.
    pub worker_multipliers: Option<Vec<(u64, f64)>>,
    /// Only these workers may be chosen (`None`: all).
    pub allowed_workers: Option<Vec<u64>>,
    /// Picker temperature for this request; `None` uses the selector's.
    pub temperature: Option<f64>,
}

impl SelectionRequest {
    /// Validates the request against the table.
    pub fn new(
        table: &WorkerTable,
        facts: RequestFacts,
        options: RequestOptions,
        mut inputs: WorkerInputs,
    ) -> Result<Self, InputError> {
        Self::check_facts(table, &facts, &options)?;
        let dense = inputs.normalise(table)?;
        Self::build(table, facts, options, Arc::new(inputs), dense)
    }

    /// Validates the request against the table, whose every slot `inputs` has a row for,
    /// in slot order (a held table's columns: shared, not copied).
    pub(crate) fn from_dense(
        table: &WorkerTable,
        facts: RequestFacts,
        options: RequestOptions,
        inputs: Arc<WorkerInputs>,
    ) -> Result<Self, InputError> {
        debug_assert!(inputs.is_dense_for(table));
        Self::check_facts(table, &facts, &options)?;
        Self::build(table, facts, options, inputs, true)
    }

    /// The checks of the facts and options that read no input row.
    fn check_facts(
        table: &WorkerTable,
        facts: &RequestFacts,
        options: &RequestOptions,
    ) -> Result<(), InputError> {
        if facts.block_size == 0 {
            return Err(InputError::new("block_size must be at least 1 token"));
        }
        if let Some(pinned) = facts.pinned {
            let known = table.worker(pinned.worker_id).is_some_and(|w| w.has_rank(pinned.dp_rank));
            if !known {
                return Err(InputError::new(format!(
                    "pinned worker {} rank {} is not in the worker table",
                    pinned.worker_id, pinned.dp_rank
                )));
            }
        }
        if let Some(t) = options.temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(InputError::new(format!("temperature must be finite and ≥ 0, got {t}")));
        }
        if let Some((taint, w)) = options.preferred_taints.iter().find(|(_, w)| !w.is_finite()) {
            return Err(InputError::new(format!(
                "preferred taint `{taint}` has weight {w}; it must be finite"
            )));
        }
        Ok(())
    }

    fn build(
        table: &WorkerTable,
        facts: RequestFacts,
        options: RequestOptions,
        inputs: Arc<WorkerInputs>,
        dense: bool,
    ) -> Result<Self, InputError> {
        let mut allowed = options.allowed_workers;
        if let Some(ids) = &mut allowed {
            ids.sort_unstable();
            ids.dedup();
        }
        let worker_multipliers = match options.worker_multipliers {
            None => Vec::new(),
            Some(_) if !options.preferred_taints.is_empty() => {
                return Err(InputError::new("give preferred taints or worker multipliers, not both"));
            }
            Some(given) => {
                let mut by_worker = vec![1.0; table.workers().len()];
                for (id, m) in given {
                    let worker = table.worker_index(id).ok_or_else(|| {
                        InputError::new(format!(
                            "worker multiplier for worker {id}, which is not in the table"
                        ))
                    })?;
                    if !(m.is_finite() && m > 0.0) {
                        return Err(InputError::new(format!(
                            "worker {id}'s multiplier is {m}; it must be finite and > 0"
                        )));
                    }
                    by_worker[worker] = m;
                }
                by_worker
            }
        };
        let mut preferred_position = HashMap::with_capacity(options.preferred_taints.len());
        let mut preferred_weights = Vec::with_capacity(options.preferred_taints.len());
        for (i, (taint, weight)) in options.preferred_taints.into_iter().enumerate() {
            preferred_position.insert(taint, i);
            preferred_weights.push(weight);
        }
        Ok(Self {
            facts,
            prefix_hashes: options.prefix_hashes,
            policy_class: options.classifier_class.or(options.policy_class),
            preferred_position,
            preferred_weights,
            worker_multipliers,
            allowed_workers: allowed,
            temperature: options.temperature,
            inputs,
            dense_for: dense.then(|| table.identity()),
        })
    }

    /// The request's facts (prompt, blocks, pool, seed…).
    pub fn facts(&self) -> &RequestFacts {
        &self.facts
    }
    /// The chained prefix-block hashes, if the caller gave any.
    pub fn prefix_hashes(&self) -> Option<&[u64]> {
        self.prefix_hashes.as_deref()
    }
    /// The policy class, if the caller gave one.
    pub fn policy_class(&self) -> Option<&str> {
        self.policy_class.as_deref()
    }
    /// The picker's temperature for this request (`None`: the selector's).
    pub fn temperature(&self) -> Option<f64> {
        self.temperature
    }
    /// The per-worker inputs, normalised (sorted, every column full).
    pub fn inputs(&self) -> &WorkerInputs {
        &self.inputs
    }
    /// The same inputs, shared: the candidates' columns when the rows are every slot.
    pub(super) fn shared_inputs(&self) -> Arc<WorkerInputs> {
        Arc::clone(&self.inputs)
    }
    /// Whether any preference is set, as taints or as the caller's multipliers (the
    /// `affinity` multipliers then apply).
    pub fn has_preferences(&self) -> bool {
        !self.preferred_weights.is_empty() || !self.worker_multipliers.is_empty()
    }

    /// Whether every slot of `table` is a candidate and has a row, in slot order.
    pub(super) fn is_dense_for(&self, table: &WorkerTable) -> bool {
        self.dense_for == Some(table.identity())
            && self.facts.pinned.is_none()
            && self.allowed_workers.is_none()
    }

    /// Slots of `table` the host rules out before any policy sees them: (those not the
    /// pinned one, when pinned; those of workers not allowed, otherwise).
    pub fn ruled_out(&self, table: &WorkerTable) -> (usize, usize) {
        let slots = table.slots();
        if self.facts.pinned.is_some() {
            let kept = slots.iter().filter(|&&s| self.eligible(s)).count();
            return (slots.len() - kept, 0);
        }
        (0, slots.iter().filter(|&&s| !self.eligible(s)).count())
    }

    /// Whether `slot` may be chosen: the pinned worker only, else the allowed set.
    pub(super) fn eligible(&self, slot: WorkerRank) -> bool {
        if let Some(pinned) = self.facts.pinned {
            return slot == pinned;
        }
        match &self.allowed_workers {
            Some(ids) => ids.binary_search(&slot.worker_id).is_ok(),
            None => true,
        }
    }

    /// Dynamo's preferred-taint multiplier: exp(−tanh(Σ weights of matching taints)).
    ///
    /// Linear in the worker's taints: one map lookup per taint, never a scan of the
    /// worker's list per preferred taint. The matching weights are summed in the
    /// preferred taints' map order, each once (a taint listed twice counts once), so the
    /// result is bit-identical to summing over the map and testing membership.
    /// `scratch` is reused between calls.
    /// The caller's own multiplier for the table's worker `worker` replaces it, if given.
    pub(super) fn preferred_multiplier(
        &self,
        worker: usize,
        taints: &[String],
        scratch: &mut Vec<usize>,
    ) -> f64 {
        if let Some(&m) = self.worker_multipliers.get(worker) {
            return m;
        }
        if self.preferred_weights.is_empty() {
            return 1.0;
        }
        scratch.clear();
        scratch.extend(taints.iter().filter_map(|taint| self.preferred_position.get(taint).copied()));
        scratch.sort_unstable();
        scratch.dedup();
        let sum: f64 = scratch.iter().map(|&i| self.preferred_weights[i]).sum();
        (-sum.tanh()).exp()
    }
}

/// A pool's view of the request's hashes, per the contract: unique to the request in a
/// decode pool, absent in a prefill pool. Hosts that build requests from traces use it.
pub fn hashes_for_pool(pool: Pool, hashes: Vec<u64>, request_salt: u64) -> Option<Vec<u64>> {
    match pool {
        Pool::Aggregated => Some(hashes),
        Pool::Prefill => None,
        Pool::Decode => {
            Some(hashes.iter().map(|h| h ^ request_salt.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15).collect())
        }
    }
}

impl Serialize for WorkerInputs {
    /// `worker_id`, then every present (non-empty) column by its snake-case name.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let present: Vec<Column> = Column::ALL.into_iter().filter(|&c| !self[c].is_empty()).collect();
        let mut map = serializer.serialize_map(Some(1 + present.len()))?;
        map.serialize_entry("worker_id", &self.worker_id)?;
        for column in present {
            map.serialize_entry(&column.snake_name(), &self[column])?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for WorkerInputs {
    /// Any of `worker_id` and the columns' snake-case names, each at most once; another
    /// field is refused by name.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = WorkerInputs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("per-worker input columns")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WorkerInputs, A::Error> {
                let mut inputs = WorkerInputs::default();
                let mut seen = [false; Column::COUNT + 1];
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let (slot, column) = match key.as_ref() {
                        "worker_id" => (Column::COUNT, None),
                        name => match Column::from_name(name).filter(|c| c.snake_name() == name) {
                            Some(c) => (c as usize, Some(c)),
                            None => {
                                let mut expected = vec!["worker_id".to_string()];
                                expected.extend(Column::ALL.map(Column::snake_name));
                                return Err(de::Error::custom(format!(
                                    "unknown field `{name}`, expected one of {}",
                                    expected.join(", ")
                                )));
                            }
                        },
                    };
                    if std::mem::replace(&mut seen[slot], true) {
                        return Err(de::Error::custom(format!("duplicate field `{key}`")));
                    }
                    match column {
                        None => inputs.worker_id = map.next_value()?,
                        Some(c) => inputs[c] = map.next_value()?,
                    }
                }
                Ok(inputs)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_json_names_each_column_by_its_snake_name_and_refuses_others() {
        let inputs = WorkerInputs::new(vec![3, 1])
            .with(Column::DpRank, vec![0, 1])
            .with(Column::CachedTokens, vec![64, 0]);
        let json = serde_json::to_value(&inputs).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"worker_id": [3, 1], "dp_rank": [0, 1], "cached_tokens": [64, 0]})
        );
        assert_eq!(serde_json::from_value::<WorkerInputs>(json).unwrap(), inputs);
        for column in Column::ALL {
            let one = serde_json::json!({ column.snake_name(): [7] });
            assert_eq!(serde_json::from_value::<WorkerInputs>(one).unwrap()[column], vec![7]);
        }
        let e = serde_json::from_str::<WorkerInputs>(r#"{"cached-tokens": [1]}"#).unwrap_err();
        assert!(
            e.to_string().contains("unknown field `cached-tokens`, expected one of worker_id, dp_rank"),
            "{e}"
        );
        let e = serde_json::from_str::<WorkerInputs>(r#"{"worker_id": [1], "worker_id": [2]}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate field `worker_id`"), "{e}");
    }
}
