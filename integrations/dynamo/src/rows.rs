//! Dynamo's candidate rows → Switchyard's worker table, columns and request: the one
//! conversion both modes use (a picker sees a [`WorkerInputView`], a scorer
//! [`WorkerCandidates`]; the rows and what they carry are the same).

use std::sync::atomic::{AtomicBool, Ordering};

use dynamo_kv_router::WorkerType;
use dynamo_kv_router::plugins::worker_selection::{
    WorkerCacheInput, WorkerCandidates, WorkerInputView, WorkerLoadInput, WorkerSelectionContext,
    WorkerSelectionPolicyError,
};
use dynamo_kv_router::protocols::WorkerWithDpRank;
use switchyard::selection::{RequestOptions, Worker, WorkerInputs};
use switchyard::{GuardedSelector, SelectError, SelectionRequest, WorkerTable};
use switchyard_guest_sdk::hash::{hash2, mix64};
use switchyard_guest_sdk::{Column, Pool, RequestFacts, WorkerRank};

use crate::capacity::PartitionCapacities;

/// What one component may read of Dynamo's rows, in Dynamo's (hash-map) order.
pub(crate) trait Rows<'a> {
    fn len(&self) -> usize;
    fn worker(&self, row: usize) -> WorkerWithDpRank;
    /// The preferred-taint multiplier, when declared and Dynamo gave one.
    fn multiplier(&self, row: usize) -> Option<f64>;
    /// Whether the component declared CACHE (and so every row has a cache row).
    fn has_cache(&self) -> bool;
    fn cache(&self, row: usize) -> Option<WorkerCacheInput<'a>>;
    fn has_load(&self) -> bool;
    fn load(&self, row: usize) -> Option<&'a WorkerLoadInput>;
}

impl<'a> Rows<'a> for WorkerInputView<'a> {
    fn len(&self) -> usize {
        self.candidates().len()
    }
    fn worker(&self, row: usize) -> WorkerWithDpRank {
        self.candidates()[row].worker()
    }
    fn multiplier(&self, row: usize) -> Option<f64> {
        self.candidates()[row].preferred_taint_multiplier()
    }
    fn has_cache(&self) -> bool {
        WorkerInputView::cache(*self).is_some()
    }
    fn cache(&self, row: usize) -> Option<WorkerCacheInput<'a>> {
        WorkerInputView::cache(*self)?.get(row)
    }
    fn has_load(&self) -> bool {
        WorkerInputView::load(*self).is_some()
    }
    fn load(&self, row: usize) -> Option<&'a WorkerLoadInput> {
        WorkerInputView::load(*self)?.get(row)
    }
}

impl<'a> Rows<'a> for WorkerCandidates<'a> {
    fn len(&self) -> usize {
        WorkerCandidates::len(*self)
    }
    fn worker(&self, row: usize) -> WorkerWithDpRank {
        self.get(row).map_or(WorkerWithDpRank::new(0, 0), |c| c.worker())
    }
    fn multiplier(&self, row: usize) -> Option<f64> {
        self.get(row)?.preferred_taint_multiplier()
    }
    fn has_cache(&self) -> bool {
        self.get(0).is_some_and(|c| c.cache().is_some())
    }
    fn cache(&self, row: usize) -> Option<WorkerCacheInput<'a>> {
        self.get(row)?.cache()
    }
    fn has_load(&self) -> bool {
        self.get(0).is_some_and(|c| c.load().is_some())
    }
    fn load(&self, row: usize) -> Option<&'a WorkerLoadInput> {
        self.get(row)?.load()
    }
}

/// How the request is put to the policy.
pub(crate) struct Framing {
    pub pool: Pool,
    /// The picker's temperature when the request carries no override.
    pub temperature: f64,
    /// Whether Dynamo's pin is passed on (a picker honours it; a scorer scores every row
    /// it is given, and Dynamo has applied the pin before scoring).
    pub pin: bool,
}

