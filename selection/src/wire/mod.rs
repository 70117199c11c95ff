//! The JSON wire types: what `switchyard select --input` reads and the service's
//! `POST /v1/select` accepts ([`request`]), shared by the CLI and the service so
//! there is one definition of each.

pub mod request;

pub use request::{
    MAX_SLOTS_CEILING, PoolJson, RequestJson, RequestLimits, RequestLimitsConfig, SAMPLE_REQUEST, WorkerJson,
    WorkerRankJson,
};
