//! Switchyard's integration tests: one binary, a module per feature.
//! Guests are real components built from `policies/` by `build.rs`.

mod cli;
mod contract;
mod equivalence;
mod replay;
mod support;
mod world;
