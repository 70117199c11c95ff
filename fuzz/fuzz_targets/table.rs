//! Held worker tables (`HeldTable`) against a model kept here: a table put, then a
//! sequence of arbitrary deltas (removes of workers it has and has not, adds that repeat
//! an id, rows naming unknown workers or ranks, columns a row short or long). A delta
//! is refused, or the new table's slots and every column are the model's. Each delta
//! round-trips through its protobuf encoding. After each, a request whose rows overlay
//! the held ones selects (native default) exactly as the same request whole (the
//! table's workers, every row merged in) does: the same refusal, or the same pick, cost
//! and costs.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use switchyard::Selector;
use switchyard::selection::wire::{RequestJson, RequestLimitsConfig, TableDelta, WorkerJson, WorkerRankJson};
use switchyard::selection::{HeldTable, SelectError, WorkerInputs};
use switchyard_fuzz::RequestLimits;
use switchyard_fuzz::request::{float, label, number};
use switchyard_guest_sdk::{Column, Pool};

/// Small limits, so that deltas reach them: a worker's ranks, its taints, the table's
/// workers and slots.
fn limits() -> RequestLimits {
    RequestLimits::new(RequestLimitsConfig {
        max_workers: 8,
        max_dp_size: 3,
        max_slots: 16,
        max_taints_per_worker: 2,
        max_preferred_taints: 3,
        max_prefix_hashes: 32,
        max_prompt_blocks: 4096,
    })
    .expect("valid limits")
}

/// A slot's values, indexed by `Column` (`DpRank`'s entry unused: the slot names it).
type Row = [u32; Column::COUNT];

/// What a held table should hold: its workers (as the table lists them back) and each
/// (worker, rank) slot's values.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    workers: BTreeMap<u64, WorkerJson>,
    rows: BTreeMap<(u64, u32), Row>,
}

/// `w` as a table lists it back: a `dp_size` of 0 is one rank; no batch size without KV
/// blocks (the capacity is unknown as a whole).
fn listed(w: &WorkerJson) -> WorkerJson {
    let mut w = w.clone();
    w.dp_size = w.dp_size.max(1);
    if w.total_kv_blocks == 0 {
        w.max_num_batched_tokens = None;
    }
    w
}

/// Whether `workers` (`count` of them) fit `limits` as a table.
fn fits<'a>(limits: &RequestLimits, workers: impl Iterator<Item = &'a WorkerJson> + Clone) -> bool {
    let c = limits.config();
    workers.clone().count() <= c.max_workers
        && workers.clone().all(|w| w.dp_size <= c.max_dp_size && w.taints.len() <= c.max_taints_per_worker)
        && workers.map(|w| w.dp_size.max(1) as usize).sum::<usize>() <= c.max_slots
}

impl Model {
    /// The table of `workers` with `inputs`, or `None` where it must be refused.
    fn new(workers: &[WorkerJson], inputs: &WorkerInputs, limits: &RequestLimits) -> Option<Self> {
        let mut model = Self { workers: BTreeMap::new(), rows: BTreeMap::new() };
        if !fits(limits, workers.iter()) || !model.add(workers) {
            return None;
        }
        model.rows = model.overlay(inputs, limits)?;
        Some(model)
    }

    /// Adds `workers`, each slot zeros; `false` when an id repeats.
    fn add(&mut self, workers: &[WorkerJson]) -> bool {
        for w in workers {
            if self.workers.insert(w.id, listed(w)).is_some() {
                return false;
            }
            for rank in 0..w.dp_size.max(1) {
                self.rows.insert((w.id, rank), [0; Column::COUNT]);
            }
        }
        true
    }

    /// This table changed by `delta`, or `None` where it must be refused.
    fn apply(&self, delta: &TableDelta, limits: &RequestLimits) -> Option<Self> {
        if delta.remove.iter().any(|id| !self.workers.contains_key(id)) {
            return None;
        }
        let mut next = self.clone();
        for id in &delta.remove {
            next.workers.remove(id);
            next.rows.retain(|&(w, _), _| w != *id);
        }
        // A worker removed and added again (a replacement) is a new worker: its rows
        // start at zero like any other added worker's, whatever its old ranks held.
        if !fits(limits, next.workers.values().chain(&delta.add)) || !next.add(&delta.add) {
            return None;
        }
        next.rows = next.overlay(&delta.inputs, limits)?;
        Some(next)
    }

