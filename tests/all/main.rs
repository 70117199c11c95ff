//! Switchyard's integration tests: one binary, a module per feature.
//! Guests are real components built from `policies/` by `build.rs`.

mod cli;
mod contract;
mod equivalence;
mod policies;
mod server;
mod service;
mod service_load;
mod replay;
mod support;
mod world;
