//! The host library's own tests: one binary, a module per property, on real guest
//! components (built from `policies/` by `switchyard-test-util`). The end-to-end suite,
//! which drives the `switchyard` binary, is the root package's `tests/all`.

mod adversarial;
mod artifact_cache;
mod bounds;
mod contract;
mod equivalence;
mod guard;
mod isolation;
mod policies;
mod world;
