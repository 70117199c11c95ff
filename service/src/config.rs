//! The service's own limits (the `[service]` table of `switchyard.toml`); the sandbox's
//! limits are `switchyard::Limits` (`[limits]`), and each policy version's quarantine
//! breaker is set by `switchyard::GuardConfig` (`[guard]`: `quarantine_after`,
//! `backoff_initial`, `backoff_max`), the same table `switchyard select` reads.

use serde::{Deserialize, Serialize};

/// Limits on what clients may ask of the service. Each refusal is a clear error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceLimits {
    /// Largest request body, bytes (→ 413 `body-too-large`). 8 MiB: twice the largest
    /// component the engine accepts by default, so an oversized component is reported by
    /// the validator as `too-large` with its size rather than cut off here.
    pub max_body_bytes: usize,
    /// Uploads one tenant may make in any 60 s window (→ 429 `rate-limited`). 60: a CI
    /// pipeline pushing on every commit stays far below; each upload costs a compile.
    pub uploads_per_minute: usize,
    /// Distinct policy names per tenant (→ 409 `too-many-policies`). 32: a tenant needs a
    /// few (one per class at most); every version of each stays compiled in memory.
    pub max_policies_per_tenant: usize,
    /// Writes one tenant may make in any 60 s window: uploads, assignments and rollbacks
    /// together (→ 429 `rate-limited`). 120: every write rewrites and fsyncs the manifest
    /// under the one writer lock; a deploy script assigning a few classes per upload stays
    /// far below.
    pub writes_per_minute: usize,
    /// Versions kept per policy (→ 409 `too-many-versions`): the active one, the ones
    /// classes pin, and the rollback history, which is trimmed (oldest first) to make
    /// room for an upload. 16: every kept version stays compiled and loaded in memory.
    pub max_versions_per_policy: usize,
    /// Classes per tenant (→ 409 `too-many-classes`). 64: a class is a routing decision
    /// of the tenant's router (latency, batch, a few tiers), not a per-request key.
    pub max_classes_per_tenant: usize,
    /// Compilations at once. 1: compiling is CPU-bound; with more, hostile uploads could
    /// take every core from the selections. A compile holds its permit until Cranelift
    /// returns, even after its upload was answered `compile-timeout`; an upload waits
    /// for a permit at most `compile_timeout_ms` (`[limits]`), then → 503 `compile-busy`.
    pub compile_concurrency: usize,
    /// Idle guest instances kept per active policy version (a Store is single-threaded, so
    /// each concurrent selection needs its own). 8: more than the worker threads of a
    /// small host; beyond that an instance is dropped after use. Instances also count
    /// against the engine's `max_instances`.
    pub idle_instances_per_version: usize,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            uploads_per_minute: 60,
            max_policies_per_tenant: 32,
            writes_per_minute: 120,
            max_versions_per_policy: 16,
            max_classes_per_tenant: 64,
            compile_concurrency: 1,
            idle_instances_per_version: 8,
        }
    }
}
