//! The wasm32 side: WIT bindings and the glue behind [`crate::export_policy!`].
//! Compiled only for `target_arch = "wasm32"`.

use std::borrow::Cow;
use std::cell::UnsafeCell;

use crate::{Capacity, Facts, Policy, PolicyError, Pool, Request, WorkerRank};

wit_bindgen::generate!({
    path: "../wit",
    world: "selection-policy",
    pub_export_macro: true,
    export_macro_name: "__export_selection_policy",
    default_bindings_module: "switchyard_guest_sdk::guest",
    // Guests target `wasm32-unknown-unknown`: no libc, so no constructors to run once
    // (`__wasm_call_ctors` is empty). The workaround's check on every export call would
    // be two guest calls for nothing (callgrind, `profile empty`).
    disable_run_ctors_once_workaround: true,
    // Hand-written in `batch` (no post-return): see there.
    skip: ["score", "filter"],
});

mod batch;
pub use batch::FlatBatch;

use switchyard::policy::request as imports;
use switchyard::policy::types as wit;

/// The one policy instance of this component, and the buffers its `score` and `filter`
/// answer from (see `batch`).
pub struct State<P>(UnsafeCell<Instance<P>>);

struct Instance<P> {
    policy: Option<P>,
    /// The last `score` answer: valid until the next call into the instance.
    costs: Vec<f64>,
    /// The last `filter` answer, likewise.
    keep: Vec<bool>,
    /// The last error's message, likewise.
    message: String,
}

// SAFETY: a component instance is single-threaded (guests are built without the threads
// proposal and the host never shares an instance across threads), so the cell is never
// accessed concurrently.
unsafe impl<P> Sync for State<P> {}

impl<P: Policy> State<P> {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self(UnsafeCell::new(Instance {
            policy: None,
            costs: Vec::new(),
            keep: Vec::new(),
            message: String::new(),
        }))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Instance<P>) -> R) -> R {
        // SAFETY: single-threaded (see `Sync` above), and the component model forbids
        // re-entering an instance, so no other `&mut` to the cell is live during `f`.
        f(unsafe { &mut *self.0.get() })
    }

    fn with_policy<R>(&self, f: impl FnOnce(&mut P) -> R) -> R {
        self.with(|instance| f(configured(&mut instance.policy)))
    }
}

/// The policy in `slot`; the host always configures first, a host that does not gets
/// defaults.
fn configured<P: Policy>(slot: &mut Option<P>) -> &mut P {
    slot.get_or_insert_with(|| P::configure("{}").unwrap_or_else(|e| panic!("{e}")))
}

/// The imports, as [`Facts`].
struct ImportedFacts;

impl Facts for ImportedFacts {
    fn prefix_hashes(&self) -> Option<Cow<'_, [u64]>> {
        imports::prefix_hashes().map(Cow::Owned)
    }
    fn policy_class(&self) -> Option<Cow<'_, str>> {
        imports::policy_class().map(Cow::Owned)
    }
    fn worker_capacity(&self, worker_id: u64) -> Option<Capacity> {
        imports::worker_capacity(worker_id).map(capacity)
    }
    fn candidate_capacities(&self) -> Cow<'_, [Option<Capacity>]> {
        Cow::Owned(imports::candidate_capacities().into_iter().map(|c| c.map(capacity)).collect())
    }
}

fn capacity(c: wit::Capacity) -> Capacity {
    Capacity { total_kv_blocks: c.total_kv_blocks, max_num_batched_tokens: c.max_num_batched_tokens }
}

fn facts(r: &wit::RequestFacts) -> crate::RequestFacts {
    crate::RequestFacts {
        prompt_tokens: r.prompt_tokens,
        block_size: r.block_size,
        request_blocks: r.request_blocks,
        expected_output_tokens: r.expected_output_tokens,
        pinned: r.pinned.map(|w| WorkerRank { worker_id: w.worker_id, dp_rank: w.dp_rank }),
        pool: match r.pool {
            wit::Pool::Aggregated => Pool::Aggregated,
            wit::Pool::Prefill => Pool::Prefill,
            wit::Pool::Decode => Pool::Decode,
        },
        seed: r.seed,
    }
}

fn error(e: PolicyError) -> wit::PolicyError {
    wit::PolicyError {
        kind: match e.kind {
            crate::ErrorKind::InvalidParameters => wit::ErrorKind::InvalidParameters,
            crate::ErrorKind::InvalidInput => wit::ErrorKind::InvalidInput,
            crate::ErrorKind::Internal => wit::ErrorKind::Internal,
        },
        message: e.message,
    }
}

