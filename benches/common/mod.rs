//! Dynamo's own bench fixture, built for both selectors so the numbers compare:
//! per worker id, `cached_tokens = (id % 32) × 64`, overlap `cached_tokens / 16` blocks,
//! `active_prefill_tokens = id × 16`, `active_decode_blocks = id % 127`,
//! `active_requests = id % 17`, `total_kv_blocks = 131072`; prompt 2,048 tokens,
//! block size 16, one dp rank.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use switchyard_guest_sdk::Column;

use dynamo_kv_router::protocols::{RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank};
use dynamo_kv_router::scheduling::{OverlapSignals, ScheduleMode};
use dynamo_kv_router::{
    DefaultWorkerSelector, KvRouterConfig, SchedulingRequest, WorkerLoadProjection, WorkerSelectionInput,
    WorkerSelector,
};
use rustc_hash::FxHashMap;
use switchyard::selection::{Call, ColumnBuffers, HostFacts, RequestOptions, Scorer, Worker, WorkerInputs};
use switchyard::{SelectionRequest, WorkerTable};
use switchyard_guest_sdk::{Pool, RequestFacts};

pub const SIZES: [usize; 4] = [64, 1_024, 4_096, 10_000];
/// Ported policies benched beside the default: stateless, and reading different inputs
/// (LMetric: load and cache; CHWBL: a prefix hash and requests in flight).
pub const PORTED: [&str; 2] = ["lmetric", "chwbl"];
pub const PROMPT_TOKENS: u32 = 2_048;
pub const BLOCK_SIZE: u32 = 16;

pub use switchyard_test_util::{IMPORTS, NOOP};

fn cached_tokens(id: u64) -> u32 {
    (id % 32) as u32 * 64
}

/// The fixture for Switchyard: the worker table and one request.
pub fn switchyard_fixture(workers: usize, temperature: f64) -> (WorkerTable, SelectionRequest) {
    switchyard_fixture_in(Pool::Aggregated, workers, temperature)
}

/// [`switchyard_fixture`] for a request of `pool`.
pub fn switchyard_fixture_in(
    pool: Pool,
    workers: usize,
    temperature: f64,
) -> (WorkerTable, SelectionRequest) {
    let table = WorkerTable::new((0..workers as u64).map(|id| Worker::new(id, 1, 131_072, None)).collect())
        .expect("unique ids");
    let ids: Vec<u64> = (0..workers as u64).collect();
    let inputs = WorkerInputs::new(ids.clone())
        .with(Column::DeviceOverlapBlocks, ids.iter().map(|&id| cached_tokens(id) / 16).collect())
        .with(Column::CachedTokens, ids.iter().map(|&id| cached_tokens(id)).collect())
        .with(Column::ActivePrefillTokens, ids.iter().map(|&id| id as u32 * 16).collect())
        .with(Column::DecodeBlocks, ids.iter().map(|&id| (id % 127) as u32).collect())
        .with(Column::ActiveRequests, ids.iter().map(|&id| (id % 17) as u32).collect())
        .with(Column::DpRank, vec![0; workers]);
    let facts = RequestFacts {
        prompt_tokens: PROMPT_TOKENS,
        block_size: BLOCK_SIZE,
        request_blocks: PROMPT_TOKENS.div_ceil(BLOCK_SIZE),
        expected_output_tokens: Some(256),
        pinned: None,
        pool,
        seed: 7,
    };
    let options = RequestOptions {
        prefix_hashes: Some((0..u64::from(facts.request_blocks)).collect()),
        policy_class: Some("latency".into()),
        temperature: Some(temperature),
        ..Default::default()
    };
    let request = SelectionRequest::new(&table, facts, options, inputs).expect("valid fixture");
    (table, request)
}

#[derive(Default)]
pub struct DynamoWorker {
    taints: HashSet<String>,
}

impl WorkerConfigLike for DynamoWorker {
    fn data_parallel_start_rank(&self) -> u32 {
        0
    }
    fn data_parallel_size(&self) -> u32 {
        1
    }
    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }
    fn total_kv_blocks(&self) -> Option<u64> {
        Some(131_072)
    }
    fn taints(&self) -> &HashSet<String> {
        &self.taints
    }
}

/// Dynamo's selector, its workers and request, on the same fixture.
pub struct DynamoFixture {
    pub selector: DefaultWorkerSelector,
    pub workers: HashMap<WorkerId, DynamoWorker>,
    pub request: SchedulingRequest,
}

impl DynamoFixture {
    pub fn new(workers: usize, temperature: f64) -> Self {
        let mut table = HashMap::with_capacity(workers);
        let mut overlap = FxHashMap::default();
        let mut cached = FxHashMap::default();
        let mut loads = FxHashMap::default();
        for id in 0..workers as WorkerId {
            let worker = WorkerWithDpRank::from_worker_id(id);
            table.insert(id, DynamoWorker::default());
            overlap.insert(worker, f64::from(cached_tokens(id)) / 16.0);
            cached.insert(worker, cached_tokens(id) as usize);
            loads.insert(
                worker,
                WorkerLoadProjection {
                    active_prefill_tokens: id as usize * 16,
                    active_decode_blocks: id as usize % 127,
                    active_requests: id as usize % 17,
                    ..Default::default()
                },
            );
        }
        let request = SchedulingRequest {
            mode: ScheduleMode::QueryOnly { request_id: None },
            token_seq: None,
            isl_tokens: PROMPT_TOKENS as usize,
            lora_name: None,
            expected_output_tokens: Some(256),
            affinity_target: None,
            pinned_worker: None,
            allowed_worker_ids: None,
            routing_constraints: RoutingConstraints {
                required_taints: HashSet::new(),
                preferred_taints: HashMap::new(),
            },
            router_config_override: None,
            track_prefill_tokens: true,
            priority_jump: 0.0,
            strict_priority: 0,
            policy_class: None,
            session_context: None,
            overlap: OverlapSignals {
                tier_overlap_blocks: Default::default(),
                effective_overlap_blocks: overlap,
                effective_cached_tokens: cached,
            },
            kv_transfer_candidates: None,
            retain_kv_transfer_chain: false,
            shared_cache_hits: None,
            worker_loads: loads,
            resp_tx: None,
        };
        let selector = DefaultWorkerSelector::new(
            Some(KvRouterConfig { router_temperature: temperature, ..Default::default() }),
            "prefill",
        );
        Self { selector, workers: table, request }
    }

