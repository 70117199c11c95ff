//! Shared fixtures: the test guests, an engine, and request builders.

use std::sync::OnceLock;
use switchyard_guest_sdk::Column;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use switchyard::selection::{RequestOptions, Worker, WorkerInputs, hashes_for_pool};
use switchyard::{Limits, PolicyComponent, PolicyEngine, SelectionRequest, WorkerTable};
use switchyard_guest_sdk::{Pool, RequestFacts};

pub use crate::{DEFAULT_POLICY, PROBE, hostile};

/// One engine for the test process, default limits.
pub fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PolicyEngine::new(Limits::default()).expect("default engine"))
}

/// Compiles a test guest once per process.
pub fn component(bytes: &'static [u8]) -> PolicyComponent {
    static CACHE: OnceLock<std::sync::Mutex<Vec<(usize, PolicyComponent)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = bytes.as_ptr() as usize;
    let mut cache = cache.lock().unwrap();
    if let Some((_, c)) = cache.iter().find(|(k, _)| *k == key) {
        return c.clone();
    }
    let c = PolicyComponent::load(engine(), bytes).expect("test guest loads");
    cache.push((key, c.clone()));
    c
}

/// A request's facts: `prompt_tokens` in blocks of `block_size`, for `pool`.
pub fn facts(prompt_tokens: u32, block_size: u32, pool: Pool, seed: u64) -> RequestFacts {
    RequestFacts {
        prompt_tokens,
        block_size,
        request_blocks: prompt_tokens.div_ceil(block_size),
        expected_output_tokens: None,
        pinned: None,
        pool,
        seed,
    }
}

/// A valid request over `table` (panics on an invalid one: a fixture's bug).
pub fn request(
    table: &WorkerTable,
    facts: RequestFacts,
    options: RequestOptions,
    inputs: WorkerInputs,
) -> SelectionRequest {
    SelectionRequest::new(table, facts, options, inputs).expect("valid request")
}

