//! The service's state: the committed manifest, the compiled versions, and the routing
//! snapshot selections read.
//!
//! Hot swap: every mutation builds a new immutable [`Snapshot`] and swaps it in with one
//! atomic pointer store (`ArcSwap`). A selection loads the snapshot once and holds an
//! `Arc` to the version it runs, so a swap never disturbs it: it finishes on the old
//! version, the next one sees the new. Mutations are serialised by one async mutex and
//! reach the disk (the manifest) before the swap, so an acknowledged change is durable.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use switchyard::guard::GuardConfig;
use switchyard::selection::{Call, Scorer};
use switchyard::{
    ArtifactCache, FailMode, Fault, GuardedSelector, GuestScorer, Limits, PolicyComponent, PolicyEngine,
    SharedBreaker,
};
use switchyard_builtins::{self as builtin, Builtin};
use switchyard_guest_sdk::{PolicyInfo, WorkerRank};
use tokio::sync::{MutexGuard, Semaphore};

use crate::config::ServiceLimits;
use crate::error::ApiError;
use crate::metrics::{Metrics, PolicyMetrics, TenantVersions};
use crate::rates::WriteRates;
use crate::registry::{Registry, RegistryOptions};
use crate::store::{Manifest, Store, VersionRecord};

/// (tenant, policy name, version).
pub type VersionKey = (String, String, String);

/// Idle instances across every version, against `max_idle_instances`: idle instances
/// hold slots of the engine's pool (and their memory), so they are bounded in total,
/// leaving the pool's other slots to selections in flight.
#[derive(Debug)]
pub struct IdleSlots {
    held: AtomicUsize,
    max: usize,
}

impl IdleSlots {
    fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), max })
    }
    /// Takes a slot for one more idle instance, if any is left. The slot is given back
    /// when the answer is dropped, with the idle instance it is kept beside.
    fn take(self: &Arc<Self>) -> Option<IdleSlot> {
        self.held
            .try_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1))
            .ok()
            .map(|_| IdleSlot(Arc::clone(self)))
    }
    /// Idle instances kept now, across every version.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// One of the `max_idle_instances` slots, owned by the idle instance it is kept with:
/// however that instance leaves its pool (checked out, its version retired or dropped
/// whole), the slot comes back with it.
#[derive(Debug)]
struct IdleSlot(Arc<IdleSlots>);

impl Drop for IdleSlot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What every loaded version shares: the service's settings, its metrics, the idle slots.
pub(crate) struct VersionContext<'a> {
    pub limits: &'a ServiceLimits,
    pub guard: &'a GuardConfig,
    pub metrics: &'a Metrics,
    pub idle: &'a Arc<IdleSlots>,
}

/// One compiled version of a tenant's policy, with its idle instances.
pub struct LoadedVersion {
    policy: String,
    version: String,
    /// The accepted configuration of the version, with no instance: each pooled
    /// instance is its sibling (see [`GuestScorer::sibling`]).
    template: Mutex<GuestScorer>,
    /// Idle guarded selectors, each owning one guest instance (a Store is
    /// single-threaded, so a concurrent selection takes its own) and the idle slot it
    /// holds.
    idle: Mutex<Vec<(GuardedSelector, IdleSlot)>>,
    max_idle: usize,
    /// Whether a route uses this version; a retired version keeps no idle instances
    /// (they hold slots of the engine's instance pool). Written and read under `idle`'s
    /// lock, so an instance checked in as the version retires is never kept.
    routed: AtomicBool,
    metrics: Arc<PolicyMetrics>,
    /// Quarantine of this version, shared by all its instances and threads.
    breaker: Arc<SharedBreaker>,
    guard: GuardConfig,
    idle_slots: Arc<IdleSlots>,
}

impl LoadedVersion {
    /// The tenant's name for the policy.
    pub fn policy(&self) -> &str {
        &self.policy
    }
    /// The version (see `manage::version_of`).
    pub fn version(&self) -> &str {
        &self.version
    }
    /// The counters of its policy (shared by all the policy's versions).
    pub fn metrics(&self) -> &Arc<PolicyMetrics> {
        &self.metrics
    }
    /// Its quarantine breaker, shared by all its instances.
    pub fn breaker(&self) -> &SharedBreaker {
        &self.breaker
    }

