//! Dynamo fixtures and the registry path a Dynamo image takes, shared by the tests.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use dynamo_kv_router::plugins::RouterPluginRegistry;
use dynamo_kv_router::protocols::{RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank};
use dynamo_kv_router::scheduling::{OverlapSignals, ScheduleMode};
use dynamo_kv_router::{
    KvRouterConfig, RoutingPartitionRef, SchedulingRequest, WorkerLoadProjection, WorkerSelectionInput,
    WorkerSelectionPolicy, WorkerSelector, WorkerType,
};
use rustc_hash::FxHashMap;

/// A worker as Dynamo's host knows it.
#[derive(Debug, Clone, Default)]
pub struct TestWorker {
    pub start_rank: u32,
    pub dp_size: u32,
    pub taints: HashSet<String>,
}

impl WorkerConfigLike for TestWorker {
    fn data_parallel_start_rank(&self) -> u32 {
        self.start_rank
    }
    fn data_parallel_size(&self) -> u32 {
        self.dp_size
    }
    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }
    fn total_kv_blocks(&self) -> Option<u64> {
        None
    }
    fn taints(&self) -> &HashSet<String> {
        &self.taints
    }
}

/// One routing decision's inputs.
pub struct Fixture {
    pub workers: HashMap<WorkerId, TestWorker>,
    pub request: SchedulingRequest,
    pub block_size: u32,
    pub worker_type: WorkerType,
}

impl Fixture {
    pub fn select(&self, selector: &impl WorkerSelector<TestWorker>) -> Result<WorkerWithDpRank, String> {
        let input = WorkerSelectionInput::configured(
            &self.workers,
            &self.request,
            self.request.eligibility(),
            self.block_size,
        );
        selector.select_worker(input).map(|r| r.worker).map_err(|e| e.to_string())
    }
}

/// xorshift64*: the fixtures' only randomness, seeded per test.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

const TAINTS: [&str; 4] = ["h100", "a100", "zone-a", "zone-b"];

/// A randomised fixture: loads, overlaps (with or without tiers), preferred taints, dp
/// ranks (some starting above 0), pinned workers, allowed subsets, and the pool.
pub fn random_fixture(rng: &mut Rng) -> Fixture {
    let worker_type = match rng.range(0, 2) {
        0 => WorkerType::Aggregated,
        1 => WorkerType::Prefill,
        _ => WorkerType::Decode,
    };
    let block_size = [16, 32, 64][rng.range(0, 2) as usize];
    let isl = if rng.chance(0.05) { 0 } else { rng.range(1, 8192) as usize };
    let request_blocks = isl.div_ceil(block_size as usize) as u64;
    let n = rng.range(1, 24);
    let mut workers = HashMap::new();
    while (workers.len() as u64) < n {
        let id = rng.range(0, 999);
        let dp_size = if rng.chance(0.6) { 1 } else { rng.range(2, 4) as u32 };
        let start_rank = if rng.chance(0.1) { 2 } else { 0 };
        let taints = TAINTS.iter().filter(|_| rng.chance(0.4)).map(|t| t.to_string()).collect();
        workers.insert(id, TestWorker { start_rank, dp_size, taints });
    }
    let mut slots: Vec<WorkerWithDpRank> = workers
        .iter()
        .flat_map(|(&id, w)| {
            (w.start_rank..w.start_rank + w.dp_size).map(move |r| WorkerWithDpRank::new(id, r))
        })
        .collect();
    slots.sort_by_key(|w| (w.worker_id, w.dp_rank));

    let tiers = rng.chance(0.3);
    let mut overlap = OverlapSignals {
        tier_overlap_blocks: Default::default(),
        effective_overlap_blocks: FxHashMap::default(),
        effective_cached_tokens: FxHashMap::default(),
    };
    let mut loads = FxHashMap::default();
    // Small ranges, so equal costs (ties) happen as they do in a real fleet.
    let load_scale = if rng.chance(0.5) { 4 } else { 4096 };
    for &slot in &slots {
        if rng.chance(0.8) {
            let device = rng.range(0, request_blocks);
            let cached = ((device * u64::from(block_size)) as usize).min(isl);
            if tiers {
                let host = rng.range(0, request_blocks);
                let disk = rng.range(0, request_blocks);
                overlap.tier_overlap_blocks.device.insert(slot, device as usize);
                overlap.tier_overlap_blocks.host_pinned.insert(slot, host as usize);
                overlap.tier_overlap_blocks.disk.insert(slot, disk as usize);
                overlap
                    .effective_overlap_blocks
                    .insert(slot, device as f64 + 0.75 * host as f64 + 0.25 * disk as f64);
            } else {
                overlap.effective_overlap_blocks.insert(slot, device as f64);
            }
            overlap.effective_cached_tokens.insert(slot, cached);
        }
        if rng.chance(0.9) {
            loads.insert(
                slot,
                WorkerLoadProjection {
                    active_prefill_tokens: (rng.range(0, load_scale) * u64::from(block_size)) as usize,
                    active_decode_blocks: rng.range(0, load_scale / 2) as usize,
                    active_requests: rng.range(0, 64) as usize,
                    additional_active_blocks: rng.range(0, 8) as usize,
                },
            );
        }
    }
    let mut preferred_taints = HashMap::new();
    if rng.chance(0.3) {
        for t in TAINTS {
            if rng.chance(0.5) {
                preferred_taints.insert(t.to_string(), (rng.range(0, 4000) as f32 - 2000.0) / 1000.0);
            }
        }
    }
    let pinned = rng.chance(0.1).then(|| slots[rng.range(0, slots.len() as u64 - 1) as usize]);
    let allowed_worker_ids = rng.chance(0.15).then(|| {
        let mut ids: HashSet<WorkerId> = workers.keys().copied().filter(|_| rng.chance(0.5)).collect();
        ids.insert(pinned.unwrap_or(slots[0]).worker_id);
        ids
    });
    let mut request = query(isl, overlap, loads);
    request.expected_output_tokens = rng.chance(0.5).then(|| rng.range(1, 2048) as u32);
    request.pinned_worker = pinned;
    request.allowed_worker_ids = allowed_worker_ids;
    request.routing_constraints.preferred_taints = preferred_taints;
    request.track_prefill_tokens = worker_type != WorkerType::Decode;
    Fixture { workers, request, block_size, worker_type }
}

