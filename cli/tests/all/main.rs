//! Switchyard's integration tests: one binary, a module per feature.
//! Guests are real components built from `policies/` by the `switchyard-test-guests` crate.

mod adversarial;
mod bounds;
mod c_guest;
mod cache;
mod cli;
mod compilers;
mod contract;
mod dynamo_store;
mod equivalence;
mod fleet;
mod fleet_faults;
mod guard;
mod isolation;
mod policies;
mod replay;
mod sandbox_cli;
mod server;
mod service;
mod service_compile;
mod service_evict;
mod service_fair;
mod service_hostile;
mod service_limits;
mod service_load;
mod service_quarantine;
mod service_shares;
mod service_state;
mod support;
mod unreadable_records;
mod world;