pub fn describe<P: Policy>(state: &State<P>) -> wit::PolicyInfo {
    state.with_policy(|p| {
        let info = p.info();
        wit::PolicyInfo {
            inputs: wit::InputGroups::from_bits_retain(info.inputs.bits()),
            filters: info.filters,
            wants_commits: info.wants_commits,
        }
    })
}

pub fn configure<P: Policy>(state: &State<P>, parameters: String) -> Result<(), wit::PolicyError> {
    let policy = P::configure(&parameters).map_err(error)?;
    state.with(|instance| instance.policy = Some(policy));
    Ok(())
}

/// The `score` export: the costs, answered from the instance's own buffer (`batch`).
///
/// # Safety
/// Called only as the component's `score` export, with the parameters the component
/// model passed it.
pub unsafe fn score<P: Policy>(state: &State<P>, flat: FlatBatch) -> *mut u8 {
    state.with(|Instance { policy, costs, message, .. }| {
        let result = batch::run(configured(policy), &flat, &ImportedFacts, |policy, request, view| {
            costs.clear();
            costs.resize(view.len(), 0.0);
            policy.score(request, view, costs)
        });
        batch::answer(result.map(|()| &costs[..]), message)
    })
}

/// The `filter` export: the keep flags, answered from the instance's own buffer.
///
/// # Safety
/// As [`score`], for `filter`.
pub unsafe fn filter<P: Policy>(state: &State<P>, flat: FlatBatch) -> *mut u8 {
    state.with(|Instance { policy, keep, message, .. }| {
        let result = batch::run(configured(policy), &flat, &ImportedFacts, |policy, request, view| {
            keep.clear();
            keep.resize(view.len(), true);
            policy.filter(request, view, keep)
        });
        batch::answer(result.map(|()| &keep[..]), message)
    })
}

pub fn on_selected<P: Policy>(state: &State<P>, request: wit::RequestFacts, chosen: wit::WorkerRank) {
    let facts = facts(&request);
    let chosen = WorkerRank { worker_id: chosen.worker_id, dp_rank: chosen.dp_rank };
    state.with_policy(|p| p.on_selected(&Request::new(&facts, &ImportedFacts), chosen));
}

/// Exports a [`Policy`] as this component's `policy` interface. Expands to nothing
/// outside wasm32, so a policy crate can call it unconditionally. Static constructors
/// (link-time `.init_array` entries, as the `ctor` crate makes) are never run: a guest
/// has no libc start-up, and the exports do not call `__wasm_call_ctors`.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        const _: () = {
            use $crate::guest::exports::switchyard::policy::policy as exports;
            use $crate::guest::switchyard::policy::types as wit;

            static STATE: $crate::guest::State<$policy> = $crate::guest::State::new();

            struct Export;

            impl exports::Guest for Export {
                fn describe() -> wit::PolicyInfo {
                    $crate::guest::describe(&STATE)
                }
                fn configure(parameters: String) -> Result<(), wit::PolicyError> {
                    $crate::guest::configure(&STATE, parameters)
                }
                fn on_selected(request: wit::RequestFacts, chosen: wit::WorkerRank) {
                    $crate::guest::on_selected(&STATE, request, chosen)
                }
            }

    $crate::guest::__export_selection_policy!(Export with_types_in $crate::guest);

            $crate::__export_batch!("switchyard:policy/policy@0.2.0#score", score, STATE);
            $crate::__export_batch!("switchyard:policy/policy@0.2.0#filter", filter, STATE);
        };
    };
}

/// Exports `score` or `filter` of the policy in `$state` under the canonical ABI's name
/// `$name` (used by [`crate::export_policy!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __export_batch {
    ($name:literal, $glue:ident, $state:ident) => {
        const _: () = {
            #[unsafe(export_name = $name)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn export(
                prompt_tokens: u32,
                block_size: u32,
                request_blocks: u32,
                expected_output_tag: u32,
                expected_output_tokens: u32,
                pinned_tag: u32,
                pinned_worker_id: u64,
                pinned_dp_rank: u32,
                pool: u32,
                seed: u64,
                worker_ids: *mut u64,
                worker_ids_len: usize,
                columns: *mut u32,
                columns_len: usize,
                multipliers: *mut f64,
                multipliers_len: usize,
            ) -> *mut u8 {
                let flat = $crate::guest::FlatBatch {
                    prompt_tokens,
                    block_size,
                    request_blocks,
                    expected_output_tag,
                    expected_output_tokens,
                    pinned_tag,
                    pinned_worker_id,
                    pinned_dp_rank,
                    pool,
                    seed,
                    worker_ids,
                    worker_ids_len,
                    columns,
                    columns_len,
                    multipliers,
                    multipliers_len,
                };
                // SAFETY: only the component model calls this export, with its parameters.
                unsafe { $crate::guest::$glue(&$state, flat) }
            }
        };
    };
}