/// Dynamo's rows → Switchyard's table and request, with the scratch reused across
/// selections: the row order, and the worker table itself while Dynamo hands over the
/// same (worker, rank) set (the common case; a table costs a map of every worker to
/// build).
#[derive(Default)]
pub(crate) struct Converter {
    /// Dynamo's row `r` is slot `position[r]` (the inverse of `keys`' rows). Columns are filled reading
    /// Dynamo's rows in their own order (sequential reads, scattered small writes: faster
    /// than slot order, `cargo bench --bench ratio`, "Inside Dynamo").
    position: Vec<u32>,
    /// (worker id, dp rank, Dynamo's row), sorted: slot `i` of the table is Dynamo's row
    /// `keys[i].2`.
    keys: Vec<(u64, u32, usize)>,
    /// The (worker id, dp rank) of each of Dynamo's rows, as they came last time: while
    /// Dynamo's map is unchanged its rows come in the same order, and `keys` stands.
    incoming: Vec<(u64, u32)>,
    table: Option<WorkerTable>,
    /// Where the workers' capacities come from, if the host knows them; read when the
    /// table is rebuilt (the rows changed).
    capacities: Option<PartitionCapacities>,
}

impl Converter {
    /// A converter whose tables carry the capacities `capacities` reports.
    pub(crate) fn with_capacities(capacities: Option<PartitionCapacities>) -> Self {
        Self { capacities, ..Self::default() }
    }

    /// The table of the last [`Converter::build`].
    pub(crate) fn table(&self) -> &WorkerTable {
        self.table.as_ref().expect("built before use")
    }

    /// The slot of Dynamo's row `row` in the last build's table.
    pub(crate) fn slot_of(&self, row: usize) -> usize {
        self.position[row] as usize
    }

    /// Dynamo's row for a Switchyard slot of the last build.
    pub(crate) fn row_of(&self, slot: WorkerRank) -> Result<usize, WorkerSelectionPolicyError> {
        self.table().slots().binary_search(&slot).map(|pos| self.keys[pos].2).map_err(|_| {
            WorkerSelectionPolicyError::failed("switchyard answered for a slot it was not given")
        })
    }

    /// Builds the request for `rows` (and the table, unless the last one has exactly
    /// these slots).
    pub(crate) fn build<'a>(
        &mut self,
        rows: &impl Rows<'a>,
        context: &WorkerSelectionContext<'_>,
        framing: &Framing,
    ) -> Result<SelectionRequest, WorkerSelectionPolicyError> {
        let n = rows.len();
        let same_rows = self.incoming.len() == n
            && self.incoming.iter().enumerate().all(|(row, &(id, rank))| {
                let w = rows.worker(row);
                (w.worker_id, w.dp_rank) == (id, rank)
            });
        if !same_rows {
            // Dynamo's rows come in hash-map order; Switchyard's contract is ascending.
            self.incoming.clear();
            self.keys.clear();
            for row in 0..n {
                let w = rows.worker(row);
                self.incoming.push((w.worker_id, w.dp_rank));
                self.keys.push((w.worker_id, w.dp_rank, row));
            }
            self.keys.sort_unstable();
            if let Some(pair) = self.keys.windows(2).find(|p| (p[0].0, p[0].1) == (p[1].0, p[1].1)) {
                let e = format!("worker {} rank {} is listed twice", pair[0].0, pair[0].1);
                self.incoming.clear();
                return Err(WorkerSelectionPolicyError::failed(e));
            }
            self.position.clear();
            self.position.resize(n, 0);
            for (slot, key) in self.keys.iter().enumerate() {
                self.position[key.2] = slot as u32;
            }
        }
        // The same rows in the same order are the same slots; else compare with the table.
        let same_slots = (same_rows && self.table.is_some())
            || self.table.as_ref().is_some_and(|t| {
                t.slots().len() == n
                    && t.slots().iter().zip(&self.keys).all(|(s, k)| (s.worker_id, s.dp_rank) == (k.0, k.1))
            });
        if !same_slots {
            // One worker per id with exactly Dynamo's candidate ranks (they need not start
            // at 0 nor be all of the worker's).
            let known = self.capacities.as_ref().map(|c| {
                c.source
                    .capacities(&c.model_name, &c.routing_group)
                    .into_iter()
                    .map(|w| (w.worker_id, w))
                    .collect::<std::collections::HashMap<_, _>>()
            });
            let workers = self
                .keys
                .chunk_by(|a, b| a.0 == b.0)
                .map(|group| {
                    let id = group[0].0;
                    let capacity = known.as_ref().and_then(|k| k.get(&id));
                    let to_u32 = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
                    let total = capacity.map_or(0, |c| to_u32(c.total_kv_blocks));
                    let batched = capacity.and_then(|c| c.max_num_batched_tokens).map(to_u32);
                    Worker::new(id, 1, total, batched).with_ranks(group.iter().map(|k| k.1).collect())
                })
                .collect();
            match WorkerTable::new(workers) {
                Ok(table) => self.table = Some(table),
                Err(e) => {
                    // Nothing kept from these rows: the next selection starts afresh.
                    self.incoming.clear();
                    self.table = None;
                    return Err(WorkerSelectionPolicyError::failed(e.to_string()));
                }
            }
        }
        request(rows, context, framing, &self.keys, &self.position, self.table())
    }
}