    /// An idle guarded selector, or a new one whose guest instantiates on its first call
    /// (a failure then is contained like any fault). Fails as `mode` says.
    pub fn checkout(&self, mode: FailMode) -> GuardedSelector {
        // The idle slot goes back as the entry is taken apart.
        let pooled =
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop().map(|(selector, _slot)| selector);
        let mut selector = pooled.unwrap_or_else(|| {
            let scorer = self.template.lock().unwrap_or_else(|p| p.into_inner()).sibling();
            self.wrap(scorer)
        });
        selector.set_fail_mode(mode);
        selector
    }

    /// Returns a selector for reuse, or drops it (and its instance, freeing its slot and
    /// its tenant's share) when the version is retired or the idle pools are full.
    pub fn checkin(&self, selector: GuardedSelector) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock that `set_routed` clears the pool under: a version retired
        // meanwhile keeps nothing.
        if self.routed.load(Ordering::Acquire)
            && idle.len() < self.max_idle
            && let Some(slot) = self.idle_slots.take()
        {
            idle.push((selector, slot));
        }
    }

    fn wrap(&self, scorer: GuestScorer) -> GuardedSelector {
        let short = self.version.get(..12).unwrap_or(&self.version);
        let scorer = Metered { inner: scorer, metrics: self.metrics.clone() };
        switchyard_builtins::guarded(Box::new(scorer), FailMode::Open, self.guard.clone())
            .with_breaker(Arc::clone(&self.breaker))
            .with_label(format!("`{}` version {short}", self.policy))
    }

    /// Marks the version routed or retired; a retired one drops its idle instances, and
    /// their slots come back with them.
    fn set_routed(&self, routed: bool) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        self.routed.store(routed, Ordering::Release);
        let dropped = if routed { Vec::new() } else { std::mem::take(&mut *idle) };
        drop(idle);
        drop(dropped);
    }
}

/// A guest scorer that adds the fuel of each call to its policy's counter.
struct Metered {
    inner: GuestScorer,
    metrics: Arc<PolicyMetrics>,
}

impl Scorer for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn info(&self) -> PolicyInfo {
        self.inner.info()
    }
    fn score(&mut self, call: &Call<'_>, costs: &mut Vec<f64>) -> Result<(), Fault> {
        let r = self.inner.score(call, costs);
        self.metrics.fuel(self.inner.last_fuel());
        r
    }
    fn filter(&mut self, call: &Call<'_>, keep: &mut Vec<bool>) -> Result<(), Fault> {
        let r = self.inner.filter(call, keep);
        self.metrics.fuel(self.inner.last_fuel());
        r
    }
    fn on_selected(&mut self, call: &Call<'_>, chosen: WorkerRank) -> Result<(), Fault> {
        let r = self.inner.on_selected(call, chosen);
        self.metrics.fuel(self.inner.last_fuel());
        r
    }
    fn reset(&mut self) {
        self.inner.reset();
    }
}

/// What runs for a class.
#[derive(Clone)]
pub enum Target {
    /// A builtin, native build.
    Builtin(&'static Builtin),
    /// A tenant's version, as a guest.
    Guest(Arc<LoadedVersion>),
    /// A stored version that did not load, at start-up or adopted from the fleet (the
    /// reason): its classes fail open (the native default answers) or closed (503
    /// `unavailable`), as assigned.
    Unavailable(Arc<str>),
}

/// A class's route: the policy, what runs it, and what a fault does.
#[derive(Clone)]
pub struct Route {
    /// The policy's name as assigned (a builtin's or the tenant's).
    pub policy: String,
    /// What runs.
    pub target: Target,
    /// What a fault of the policy does to the selection.
    pub on_fault: FailMode,
    /// The counters of a builtin's or an unavailable version's route, from the service's
    /// metrics on its first selection through this snapshot (so a series still appears
    /// on a policy's first selection, and later ones take no lock).
    metrics: OnceLock<Arc<PolicyMetrics>>,
}

impl Route {
    fn new(policy: String, target: Target, on_fault: FailMode) -> Self {
        Self { policy, target, on_fault, metrics: OnceLock::new() }
    }