    /// One selection; returns the chosen worker id.
    pub fn select(&self) -> u64 {
        let input = WorkerSelectionInput::configured(
            &self.workers,
            &self.request,
            self.request.eligibility(),
            BLOCK_SIZE,
        );
        self.selector.select_worker(input).expect("dynamo selects").worker.worker_id
    }

    /// One selection by another of Dynamo's selectors (a plugin's `WorkerSelectionPolicy`)
    /// on the same workers map and request, as [`DynamoFixture::select`] drives Dynamo's
    /// default; returns the chosen worker id.
    pub fn select_with(&self, selector: &impl WorkerSelector<DynamoWorker>) -> u64 {
        let input = WorkerSelectionInput::configured(
            &self.workers,
            &self.request,
            self.request.eligibility(),
            BLOCK_SIZE,
        );
        selector.select_worker(input).expect("the policy selects").worker.worker_id
    }
}

/// Reused destinations for [`ScoreOnly::copy_what_crosses`] and the copies beside it.
#[derive(Default)]
pub struct Crossing {
    ids: Vec<u64>,
    packed: Vec<u32>,
    multipliers: Vec<f64>,
    costs_in: Vec<f64>,
    costs_back: Vec<f64>,
}

impl Crossing {
    /// Buffers for calls of up to `rows` candidates.
    pub fn new(rows: usize) -> Self {
        Self { costs_in: vec![1.0; rows], ..Self::default() }
    }
}

/// Materialised columns for calling a scorer directly: the score call alone, without
/// the selection around it.
pub struct ScoreOnly {
    table: WorkerTable,
    request: SelectionRequest,
    columns: ColumnBuffers,
    costs: Vec<f64>,
}

impl ScoreOnly {
    pub fn new(n: usize, scorer: &dyn Scorer) -> Self {
        let (table, request) = switchyard_fixture(n, 0.0);
        let mut columns = ColumnBuffers::default();
        columns.materialise(&table, &request, scorer.info().inputs);
        Self { table, request, columns, costs: Vec::new() }
    }

    pub fn run(&mut self, scorer: &mut dyn Scorer) {
        self.try_run(scorer).unwrap();
        std::hint::black_box(&self.costs);
    }

    /// The copies a guest call cannot avoid, done by `memcpy` alone: the columns it lowers
    /// into guest memory (worker ids, packed columns, multipliers) and one cost per row
    /// lifted back. The floor of what crossing the boundary costs this call.
    pub fn copy_what_crosses(&self, into: &mut Crossing) {
        let c = &self.columns;
        into.ids.clear();
        into.ids.extend_from_slice(c.worker_ids());
        into.packed.clear();
        c.packed_columns().for_each(|column| into.packed.extend_from_slice(column));
        into.multipliers.clear();
        into.multipliers.extend_from_slice(c.preferred_multiplier());
        self.copy_costs_back(into);
    }

    /// The least any copying contract could carry for the default policy: only the six
    /// columns its cost reads at Dynamo's defaults (prefill tokens in flight, the three
    /// overlaps, cached tokens, decode blocks; no worker ids, dp ranks or request counts)
    /// in, one cost per row back.
    pub fn copy_what_the_default_policy_reads(&self, into: &mut Crossing) {
        let view = self.columns.view().expect("materialised columns line up");
        into.packed.clear();
        for column in [
            Column::ActivePrefillTokens,
            Column::DeviceOverlapBlocks,
            Column::HostOverlapBlocks,
            Column::DiskOverlapBlocks,
            Column::CachedTokens,
            Column::DecodeBlocks,
        ] {
            into.packed.extend_from_slice(view.column(column));
        }
        self.copy_costs_back(into);
    }

    /// The one copy no contract that returns costs avoids: one cost per row back.
    pub fn copy_costs_back(&self, into: &mut Crossing) {
        into.costs_back.clear();
        into.costs_back.extend_from_slice(std::hint::black_box(&into.costs_in[..self.columns.len()]));
        std::hint::black_box(&into);
    }

    /// One score call, its fault returned.
    pub fn try_run(&mut self, scorer: &mut dyn Scorer) -> Result<(), switchyard::Fault> {
        let facts = HostFacts::new(&self.request, &self.table, &self.columns);
        let call = Call { request: &self.request, columns: &self.columns, facts };
        scorer.score(&call, &mut self.costs)
    }
}

/// The median of `n` compiles of `bytes` by `engine` (`PolicyComponent::load`: validation,
/// compile and our checks; an engine without an artifact cache compiles every time).
pub fn median_compile(engine: &switchyard::PolicyEngine, bytes: &[u8], n: usize) -> std::time::Duration {
    let mut took: Vec<_> = (0..n.max(1))
        .map(|_| switchyard::PolicyComponent::load(engine, bytes).expect("compiles").compile_time())
        .collect();
    took.sort();
    took[took.len() / 2]
}
