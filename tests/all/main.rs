//! Switchyard's integration tests: one binary, a module per feature.
//! Guests are real components built from `policies/` by `switchyard-test-util`; the host
//! library's own tests are `runtime/tests/all`.

mod c_guest;
mod cache_cli;
mod cli;
mod compilers;
mod dynamo_store;
mod fleet;
mod fleet_faults;
mod guide;
mod receipts;
mod replay;
mod rollout;
mod sandbox_cli;
mod service;
mod service_answers;
mod service_compile;
mod service_evict;
mod service_fair;
mod service_hostile;
mod service_limits;
mod service_load;
mod service_quarantine;
mod service_shares;
mod service_state;
mod service_tables;
mod unreadable_records;