    /// The rows with `inputs` set over them, or `None` where `inputs` must be refused: over
    /// `max_slots` rows, a column neither absent nor a value per row, a slot the table does
    /// not have, or one slot twice.
    fn overlay(&self, inputs: &WorkerInputs, limits: &RequestLimits) -> Option<BTreeMap<(u64, u32), Row>> {
        let n = inputs.len();
        if n > limits.config().max_slots {
            return None;
        }
        let mut rows = self.rows.clone();
        if Column::ALL.iter().any(|&c| !inputs[c].is_empty() && inputs[c].len() != n) {
            return None;
        }
        let given: Vec<Column> =
            Column::ALL.into_iter().filter(|&c| c != Column::DpRank && !inputs[c].is_empty()).collect();
        let mut seen = std::collections::BTreeSet::new();
        for (i, &id) in inputs.worker_id.iter().enumerate() {
            // No `dp_rank` column: every row is rank 0.
            let rank = inputs[Column::DpRank].get(i).copied().unwrap_or(0);
            let row = rows.get_mut(&(id, rank))?;
            if !seen.insert((id, rank)) {
                return None;
            }
            for &c in &given {
                row[c as usize] = inputs[c][i];
            }
        }
        Some(rows)
    }

    /// Every row, in slot order, every column full: the held table's `inputs`.
    fn dense(&self) -> WorkerInputs {
        self.inputs(|_| true)
    }

    /// The rows `keep` keeps, in slot order, every column given.
    fn inputs(&self, mut keep: impl FnMut(&Row) -> bool) -> WorkerInputs {
        let rows: Vec<_> = self.rows.iter().filter(|(_, row)| keep(row)).collect();
        let mut inputs = WorkerInputs::new(rows.iter().map(|((id, _), _)| *id).collect());
        for c in Column::ALL {
            inputs[c] = match c {
                Column::DpRank => rows.iter().map(|((_, rank), _)| *rank).collect(),
                _ => rows.iter().map(|(_, row)| row[c as usize]).collect(),
            };
        }
        inputs
    }

    /// Every slot, (worker, rank).
    fn slots(&self) -> Vec<(u64, u32)> {
        self.rows.keys().copied().collect()
    }
}

/// The held table is the model: its workers, slots, every column, and its version.
fn check(held: &HeldTable, model: &Model, version: u64, context: &dyn Fn() -> String) {
    assert_eq!(held.version(), version);
    let workers: Vec<WorkerJson> = model.workers.values().cloned().collect();
    assert_eq!(held.workers_json(), workers, "workers differ: {}", context());
    let slots: Vec<(u64, u32)> = held.table().slots().iter().map(|s| (s.worker_id, s.dp_rank)).collect();
    assert_eq!(slots, model.slots(), "slots differ: {}", context());
    assert_eq!(*held.inputs(), model.dense(), "columns differ: {}", context());
}

/// A worker id: mostly from a few (so removes, adds and rows meet), sometimes any.
fn id(u: &mut Unstructured<'_>) -> arbitrary::Result<u64> {
    Ok(if u.ratio(1, 16)? { u64::arbitrary(u)? } else { u.int_in_range(0..=11)? })
}

/// A worker: 1–3 ranks mostly, sometimes 0 (one rank) or past the limit.
fn worker(u: &mut Unstructured<'_>, id: u64) -> arbitrary::Result<WorkerJson> {
    let dp_size = match u.int_in_range(0..=15)? {
        0 => 0,
        1 => u.int_in_range(4..=8)?,
        _ => u.int_in_range(1..=3)?,
    };
    let most = if u.ratio(1, 16)? { 3 } else { 2 };
    let taints = (0..u.int_in_range(0..=most)?).map(|_| label(u)).collect::<Result<_, _>>()?;
    Ok(WorkerJson {
        id,
        dp_size,
        total_kv_blocks: if bool::arbitrary(u)? { number(u)? } else { 0 },
        max_num_batched_tokens: if bool::arbitrary(u)? { Some(number(u)?) } else { None },
        taints,
    })
}

