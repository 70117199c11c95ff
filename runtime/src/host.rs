//! The host's side of the contract: the generated bindings, what a guest's Store holds,
//! and the `request` imports, each charged to the calling guest's fuel before the host
//! works. Both the loader (`component`, which links the imports) and the scorer (`guest`,
//! which sets the facts of each call) use it; it uses neither.

use std::ptr::NonNull;
use std::sync::Arc;

use switchyard_guest_sdk::Facts;
use wasmtime::component::Linker;
use wasmtime::{StoreContextMut, StoreLimits, Trap};

use crate::engine::Limits;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "selection-policy",
    });
}

pub(crate) use bindings::switchyard::policy::types as wit;

/// The interface of the contract's imports, as the component names it.
const REQUEST_IMPORT: &str = "switchyard:policy/request@0.2.0";

/// What a guest's Store holds: its limits, the import charges, and the call in progress.
pub struct HostState {
    pub(crate) limits: StoreLimits,
    /// The lazily fetched facts of the call in progress; `None` between calls.
    pub(crate) facts: Option<NonNull<dyn Facts + 'static>>,
    /// Candidate rows of the call in progress (what `candidate-capacities` answers for).
    pub(crate) candidates: usize,
    /// The engine's limits: what an import costs ([`Limits::import_fuel`]).
    pub(crate) engine_limits: Arc<Limits>,
    /// The imports the call in progress has called, a bit each ([`IMPORTS`]' order), for
    /// a route receipt.
    pub(crate) imports_read: u8,
}

/// The contract's imports, in the order of [`HostState::imports_read`]'s bits.
pub(crate) const IMPORTS: [&str; 4] =
    ["prefix-hashes", "policy-class", "worker-capacity", "candidate-capacities"];

// SAFETY: `facts` is only set for the duration of a call made on the thread that owns
// the Store (see `GuestScorer::with_live`), and cleared before that call returns, so the
// pointer is never dereferenced from another thread.
unsafe impl Send for HostState {}

impl HostState {
    fn facts(&self) -> Option<&dyn Facts> {
        // SAFETY: set by `GuestScorer::with_live` from a reference that outlives the guest
        // call, and cleared when it returns; imports run only inside that call.
        self.facts.map(|p| unsafe { p.as_ref() })
    }
}

/// Charges an import answer of `bytes` to the calling guest's fuel before the host does
/// the work: a loop of imports runs out of fuel like a loop of instructions. Without a
/// fuel budget the call deadline bounds such a loop.
fn charge(store: &mut StoreContextMut<'_, HostState>, bytes: usize) -> wasmtime::Result<()> {
    let cost = store.data().engine_limits.import_fuel(bytes);
    match store.get_fuel() {
        Ok(left) if left >= cost => store.set_fuel(left - cost),
        Ok(_) => {
            store.set_fuel(0)?;
            Err(Trap::OutOfFuel.into())
        }
        Err(_) => Ok(()),
    }
}

/// Bytes an answer of the contract occupies in guest memory (the canonical ABI's sizes).
const HASH_BYTES: usize = 8;
const CAPACITY_BYTES: usize = 12;
/// `option<capacity>` in a list (16 bytes) plus the host's lookup of the worker and the
/// element-wise lowering, counted as bytes: measured as long as a plain wasm loop takes
/// with ~1,000 fuel (BENCHMARKS.md, "Hostile guests": the import charges), hence 16 + 496
/// bytes at 2 fuel a byte.
const CANDIDATE_CAPACITY_BYTES: usize = 16 + 496;

/// Links the contract's imports (`request`), each charged to the guest before it runs.
pub(crate) fn add_imports(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut request = linker.instance(REQUEST_IMPORT)?;
    request.func_wrap("prefix-hashes", |mut store: StoreContextMut<'_, HostState>, (): ()| {
        store.data_mut().imports_read |= 1 << 0;
        let len = store.data().facts().and_then(|f| f.prefix_hashes().map(|h| h.len()));
        charge(&mut store, len.unwrap_or(0) * HASH_BYTES)?;
        Ok((store.data().facts().and_then(|f| f.prefix_hashes()).map(|h| h.into_owned()),))
    })?;
    request.func_wrap("policy-class", |mut store: StoreContextMut<'_, HostState>, (): ()| {
        store.data_mut().imports_read |= 1 << 1;
        let len = store.data().facts().and_then(|f| f.policy_class().map(|c| c.len()));
        charge(&mut store, len.unwrap_or(0))?;
        Ok((store.data().facts().and_then(|f| f.policy_class()).map(|c| c.into_owned()),))
    })?;
    request.func_wrap(
        "worker-capacity",
        |mut store: StoreContextMut<'_, HostState>, (worker_id,): (u64,)| {
            store.data_mut().imports_read |= 1 << 2;
            charge(&mut store, CAPACITY_BYTES)?;
            Ok((store.data().facts().and_then(|f| f.worker_capacity(worker_id)).map(capacity),))
        },
    )?;
    request.func_wrap("candidate-capacities", |mut store: StoreContextMut<'_, HostState>, (): ()| {
        store.data_mut().imports_read |= 1 << 3;
        let rows = store.data().candidates;
        charge(&mut store, rows * CANDIDATE_CAPACITY_BYTES)?;
        let answer: Vec<Option<wit::Capacity>> = match store.data().facts() {
            Some(f) => f.candidate_capacities().iter().map(|c| c.map(capacity)).collect(),
            None => Vec::new(),
        };
        Ok((answer,))
    })?;
    Ok(())
}

pub(crate) fn capacity(c: switchyard_guest_sdk::Capacity) -> wit::Capacity {
    wit::Capacity { total_kv_blocks: c.total_kv_blocks, max_num_batched_tokens: c.max_num_batched_tokens }
}
