//! Switchyard inside Dynamo's own router: the worker-selection plugin type `switchyard`
//! for `dynamo-kv-router` 1.6.1, which runs a tenant's policy component, sandboxed, as
//! Dynamo's picker (or, composed by the host, as one of its scorers), from a file or
//! followed in a Switchyard store.
//!
//! # Registration
//!
//! A Dynamo image links this crate and adds the type to its plugin catalog at start-up:
//!
//! ```no_run
//! let mut registry = dynamo_kv_router::plugins::RouterPluginRegistry::default();
//! switchyard_dynamo::register(&mut registry).expect("`switchyard` registered once");
//! ```
//!
//! and its router policy file selects an instance of it (see [`SwitchyardConfig`] for
//! every field):
//!
//! ```yaml
//! worker_selection:
//!   aggregated: tenant-a
//!   instances:
//!     - name: tenant-a
//!       type: switchyard
//!       parameters:
//!         policy: {file: /etc/switchyard/tenant-a.wasm}
//!         params: {overlap_score_credit: 0.5}
//!         on_fault: open
//! ```
//!
//! Dynamo calls the provider once per instance when it resolves its plugins, and the
//! factory it returns once per routing partition and pool, later, where nothing may fail.
//! So the provider does everything that can fail: it checks every field (each refusal
//! names it: `policy.file: wrong-world: …`, `temperature: must be finite and ≥ 0`), reads
//! and compiles the component, and instantiates and configures it once with `params`. A
//! factory call then only makes a sibling instance, created on its first selection.
//!
//! # Policy source
//!
//! - `policy: {file: PATH}`: a component file, read once at start-up, with the instance's
//!   `params` and `on_fault`.
//! - `policy: {store: {data_dir: DIR, tenant: NAME, class: NAME, poll_ms: 200}}`: the
//!   version a tenant's class routes to in the data directory a running `switchyard
//!   serve` writes (read-only, without its lock: [`switchyard_store::StoreReader`]), with
//!   that version's uploaded parameters and the assignment's `on_fault`
//!   ([`StorePolicies`]). A thread of the instance's checks the stamp of the tenant's
//!   record file every `poll_ms`; when the class routes elsewhere (an upload it follows,
//!   an assignment, a rollback) it reads, compiles and configures the new version off the
//!   selection path, under the adapter's one compile permit and `compile_timeout_ms`, and
//!   only then swaps it in ([`LivePolicy`]): each picker takes a sibling of it on its
//!   next selection, so no selection waits on a compile, none fails, and each answer is
//!   one version's. A change that cannot be taken (a component that does not load, the
//!   tenant gone) leaves the running version in place, reported by
//!   [`LivePolicy::last_error`] and a `tracing` warning. An unassigned class runs the
//!   builtin default's guest build, as the service routes it; so does a class assigned to
//!   a builtin by name. Pickers of a store source declare all three input groups to
//!   Dynamo, because Dynamo fixes a picker's inputs when it builds the policy and a later
//!   version may read any of them.
//! - `policy: {store: {data_dir: DIR, tenant_from: routing_group, tenants: {GROUP: TENANT},
//!   class: NAME, max_tenants: 4096}}`: the same, per routing partition. Dynamo calls the
//!   factory with each partition's `RoutingPartitionRef { model_name, routing_group }`;
//!   `tenant_from` (`routing_group` or `model_name`) names the partition's tenant, through
//!   `tenants` where it lists the key, else the key itself. Every tenant of the data
//!   directory is loaded at start-up and followed; a partition naming a tenant not seen
//!   before is followed from its first selection (the follower loads its version at once;
//!   until then it runs the builtin default). A tenant without the class, or not in the
//!   store at all, runs the builtin default, as `serve` routes a class nobody assigned.
//!   Each tenant has its own versions, breakers and errors: one tenant's bad upload or
//!   quarantine touches no other partition. Beyond `max_tenants` tenants, further
//!   partitions run the builtin default, unfollowed, with a warning.
//! - `registry: nats://HOST:PORT` in place of `data_dir`, in either form: the same, on a
//!   fleet's NATS registry (what `switchyard serve --registry` replicas share): every
//!   record loaded once, then watched, each change waking the follower at once. A
//!   registry lost later leaves every tenant's running version serving, each
//!   `last_error` saying so.
//!
//! Compiles run on the follower's thread (at start-up, the caller's) unless
//! `compile_worker` names a `switchyard` binary: then each runs in a `switchyard
//! compile-worker` process, killed at `limits.compile_timeout_ms`. On a thread, Cranelift
//! cannot be stopped: a compile past its deadline is refused but holds the adapter's one
//! compile permit until it ends, and a version refused for the permit meanwhile is tried
//! again on the next poll.