/// Rows for some of `slots`, with some columns; sometimes a slot twice, one the table does
/// not have, out of order, no `dp_rank` (every row rank 0), or a column a row short or long.
fn rows(u: &mut Unstructured<'_>, slots: &[(u64, u32)]) -> arbitrary::Result<WorkerInputs> {
    let mut picked = Vec::new();
    for &slot in slots {
        if u.ratio(1, 3)? {
            picked.push(slot);
        }
    }
    if !picked.is_empty() && u.ratio(1, 16)? {
        picked.push(picked[u.choose_index(picked.len())?]);
    }
    if u.ratio(1, 16)? {
        picked.push((id(u)?, u.int_in_range(0..=4)?));
    }
    if picked.len() > 1 && u.ratio(1, 4)? {
        let (a, b) = (u.choose_index(picked.len())?, u.choose_index(picked.len())?);
        picked.swap(a, b);
    }
    let mut inputs = WorkerInputs::new(picked.iter().map(|s| s.0).collect());
    for c in Column::ALL {
        let mut values: Vec<u32> = match c {
            Column::DpRank if u.ratio(1, 8)? => continue,
            Column::DpRank => picked.iter().map(|s| s.1).collect(),
            _ if bool::arbitrary(u)? => continue,
            _ => picked.iter().map(|_| number(u)).collect::<Result<_, _>>()?,
        };
        if u.ratio(1, 32)? {
            if bool::arbitrary(u)? {
                values.pop();
            } else {
                values.push(number(u)?);
            }
        }
        inputs[c] = values;
    }
    Ok(inputs)
}

/// A delta on a table of `model`: ids it has and has not, workers it has, new ones, one
/// twice; rows for any slot of the changed table, or others.
fn delta(u: &mut Unstructured<'_>, model: &Model) -> arbitrary::Result<TableDelta> {
    let ids: Vec<u64> = model.workers.keys().copied().collect();
    let existing = |u: &mut Unstructured<'_>| -> arbitrary::Result<u64> {
        if ids.is_empty() || u.ratio(1, 4)? { id(u) } else { Ok(ids[u.choose_index(ids.len())?]) }
    };
    let mut remove = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        remove.push(existing(u)?);
    }
    let mut add = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let id = match u.int_in_range(0..=7)? {
            0 if !remove.is_empty() => remove[u.choose_index(remove.len())?],
            1 => existing(u)?,
            _ => id(u)?,
        };
        add.push(worker(u, id)?);
    }
    let mut slots: Vec<(u64, u32)> = model
        .slots()
        .into_iter()
        .filter(|(id, _)| !remove.contains(id) || u.ratio(1, 8).unwrap_or(false))
        .collect();
    slots.extend(add.iter().flat_map(|w| (0..w.dp_size.clamp(1, 4)).map(move |rank| (w.id, rank))));
    let inputs = if u.ratio(3, 4)? { rows(u, &slots)? } else { WorkerInputs::default() };
    Ok(TableDelta { base_version: u64::arbitrary(u)?, remove, add, inputs })
}

/// A request's facts and options (no workers, no rows), mostly valid for `model`'s table.
fn request(u: &mut Unstructured<'_>, model: &Model) -> arbitrary::Result<RequestJson> {
    let slots = model.slots();
    let pinned = if !slots.is_empty() && u.ratio(1, 6)? {
        let (worker_id, dp_rank) =
            if u.ratio(7, 8)? { slots[u.choose_index(slots.len())?] } else { (id(u)?, 0) };
        Some(WorkerRankJson { worker_id, dp_rank })
    } else {
        None
    };
    let allowed_workers = if u.ratio(1, 4)? {
        Some((0..u.int_in_range(0..=4)?).map(|_| id(u)).collect::<Result<_, _>>()?)
    } else {
        None
    };
    let mut preferred_taints = BTreeMap::new();
    if u.ratio(1, 3)? {
        for _ in 0..u.int_in_range(0..=4)? {
            preferred_taints.insert(label(u)?, float(u)?);
        }
    }
    let hashes = u.int_in_range(0..=40u64)?;
    Ok(RequestJson {
        tenant: None,
        prompt_tokens: number(u)?,
        block_size: if u.ratio(1, 16)? { 0 } else { [1, 16, 64][u.choose_index(3)?] },
        expected_output_tokens: if bool::arbitrary(u)? { Some(number(u)?) } else { None },
        pool: [Pool::Aggregated, Pool::Prefill, Pool::Decode][u.choose_index(3)?],
        seed: u64::arbitrary(u)?,
        temperature: if u.ratio(1, 4)? { Some(float(u)?) } else { None },
        prefix_hashes: if bool::arbitrary(u)? { Some((0..hashes).collect()) } else { None },
        policy_class: None,
        classifier_class: None,
        pinned,
        allowed_workers,
        preferred_taints,
        workers: Vec::new(),
        table: None,
        table_version: None,
        inputs: WorkerInputs::default(),
        receipt: None,
        costs: false,
        session: None,
    })
}