/// The request for `rows` over `table`, whose slots are `keys` in order; Dynamo's row `r`
/// is slot `position[r]`.
fn request<'a>(
    rows: &impl Rows<'a>,
    context: &WorkerSelectionContext<'_>,
    framing: &Framing,
    keys: &[(u64, u32, usize)],
    position: &[u32],
    table: &WorkerTable,
) -> Result<SelectionRequest, WorkerSelectionPolicyError> {
    let n = keys.len();
    // The multiplier Dynamo computed for each worker (the same for all its ranks), read
    // in Dynamo's row order.
    let mut multipliers: Vec<(u64, f64)> = Vec::new();
    for (row, &slot) in position.iter().enumerate() {
        if let Some(m) = rows.multiplier(row)
            && m != 1.0
            && m.is_finite()
            && m > 0.0
        {
            multipliers.push((keys[slot as usize].0, m));
        }
    }

    // The seed: the request's data, then the rows (ids, ranks, loads), so the same request
    // over the same state picks the same worker and ties spread as the loads move. Each row
    // is mixed on its own and the mixes summed: a chain of hashes through every row would
    // cost a serial multiply chain per row (measured: `cargo bench --bench ratio`, "Inside
    // Dynamo").
    let mut rows_hash = 0u64;
    let mut seed = hash2(context.prompt_tokens() as u64, u64::from(context.block_size()));
    seed = hash2(seed, context.request_blocks());
    seed = hash2(seed, context.expected_output_tokens().map_or(u64::MAX, u64::from));
    if let Some(session) = context.session_context() {
        for chunk in session.session_id().as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            seed = hash2(seed, u64::from_le_bytes(word));
        }
    }
    let ids = keys.iter().map(|k| k.0).collect();
    let ranks = keys.iter().map(|k| k.1).collect();
    let mut columns = WorkerInputs::new(ids).with(Column::DpRank, ranks);
    if rows.has_cache() {
        let tiers = rows.cache(0).is_some_and(|c| c.has_tier_matches());
        let (mut dev, mut host, mut disk, mut cached) = (vec![0; n], vec![0; n], vec![0; n], vec![0; n]);
        for (row, &slot) in position.iter().enumerate() {
            let c = rows.cache(row).ok_or_else(|| short("cache", row))?;
            let (effective, cached_tokens) = c.accounting_cache_estimate();
            let slot = slot as usize;
            // Dynamo's default credits the device tier when the lookup reported tiers,
            // else the effective overlap (what a tierless index returns).
            dev[slot] = blocks(if tiers { c.device_overlap_blocks() } else { effective });
            host[slot] = blocks(c.host_overlap_blocks());
            disk[slot] = blocks(c.disk_overlap_blocks());
            cached[slot] = saturate(cached_tokens);
        }
        columns = columns
            .with(Column::DeviceOverlapBlocks, dev)
            .with(Column::HostOverlapBlocks, host)
            .with(Column::DiskOverlapBlocks, disk)
            .with(Column::CachedTokens, cached);
    }
    if rows.has_load() {
        let (mut prefill, mut decode, mut requests) = (vec![0; n], vec![0; n], vec![0; n]);
        for (row, &slot) in position.iter().enumerate() {
            let l = rows.load(row).ok_or_else(|| short("load", row))?;
            let (p, d, r) = (
                saturate(l.active_prefill_tokens()),
                blocks(l.decode_cost_blocks()),
                saturate(l.active_requests()),
            );
            let slot = slot as usize;
            let (id, rank, _) = keys[slot];
            rows_hash = rows_hash.wrapping_add(mix64(
                id ^ u64::from(rank).rotate_left(7)
                    ^ u64::from(p).rotate_left(17)
                    ^ u64::from(d).rotate_left(37)
                    ^ u64::from(r).rotate_left(53),
            ));
            prefill[slot] = p;
            decode[slot] = d;
            requests[slot] = r;
        }
        columns = columns
            .with(Column::ActivePrefillTokens, prefill)
            .with(Column::DecodeBlocks, decode)
            .with(Column::ActiveRequests, requests);
    }
    if !rows.has_load() {
        for &(id, rank, _) in keys {
            rows_hash = rows_hash.wrapping_add(mix64(id ^ u64::from(rank).rotate_left(7)));
        }
    }
    seed = hash2(seed, rows_hash);

    // A pin on a worker Dynamo did not hand over pins nothing here, as in Dynamo.
    let pinned = context
        .pinned_worker()
        .filter(|_| framing.pin)
        .map(|p| WorkerRank { worker_id: p.worker_id, dp_rank: p.dp_rank })
        .filter(|p| keys.binary_search_by(|k| (k.0, k.1).cmp(&(p.worker_id, p.dp_rank))).is_ok());
    let facts = RequestFacts {
        prompt_tokens: saturate(context.prompt_tokens()),
        block_size: context.block_size().max(1),
        request_blocks: u32::try_from(context.request_blocks()).unwrap_or(u32::MAX),
        expected_output_tokens: context.expected_output_tokens(),
        pinned,
        pool: framing.pool,
        seed,
    };
    let temperature = context
        .router_temperature_override()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .unwrap_or(framing.temperature);
    let options = RequestOptions {
        worker_multipliers: (!multipliers.is_empty()).then_some(multipliers),
        policy_class: policy_class(context),
        temperature: Some(temperature),
        ..Default::default()
    };
    SelectionRequest::new(table, facts, options, columns)
        .map_err(|e| WorkerSelectionPolicyError::failed(format!("switchyard: {e}")))
}