//! # Picker mode
//!
//! Each policy Dynamo builds is a [`WorkerSelectionPolicy`] with no filters or scorers of
//! Dynamo's and a [`SwitchyardPicker`]: Dynamo applies its own eligibility (allowed
//! workers, required taints, overload, pins, an exclusive affinity target as its default
//! selector does) and hands the picker the eligible rows. The picker
//!
//! 1. declares the inputs the guest reads (`cache` → `CACHE`, `load` → `LOAD`,
//!    `affinity` → `PREFERRED_TAINT`; in fail-open mode all three, which the native
//!    default that then decides reads);
//! 2. sorts Dynamo's rows, which arrive in hash-map order, into the contract's ascending
//!    (worker id, dp rank), and builds a [`switchyard::WorkerTable`] and the columns (the
//!    order and the table are kept while Dynamo hands over the same rows in the same
//!    order, as it does while its worker map is unchanged);
//! 3. runs the guest's filter and score and Switchyard's picker through a
//!    [`switchyard::GuardedSelector`] (fault containment, a quarantine breaker per
//!    version shared by every partition of the instance), commits the pick through
//!    `on-selected`;
//! 4. maps the chosen slot back to Dynamo's row.
//!
//! # Scorer mode
//!
//! A Dynamo image with scorers of its own composes a guest with them: its provider calls
//! [`LoadedPolicy::scorers`] (which refuses, naming the reason, a policy that filters or
//! wants commits: a Dynamo scorer can neither drop a row nor learn the pick) and its
//! factory puts [`ScorerFactory::scorer`] beside its own scorers in a
//! `WorkerSelectionPolicy`. The guest's costs (the columns built as in picker mode, no
//! pin: Dynamo applied it before scoring) are written per row and Dynamo adds them to its
//! scorers' in declaration order; its picker decides. Scorer mode takes a file source
//! only: a followed store's next version might filter or want commits. Faults are contained as in picker
//! mode: fail-open writes the native default's costs instead, fail-closed fails the
//! selection.
//!
//! # What maps, and how
//!
//! | Switchyard | from Dynamo 1.6.1's picker view |
//! | --- | --- |
//! | `worker-id` | `ScoredWorkerCandidate::worker().worker_id` |
//! | `dp-rank` | Dynamo's own rank: each worker's slots are exactly its candidate ranks (`Worker::with_ranks`), wherever they start (`data_parallel_start_rank`) and whichever Dynamo's filters left |
//! | `device-overlap-blocks` | `device_overlap_blocks()` when the lookup reported tiers (`has_tier_matches()`), else the effective overlap (`accounting_cache_estimate().0`), as Dynamo's default does; rounded to whole blocks |
//! | `host-overlap-blocks`, `disk-overlap-blocks` | `host_overlap_blocks()`, `disk_overlap_blocks()` (whole blocks) |
//! | `cached-tokens` | `accounting_cache_estimate().1` |
//! | `active-prefill-tokens` | `load.active_prefill_tokens()` (0 when `!is_available()`) |
//! | `decode-blocks` | `load.decode_cost_blocks()` (whole blocks) |
//! | `active-requests` | `load.active_requests()` |
//! | `preferred-multiplier` | `preferred_taint_multiplier()`, as given (`RequestOptions::worker_multipliers`) |
//! | `prompt-tokens`, `block-size`, `request-blocks`, `expected-output-tokens` | the context's, saturated to u32 |
//! | `pinned` | `pinned_worker()` |
//! | `pool` | the pool Dynamo builds the policy for: aggregated, prefill, decode (encode routes as aggregated) |
//! | temperature | the request's `router_temperature_override()`, else the instance's `temperature` |
//!
//! What 1.6.1 does not give a plugin, and how the adapter fills it:
//!
//! - **prefix hashes**: `prefix-hashes()` answers `none` (the request's token sequence
//!   and block hashes are crate-private to Dynamo). Hash-affinity policies (CHWBL,
//!   two-choice, SGLang's cache-aware) then fall back to whatever they do without
//!   hashes.
//! - **policy class**: `policy-class()` answers the request's session agent header
//!   `x-dynamo-meta-policy-class` (1–64 bytes), else `none`: Dynamo's own
//!   `SchedulingRequest::policy_class` is not on `WorkerSelectionContext`.
//! - **capacities**: `worker-capacity()` and `candidate-capacities()` answer `none`
//!   (workers' `total_kv_blocks` / `max_num_batched_tokens` stay with the host).
//! - **the per-request seed**: derived deterministically from the request's data (prompt
//!   tokens, block size, request blocks, expected output, session id) and the candidate
//!   rows (ids, ranks, loads), so the same request over the same state picks the same
//!   worker, and ties spread as the loads move.
//! - **shared-cache hits** (`shared_hits()`) and Dynamo's per-request overrides of the
//!   cost's weights (`router_config_override`: credit, prefill scale): not visible
//!   either; the policy's `params` hold its weights. A decode pool whose Dynamo host
//!   forces `overlap_score_credit = 0` per request needs `params: {overlap_score_credit:
//!   0}` on its instance.
//!
//! - **whether the selection is a dry run**: Dynamo's query-only schedules reach the
//!   picker like any other, so the picker commits every pick through `on-selected`; a
//!   stateful guest inside Dynamo also learns of requests that were never sent.
//!
//! A newer Dynamo that put these on `WorkerSelectionContext` (the token blocks' hashes,
//! the policy class, the workers' configs, a request id or seed, the overrides) would let
//! the adapter pass each one through unchanged; the sections above then shrink to the
//! table.
//!
//! # Faults
//!
//! Contained as everywhere in Switchyard: a guest that spins, traps, exhausts memory or
//! answers garbage is stopped by the sandbox's limits; fail-open (the default) lets
//! Switchyard's native default policy decide over the same columns, fail-closed returns
//! Dynamo's [`WorkerSelectionPolicyError`](dynamo_kv_router::WorkerSelectionPolicyError)
//! naming the fault. The picker never panics on a guest's behalf.