/// A seeded generator for randomised cases.
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in 0..n (0 for n = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A random worker table with about `slots_wanted` (worker, rank) slots: gaps in the ids,
/// some data-parallel workers, some taints, and capacities of which some are unknown (0).
pub fn random_table(rng: &mut Rng, slots_wanted: u64) -> WorkerTable {
    let mut workers = Vec::new();
    let mut slots = 0;
    let mut id = rng.below(1000);
    while slots < slots_wanted {
        let dp = if rng.chance(10) { 1 + rng.below(4) as u32 } else { 1 };
        let dp = dp.min((slots_wanted - slots) as u32);
        let taints = if rng.chance(30) { vec![format!("t{}", rng.below(3))] } else { vec![] };
        let kv_blocks = if rng.chance(10) { 0 } else { rng.below(200_000) as u32 };
        let batched = rng.chance(50).then(|| rng.below(16_384) as u32);
        workers.push(Worker::new(id, dp, kv_blocks, batched).with_taints(taints));
        slots += u64::from(dp);
        id += 1 + rng.below(3);
    }
    WorkerTable::new(workers).unwrap()
}

/// Random per-slot inputs for a prompt of `prompt_tokens`; 30 % of slots have no row.
pub fn random_inputs(rng: &mut Rng, table: &WorkerTable, prompt_tokens: u32, pool: Pool) -> WorkerInputs {
    let mut inputs = WorkerInputs::default();
    for &slot in table.slots() {
        if rng.chance(30) {
            continue; // no row: zeros
        }
        let big = |rng: &mut Rng, n: u64| {
            if rng.chance(10) { rng.below(u64::from(u32::MAX)) as u32 } else { rng.below(n) as u32 }
        };
        inputs.worker_id.push(slot.worker_id);
        inputs[Column::DpRank].push(slot.dp_rank);
        inputs[Column::DeviceOverlapBlocks].push(rng.below(3000) as u32);
        inputs[Column::HostOverlapBlocks].push(if rng.chance(50) { 0 } else { rng.below(500) as u32 });
        inputs[Column::DiskOverlapBlocks].push(if rng.chance(70) { 0 } else { rng.below(500) as u32 });
        inputs[Column::CachedTokens].push(rng.below(u64::from(prompt_tokens) + 2000) as u32);
        inputs[Column::ActivePrefillTokens].push(if pool == Pool::Decode { 0 } else { big(rng, 100_000) });
        inputs[Column::DecodeBlocks].push(big(rng, 50_000));
        // Mostly light loads, sometimes a spread: the load bounds and balance tests trip.
        let requests = if rng.chance(20) { rng.below(256) } else { rng.below(8) };
        inputs[Column::ActiveRequests].push(requests as u32);
    }
    inputs
}

/// Chained block hashes of a prompt from one of a few shared conversations: requests of
/// the same conversation share a prefix up to a random divergence point.
pub fn random_hashes(rng: &mut Rng, blocks: u32, conversations: u64) -> Vec<u64> {
    let conversation = rng.below(conversations);
    let shared = if rng.chance(30) { blocks } else { rng.below(u64::from(blocks) + 1) as u32 };
    let own = rng.next_u64();
    (0..blocks)
        .map(|i| {
            let stem = if i < shared { conversation } else { own };
            switchyard_guest_sdk::hash::hash2(stem, u64::from(i))
        })
        .collect()
}

/// A random selection over `table`: every pool, pinned and allowed sets, taints,
/// temperatures, classes, hashes from shared conversations.
pub fn random_request(rng: &mut Rng, table: &WorkerTable, max_prompt: u64) -> SelectionRequest {
    // 48: a block size that is not a power of two (the default policy's general loop).
    let block_size = [1u32, 16, 32, 48, 64, 512][rng.below(6) as usize];
    let prompt_tokens = if rng.chance(5) { 0 } else { rng.below(max_prompt) as u32 };
    let pool = [Pool::Aggregated, Pool::Prefill, Pool::Decode][rng.below(3) as usize];
    let inputs = random_inputs(rng, table, prompt_tokens, pool);
    let slot_list = table.slots().to_vec();
    let pinned = rng.chance(5).then(|| slot_list[rng.below(slot_list.len() as u64) as usize]);
    let allowed = (pinned.is_none() && rng.chance(10)).then(|| {
        table
            .workers()
            .iter()
            .filter(|_| rng.chance(50))
            .map(|w| w.id())
            .chain([table.workers()[0].id()])
            .collect()
    });
    let mut preferred_taints = std::collections::BTreeMap::new();
    if rng.chance(25) {
        preferred_taints.insert("t0".to_string(), rng.unit() * 4.0 - 2.0);
        preferred_taints.insert("t1".to_string(), rng.unit() * 2.0 - 1.0);
    }
    let temperature = if rng.chance(50) { 0.0 } else { 0.05 + rng.unit() * 2.0 };
    let facts = RequestFacts {
        prompt_tokens,
        block_size,
        request_blocks: prompt_tokens.div_ceil(block_size),
        expected_output_tokens: rng.chance(50).then(|| rng.below(4000) as u32),
        pinned,
        pool,
        seed: rng.next_u64(),
    };
    let hashes = random_hashes(rng, facts.request_blocks, 8);
    let classes = [None, Some("latency"), Some("batch"), Some("gold")];
    let options = RequestOptions {
        prefix_hashes: hashes_for_pool(pool, hashes, facts.seed),
        policy_class: classes[rng.below(4) as usize].map(str::to_string),
        classifier_class: rng.chance(10).then(|| "batch".to_string()),
        preferred_taints,
        allowed_workers: allowed,
        temperature: Some(temperature),
        worker_multipliers: None,
    };
    SelectionRequest::new(table, facts, options, inputs).expect("valid random request")
}

/// A random table and request: mostly small batches, 15 % up to 4096 slots.
pub fn random_case(rng: &mut Rng) -> (WorkerTable, SelectionRequest) {
    let slots_wanted = if rng.chance(15) { 1 + rng.below(4096) } else { 1 + rng.below(96) };
    let table = random_table(rng, slots_wanted);
    let request = random_request(rng, &table, 40_000);
    (table, request)
}

/// The sample request (crates/selection/sample-request.json): 9 candidates.
pub fn sample() -> (WorkerTable, SelectionRequest) {
    switchyard::selection::wire::RequestJson::parse(switchyard::selection::wire::SAMPLE_REQUEST)
        .and_then(switchyard::selection::wire::RequestJson::into_parts)
        .expect("the sample request is valid")
}

/// What the native default policy picks for `request`: the fail-open answer.
pub fn native_default_pick(
    table: &WorkerTable,
    request: &SelectionRequest,
) -> switchyard_guest_sdk::WorkerRank {
    let scorer = switchyard_builtins::find("default").unwrap().native("{}").unwrap();
    switchyard::Selector::new(scorer).select(table, request).expect("the default policy answers").chosen
}

/// An engine with `limits` (tests that need other limits than the shared engine's).
pub fn engine_with(limits: Limits) -> PolicyEngine {
    PolicyEngine::new(limits).expect("engine")
}

/// Deterministic bytes (splitmix64), for "random bytes" uploads.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// Random but valid parameters, so every branch of the cost is exercised.
pub fn random_parameters(rng: &mut Rng) -> String {
    if rng.chance(30) {
        return "{}".into();
    }
    let mut fields = vec![
        format!("\"overlap_score_credit\": {}", if rng.chance(20) { 0.0 } else { rng.unit() }),
        format!("\"overlap_score_credit_decay\": {}", if rng.chance(50) { 0.0 } else { rng.unit() * 4.0 }),
        format!("\"prefill_load_scale\": {}", rng.unit() * 3.0),
        format!("\"decode_active_request_weight\": {}", rng.unit() * 10.0),
        format!("\"host_cache_hit_weight\": {}", rng.unit()),
        format!("\"disk_cache_hit_weight\": {}", rng.unit()),
    ];
    if rng.chance(10) {
        fields.push(format!(
            "\"overlap_score_weight\": {}",
            if rng.chance(50) { 0.0 } else { rng.unit() * 2.0 }
        ));
    }
    format!("{{{}}}", fields.join(", "))
}

/// Runs `bytes` (configured with `params`) on the sample request, fail-open then
/// fail-closed, and checks the fault's kind, the fallback's answer and the recovery.
pub fn assert_contained(
    engine: &PolicyEngine,
    bytes: &[u8],
    params: &str,
    kind: switchyard::FaultKind,
) -> String {
    let (table, request) = sample();
    let component = PolicyComponent::load(engine, bytes).expect("loads");
    let guest = switchyard::GuestScorer::new("hostile", component.clone(), params).expect("instantiates");
    let stats = guest.stats();
    let mut open = switchyard_builtins::guarded(
        Box::new(guest),
        switchyard::FailMode::Open,
        switchyard::GuardConfig::default(),
    );
    let decision = open.select(&table, &request).expect("fail-open answers");
    let fault = decision.fallback.clone().expect("the fallback decided");
    assert_eq!(fault.kind, kind, "{}", fault.message);
    assert_eq!(decision.decided_by, switchyard::Decider::Fallback);
    assert_eq!(decision.selection.chosen, native_default_pick(&table, &request), "the default policy's pick");
    assert_eq!(open.counters().fallbacks, 1);
    // The faulted Store was dropped: the next call instantiates afresh (and faults again).
    assert_eq!(stats.instantiations(), 1);
    let again = open.select(&table, &request).expect("still answers");
    assert_eq!(again.fallback.map(|f| f.kind), Some(kind));
    assert_eq!(stats.instantiations(), 2, "a fresh instance after the fault");

    let guest = switchyard::GuestScorer::new("hostile", component, params).expect("instantiates");
    let mut closed = switchyard_builtins::guarded(
        Box::new(guest),
        switchyard::FailMode::Closed,
        switchyard::GuardConfig::default(),
    );
    match closed.select(&table, &request) {
        Err(switchyard::SelectError::Fault { fault, .. }) => {
            assert_eq!(fault.kind, kind, "{}", fault.message)
        }
        other => panic!("fail-closed must return the fault, got {other:?}"),
    }
    fault.message
}

/// A component whose core module Cranelift takes seconds to compile (about 0.5 s a
/// function here; it is never instantiated): `functions` functions, each `depth` nested
/// blocks with a `br_table` over every enclosing block at each level.
pub fn slow_component(functions: usize, depth: usize) -> Vec<u8> {
    let mut wat = String::from("(component (core module\n");
    for _ in 0..functions {
        wat.push_str("(func (param i32) (result i32)\n");
        wat.push_str(&"(block ".repeat(depth));
        for d in 0..depth {
            let targets: Vec<String> = (0..depth - d).map(|i| i.to_string()).collect();
            wat.push_str(&format!(
                "local.get 0 br_table {} 0) local.get 0 i32.const {} i32.mul local.set 0\n",
                targets.join(" "),
                d + 1
            ));
        }
        wat.push_str("local.get 0)\n");
    }
    wat.push_str("))");
    wat::parse_str(&wat).expect("the slow component assembles")
}