    /// The counters the route's selections count into: a guest version's own, else
    /// those of (`tenant`, the policy) in `all`.
    pub fn metrics(&self, tenant: &str, all: &Metrics) -> &Arc<PolicyMetrics> {
        match &self.target {
            Target::Guest(v) => v.metrics(),
            Target::Builtin(_) | Target::Unavailable(_) => {
                self.metrics.get_or_init(|| all.policy(tenant, &self.policy))
            }
        }
    }
}

/// One tenant's routes.
struct TenantRoutes {
    /// class → route, for the classes it assigned.
    classes: HashMap<String, Arc<Route>>,
    /// What an unassigned class runs: the builtin default, fail-open.
    default: Arc<Route>,
}

/// An immutable view for readers: swapped whole on every change.
pub struct Snapshot {
    manifest: Arc<Manifest>,
    /// tenant → its routes.
    routes: HashMap<String, TenantRoutes>,
    /// Every loaded version, routed or not (for listing their breakers).
    versions: HashMap<VersionKey, Arc<LoadedVersion>>,
    /// Versions that did not load, and why.
    unavailable: HashMap<VersionKey, Arc<str>>,
}

impl Snapshot {
    /// The committed manifest this snapshot was built from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// A loaded version of a tenant's policy.
    pub fn version(&self, tenant: &str, policy: &str, version: &str) -> Option<&Arc<LoadedVersion>> {
        self.versions.get(&(tenant.to_string(), policy.to_string(), version.to_string()))
    }

    /// Why a stored version is not loaded, if it is not.
    pub fn unavailable(&self, tenant: &str, policy: &str, version: &str) -> Option<&str> {
        self.unavailable.get(&(tenant.to_string(), policy.to_string(), version.to_string())).map(|r| &**r)
    }

    /// How many stored versions did not load.
    pub fn unavailable_count(&self) -> usize {
        self.unavailable.len()
    }

    /// (tenant, policy) pairs with a routed version whose breaker is open or half-open:
    /// the policy is quarantined for some class. A retired version's breaker does not
    /// count: no traffic reaches it.
    pub fn quarantined(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (tenant, routes) in &self.routes {
            for route in routes.classes.values() {
                if let Target::Guest(v) = &route.target
                    && v.breaker().state().is_quarantined()
                {
                    out.insert((tenant.clone(), v.policy().to_string()));
                }
            }
        }
        out
    }