#![forbid(unsafe_code)]

mod capacity;
mod config;
mod follow;
mod picker;
mod rows;
mod scorer;
mod source;
mod version;

use std::sync::Arc;

use dynamo_kv_router::plugins::{
    RouterPluginRegistry, WorkerSelectionPolicyProvider, WorkerSelectionPolicyRegistryError,
};
use dynamo_kv_router::{
    KvRouterConfig, RoutingPartitionRef, WorkerSelectionPolicy, WorkerSelectionPolicyFactory, WorkerType,
};
use switchyard_guest_sdk::Pool;

pub use capacity::{Capacities, WorkerCapacity};
pub use config::{ConfigError, PartitionKey, PolicySource, StoreAt, StoreSource, SwitchyardConfig, TenantOf};
pub use follow::StorePolicies;
pub use picker::SwitchyardPicker;
pub use rows::pool_of;
pub use scorer::{ScorerFactory, SwitchyardScorer};
pub use version::{LivePolicy, LoadedPolicy};

/// The worker-selection policy type this crate registers.
pub const POLICY_TYPE: &str = "switchyard";

/// Adds the worker-selection type `switchyard` to Dynamo's plugin catalog. Fails only if
/// the catalog has a type of that name already.
pub fn register(registry: &mut RouterPluginRegistry) -> Result<(), WorkerSelectionPolicyRegistryError> {
    registry.register_worker_selection(POLICY_TYPE, provider())
}

/// The provider behind `switchyard`: parameters → a checked, loaded policy (followed, for
/// a store source) → the factory Dynamo calls per routing partition.
pub fn provider() -> WorkerSelectionPolicyProvider {
    Arc::new(|parameters| Ok(factory_for(&SwitchyardConfig::from_parameters(parameters)?)?))
}

/// The picker-mode factory for `config`: a file's policy for every partition, or a store's,
/// followed (each partition its tenant's, for a partition-aware source). Loads and
/// compiles now; each failure names the field at fault.
pub fn factory_for(config: &SwitchyardConfig) -> Result<WorkerSelectionPolicyFactory, ConfigError> {
    factory_with_capacities(config, None)
}

/// [`factory_for`], the pickers' tables carrying the capacities `capacities` reports for
/// their partition.
pub fn factory_with_capacities(
    config: &SwitchyardConfig,
    capacities: Option<Arc<dyn Capacities>>,
) -> Result<WorkerSelectionPolicyFactory, ConfigError> {
    Ok(match config.source() {
        PolicySource::Store(_) => StorePolicies::load(config)?.factory_with(capacities),
        PolicySource::File(_) => LivePolicy::load(config)?.factory_with(capacities),
    })
}

