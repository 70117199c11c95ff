//! Switchyard: run tenants' worker-selection policies as untrusted WebAssembly
//! components, and select natively.
//!
//! - [`engine`]: all wasmtime configuration and the sandbox's limits.
//! - [`component`]: validate, compile and pre-instantiate an uploaded component.
//! - [`artifact_cache`]: our own compiled output on disk, keyed by content, engine
//!   settings and version; [`function_cache`]: Cranelift's compiled functions in memory,
//!   shared by every compile of an engine.
//! - [`compile_worker`]: compiles in a child process, killed at its deadline;
//!   [`compile_worker_main`]: what that process runs.
//! - [`guard`]: fault containment: fail-open/closed, the quarantine breaker, counters
//!   (the fallback comes from outside: `switchyard-builtins` gives the native default).
//! - [`guest`]: a component instance as a [`selection::Scorer`].
//! - `lists`: how the candidates' lists are lowered (an empty one without a guest call; the
//!   packed columns gathered from separate buffers in one allocation).
//! - `host`: the contract's bindings, a Store's state, and the metered imports.
//! - [`selection`]: the wasmtime-free core this host builds on (the `switchyard-selection`
//!   crate, re-exported): columns → scorers → validated costs → picker, and the wire types.

pub mod artifact_cache;
pub mod compile_worker;
pub mod compile_worker_main;
pub mod component;
pub mod engine;
pub mod function_cache;
pub mod guard;
pub mod guest;
mod host;
mod lists;

pub use switchyard_selection as selection;

pub use artifact_cache::ArtifactCache;
pub use compile_worker::{WorkerCommand, WorkerStats};
pub use component::{LoadError, LoadErrorKind, PolicyComponent};
pub use engine::{Budget, Compiler, Limits, PolicyEngine, WorkUnits, lower_thread_priority};
pub use function_cache::{FunctionCache, FunctionCacheStats};
pub use guard::{
    Admission, Breaker, BreakerState, Decider, Decision, FailMode, GuardConfig, GuardCounters,
    GuardedSelector, SharedBreaker, Ticket,
};
pub use guest::{GuestScorer, GuestStats};
pub use selection::{Fault, FaultKind, SelectError, Selection, SelectionRequest, Selector, WorkerTable};