    /// The route of `class` for `tenant`: `None` for an unknown tenant; the builtin
    /// default (fail-open) for an unassigned class.
    pub fn route(&self, tenant: &str, class: Option<&str>) -> Option<&Arc<Route>> {
        let routes = self.routes.get(tenant)?;
        Some(class.and_then(|c| routes.classes.get(c)).unwrap_or(&routes.default))
    }
}

/// What only the writer touches.
pub struct Writer {
    /// The committed manifest, as of the last commit.
    pub manifest: Manifest,
    /// Compiled components by blob sha256 (several versions may share one).
    pub components: HashMap<String, PolicyComponent>,
    /// Every version that loaded, routed or not.
    pub loaded: HashMap<VersionKey, Arc<LoadedVersion>>,
    /// Stored versions that did not load (at start-up, or adopted from the fleet), and why.
    pub unavailable: HashMap<VersionKey, Arc<str>>,
}

/// The running service.
pub struct Service {
    pub(crate) limits: ServiceLimits,
    /// Each version's breaker settings (`[guard]`).
    pub(crate) guard: GuardConfig,
    pub(crate) engine: PolicyEngine,
    pub(crate) registry: Registry,
    pub(crate) admin_sha256: String,
    pub(crate) writer: tokio::sync::Mutex<Writer>,
    snapshot: ArcSwap<Snapshot>,
    pub(crate) compile_permits: Semaphore,
    pub(crate) metrics: Metrics,
    /// Idle instances across all versions (`max_idle_instances`).
    pub(crate) idle_slots: Arc<IdleSlots>,
    /// Each tenant's selections in flight (`max_in_flight_per_tenant`).
    pub(crate) in_flight: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    /// Each tenant's uploads and writes in the last minute (`uploads_per_minute`,
    /// `writes_per_minute`).
    pub(crate) rates: WriteRates,
}

impl Service {
    /// Opens the data directory and loads every committed version: from our artifact
    /// cache in `cache_dir` when it holds this engine's compilation of the component,
    /// else compiled (and cached). Blocking: call before serving, or off the async runtime.
    pub fn open(
        data_dir: &Path,
        registry: Option<&RegistryOptions>,
        cache_dir: &Path,
        limits: ServiceLimits,
        guard: GuardConfig,
        engine_limits: Limits,
        admin_token: Option<String>,
    ) -> anyhow::Result<Arc<Self>> {
        // Selections in flight, idle instances and uploads' configure checks each hold a
        // slot of the engine's pool: together they must fit, so the pool never runs out.
        let needed = limits.max_inflight_selections + limits.max_idle_instances + limits.compile_concurrency;
        if needed > engine_limits.max_instances as usize {
            anyhow::bail!(
                "[service] max_inflight_selections ({}) + max_idle_instances ({}) + compile_concurrency ({}) = {needed} exceed [limits] max_instances ({})",
                limits.max_inflight_selections,
                limits.max_idle_instances,
                limits.compile_concurrency,
                engine_limits.max_instances
            );
        }
        let store = Store::open(data_dir)
            .map_err(|e| anyhow::anyhow!("opening the data dir {}: {e}", data_dir.display()))?;
        let registry = match registry {
            None => Registry::Files(store),
            Some(options) => Registry::connect_nats(options, store).map_err(anyhow::Error::msg)?,
        };
        let manifest = registry.load_manifest().map_err(anyhow::Error::msg)?;
        let admin_sha256 = crate::auth::admin_token_hash(data_dir, admin_token)
            .map_err(|e| anyhow::anyhow!("the admin token in {}: {e}", data_dir.display()))?;
        let cache = ArtifactCache::open(cache_dir)
            .map_err(|e| anyhow::anyhow!("the compiled-artifact cache {}: {e}", cache_dir.display()))?;
        let engine = PolicyEngine::new(engine_limits)?.with_artifact_cache(cache);
        let metrics = Metrics::default();
        let idle_slots = IdleSlots::new(limits.max_idle_instances);
        let mut writer = Writer {
            manifest,
            components: HashMap::new(),
            loaded: HashMap::new(),
            unavailable: HashMap::new(),
        };
        let ctx = VersionContext { limits: &limits, guard: &guard, metrics: &metrics, idle: &idle_slots };
        load_versions(&mut writer, &registry, &engine, &ctx);
        sweep_orphan_blobs(&registry, &engine, &writer.manifest);
        let snapshot = build_snapshot(&writer);
        mark_routed(&snapshot, &writer.loaded);
        record_state(&metrics, &writer);
        let service = Arc::new(Self {
            compile_permits: Semaphore::new(limits.compile_concurrency),
            limits,
            guard,
            engine,
            registry,
            admin_sha256,
            writer: tokio::sync::Mutex::new(writer),
            snapshot: ArcSwap::from_pointee(snapshot),
            metrics,
            idle_slots,
            in_flight: Mutex::default(),
            rates: WriteRates::default(),
        });
        Ok(service)
    }

    /// The current snapshot (lock-free).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The service's counters and gauges.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Registers the service's metrics for one scrape of `/metrics`, with each policy's
    /// quarantine state as it is now.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let snapshot = self.snapshot();
        self.metrics.register(registry, &snapshot.quarantined(), snapshot.unavailable_count());
        registry.register(
            "switchyard_idle_instances",
            "Idle guest instances kept for reuse, across every version (at most max_idle_instances)",
            prometheus_client::metrics::gauge::ConstGauge::new(self.idle_slots.held()),
        );
    }

    /// Makes `manifest` durable, then visible: writes it (temp + fsync + rename), adopts
    /// it, releases what it no longer names (see [`Service::release_unnamed`]) and swaps
    /// in a new snapshot. On a write error nothing changes.
    pub(crate) fn commit(
        &self,
        writer: &mut MutexGuard<'_, Writer>,
        manifest: Manifest,
    ) -> Result<(), ApiError> {
        tokio::task::block_in_place(|| self.registry.commit(&writer.manifest, &manifest))
            .map_err(|e| e.into_api("writing the manifest"))?;
        let old = std::mem::replace(&mut writer.manifest, manifest);
        self.publish(writer, &old);
        Ok(())
    }