/// Picker mode: the factory Dynamo calls once per routing partition and pool, each
/// partition running the policy `policy_of` gives it, its table carrying the capacities
/// `capacities` reports for it.
fn picker_factory(
    policy_of: impl Fn(RoutingPartitionRef<'_>) -> Arc<LivePolicy> + Send + Sync + 'static,
    capacities: Option<Arc<dyn Capacities>>,
) -> WorkerSelectionPolicyFactory {
    Arc::new(move |router_config, worker_type, partition| {
        policy_of(partition).policy(router_config, worker_type, partition_capacities(&capacities, partition))
    })
}

/// The capacities of `partition`, from `source`.
fn partition_capacities(
    source: &Option<Arc<dyn Capacities>>,
    partition: RoutingPartitionRef<'_>,
) -> Option<capacity::PartitionCapacities> {
    source.as_ref().map(|source| capacity::PartitionCapacities {
        source: Arc::clone(source),
        model_name: partition.model_name.to_string(),
        routing_group: partition.routing_group.to_string(),
    })
}

impl LoadedPolicy {
    /// Picker mode for this version alone: the factory Dynamo calls once per routing
    /// partition and pool.
    pub fn factory(self: Arc<Self>) -> WorkerSelectionPolicyFactory {
        LivePolicy::fixed(self).factory()
    }

    /// Scorer mode for this version alone (see [`LivePolicy::scorers`]).
    pub fn scorers(self: &Arc<Self>) -> Result<ScorerFactory, ConfigError> {
        LivePolicy::fixed(Arc::clone(self)).scorers()
    }
}

impl StorePolicies {
    /// Picker mode: the factory Dynamo calls once per routing partition and pool; each
    /// partition runs its tenant's policy ([`StorePolicies::for_partition`]).
    pub fn factory(self: Arc<Self>) -> WorkerSelectionPolicyFactory {
        self.factory_with(None)
    }

    /// [`StorePolicies::factory`], with the capacities `capacities` reports.
    pub fn factory_with(
        self: Arc<Self>,
        capacities: Option<Arc<dyn Capacities>>,
    ) -> WorkerSelectionPolicyFactory {
        picker_factory(move |partition| self.for_partition(partition), capacities)
    }
}

impl LivePolicy {
    /// Loads the policy of a file source, once. (A store source is followed:
    /// [`StorePolicies::load`].) Each failure names the field at fault.
    pub fn load(config: &SwitchyardConfig) -> Result<Arc<Self>, ConfigError> {
        match config.source() {
            PolicySource::File(path) => {
                let engine = config.engine()?;
                let bytes = std::fs::read(path).map_err(|e| {
                    ConfigError::new("policy.file", format!("cannot read {}: {e}", path.display()))
                })?;
                let name =
                    path.file_stem().map_or_else(|| "policy".into(), |s| s.to_string_lossy().into_owned());
                Ok(Self::fixed(LoadedPolicy::from_bytes(config, &engine, &bytes, name)?))
            }
            PolicySource::Store(_) => Err(ConfigError::new(
                "policy.store",
                "a store source is followed while the router runs: load it with `StorePolicies::load`",
            )),
        }
    }

    /// A picker for `pool`, at the instance's temperature, else `router_temperature`.
    pub fn picker(self: &Arc<Self>, pool: Pool, router_temperature: f64) -> SwitchyardPicker {
        let temperature = self.temperature.unwrap_or(router_temperature);
        SwitchyardPicker::new(Arc::clone(self), pool, temperature, None)
    }

    /// Picker mode: the factory Dynamo calls once per routing partition and pool.
    pub fn factory(self: Arc<Self>) -> WorkerSelectionPolicyFactory {
        self.factory_with(None)
    }

    /// [`LivePolicy::factory`], with the capacities `capacities` reports.
    pub fn factory_with(
        self: Arc<Self>,
        capacities: Option<Arc<dyn Capacities>>,
    ) -> WorkerSelectionPolicyFactory {
        picker_factory(move |_| Arc::clone(&self), capacities)
    }

    /// The policy Dynamo runs for one partition and pool: no filters or scorers of
    /// Dynamo's, this policy's picker.
    fn policy(
        self: &Arc<Self>,
        router_config: &KvRouterConfig,
        worker_type: WorkerType,
        capacities: Option<capacity::PartitionCapacities>,
    ) -> WorkerSelectionPolicy {
        let temperature = self.temperature.unwrap_or(router_config.router_temperature);
        let picker = SwitchyardPicker::new(Arc::clone(self), pool_of(worker_type), temperature, capacities);
        WorkerSelectionPolicy::new(router_config.clone(), worker_type.as_str(), Vec::new(), Box::new(picker))
            // As Dynamo's default selector: an eligible affinity target is the only candidate.
            .with_exclusive_affinity(true)
    }

    /// Scorer mode: a factory of [`SwitchyardScorer`]s for a host that composes them with
    /// its own scorers. Refused, with the reason, for a policy that filters or wants
    /// commits (a Dynamo scorer can neither drop a row nor learn the pick), and for a
    /// followed source (a later version might do either). Call it where failing is
    /// allowed (a provider); the factory's scorers cannot fail to be made.
    pub fn scorers(self: &Arc<Self>) -> Result<ScorerFactory, ConfigError> {
        let info = self.current().info;
        let why = if self.followed {
            Some("follows a store, whose next version may filter or want commits (use a file source)")
        } else if info.filters {
            Some("filters candidates, which a Dynamo scorer cannot (use picker mode)")
        } else if info.wants_commits {
            Some("wants commits (`on-selected`), which a Dynamo scorer never sees (use picker mode)")
        } else {
            None
        };
        match why {
            Some(why) => Err(ConfigError::new("policy", format!("scorer mode: the policy {why}"))),
            None => Ok(ScorerFactory::new(self.current())),
        }
    }
}
