//! The policy author's side of Switchyard.
//!
//! A policy implements [`Policy`] once. The same source is
//! - linked natively into the host (the runtime calls [`Policy::score`] directly), and
//! - built for `wasm32-unknown-unknown` and exported as a component with
//!   [`export_policy!`], then wrapped by [`build::componentize`] (feature `build`).
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
pub mod hash;
mod params;
pub mod placement;
mod request;

/// Hand-made cases for policies' unit tests (native only).
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(feature = "build")]
pub mod build;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

// Also built natively for its unit tests.
#[cfg(any(test, all(target_arch = "wasm32", feature = "recycling-allocator")))]
mod allocator;

/// Every guest's allocator unless the policy opts out (see `allocator.rs`).
#[cfg(all(target_arch = "wasm32", feature = "recycling-allocator"))]
#[global_allocator]
static ALLOCATOR: allocator::RecyclingAllocator = allocator::RecyclingAllocator::new();

pub use candidates::{Candidates, Column, ColumnLengthError, Columns};
pub use params::parse_parameters;
pub use request::{Capacity, Facts, NoFacts, Pool, Request, RequestFacts, WorkerRank};

/// Column groups a policy reads; the host fills only these (see the WIT `input-groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InputGroups(u8);

impl InputGroups {
    pub const NONE: Self = Self(0);
    /// Overlap blocks on device/host/disk, cached tokens.
    pub const CACHE: Self = Self(1);
    /// Prefill tokens in flight, decode blocks, requests in flight.
    pub const LOAD: Self = Self(2);
    /// The preferred-taint multiplier.
    pub const AFFINITY: Self = Self(4);
    pub const ALL: Self = Self(7);

    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// From the bit pattern of the WIT flags; unknown bits are dropped.
    pub const fn from_bits_truncate(bits: u8) -> Self {
        Self(bits & Self::ALL.0)
    }
}

impl std::ops::BitOr for InputGroups {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

/// What a policy tells the host about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInfo {
    /// Column groups `score` and `filter` read.
    pub inputs: InputGroups,
    /// Whether the host should call [`Policy::filter`].
    pub filters: bool,
    /// Whether the host should call [`Policy::on_selected`] after each accepted pick.
    pub wants_commits: bool,
}

/// Why a policy call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidParameters,
    InvalidInput,
    Internal,
}

/// A policy's own error: a kind and a readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub kind: ErrorKind,
    pub message: String,
}

impl PolicyError {
    pub fn invalid_parameters(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidParameters, message: message.into() }
    }
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidInput, message: message.into() }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Internal, message: message.into() }
    }
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            ErrorKind::InvalidParameters => "invalid parameters",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Internal => "internal error",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// A worker-selection policy. Lower cost is better.
///
/// The host calls `configure` once per instance, then `info`, then for each request
/// `filter` (if [`PolicyInfo::filters`]), `score`, and after the host accepts a pick,
/// `on_selected` (if [`PolicyInfo::wants_commits`]).
pub trait Policy: Sized + 'static {
    /// Builds the policy from the tenant's JSON parameters (`{}` means defaults).
    /// Use [`parse_parameters`] so that an error names the offending field, and [`check`]
    /// for ranges, so that every policy states them the same way.
    fn configure(parameters: &str) -> Result<Self, PolicyError>;

    /// Describes the policy.
    fn info(&self) -> PolicyInfo;

    /// Writes one finite cost per candidate into `costs` (`costs.len() == candidates.len()`,
    /// zero-filled on entry).
    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError>;

    /// Clears `keep[i]` for candidates to exclude (`keep` is all true on entry).
    fn filter(
        &mut self,
        _request: &Request<'_>,
        _candidates: &Candidates<'_>,
        _keep: &mut [bool],
    ) -> Result<(), PolicyError> {
        Ok(())
    }

    /// The host accepted `chosen` for this request. Stateful policies update here, so
    /// that dry runs and abandoned retries leave no trace.
    fn on_selected(&mut self, _request: &Request<'_>, _chosen: WorkerRank) {}
}

/// Exports a [`Policy`] as a component (wasm32 only; nothing elsewhere), e.g.
/// `switchyard_guest_sdk::export_policy!(MyPolicy);` at the root of the policy crate.
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {};
}