/// The header a caller names its policy class in (Dynamo's own ingress reads the class
/// from it). 1.6.1 keeps the class it reads off the plugin context but passes a session's
/// agent headers through, so the adapter reads the class there.
const POLICY_CLASS_HEADER: &str = "x-dynamo-meta-policy-class";

/// The longest class passed on: Switchyard names classes in 1–64 characters, so a longer
/// value names no class a tenant can have.
const MAX_CLASS_BYTES: usize = 64;

/// The request's policy class: the header's first non-empty value, trimmed. A value too
/// long to be a class is the caller's bad input; as with the other out-of-range values
/// Dynamo hands over (a bad temperature override, a pin on a worker not handed over), the
/// selection goes on without it, with one warning per process (every such request would
/// repeat it).
fn policy_class(context: &WorkerSelectionContext<'_>) -> Option<String> {
    let headers = context.session_context()?.agent_headers();
    // Header names are case-insensitive, and a `/select` body carries them as its caller
    // spelt them.
    let values = headers.get(POLICY_CLASS_HEADER).or_else(|| {
        headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(POLICY_CLASS_HEADER)).map(|(_, v)| v)
    })?;
    let class = values.iter().map(|v| v.trim()).find(|v| !v.is_empty())?;
    if class.len() > MAX_CLASS_BYTES {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                bytes = class.len(),
                "switchyard: a request's {POLICY_CLASS_HEADER} is longer than {MAX_CLASS_BYTES} bytes; \
                 it is routed without a class (warned once)"
            );
        }
        return None;
    }
    Some(class.to_owned())
}

/// f64 blocks → the contract's u32 blocks: rounded to nearest, clamped to the u32 range.
fn blocks(x: f64) -> u32 {
    // Whole block counts (the usual case) need no `round`, a libm call per value here.
    let whole = x as u32;
    if f64::from(whole) == x {
        return whole;
    }
    if x.is_nan() { 0 } else { x.round().clamp(0.0, f64::from(u32::MAX)) as u32 }
}

fn saturate(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

fn short(what: &str, row: usize) -> WorkerSelectionPolicyError {
    WorkerSelectionPolicyError::failed(format!("Dynamo's {what} inputs have no row {row}"))
}

/// A selection Switchyard refused, as Dynamo's policy error.
pub(crate) fn refused(guard: &GuardedSelector, e: SelectError) -> WorkerSelectionPolicyError {
    match e {
        SelectError::NoEligibleWorker => WorkerSelectionPolicyError::failed(format!(
            "switchyard policy `{}` filtered out every candidate",
            guard.name()
        )),
        SelectError::Fault { scorer, fault } => WorkerSelectionPolicyError::failed(format!(
            "switchyard policy `{scorer}` faulted ({}): {}",
            fault.kind, fault.message
        )),
    }
}

/// The Switchyard pool a Dynamo worker pool routes as.
pub fn pool_of(worker_type: WorkerType) -> Pool {
    match worker_type {
        WorkerType::Prefill => Pool::Prefill,
        WorkerType::Decode => Pool::Decode,
        WorkerType::Aggregated | WorkerType::Encode => Pool::Aggregated,
    }
}
