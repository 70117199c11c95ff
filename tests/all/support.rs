//! Shared fixtures: the test guests, an engine, and request builders.

use std::sync::OnceLock;

use switchyard::selection::{RequestOptions, WorkerInputs};
use switchyard::{Limits, PolicyComponent, PolicyEngine, SelectionRequest, WorkerTable};
use switchyard_guest_sdk::{Pool, RequestFacts};

pub const DEFAULT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/switchyard_policy_default.component.wasm"));
pub const PROBE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/switchyard_probe.component.wasm"));

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

pub fn request(
    table: &WorkerTable,
    facts: RequestFacts,
    options: RequestOptions,
    inputs: WorkerInputs,
) -> SelectionRequest {
    SelectionRequest::new(table, facts, options, inputs).expect("valid request")
}

macro_rules! out_dir_file {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file))
    };
}

/// Hostile guests (policies/adversarial), built from source by build.rs.
pub mod hostile {
    pub const ILOOP: &[u8] = out_dir_file!("adversarial_iloop.component.wasm");
    pub const RECURSION: &[u8] = out_dir_file!("adversarial_recursion.component.wasm");
    pub const MEMORY_BOMB: &[u8] = out_dir_file!("adversarial_memory_bomb.component.wasm");
    pub const HUGE_DATA: &[u8] = out_dir_file!("adversarial_huge_data.component.wasm");
    pub const CONFIGURE_SPIN: &[u8] = out_dir_file!("adversarial_configure_spin.component.wasm");
    pub const PANIC: &[u8] = out_dir_file!("adversarial_panic.component.wasm");
    pub const WRONG_LENGTH: &[u8] = out_dir_file!("adversarial_wrong_length.component.wasm");
    pub const BAD_COSTS: &[u8] = out_dir_file!("adversarial_bad_costs.component.wasm");
    pub const SECRET: &[u8] = out_dir_file!("adversarial_secret.component.wasm");
    pub const START_SPIN: &[u8] = out_dir_file!("adversarial_start_spin.component.wasm");
    pub const TABLE_GROWTH: &[u8] = out_dir_file!("adversarial_table_growth.component.wasm");
    pub const WASI_IMPORT: &[u8] = out_dir_file!("adversarial_wasi_import.component.wasm");
    pub const OTHER_WORLD: &[u8] = out_dir_file!("adversarial_other_world.component.wasm");
    /// The iloop guest's core module, not wrapped as a component.
    pub const CORE_MODULE: &[u8] = out_dir_file!("adversarial_core_module.wasm");
}

/// The sample request (tests/fixtures/request.json): 9 candidates.
pub fn sample() -> (WorkerTable, SelectionRequest) {
    switchyard::input::RequestJson::parse(switchyard::input::SAMPLE_REQUEST)
        .and_then(switchyard::input::RequestJson::into_parts)
        .expect("the sample request is valid")
}

/// What the native default policy picks for `request`: the fail-open answer.
pub fn native_default_pick(
    table: &WorkerTable,
    request: &SelectionRequest,
) -> switchyard_guest_sdk::WorkerRank {
    let scorer = switchyard::builtin::find("default").unwrap().native("{}").unwrap();
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