/// A query-only request of `isl_tokens` with these overlaps and loads, and nothing else
/// set: what a test then changes.
pub fn query(
    isl_tokens: usize,
    overlap: OverlapSignals,
    worker_loads: FxHashMap<WorkerWithDpRank, WorkerLoadProjection>,
) -> SchedulingRequest {
    SchedulingRequest {
        mode: ScheduleMode::QueryOnly { request_id: None },
        token_seq: None,
        isl_tokens,
        lora_name: None,
        expected_output_tokens: None,
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
        overlap,
        kv_transfer_candidates: None,
        retain_kv_transfer_chain: false,
        shared_cache_hits: None,
        worker_loads,
        resp_tx: None,
    }
}

/// Writes `bytes` as a component file under the test's temp dir.
pub fn component_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("switchyard-dynamo-{name}.wasm"));
    std::fs::write(&path, bytes).expect("writing the component");
    path
}

/// Dynamo's own path: a registry with `switchyard` registered, a router policy file
/// selecting one instance for every pool with `parameters` (YAML, indented by 8), the
/// factory it resolves.
pub fn resolve(
    name: &str,
    parameters: &str,
) -> Result<dynamo_kv_router::WorkerSelectionPolicyFactory, String> {
    let mut registry = RouterPluginRegistry::default();
    switchyard_dynamo::register(&mut registry).expect("registered once");
    let policy = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("switchyard-dynamo-{name}.yaml"));
    let yaml = format!(
        "worker_selection:\n  aggregated: tenant\n  prefill: tenant\n  decode: tenant\n  encode: tenant\n  instances:\n    - name: tenant\n      type: switchyard\n      parameters:\n{parameters}\n"
    );
    std::fs::write(&policy, yaml).expect("writing the policy file");
    let config =
        KvRouterConfig { router_policy_config: Some(policy.display().to_string()), ..Default::default() };
    let plugins = registry.resolve_plugins(&config).map_err(|e| e.to_string())?;
    Ok(plugins.worker_selection().expect("a worker-selection factory").clone())
}

/// The policy Dynamo builds for `worker_type` from `factory`.
pub fn policy(
    factory: &dynamo_kv_router::WorkerSelectionPolicyFactory,
    worker_type: WorkerType,
) -> WorkerSelectionPolicy {
    factory(&KvRouterConfig::default(), worker_type, RoutingPartitionRef::new("model", "default"))
}
