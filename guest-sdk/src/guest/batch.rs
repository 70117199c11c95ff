//! The canonical ABI of `score` and `filter`, written by hand so that they need no
//! post-return: their flat parameters ([`FlatBatch`]), the lists taken as owned, and the
//! answer written into a return area ([`answer`]). The exports themselves (`super::score`,
//! `super::filter`, `__export_batch!`) put these together with the instance's state.
//!
//! Why: wit-bindgen's exports return each answer in a fresh list and export a `cabi_post_*`
//! function that frees it, which the host calls after every call: a second entry into the
//! guest, a sizeable share of an empty call's instructions (callgrind, `benches/profile.rs
//! empty`; docs/benchmarks-history.md, "an empty call's instructions"). These exports
//! answer from buffers the instance keeps (its costs, its keep flags, its last error
//! message), left in place until its next call, so there is nothing to free and no
//! post-return. The contract is the same WIT: a post-return is optional in the canonical
//! ABI, and the host lifts an answer before it calls the instance again (the component
//! model forbids re-entering it meanwhile).
//!
//! The flattening mirrors `wit/policy.wit`; the wrap step type-checks the exports against
//! it, and every test of a Rust guest goes through them.

use std::cell::UnsafeCell;

use crate::{
    Candidates, Columns, ErrorKind, Facts, Policy, PolicyError, Pool, Request, RequestFacts, WorkerRank,
};

/// The flat parameters of `score` and `filter`: `request-facts`, then `candidates`, as
/// the canonical ABI passes them (16 core values: under its limit of 16, so by value).
#[doc(hidden)]
pub struct FlatBatch {
    pub prompt_tokens: u32,
    pub block_size: u32,
    pub request_blocks: u32,
    /// `option<u32>`: 0 none, 1 some (the next field).
    pub expected_output_tag: u32,
    pub expected_output_tokens: u32,
    /// `option<worker-rank>`: 0 none, 1 some (the next two fields).
    pub pinned_tag: u32,
    pub pinned_worker_id: u64,
    pub pinned_dp_rank: u32,
    /// `pool`: 0 aggregated, 1 prefill, 2 decode.
    pub pool: u32,
    pub seed: u64,
    /// The three lists of `candidates`, each allocated by the host through this
    /// instance's `cabi_realloc` for `len` elements and owned by the call.
    pub worker_ids: *mut u64,
    pub worker_ids_len: usize,
    pub columns: *mut u32,
    pub columns_len: usize,
    pub multipliers: *mut f64,
    pub multipliers_len: usize,
}

impl FlatBatch {
    fn facts(&self) -> RequestFacts {
        RequestFacts {
            prompt_tokens: self.prompt_tokens,
            block_size: self.block_size,
            request_blocks: self.request_blocks,
            expected_output_tokens: (self.expected_output_tag != 0).then_some(self.expected_output_tokens),
            pinned: (self.pinned_tag != 0)
                .then_some(WorkerRank { worker_id: self.pinned_worker_id, dp_rank: self.pinned_dp_rank }),
            // The host lowers a valid case (0, 1 or 2).
            pool: match self.pool {
                0 => Pool::Aggregated,
                1 => Pool::Prefill,
                _ => Pool::Decode,
            },
            seed: self.seed,
        }
    }

    /// Takes ownership of the three lists: they are freed when the returned vectors drop.
    ///
    /// # Safety
    /// Each non-empty list was allocated by this instance's `cabi_realloc` with the
    /// element type's size times its length and its alignment, and is owned by this call
    /// (the canonical ABI's contract for a callee's list parameters).
    unsafe fn take_lists(&self) -> (Vec<u64>, Vec<u32>, Vec<f64>) {
        // SAFETY: the caller's precondition, list by list.
        unsafe {
            (
                owned(self.worker_ids, self.worker_ids_len),
                owned(self.columns, self.columns_len),
                owned(self.multipliers, self.multipliers_len),
            )
        }
    }
}

/// A list parameter of the call, owned: freed when the vector drops.
///
/// # Safety
/// A non-empty list was allocated by this instance's `cabi_realloc` for exactly `len`
/// elements of `T` (their size times `len`, their alignment) and is owned by the caller.
unsafe fn owned<T>(ptr: *mut T, len: usize) -> Vec<T> {
    if len == 0 {
        // An empty list may not have been allocated at all.
        return Vec::new();
    }
    // SAFETY: the function's precondition is `from_raw_parts`'s for a full vector.
    unsafe { Vec::from_raw_parts(ptr, len, len) }
}

/// Where an answer is returned: `result<list<T>, policy-error>` laid out as the canonical
/// ABI lays it out (16 bytes, 4-aligned): the case at byte 0; `ok`: the list's pointer
/// and length at 4 and 8; `error`: the kind at 4, the message's pointer and length at 8
/// and 12. Little-endian words, so each byte-sized field is its word's low byte.
#[repr(C, align(4))]
struct ReturnArea(UnsafeCell<[u32; 4]>);

// SAFETY: single-threaded, as `State`.
unsafe impl Sync for ReturnArea {}

static RETURN_AREA: ReturnArea = ReturnArea(UnsafeCell::new([0; 4]));

/// Writes `answer` into the return area and returns its address; `answer` and `message`
/// must stay in place until the instance's next call (the host reads them after this one).
pub(super) fn answer<T>(answer: Result<&[T], PolicyError>, message: &mut String) -> *mut u8 {
    let words = match answer {
        Ok(list) => [0, list.as_ptr() as u32, list.len() as u32, 0],
        Err(e) => {
            *message = e.message;
            let kind = match e.kind {
                ErrorKind::InvalidParameters => 0,
                ErrorKind::InvalidInput => 1,
                ErrorKind::Internal => 2,
            };
            [1, kind, message.as_ptr() as u32, message.len() as u32]
        }
    };
    let area = RETURN_AREA.0.get();
    // SAFETY: single-threaded, and the host reads the area only after this call returns.
    unsafe { *area = words };
    area.cast()
}

/// Runs `f` on the policy with the request (its lazy facts from `lazy`) and its view of
/// the candidates; the lists the host passed are freed when it returns.
pub(super) fn run<P: Policy>(
    policy: &mut P,
    flat: &FlatBatch,
    lazy: &dyn Facts,
    f: impl FnOnce(&mut P, &Request<'_>, &Candidates<'_>) -> Result<(), PolicyError>,
) -> Result<(), PolicyError> {
    // SAFETY: `flat` holds the parameters the component model passed this export.
    let (worker_ids, packed, multipliers) = unsafe { flat.take_lists() };
    let columns = Columns { worker_ids: &worker_ids, packed: &packed, preferred_multiplier: &multipliers };
    let view = Candidates::new(columns, policy.info().inputs)
        .map_err(|e| PolicyError::invalid_input(e.to_string()))?;
    let facts = flat.facts();
    f(policy, &Request::new(&facts, lazy), &view)
}