    /// After the writer's manifest replaced `old` (committed here, or adopted): releases
    /// what it no longer names, swaps in the snapshot that routes by it, marks versions
    /// routed or retired, and updates the state gauges.
    fn publish(&self, writer: &mut Writer, old: &Manifest) {
        self.release_unnamed(writer, old);
        let snapshot = Arc::new(build_snapshot(writer));
        self.snapshot.store(Arc::clone(&snapshot));
        mark_routed(&snapshot, &writer.loaded);
        record_state(&self.metrics, writer);
    }

    /// What loading a version needs of the service.
    fn version_context(&self) -> VersionContext<'_> {
        VersionContext {
            limits: &self.limits,
            guard: &self.guard,
            metrics: &self.metrics,
            idle: &self.idle_slots,
        }
    }

    /// Adopts `manifest`, committed by another replica of the fleet: configures the
    /// versions it names that are new here (their components compiled beforehand by
    /// [`Service::load_components`], outside the writer lock), off the selection path
    /// (selections keep the old snapshot until the new one is swapped in), then releases
    /// what it no longer names and swaps in a new snapshot. The caller holds a compile
    /// permit: each new version is configured once in a slot of the engine's pool.
    pub(crate) fn adopt(&self, writer: &mut MutexGuard<'_, Writer>, manifest: Manifest) {
        let old = std::mem::replace(&mut writer.manifest, manifest);
        let ctx = self.version_context();
        tokio::task::block_in_place(|| load_versions(writer, &self.registry, &self.engine, &ctx));
        self.publish(writer, &old);
    }

    /// Makes sure each of `blobs` is compiled (or read from the artifact cache) and in the
    /// writer's components, compiling outside the writer lock as an upload does: a
    /// compile must not hold every writer. One that does not load is left to
    /// [`load_versions`], which marks its versions unavailable. The caller holds a
    /// compile permit.
    pub(crate) async fn load_components(&self, blobs: Vec<String>) {
        for blob in blobs {
            if self.writer.lock().await.components.contains_key(&blob) {
                continue;
            }
            let loaded = tokio::task::block_in_place(|| load_component(&self.registry, &self.engine, &blob));
            if let Ok(component) = loaded {
                self.metrics.loaded(&component);
                self.writer.lock().await.components.entry(blob).or_insert(component);
            }
        }
    }

    /// Garbage collection, once the manifest that dropped versions is durable: loaded
    /// versions it does not name are dropped (a selection running one finishes on its
    /// `Arc`), compiled components no loaded version uses are evicted, and the blob (with
    /// its compiled artifact) of each version `old` named and the new manifest does not
    /// is deleted unless another version, of any tenant, still names it. A crash before
    /// the deletions leaves only unnamed files behind, never a manifest naming a missing
    /// blob. A deletion that fails leaves the file; the commit stands.
    fn release_unnamed(&self, writer: &mut Writer, old: &Manifest) {
        let named: HashMap<(&str, &str, &str), &str> = versions_of(&writer.manifest).collect();
        writer.loaded.retain(|(t, p, v), loaded| {
            let keep = named.contains_key(&(t.as_str(), p.as_str(), v.as_str()));
            if !keep {
                // Retired now, routed or not: its idle instances go (a selection still on
                // it drops its instance when done), and their slots come back.
                loaded.set_routed(false);
            }
            keep
        });
        writer.unavailable.retain(|(t, p, v), _| named.contains_key(&(t.as_str(), p.as_str(), v.as_str())));
        let in_use: HashSet<&str> = writer
            .loaded
            .keys()
            .filter_map(|(t, p, v)| named.get(&(t.as_str(), p.as_str(), v.as_str())).copied())
            .collect();
        writer.components.retain(|blob, _| in_use.contains(blob.as_str()));
        let blobs: HashSet<&str> = named.values().copied().collect();
        let mut removed_blobs = BTreeSet::new();
        let mut collected: HashMap<&str, u64> = HashMap::new();
        for (key, blob) in versions_of(old) {
            if !named.contains_key(&key) {
                *collected.entry(key.0).or_default() += 1;
                if !blobs.contains(blob) {
                    removed_blobs.insert(blob);
                }
            }
        }
        for (tenant, n) in collected {
            self.metrics.collected(tenant, n);
        }
        tokio::task::block_in_place(|| {
            for blob in removed_blobs {
                let _ = self.registry.remove_blob(blob, &self.engine);
            }
        });
    }

    /// A loaded version for the writer's map; `template` is an instance-less sibling of
    /// the scorer the upload's configure check accepted.
    pub(crate) fn new_version(&self, key: &VersionKey, template: GuestScorer) -> Arc<LoadedVersion> {
        new_version(&self.version_context(), (&key.0, &key.1, &key.2), template)
    }
}

