//! The policy author's side of Switchyard.
//!
//! A policy implements [`Policy`] once. The same source is
//! - linked natively into the host (the runtime calls [`Policy::score`] directly), and
//! - built for `wasm32-unknown-unknown` and exported as a component with
//!   [`export_policy!`], then wrapped by `switchyard_guest_build::componentize` (the
//!   build tooling, crate `switchyard-guest-build`).
//!
//! Both builds see the same [`Request`] and [`Candidates`] views, so "guest vs native"
//! compares the same code, and the cost logic lives in one place.
//!
//! What every policy needs is written once here, so policies read and fail alike:
//! [`parse_parameters`] reads the tenant's JSON (an error names the path to the bad
//! value), [`check`] validates ranges with one message shape, [`placement`] holds the
//! prefix key and the load bound of prefix-affinity policies, and [`hash`] a hash that
//! is the same in both builds.

mod candidates;
pub mod check;
mod error;
mod groups;
pub mod hash;
mod json;
mod params;
pub mod placement;
mod policy;
mod request;

/// Hand-made cases for policies' unit tests (native only).
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

// Also built natively for its unit tests.
#[cfg(any(test, all(target_arch = "wasm32", feature = "recycling-allocator")))]
mod allocator;

/// Every guest's allocator unless the policy opts out (see `allocator.rs`).
#[cfg(all(target_arch = "wasm32", feature = "recycling-allocator"))]
#[global_allocator]
static ALLOCATOR: allocator::SizeClassAllocator<allocator::LinearMemory> =
    allocator::SizeClassAllocator::new(allocator::LinearMemory);

pub use candidates::{Candidates, Column, ColumnLengthError, Columns};
pub use error::{ErrorKind, PolicyError};
pub use groups::InputGroups;
pub use params::parse_parameters;
pub use policy::{Policy, PolicyInfo};
pub use request::{Capacity, Facts, NoFacts, Pool, Request, RequestFacts, WorkerRank};

/// Exports a [`Policy`] as a component (wasm32 only; nothing elsewhere), e.g.
/// `switchyard_guest_sdk::export_policy!(MyPolicy);` at the root of the policy crate.
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {};
}
