//! The service's own limits (the `[service]` table of `switchyard.toml`); the sandbox's
//! limits are `switchyard::Limits` (`[limits]`), and each policy version's quarantine
//! breaker is set by `switchyard::GuardConfig` (`[guard]`: `quarantine_after`,
//! `backoff_initial`, `backoff_max`), the same table `switchyard select` reads.
//!
//! The table is read as a [`ServiceConfig`] (each field, its default and why, written
//! once) and validated into [`ServiceLimits`], so a running service only ever holds
//! limits that make sense (every cap at least 1).

use std::ops::Deref;

use serde::{Deserialize, Serialize};
use switchyard::selection::wire::{RequestLimits, RequestLimitsConfig};

/// `[service]` as written: every field optional (the default), no unknown ones. Each
/// refusal a limit causes is a clear error that names it. Validated into
/// [`ServiceLimits`], which is what the service holds.
///
/// The request limits are flat in the table (serde cannot deny unknown fields of a
/// flattened table) and become a [`RequestLimits`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Largest upload body (a component), bytes (→ 413 `body-too-large`). 8 MiB: twice
    /// the largest component the engine accepts by default, so an oversized component is
    /// reported by the validator as `too-large` with its size rather than cut off here.
    pub max_body_bytes: usize,
    /// Largest `POST /v1/select` body, bytes (→ 413 `body-too-large`). 2 MiB: a request at
    /// `max_slots` (10,000) with every worker field and every input column is ~1.3 MB.
    pub max_select_body_bytes: usize,
    /// Largest body of the other routes (tenants, routers, assignments), bytes (→ 413
    /// `body-too-large`). 64 KiB: these bodies are a name or an assignment, < 1 KB.
    pub max_management_body_bytes: usize,
    /// Largest upload `params` (the decoded query parameter), bytes (→ 400
    /// `invalid-params`). 16 KiB: a policy's parameters are a few numbers and names, < 1
    /// KB; every version keeps its text in the manifest and in memory.
    pub max_params_bytes: usize,
    /// Time allowed to receive a whole body once the headers are in, ms (→ 408
    /// `body-timeout`). 10 s: an 8 MiB upload over a slow 10 Mbit/s link takes ~7 s.
    pub body_read_timeout_ms: u64,
    /// Time allowed to receive a request's headers, ms, also the longest a kept-alive
    /// connection may sit idle; the connection is then closed. 10 s.
    pub header_read_timeout_ms: u64,
    /// Time a new connection has to send its first byte, ms; one that sends nothing is
    /// closed. 2,000: a client connects to send a request at once, so this only ever
    /// closes connections opened to hold a slot of `max_connections`.
    pub first_byte_timeout_ms: u64,
    /// Open connections at once. 1,024: routers keep pools of tens of connections each;
    /// every connection costs a task and up to 64 KiB of header buffer. At the cap, the
    /// connection idle longest (no request in progress: kept alive between requests, or
    /// not done sending its first request's headers) is closed to make room for the new
    /// one, so connections that send nothing cannot lock everyone out; only when every
    /// connection has a request in progress is the new one answered 503 `overloaded` and
    /// closed.
    pub max_connections: usize,
    /// Selections in flight at once, from the moment the caller is authenticated to the
    /// answer (body read included); one more is answered 503 `overloaded`. 64: each runs
    /// on a blocking thread and takes one guest instance, so this stays well under the
    /// engine's `max_instances` (256) and bounds the request memory held at once
    /// (64 × `max_select_body_bytes`).
    pub max_inflight_selections: usize,
    /// Uploads one tenant may make in any 60 s window (→ 429 `rate-limited`). 60: a CI
    /// pipeline pushing on every commit stays far below; each upload costs a compile.
    /// An upload is counted once it holds its place (`max_uploads_per_tenant`,
    /// `max_buffered_upload_bytes`), before its body is read: one whose body never
    /// arrives, or that is refused later, still counts.
    pub uploads_per_minute: usize,
    /// Uploads of one tenant at once, from authentication to answer (→ 429
    /// `tenant-busy`), counted before a byte of the body is read. 2: a deploy pushes one
    /// policy at a time, and each upload holds its body in memory until it is answered,
    /// so one tenant holds at most 2 × `max_body_bytes`.
    pub max_uploads_per_tenant: usize,
    /// Upload body bytes held at once, all tenants together (→ 503 `overloaded`): each
    /// upload reserves its declared `Content-Length` (`max_body_bytes` for a chunked
    /// body) before a byte of it is read, and holds it until answered. 64 MiB: eight
    /// uploads at `max_body_bytes` (real components are 6–300 KB), and what stalled
    /// uploads can make the server hold whatever their number. At least `max_body_bytes`.
    pub max_buffered_upload_bytes: usize,
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
    /// Worker tables one tenant may have the service hold (→ 409 `too-many-tables`). 8: a
    /// table is a router's pool of workers (one per model, a prefill and a decode pool),
    /// each at most the request limits' `max_workers` and `max_slots`; held in memory.
    pub max_tables_per_tenant: usize,
    /// Shadow runs waiting, across tenants; a sampled selection finding the queue full is
    /// not shadowed (counted `queue-full`). 256: shadows run on `shadow_threads` at the
    /// lowest CPU priority, so under load the queue fills and samples are dropped rather
    /// than live selections slowed.
    pub shadow_queue: usize,
    /// Shadow runs one tenant may have waiting or running (counted `tenant-full` past it):
    /// its share of the queue. 4.
    pub max_shadows_per_tenant: usize,
    /// Threads running shadows, each at the lowest CPU priority (`SCHED_IDLE`). 1.
    pub shadow_threads: usize,
    /// The most of one core each shadow thread may use, percent: after a run it rests
    /// until its CPU time is within this share of the time passed. 10: a core's idle time
    /// is not free (a sibling hyperthread, the caches: BENCHMARKS.md, "The service over
    /// HTTP"), so shadows take a small part of it, and the samples past it are dropped,
    /// counted.
    pub shadow_cpu_percent: usize,
    /// Bytes of captured selections one tenant's classes hold together; past it a class
    /// drops its oldest. 16 MiB: held in memory, and each line carries the request's whole
    /// table, so a large table's capture keeps its most recent selections only.
    pub max_capture_bytes_per_tenant: usize,
    /// Selections one class may capture (`PUT …/capture {"selections"}`). 100,000.
    pub max_capture_selections: usize,
    /// Compilations at once, each with its upload's configure check (an upload of bytes
    /// compiled before takes a permit for its check too: the check's instance is one of
    /// the engine's pool slots this many are set aside for). 1: compiling is CPU-bound;
    /// with more, hostile uploads could take every core from the selections. A compile holds its permit until Cranelift
    /// returns, even after its upload was answered `compile-timeout`; an upload waits
    /// for a permit at most `compile_timeout_ms` (`[limits]`), then → 503 `compile-busy`.
    pub compile_concurrency: usize,
    /// Idle guest instances kept per active policy version (a Store is single-threaded, so
    /// each concurrent selection needs its own). 8: more than the worker threads of a
    /// small host; beyond that an instance is dropped after use. Instances also count
    /// against the engine's `max_instances`.
    pub idle_instances_per_version: usize,
    /// Idle instances across all versions (→ beyond it the instance idle longest is
    /// dropped). 10,240: one for every recently used version of ten thousand tenants. An
    /// idle default-policy instance keeps tens of KiB resident, while making a fresh one
    /// costs each selection far more CPU (instantiate, configure, and the memory reset when
    /// it is dropped; BENCHMARKS.md, "Where the time goes"); `idle_rss_limit_mb` bounds
    /// what idle instances keep whatever their guests touch. `serve` sizes the engine's
    /// pool (`[limits] max_instances`) to fit these, the selections in flight and the
    /// compiles, unless it is set.
    pub max_idle_instances: usize,
    /// Resident memory of the whole process, MiB, above which idle instances are shed
    /// (longest idle first) and no more are kept until it is back under. 1,536; 0: no
    /// such bound. It is what keeps a guest that fills its memory from being kept idle
    /// ten thousand times.
    pub idle_rss_limit_mb: u64,
    /// Whether `serve` loads every stored version in the background once it answers
    /// (true), or each only when a selection first needs it (false). Either way start-up
    /// reads only the registry, so the first selections are answered at once however many
    /// versions there are; a selection that reaches a version not loaded yet loads it
    /// itself (from the compiled cache, ~ms). true: after a restart every version is
    /// ready within seconds, and a version that no longer loads is reported at once.
    pub load_on_start: bool,
    /// A loaded version not selected for this long, seconds, is evicted: its
    /// configuration, idle instances and (when no other loaded version shares it) its
    /// compiled component are dropped, and its next selection loads it again from the
    /// compiled cache (~ms). 600; 0 never evicts. What bounds memory with many tenants is
    /// the versions in use, not the versions stored.
    pub evict_after_secs: u64,
    /// Compiled components kept in memory after every version using them was evicted,
    /// the most recently selected first (→ beyond it, the one selected longest ago is
    /// dropped at the next eviction pass; all of them while resident memory is over
    /// `idle_rss_limit_mb`). 1,024; 0 drops a component with its last loaded version.
    /// A version evicted whose component is kept loads again by instantiating and
    /// configuring alone; otherwise it first loads the component from the compiled cache,
    /// on its selection's path (BENCHMARKS.md, "Where the time goes"). What one keeps is
    /// its metadata and its code, no instance (the default policy's: BENCHMARKS.md, "Ten
    /// thousand tenants on one server"), mapped from its artifact, file-backed, when it
    /// was loaded from the compiled cache; in anonymous memory when this process compiled
    /// it for an upload.
    pub max_unused_components: usize,
    /// Selections of one tenant at once (→ 429 `tenant-busy`), each running on an
    /// instance of its own. 16: more than the selection threads of a small host, so one
    /// tenant's burst (many versions, many concurrent selects) holds at most 16 of the
    /// pool's slots and never starves another tenant's instances. Counted from the
    /// tenant's own token before `max_inflight_selections` (a body still arriving
    /// counts), so one tenant never holds every selection slot; a router's selections
    /// count for the tenant their body names once it is read.
    pub max_in_flight_per_tenant: usize,
    /// Selections one router's token may have in flight at once, bodies still arriving
    /// included (→ 429 `router-busy`), counted before `max_inflight_selections`. Unset:
    /// half of `max_inflight_selections` (32), at least 1; set, it must be less than
    /// `max_inflight_selections`. A router names its tenant only in the body, so that
    /// tenant's share counts once the body is read: until then this bound is what keeps
    /// one router's slow bodies from holding every selection slot, leaving room for the
    /// tenants' own calls and for other routers.
    pub max_in_flight_per_router: Option<usize>,
    /// Whether `/metrics` answers without a token. false: it needs the admin token (401
    /// without, 403 with another), since its series name every tenant and policy. true:
    /// without the admin token it answers the server-wide series only (none with a
    /// `tenant` or `policy` label), for a scraper that cannot send a bearer token.
    pub public_metrics: bool,
    /// Workers in one request's table (→ 400 `invalid-input`); see [`RequestLimitsConfig`]
    /// for this and the six below, their defaults and why.
    pub max_workers: usize,
    /// Data-parallel ranks of one worker.
    pub max_dp_size: u32,
    /// Candidates (worker, rank) in one request.
    pub max_slots: usize,
    /// Taints of one worker.
    pub max_taints_per_worker: usize,
    /// Entries of `preferred_taints`.
    pub max_preferred_taints: usize,
    /// Entries of `prefix_hashes`.
    pub max_prefix_hashes: usize,
    /// `ceil(prompt_tokens / block_size)`.
    pub max_prompt_blocks: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        let r = RequestLimitsConfig::default();
        Self {
            max_body_bytes: 8 << 20,
            max_select_body_bytes: 2 << 20,
            max_management_body_bytes: 64 << 10,
            max_params_bytes: 16 << 10,
            body_read_timeout_ms: 10_000,
            header_read_timeout_ms: 10_000,
            first_byte_timeout_ms: 2_000,
            max_connections: 1_024,
            max_inflight_selections: 64,
            uploads_per_minute: 60,
            max_uploads_per_tenant: 2,
            max_buffered_upload_bytes: 64 << 20,
            max_policies_per_tenant: 32,
            writes_per_minute: 120,
            max_versions_per_policy: 16,
            max_classes_per_tenant: 64,
            max_tables_per_tenant: 8,
            shadow_queue: 256,
            max_shadows_per_tenant: 4,
            shadow_threads: 1,
            shadow_cpu_percent: 10,
            max_capture_bytes_per_tenant: 16 << 20,
            max_capture_selections: 100_000,
            compile_concurrency: 1,
            idle_instances_per_version: 8,
            max_idle_instances: 10_240,
            idle_rss_limit_mb: 1_536,
            load_on_start: true,
            evict_after_secs: 600,
            max_unused_components: 1_024,
            max_in_flight_per_tenant: 16,
            max_in_flight_per_router: None,
            public_metrics: false,
            max_workers: r.max_workers,
            max_dp_size: r.max_dp_size,
            max_slots: r.max_slots,
            max_taints_per_worker: r.max_taints_per_worker,
            max_preferred_taints: r.max_preferred_taints,
            max_prefix_hashes: r.max_prefix_hashes,
            max_prompt_blocks: r.max_prompt_blocks,
        }
    }
}