/// Loads every version `writer.manifest` names that is neither loaded nor known to be
/// unavailable: from the engine's artifact cache when it holds this component, else
/// compiled; configured once to learn what it declares (the instance is not kept: it
/// would hold a slot of the engine's pool while nobody selects). One that does not load
/// (a missing blob, a limit lowered below its size, a configure that now fails) is marked
/// unavailable, and everything else serves. Blocking.
pub(crate) fn load_versions(
    writer: &mut Writer,
    registry: &Registry,
    engine: &PolicyEngine,
    ctx: &VersionContext<'_>,
) {
    let keys: Vec<(VersionKey, VersionRecord)> = writer
        .manifest
        .versions()
        .map(|(tenant, name, v)| ((tenant.to_string(), name.to_string(), v.version.clone()), v.clone()))
        .filter(|(key, _)| !writer.loaded.contains_key(key) && !writer.unavailable.contains_key(key))
        .collect();
    for (key, v) in keys {
        let (tenant, name) = (&key.0, &key.1);
        let loaded = (|| -> Result<GuestScorer, String> {
            if !writer.components.contains_key(&v.blob) {
                let component = load_component(registry, engine, &v.blob)?;
                ctx.metrics.loaded(&component);
                writer.components.insert(v.blob.clone(), component);
            }
            let component = writer.components[&v.blob].clone();
            GuestScorer::new(name.clone(), component, &v.params)
                .map(|s| s.sibling())
                .map_err(|e| format!("configuring: {e}"))
        })();
        match loaded {
            Ok(accepted) => {
                let version = new_version(ctx, (tenant, name, &v.version), accepted);
                writer.loaded.insert(key, version);
            }
            Err(reason) => {
                tracing::warn!(tenant = %tenant, policy = %name, version = %v.version, %reason, "stored version unavailable");
                writer.unavailable.insert(key, reason.into());
            }
        }
    }
}

/// The blob `blob`, read and loaded: from the engine's artifact cache when it holds this
/// component, else compiled. Blocking.
fn load_component(registry: &Registry, engine: &PolicyEngine, blob: &str) -> Result<PolicyComponent, String> {
    let bytes = registry.read_blob(blob).map_err(|e| format!("reading blob {blob}: {e}"))?;
    PolicyComponent::load(engine, &bytes).map_err(|e| format!("loading: {e}"))
}

/// Deletes blobs (and their compiled artifacts) that no version of the manifest names:
/// left by a crash between a manifest write and a collection, or by an upload dropped
/// between storing its blob and committing. Start-up holds the data dir's lock, so no
/// upload is in flight.
fn sweep_orphan_blobs(store: &Registry, engine: &PolicyEngine, manifest: &Manifest) {
    let named: HashSet<&str> = versions_of(manifest).map(|(_, blob)| blob).collect();
    let blobs = match store.blob_names() {
        Ok(blobs) => blobs,
        Err(e) => return tracing::warn!(error = %e, "listing blobs for the start-up sweep"),
    };
    for blob in blobs.iter().filter(|b| !named.contains(b.as_str())) {
        match store.remove_blob(blob, engine) {
            Ok(()) => tracing::info!(blob = %blob, "orphan blob removed at start-up"),
            Err(e) => tracing::warn!(blob = %blob, error = %e, "removing an orphan blob"),
        }
    }
}

