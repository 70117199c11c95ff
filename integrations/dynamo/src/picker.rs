//! Picker mode: Dynamo's candidate table → Switchyard's worker table and columns → the
//! guarded guest → the pick, mapped back to Dynamo's row.

use dynamo_kv_router::{
    WorkerInputView, WorkerInputs as DynamoInputs, WorkerPicker, WorkerSelectionContext,
    WorkerSelectionPolicyError,
};
use switchyard::selection::{RequestOptions, Worker, WorkerInputs};
use switchyard::{FailMode, GuardedSelector, SelectError, SelectionRequest, WorkerTable};
use switchyard_guest_sdk::hash::hash2;
use switchyard_guest_sdk::{Column, InputGroups, Pool, RequestFacts, WorkerRank};

/// A [`WorkerPicker`] that runs a Switchyard policy (a guarded guest) over Dynamo's
/// eligible candidates. One per routing partition and pool (Dynamo calls it serially).
pub struct SwitchyardPicker {
    guard: GuardedSelector,
    pool: Pool,
    temperature: f64,
    inputs: DynamoInputs,
    /// Dynamo's rows in ascending (worker id, dp rank): scratch, reused.
    order: Vec<usize>,
}

impl SwitchyardPicker {
    /// A picker running `guard`'s policy for `pool`, at `temperature` unless the request
    /// overrides it. `groups` are the input groups the guest declared; in fail-open mode
    /// the fallback's (the native default's) are requested too, so it can decide.
    pub fn new(
        guard: GuardedSelector,
        groups: InputGroups,
        fail_mode: FailMode,
        pool: Pool,
        temperature: f64,
    ) -> Self {
        let groups = match fail_mode {
            FailMode::Open => groups | InputGroups::CACHE | InputGroups::LOAD | InputGroups::AFFINITY,
            FailMode::Closed => groups,
        };
        let mut inputs = DynamoInputs::NONE;
        if groups.contains(InputGroups::CACHE) {
            inputs = inputs | DynamoInputs::CACHE;
        }
        if groups.contains(InputGroups::LOAD) {
            inputs = inputs | DynamoInputs::LOAD;
        }
        if groups.contains(InputGroups::AFFINITY) {
            inputs = inputs | DynamoInputs::PREFERRED_TAINT;
        }
        Self { guard, pool, temperature, inputs, order: Vec::new() }
    }

    /// The guarded selector (its counters, its breaker).
    pub fn guard(&self) -> &GuardedSelector {
        &self.guard
    }

