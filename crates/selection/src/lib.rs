//! Selection, native and free of wasmtime types:
//! worker table + request → candidate columns (declared groups only) → host eligibility
//! → filters → scorers (weighted sum of costs) → validated costs → native picker.
//!
//! The same [`Selector`] runs native policies and guests: a [`Scorer`] is either. The
//! wasmtime host (`switchyard`) implements [`Scorer`] for a component instance; this
//! crate knows nothing of it, so a router, the replay simulator or a benchmark can select
//! natively without linking wasmtime.
//!
//! [`wire`] holds the JSON the CLI and the service exchange: requests, answers, error
//! kinds.

#![forbid(unsafe_code)]

mod columns;
pub mod compare;
mod containment;
mod error;
mod facts;
mod held;
mod native;
mod picker;
mod request;
mod scorer;
mod selector;
pub mod wire;
mod workers;

pub use columns::ColumnBuffers;
pub use containment::{BreakerState, FailMode};
pub use error::{Fault, FaultKind, InputError, SelectError};
pub use facts::HostFacts;
pub use held::HeldTable;
pub use native::NativeScorer;
pub use picker::pick;
pub use request::{RequestOptions, SelectionRequest, WorkerInputs, hashes_for_pool};
pub use scorer::{Call, CallReport, Scorer};
pub use selector::{Selection, Selector};
pub use workers::{Worker, WorkerTable};
