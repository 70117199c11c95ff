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