/// A loaded version of (tenant, policy, version), with a closed breaker of its own and
/// no instance yet: `template` is an instance-less sibling of a scorer that configured
/// successfully. Retired until a commit (or start-up) routes a class to it.
fn new_version(
    ctx: &VersionContext<'_>,
    (tenant, policy, version): (&str, &str, &str),
    template: GuestScorer,
) -> Arc<LoadedVersion> {
    Arc::new(LoadedVersion {
        policy: policy.to_string(),
        version: version.to_string(),
        template: Mutex::new(template),
        idle: Mutex::new(Vec::new()),
        max_idle: ctx.limits.idle_instances_per_version,
        routed: AtomicBool::new(false),
        metrics: ctx.metrics.policy(tenant, policy),
        breaker: Arc::new(SharedBreaker::new(ctx.guard.clone())),
        guard: ctx.guard.clone(),
        idle_slots: Arc::clone(ctx.idle),
    })
}

/// Marks each loaded version routed if `snapshot` routes a class to it, else retired
/// (which drops its idle instances).
fn mark_routed(snapshot: &Snapshot, loaded: &HashMap<VersionKey, Arc<LoadedVersion>>) {
    let routed: HashSet<*const LoadedVersion> = snapshot
        .routes
        .values()
        .flat_map(|routes| routes.classes.values())
        .filter_map(|r| match &r.target {
            Target::Guest(v) => Some(Arc::as_ptr(v)),
            Target::Builtin(_) | Target::Unavailable(_) => None,
        })
        .collect();
    for v in loaded.values() {
        v.set_routed(routed.contains(&Arc::as_ptr(v)));
    }
}

/// Every version `manifest` names: ((tenant, policy, version), blob).
fn versions_of(manifest: &Manifest) -> impl Iterator<Item = ((&str, &str, &str), &str)> {
    manifest.versions().map(|(tenant, name, v)| ((tenant, name, v.version.as_str()), v.blob.as_str()))
}

/// The state gauges: versions known (in the manifest) and loaded, per tenant; components.
fn record_state(metrics: &Metrics, writer: &Writer) {
    let mut versions: BTreeMap<String, TenantVersions> = writer
        .manifest
        .tenants
        .iter()
        .map(|(tenant, record)| {
            let known = record.policies.values().map(|p| p.versions.len() as u64).sum();
            (tenant.clone(), TenantVersions { known, loaded: 0 })
        })
        .collect();
    for (tenant, _, _) in writer.loaded.keys() {
        versions.entry(tenant.clone()).or_default().loaded += 1;
    }
    metrics.set_state(versions, writer.components.len());
}

/// Routes from the manifest: a class names a builtin or one of the tenant's policies
/// (pinned version, or the policy's active one).
fn build_snapshot(writer: &Writer) -> Snapshot {
    let mut routes = HashMap::new();
    for (tenant, record) in &writer.manifest.tenants {
        let mut classes = HashMap::new();
        for (class, a) in &record.classes {
            let target = if let Some(policy) = record.policies.get(&a.policy) {
                let key = (tenant.clone(), a.policy.clone(), a.version_in(policy).to_string());
                match (writer.loaded.get(&key), writer.unavailable.get(&key)) {
                    (Some(v), _) => Target::Guest(v.clone()),
                    (None, Some(reason)) => Target::Unavailable(reason.clone()),
                    (None, None) => continue,
                }
            } else if let Some(b) = builtin::find(&a.policy) {
                Target::Builtin(b)
            } else {
                continue;
            };
            classes.insert(class.clone(), Arc::new(Route::new(a.policy.clone(), target, a.on_fault)));
        }
        let default = Arc::new(Route::new(
            "default".into(),
            Target::Builtin(builtin::find("default").expect("the default builtin exists")),
            FailMode::Open,
        ));
        routes.insert(tenant.clone(), TenantRoutes { classes, default });
    }
    Snapshot {
        manifest: Arc::new(writer.manifest.clone()),
        routes,
        versions: writer.loaded.clone(),
        unavailable: writer.unavailable.clone(),
    }
}