/// A request with `overlay` rows on `held` selects as the same request whole does.
fn select_alike(
    u: &mut Unstructured<'_>,
    held: &HeldTable,
    model: &Model,
    limits: &RequestLimits,
) -> arbitrary::Result<()> {
    let facts = request(u, model)?;
    let overlay = rows(u, &model.slots())?;
    let context = || format!("{facts:?} with rows {overlay:?} on {model:?}");
    let on_held = RequestJson { table: Some("t".into()), inputs: overlay.clone(), ..facts.clone() }
        .into_held_request(held, limits);
    let Some(merged) = model.overlay(&overlay, limits) else {
        assert!(on_held.is_err(), "rows the model refuses were taken: {}", context());
        return Ok(());
    };
    let merged = Model { workers: model.workers.clone(), rows: merged };
    // Whole: only the rows with a value (the rest are zeros anyway), as a router sends
    // them, or every row; in slot order, or not.
    let mut inputs =
        if bool::arbitrary(u)? { merged.dense() } else { merged.inputs(|row| row.iter().any(|&v| v != 0)) };
    if inputs.len() > 1 && u.ratio(1, 4)? {
        inputs.worker_id.reverse();
        for c in Column::ALL {
            inputs[c].reverse();
        }
    }
    let whole = RequestJson { workers: merged.workers.values().cloned().collect(), inputs, ..facts.clone() }
        .into_parts_within(limits);
    let (on_held, (table, on_whole)) = match (on_held, whole) {
        (Ok(h), Ok(w)) => (h, w),
        (Err(_), Err(_)) => return Ok(()),
        (h, w) => panic!("held {:?}, whole {:?}: {}", h.err(), w.err(), context()),
    };
    let native = || Selector::new(switchyard_builtins::find("default").unwrap().native("{}").unwrap());
    let (mut a, mut b) = (native(), native());
    let (x, y) = (a.select(held.table(), &on_held), b.select(&table, &on_whole));
    match (&x, &y) {
        (Ok(x), Ok(y)) => {
            let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "costs differ: {}", context());
            assert_eq!(
                (x.chosen, x.cost.to_bits()),
                (y.chosen, y.cost.to_bits()),
                "picks differ: {}",
                context()
            );
        }
        (Err(SelectError::NoEligibleWorker), Err(SelectError::NoEligibleWorker)) => {}
        _ => panic!("held {x:?}, whole {y:?}: {}", context()),
    }
    Ok(())
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let limits = limits();
    let mut workers = Vec::new();
    for _ in 0..u.int_in_range(0..=5)? {
        let id = id(u)?;
        workers.push(worker(u, id)?);
    }
    let slots: Vec<(u64, u32)> =
        workers.iter().flat_map(|w| (0..w.dp_size.clamp(1, 4)).map(move |rank| (w.id, rank))).collect();
    let inputs = rows(u, &slots)?;
    let mut version = 1;
    let held = HeldTable::new(workers.clone(), inputs.clone(), version, &limits);
    let (mut held, mut model) = match (held, Model::new(&workers, &inputs, &limits)) {
        (Ok(held), Some(model)) => (held, model),
        (Err(_), None) => return Ok(()),
        (held, model) => panic!("put {workers:?} with {inputs:?}: held {held:?}, model {model:?}"),
    };
    check(&held, &model, version, &|| format!("put {workers:?} with {inputs:?}"));
    select_alike(u, &held, &model, &limits)?;
    for _ in 0..u.int_in_range(1..=8)? {
        let delta = delta(u, &model)?;
        let decoded = switchyard_proto::decode_delta(&switchyard_proto::encode_delta(&delta));
        assert_eq!(decoded.as_ref().ok(), Some(&delta), "the delta's protobuf differs");
        let context = || format!("{delta:?} on {model:?}");
        version += 1;
        match (held.apply(delta.clone(), version, &limits), model.apply(&delta, &limits)) {
            (Ok(next), Some(expected)) => {
                check(&next, &expected, version, &context);
                (held, model) = (next, expected);
            }
            // Refused: the held table is immutable, so the one kept is unchanged.
            (Err(_), None) => {}
            (next, expected) => panic!("held {:?}, model {expected:?}: {}", next.map(|_| ()), context()),
        }
        select_alike(u, &held, &model, &limits)?;
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