/// The service's limits: a [`ServiceConfig`] whose every value was checked (built only
/// from one, by `TryFrom` or as `[service]` is deserialised), and the request limits it
/// names. Reads like the config (`limits.max_body_bytes`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "ServiceConfig")]
pub struct ServiceLimits {
    config: ServiceConfig,
    requests: RequestLimits,
}

impl Deref for ServiceLimits {
    type Target = ServiceConfig;
    fn deref(&self) -> &ServiceConfig {
        &self.config
    }
}

impl ServiceLimits {
    /// Slots of the engine's pool these limits may hold at once: selections in flight,
    /// idle instances, uploads' configure checks and the service's own loads'
    /// (`[limits] max_instances` must be at least this, so the pool never runs out).
    pub fn instances_needed(&self) -> usize {
        // The last one: the service's own loads' configure checks (one at a time). Each
        // shadow thread runs one guest at a time, beside the selections.
        self.max_inflight_selections
            + self.max_idle_instances
            + self.compile_concurrency
            + self.shadow_threads
            + 1
    }

    /// What one selection request may ask for (→ 400 `invalid-input` naming the limit).
    pub fn requests(&self) -> &RequestLimits {
        &self.requests
    }

    /// Selections one router may have in flight: `max_in_flight_per_router`, or half of
    /// `max_inflight_selections` (at least 1) when it is not set.
    pub fn router_share(&self) -> usize {
        self.max_in_flight_per_router.unwrap_or((self.max_inflight_selections / 2).max(1))
    }
}