    fn build(
        &mut self,
        context: &WorkerSelectionContext<'_>,
        input: &WorkerInputView<'_>,
    ) -> Result<(WorkerTable, SelectionRequest), WorkerSelectionPolicyError> {
        let candidates = input.candidates();
        let n = candidates.len();
        let key = |row: usize| {
            let w = candidates[row].worker();
            (w.worker_id, w.dp_rank)
        };
        // Dynamo's rows come in hash-map order; Switchyard's contract is ascending.
        self.order.clear();
        self.order.extend(0..n);
        self.order.sort_unstable_by_key(|&row| key(row));
        // One worker per id with exactly Dynamo's candidate ranks (they need not start
        // at 0 nor be all of the worker's), and the multiplier Dynamo computed for it.
        let mut workers: Vec<Worker> = Vec::new();
        let mut multipliers: Vec<(u64, f64)> = Vec::new();
        for group in self.order.chunk_by(|&a, &b| key(a).0 == key(b).0) {
            let id = key(group[0]).0;
            if let Some(pair) = group.windows(2).find(|p| key(p[0]) == key(p[1])) {
                return Err(WorkerSelectionPolicyError::failed(format!(
                    "worker {id} rank {} is listed twice",
                    key(pair[0]).1
                )));
            }
            let ranks = group.iter().map(|&row| key(row).1).collect();
            workers.push(Worker::new(id, 1, 0, None).with_ranks(ranks));
            if let Some(m) = candidates[group[0]].preferred_taint_multiplier()
                && m != 1.0
                && m.is_finite()
                && m > 0.0
            {
                multipliers.push((id, m));
            }
        }
        let table =
            WorkerTable::new(workers).map_err(|e| WorkerSelectionPolicyError::failed(e.to_string()))?;

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
        let ids = self.order.iter().map(|&row| key(row).0).collect();
        let ranks = self.order.iter().map(|&row| key(row).1).collect();
        let mut columns = WorkerInputs::new(ids).with(Column::DpRank, ranks);
        if let Some(cache) = input.cache() {
            let tiers = cache.get(0).is_some_and(|c| c.has_tier_matches());
            let mut dev = Vec::with_capacity(n);
            let mut host = Vec::with_capacity(n);
            let mut disk = Vec::with_capacity(n);
            let mut cached = Vec::with_capacity(n);
            for &row in &self.order {
                let c = cache.get(row).ok_or_else(|| short("cache", row))?;
                let (effective, cached_tokens) = c.accounting_cache_estimate();
                // Dynamo's default credits the device tier when the lookup reported
                // tiers, else the effective overlap (what a tierless index returns).
                dev.push(blocks(if tiers { c.device_overlap_blocks() } else { effective }));
                host.push(blocks(c.host_overlap_blocks()));
                disk.push(blocks(c.disk_overlap_blocks()));
                cached.push(saturate(cached_tokens));
            }
            columns = columns
                .with(Column::DeviceOverlapBlocks, dev)
                .with(Column::HostOverlapBlocks, host)
                .with(Column::DiskOverlapBlocks, disk)
                .with(Column::CachedTokens, cached);
        }
        if let Some(load) = input.load() {
            let mut prefill = Vec::with_capacity(n);
            let mut decode = Vec::with_capacity(n);
            let mut requests = Vec::with_capacity(n);
            for &row in &self.order {
                let l = load.get(row).ok_or_else(|| short("load", row))?;
                let (p, d, r) = (
                    saturate(l.active_prefill_tokens()),
                    blocks(l.decode_cost_blocks()),
                    saturate(l.active_requests()),
                );
                seed = hash2(seed, hash2(u64::from(p), u64::from(d) << 32 | u64::from(r)));
                prefill.push(p);
                decode.push(d);
                requests.push(r);
            }
            columns = columns
                .with(Column::ActivePrefillTokens, prefill)
                .with(Column::DecodeBlocks, decode)
                .with(Column::ActiveRequests, requests);
        }
        for &row in &self.order {
            let (id, rank) = key(row);
            seed = hash2(seed, hash2(id, u64::from(rank)));
        }

        // A pin on a worker Dynamo did not hand over pins nothing here, as in Dynamo.
        let pinned = context
            .pinned_worker()
            .map(|p| WorkerRank { worker_id: p.worker_id, dp_rank: p.dp_rank })
            .filter(|p| self.order.binary_search_by(|&row| key(row).cmp(&(p.worker_id, p.dp_rank))).is_ok());
        let prompt_tokens = saturate(context.prompt_tokens());
        let facts = RequestFacts {
            prompt_tokens,
            block_size: context.block_size().max(1),
            request_blocks: u32::try_from(context.request_blocks()).unwrap_or(u32::MAX),
            expected_output_tokens: context.expected_output_tokens(),
            pinned,
            pool: self.pool,
            seed,
        };
        let temperature = context
            .router_temperature_override()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .unwrap_or(self.temperature);
        let options = RequestOptions {
            worker_multipliers: (!multipliers.is_empty()).then_some(multipliers),
            temperature: Some(temperature),
            ..Default::default()
        };
        let request = SelectionRequest::new(&table, facts, options, columns)
            .map_err(|e| WorkerSelectionPolicyError::failed(format!("switchyard: {e}")))?;
        Ok((table, request))
    }
}

/// f64 blocks → the contract's u32 blocks: rounded to nearest, clamped to the u32 range.
fn blocks(x: f64) -> u32 {
    if x.is_nan() { 0 } else { x.round().clamp(0.0, f64::from(u32::MAX)) as u32 }
}

fn saturate(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

fn short(what: &str, row: usize) -> WorkerSelectionPolicyError {
    WorkerSelectionPolicyError::failed(format!("Dynamo's {what} inputs have no row {row}"))
}

impl WorkerPicker for SwitchyardPicker {
    fn required_worker_inputs(&self) -> DynamoInputs {
        self.inputs
    }

    fn pick(
        &mut self,
        context: &WorkerSelectionContext<'_>,
        input: WorkerInputView<'_>,
    ) -> Result<usize, WorkerSelectionPolicyError> {
        if input.candidates().is_empty() {
            return Err(WorkerSelectionPolicyError::failed("no candidate to pick from"));
        }
        let (table, request) = self.build(context, &input)?;
        let decision = self.guard.select(&table, &request).map_err(|e| refused(&self.guard, e))?;
        let chosen = decision.selection.chosen;
        // The pick stands whatever the commit does in fail-open mode (its fault is
        // counted and the instance dropped); fail-closed fails the selection.
        self.guard.commit(&table, &request, chosen).map_err(|e| refused(&self.guard, e))?;
        // Switchyard's slots are exactly Dynamo's rows in sorted order, so the chosen
        // slot's index is its position in `order`.
        let pos = table
            .slots()
            .binary_search(&chosen)
            .map_err(|_| WorkerSelectionPolicyError::failed("switchyard chose a slot it was not given"))?;
        Ok(self.order[pos])
    }
}

/// A selection Switchyard refused, as Dynamo's policy error.
fn refused(guard: &GuardedSelector, e: SelectError) -> WorkerSelectionPolicyError {
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
