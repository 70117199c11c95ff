//! The JSON wire types, one definition each, shared by the CLI and the service (and any
//! client: this crate links no wasmtime):
//!
//! - [`request`]: what `switchyard select --input` reads and `POST /v1/select` takes;
//! - [`answer`]: the selection either of them answers;
//! - [`api`]: the management API's bodies and answers;
//! - [`table`]: the worker tables the service holds, and their deltas;
//! - [`error`]: every error kind, and the service's error body.

pub mod answer;
pub mod api;
pub mod error;
pub mod request;
pub mod table;

pub use answer::{
    CandidateCost, ClassRoute, DecidedBy, Receipt, SelectionAnswer, TenantAnswer, UnroutedClass,
};
pub use error::{ErrorBody, ErrorDetail, ErrorKind, UnknownErrorKind};
pub use request::{
    MAX_RECEIPT_TOP, MAX_SLOTS_CEILING, ReceiptAsk, RequestJson, RequestLimits, RequestLimitsConfig,
    SAMPLE_REQUEST, WorkerJson, WorkerRankJson,
};
pub use table::{TableDelta, TableJson, TableState, TableVersion};