impl TryFrom<ServiceConfig> for ServiceLimits {
    type Error = String;

    /// Every size, time and count must be at least 1 (`idle_instances_per_version`,
    /// `max_unused_components` and `uploads_per_minute` may be 0: keep no idle instance,
    /// no component without a loaded version, accept no upload).
    fn try_from(c: ServiceConfig) -> Result<Self, String> {
        let positive = [
            ("max_body_bytes", c.max_body_bytes as u64),
            ("max_select_body_bytes", c.max_select_body_bytes as u64),
            ("max_management_body_bytes", c.max_management_body_bytes as u64),
            ("max_params_bytes", c.max_params_bytes as u64),
            ("body_read_timeout_ms", c.body_read_timeout_ms),
            ("header_read_timeout_ms", c.header_read_timeout_ms),
            ("first_byte_timeout_ms", c.first_byte_timeout_ms),
            ("max_connections", c.max_connections as u64),
            ("max_inflight_selections", c.max_inflight_selections as u64),
            ("max_policies_per_tenant", c.max_policies_per_tenant as u64),
            ("writes_per_minute", c.writes_per_minute as u64),
            ("compile_concurrency", c.compile_concurrency as u64),
            ("max_in_flight_per_tenant", c.max_in_flight_per_tenant as u64),
            ("max_in_flight_per_router", c.max_in_flight_per_router.unwrap_or(1) as u64),
            ("max_uploads_per_tenant", c.max_uploads_per_tenant as u64),
            ("max_buffered_upload_bytes", c.max_buffered_upload_bytes as u64),
            ("max_versions_per_policy", c.max_versions_per_policy as u64),
            ("max_classes_per_tenant", c.max_classes_per_tenant as u64),
            ("max_tables_per_tenant", c.max_tables_per_tenant as u64),
            ("shadow_queue", c.shadow_queue as u64),
            ("max_shadows_per_tenant", c.max_shadows_per_tenant as u64),
            ("shadow_threads", c.shadow_threads as u64),
            ("shadow_cpu_percent", c.shadow_cpu_percent as u64),
            ("max_capture_bytes_per_tenant", c.max_capture_bytes_per_tenant as u64),
            ("max_capture_selections", c.max_capture_selections as u64),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("[service] {name} must be at least 1"));
        }
        // The selection slots are a tokio semaphore, which holds at most this many permits.
        let most = tokio::sync::Semaphore::MAX_PERMITS;
        if c.max_inflight_selections > most {
            return Err(format!(
                "[service] max_inflight_selections {} is over {most}",
                c.max_inflight_selections
            ));
        }
        if let Some(router) = c.max_in_flight_per_router
            && router >= c.max_inflight_selections
        {
            return Err(format!(
                "[service] max_in_flight_per_router ({router}) must be less than max_inflight_selections ({}): \
                 one router must leave selection slots for the tenants' own calls",
                c.max_inflight_selections
            ));
        }
        if c.max_buffered_upload_bytes < c.max_body_bytes {
            return Err(format!(
                "[service] max_buffered_upload_bytes ({}) must be at least max_body_bytes ({}), \
                 or an upload of max_body_bytes could never be read",
                c.max_buffered_upload_bytes, c.max_body_bytes
            ));
        }
        let requests = RequestLimits::new(RequestLimitsConfig {
            max_workers: c.max_workers,
            max_dp_size: c.max_dp_size,
            max_slots: c.max_slots,
            max_taints_per_worker: c.max_taints_per_worker,
            max_preferred_taints: c.max_preferred_taints,
            max_prefix_hashes: c.max_prefix_hashes,
            max_prompt_blocks: c.max_prompt_blocks,
        })
        .map_err(|e| format!("[service] {e}"))?;
        Ok(Self { config: c, requests })
    }
}

impl Default for ServiceLimits {
    fn default() -> Self {
        Self::try_from(ServiceConfig::default()).expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flat_table_is_validated_into_limits() {
        let limits: ServiceLimits =
            serde_json::from_str(r#"{"max_dp_size": 8, "max_inflight_selections": 3}"#).unwrap();
        assert_eq!(limits.requests().config().max_dp_size, 8);
        assert_eq!(limits.max_inflight_selections, 3);
        assert_eq!(limits.max_select_body_bytes, 2 << 20);
        let zero = serde_json::from_str::<ServiceLimits>(r#"{"max_connections": 0}"#).unwrap_err();
        assert!(zero.to_string().contains("max_connections must be at least 1"), "{zero}");
        let slots = serde_json::from_str::<ServiceLimits>(r#"{"max_slots": 0}"#).unwrap_err();
        assert!(slots.to_string().contains("max_slots must be at least 1"), "{slots}");
        let unknown = serde_json::from_str::<ServiceLimits>(r#"{"max_dp": 1}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown field"), "{unknown}");
        let bad = ServiceConfig { max_inflight_selections: 0, ..ServiceConfig::default() };
        assert!(ServiceLimits::try_from(bad).unwrap_err().contains("max_inflight_selections"));
        // 0 would refuse every write: only these two may be 0.
        let writes = serde_json::from_str::<ServiceLimits>(r#"{"writes_per_minute": 0}"#).unwrap_err();
        assert!(writes.to_string().contains("writes_per_minute must be at least 1"), "{writes}");
        let zeros = r#"{"uploads_per_minute": 0, "idle_instances_per_version": 0}"#;
        assert!(serde_json::from_str::<ServiceLimits>(zeros).is_ok());
    }

    #[test]
    fn a_routers_share_is_half_the_selection_slots_unless_set_and_always_fewer() {
        assert_eq!(ServiceLimits::default().router_share(), 32);
        let few: ServiceLimits = serde_json::from_str(r#"{"max_inflight_selections": 1}"#).unwrap();
        assert_eq!(few.router_share(), 1, "a router may still select");
        let set: ServiceLimits = serde_json::from_str(r#"{"max_in_flight_per_router": 5}"#).unwrap();
        assert_eq!(set.router_share(), 5);
        let all = r#"{"max_inflight_selections": 8, "max_in_flight_per_router": 8}"#;
        let all = serde_json::from_str::<ServiceLimits>(all).unwrap_err().to_string();
        assert!(
            all.contains("max_in_flight_per_router (8) must be less than max_inflight_selections (8)"),
            "{all}"
        );
        let zero = serde_json::from_str::<ServiceLimits>(r#"{"max_in_flight_per_router": 0}"#).unwrap_err();
        assert!(zero.to_string().contains("max_in_flight_per_router must be at least 1"), "{zero}");
    }

    #[test]
    fn the_upload_buffer_budget_holds_at_least_one_upload() {
        let small = r#"{"max_body_bytes": 1000, "max_buffered_upload_bytes": 999}"#;
        let small = serde_json::from_str::<ServiceLimits>(small).unwrap_err().to_string();
        assert!(
            small.contains("max_buffered_upload_bytes (999) must be at least max_body_bytes (1000)"),
            "{small}"
        );
        let limits = ServiceLimits::default();
        assert_eq!((limits.max_uploads_per_tenant, limits.max_buffered_upload_bytes), (2, 64 << 20));
        assert_eq!((limits.first_byte_timeout_ms, limits.public_metrics), (2_000, false));
        let zero = serde_json::from_str::<ServiceLimits>(r#"{"max_uploads_per_tenant": 0}"#).unwrap_err();
        assert!(zero.to_string().contains("max_uploads_per_tenant must be at least 1"), "{zero}");
    }
}
