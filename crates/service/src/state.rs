//! The service's state: the committed manifest, the compiled versions, and the routing
//! snapshot selections read.
//!
//! Hot swap: every mutation builds a new immutable [`Snapshot`] and swaps it in with one
//! atomic pointer store (`ArcSwap`). A selection loads the snapshot once and holds an
//! `Arc` to the version it runs, so a swap never disturbs it: it finishes on the old
//! version, the next one sees the new. Mutations are serialised by one async mutex and
//! reach the disk (the tenant's record) before the swap, so an acknowledged change is
//! durable.
//!
//! Every mutation changes one tenant or one router (a [`Key`]), and everything after the
//! commit (collecting what the tenant no longer names, its routes, its gauges) looks at
//! that tenant alone: the work of a write does not grow with the number of tenants.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use switchyard::artifact_cache::ArtifactKey;
use switchyard::guard::GuardConfig;
use switchyard::{ArtifactCache, GuestScorer, Limits, PolicyEngine, WorkerCommand};
use switchyard_registry_nats::Key;
use tokio::sync::{MutexGuard, Semaphore};

use crate::config::ServiceLimits;
use crate::error::ApiError;
use crate::loader::Compile;
use crate::metrics::{Metrics, State};
use crate::rates::WriteRates;
use crate::registry::{Registry, RegistryOptions};
pub use crate::snapshot::{Route, Snapshot, Target};
use crate::store::{Manifest, Store, TenantRecord, VersionRecord};
use crate::version::tenant_range;
use crate::version::{Clock, Template, VersionContext, new_version};
pub use crate::version::{Generation, IdleSlots, LoadedVersion, Loader, VersionKey, Versions};

/// What only the writer touches.
pub struct Writer {
    /// The committed manifest, as of the last commit.
    pub manifest: Manifest,
    /// Every version the manifest names, routed or not, loaded or not yet (persistent:
    /// each snapshot shares it).
    pub loaded: Versions,
    /// Blob → how many versions of the manifest, of any tenant, name it: a blob whose
    /// count drops to 0 is deleted, and its compiled component dropped.
    pub blob_users: HashMap<String, usize>,
}

impl Writer {
    /// Whether a version of the committed manifest names `blob`.
    pub fn names_blob(&self, blob: &str) -> bool {
        self.blob_users.contains_key(blob)
    }

    /// Counts the blobs of `record`'s versions in (`add`) or out.
    fn count_blobs(&mut self, record: Option<&TenantRecord>, add: bool) {
        for (_, v) in record.into_iter().flat_map(|r| r.versions()) {
            if add {
                *self.blob_users.entry(v.blob.clone()).or_default() += 1;
            } else if let Some(n) = self.blob_users.get_mut(&v.blob) {
                *n -= 1;
                if *n == 0 {
                    self.blob_users.remove(&v.blob);
                }
            }
        }
    }
}

/// The running service.
pub struct Service {
    pub(crate) limits: ServiceLimits,
    /// Each version's breaker settings (`[guard]`).
    pub(crate) guard: GuardConfig,
    /// The registry, the engine, and the components loaded from them.
    pub(crate) loader: Arc<Loader>,
    /// Seconds since start, for versions' last use.
    clock: Clock,
    pub(crate) admin_sha256: String,
    pub(crate) writer: tokio::sync::Mutex<Writer>,
    snapshot: ArcSwap<Snapshot>,
    /// The permit of the service's own loads: a fleet's changes, start-up's and the
    /// background loads (the loader's, shared). Apart from the uploads', so no tenant's
    /// uploads can hold these back.
    pub(crate) system_compile_permits: Arc<Semaphore>,
    /// One Cranelift compile at a time behind tiered uploads (`compiler = "tiered"`).
    pub(crate) tier_up_permits: Arc<Semaphore>,
    pub(crate) metrics: Arc<Metrics>,
    /// Idle instances across all versions (`max_idle_instances`).
    pub(crate) idle_slots: Arc<IdleSlots>,
    /// Each tenant's selections in flight (`max_in_flight_per_tenant`).
    pub(crate) in_flight: Mutex<HashMap<String, Arc<crate::share::TenantShare>>>,
    /// Each tenant's uploads and writes in the last minute (`uploads_per_minute`,
    /// `writes_per_minute`).
    pub(crate) rates: WriteRates,
    /// The worker tables held for routers, per tenant (in memory only).
    pub(crate) tables: crate::tables::Tables,
    /// Each class's shadow comparison, canary count and captured selections (this
    /// replica's, in memory).
    pub(crate) trials: crate::trials::Trials,
    /// The shadow runs waiting, and the threads that run them.
    pub(crate) shadows: crate::trials::ShadowQueue,
    /// The service itself, for work a selection starts that outlives it (a canary's
    /// rollback, committed in the background).
    pub(crate) me: std::sync::Weak<Service>,
}

/// The engine a [`Service`] compiles and runs policies with.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The sandbox's limits for every guest (`[limits]`).
    pub limits: Limits,
    /// How to start a compile worker: every compile then runs in a process killed at its
    /// deadline. `None` compiles on threads of this process, where a compile past its
    /// deadline runs on until Cranelift returns.
    pub compile_workers: Option<WorkerCommand>,
}

impl From<Limits> for EngineOptions {
    /// In-process compiles.
    fn from(limits: Limits) -> Self {
        Self { limits, compile_workers: None }
    }
}

impl Service {
    /// Opens the data directory and reads the registry; every version starts cold, to be
    /// loaded by [`warm`] (or by its first selection): from our artifact cache in
    /// `cache_dir` when it holds this engine's compilation of the component, else
    /// compiled (and cached). Blocking: call before serving, or off the async runtime.
    pub fn open(
        data_dir: &Path,
        registry: Option<&RegistryOptions>,
        cache_dir: &Path,
        limits: ServiceLimits,
        guard: GuardConfig,
        engine: EngineOptions,
        admin_token: Option<String>,
    ) -> anyhow::Result<Arc<Self>> {
        let EngineOptions { limits: engine_limits, compile_workers } = engine;
        // Selections in flight, idle instances and uploads' configure checks each hold a
        // slot of the engine's pool: together they must fit, so the pool never runs out.
        let needed = limits.instances_needed();
        if needed > engine_limits.max_instances as usize {
            anyhow::bail!(
                "[service] max_inflight_selections ({}) + max_idle_instances ({}) + compile_concurrency ({}) + shadow_threads ({}) + 1 (the service's own loads) = {needed} exceed [limits] max_instances ({})",
                limits.max_inflight_selections,
                limits.max_idle_instances,
                limits.compile_concurrency,
                limits.shadow_threads,
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
        // Outside the cache directory: whoever can write artifacts must not read the key.
        let key = ArtifactKey::from_env_or_file(&data_dir.join("artifact.key"))
            .map_err(|e| anyhow::anyhow!("the compiled-artifact key: {e}"))?;
        let cache = ArtifactCache::open(cache_dir, key)
            .map_err(|e| anyhow::anyhow!("the compiled-artifact cache {}: {e}", cache_dir.display()))?;
        let mut engine = PolicyEngine::new(engine_limits)?.with_artifact_cache(cache);
        if let Some(command) = compile_workers {
            engine = engine.with_compile_workers(command);
        }
        let metrics = Arc::new(Metrics::default());
        for (at, record) in &manifest.unreadable {
            crate::registry::skipped(&metrics, at, record);
        }
        let idle_slots =
            IdleSlots::new(limits.max_idle_instances, limits.idle_rss_limit_mb.saturating_mul(1 << 20));
        let system_compile_permits = Arc::new(Semaphore::new(1));
        let loader = Loader::new(
            registry,
            engine,
            Arc::clone(&metrics),
            Arc::clone(&system_compile_permits),
            limits.compile_concurrency,
        );
        let clock = Clock::new();
        let mut writer = Writer { manifest, loaded: imbl::OrdMap::new(), blob_users: HashMap::new() };
        let manifest = writer.manifest.clone();
        for record in manifest.tenants.values() {
            writer.count_blobs(Some(record), true);
        }
        let ctx = VersionContext {
            limits: &limits,
            guard: &guard,
            metrics: &metrics,
            idle: &idle_slots,
            loader: &loader,
            clock,
        };
        add_versions(&mut writer, &ctx, None);
        sweep_orphan_blobs(&loader, &writer);
        let snapshot = Snapshot::build(&writer.manifest, &writer.loaded);
        let shadows = crate::trials::ShadowQueue::start(
            limits.shadow_queue,
            limits.max_shadows_per_tenant,
            limits.shadow_threads,
            limits.shadow_cpu_percent,
        );
        let service = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            trials: Default::default(),
            shadows,
            system_compile_permits,
            tier_up_permits: Arc::new(Semaphore::new(1)),
            limits,
            guard,
            loader,
            clock,
            admin_sha256,
            writer: tokio::sync::Mutex::new(writer),
            snapshot: ArcSwap::from_pointee(snapshot),
            metrics,
            idle_slots,
            in_flight: Mutex::default(),
            tables: Default::default(),
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
        let (versions, unavailable) = snapshot.version_counts();
        let state = State {
            quarantined: snapshot.quarantined(),
            versions,
            unavailable,
            components: self.loader.len(),
            components_unused: self.loader.unused(),
            instances: self.loader.instances(),
            function_cache: self.loader.engine.function_cache_stats(),
            compile_workers: self.loader.engine.compile_workers().map(|w| w.stats()),
        };
        self.metrics.register(registry, &state);
        self.trials.register_metrics(registry);
        registry.register(
            "switchyard_idle_instances",
            "Idle guest instances kept for reuse, across every version (at most max_idle_instances)",
            prometheus_client::metrics::gauge::ConstGauge::new(self.idle_slots.held()),
        );
    }

    /// Makes `manifest` durable, then visible: writes the record `key` names (the one
    /// thing that changed, temp + fsync + rename), adopts it, releases what it no longer
    /// names (see [`Service::release_unnamed`]) and swaps in a new snapshot. On a write
    /// error nothing changes.
    pub(crate) fn commit(
        &self,
        writer: &mut MutexGuard<'_, Writer>,
        manifest: Manifest,
        key: Key,
    ) -> Result<(), ApiError> {
        crate::registry::check_writable(&writer.manifest, &key)?;
        tokio::task::block_in_place(|| self.loader.registry.commit(&manifest, &key))
            .map_err(|e| e.into_api("writing the registry"))?;
        let old = std::mem::replace(&mut writer.manifest, manifest);
        self.publish(writer, &old, &key);
        Ok(())
    }

    /// After the writer's manifest replaced `old` by changing `key` alone (committed
    /// here, or adopted): releases what that tenant no longer names, and swaps in the
    /// snapshot that routes by it (marking its versions routed or retired).
    fn publish(&self, writer: &mut Writer, old: &Manifest, key: &Key) {
        if let Key::Tenant(tenant) = key {
            self.release_unnamed(writer, old, tenant);
        }
        let snapshot = Arc::new(self.snapshot.load().update((&writer.manifest, &writer.loaded), old, key));
        self.snapshot.store(snapshot);
    }

    /// What loading a version needs of the service.
    fn version_context(&self) -> VersionContext<'_> {
        VersionContext {
            limits: &self.limits,
            guard: &self.guard,
            metrics: &self.metrics,
            idle: &self.idle_slots,
            loader: &self.loader,
            clock: self.clock,
        }
    }

    /// Adopts `manifest`, committed by another replica of the fleet by changing `key`:
    /// configures the versions of that tenant that are new here (their components
    /// compiled beforehand by [`Service::load_components`], outside the writer lock), off
    /// the selection path (selections keep the old snapshot until the new one is swapped
    /// in), then releases what it no longer names and swaps in a new snapshot. The caller
    /// holds a compile permit: each new version is configured once in a slot of the
    /// engine's pool.
    pub(crate) fn adopt(&self, writer: &mut MutexGuard<'_, Writer>, manifest: Manifest, key: Key) {
        let old = std::mem::replace(&mut writer.manifest, manifest);
        if let Key::Tenant(tenant) = &key {
            for version in add_versions(writer, &self.version_context(), Some(tenant)) {
                tokio::task::block_in_place(|| version.load());
            }
        }
        self.publish(writer, &old, &key);
    }

    /// Makes sure each of `blobs` is compiled (or read from the artifact cache) and kept
    /// by the loader, outside the writer lock, as an upload compiles: a compile must not
    /// hold every writer. One that does not load is left to the version's own load,
    /// which marks it unavailable. The caller holds a compile permit.
    pub(crate) fn load_components(&self, tenant: &str, blobs: &[String]) {
        for blob in blobs {
            let _ = tokio::task::block_in_place(|| self.loader.component(tenant, blob, Compile::Now));
        }
    }

    /// Drops the compiled component of `blob` unless a version names it: what a refused
    /// upload, or an adopted change this replica had seen already, compiled for nothing.
    pub(crate) fn forget_component(&self, writer: &Writer, blob: &str) {
        if !writer.names_blob(blob) {
            self.loader.forget(blob);
        }
    }

    /// Garbage collection of `tenant`, once the manifest that changed it is durable: its
    /// loaded versions the new record does not name are dropped (a selection running one
    /// finishes on its `Arc`), and each blob its old record named that no version of any
    /// tenant names any more is deleted (with its compiled artifact) and its compiled
    /// component dropped. A crash before the deletions leaves only unnamed files behind,
    /// never a record naming a missing blob. A deletion that fails leaves the file; the
    /// commit stands.
    fn release_unnamed(&self, writer: &mut Writer, old: &Manifest, tenant: &str) {
        let (before, after) =
            (old.tenants.get(tenant).cloned(), writer.manifest.tenants.get(tenant).cloned());
        // Counted in before out: a blob the tenant keeps naming never drops to 0.
        writer.count_blobs(after.as_deref(), true);
        writer.count_blobs(before.as_deref(), false);
        let named: HashSet<(&str, &str)> =
            after.iter().flat_map(|r| r.versions()).map(|(name, v)| (name, v.version.as_str())).collect();
        let unnamed = |(_, p, v): &VersionKey| !named.contains(&(p.as_str(), v.as_str()));
        let dropped: Vec<VersionKey> =
            tenant_range(&writer.loaded, tenant).map(|(k, _)| k).filter(|k| unnamed(k)).cloned().collect();
        for key in dropped {
            if let Some(loaded) = writer.loaded.remove(&key) {
                // Retired now, routed or not: its idle instances go (a selection still on
                // it drops its instance when done), and their slots come back.
                loaded.set_routed(false);
            }
        }
        let mut collected = 0;
        let mut removed_blobs = BTreeSet::new();
        for (name, v) in before.iter().flat_map(|r| r.versions()) {
            if !named.contains(&(name, v.version.as_str())) {
                collected += 1;
                if !writer.names_blob(&v.blob) {
                    removed_blobs.insert(v.blob.clone());
                }
            }
        }
        if collected > 0 {
            self.metrics.collected(tenant, collected);
        }
        tokio::task::block_in_place(|| {
            for blob in removed_blobs {
                self.loader.forget(&blob);
                let _ = self.loader.registry.remove_blob(&blob, &self.loader.engine);
            }
        });
    }

    /// A loaded version for the writer's map, stored as `record`; `template` is an
    /// instance-less sibling of the scorer the upload's configure check accepted.
    pub(crate) fn new_version(
        &self,
        (tenant, policy): (&str, &str),
        record: &VersionRecord,
        template: GuestScorer,
    ) -> Arc<LoadedVersion> {
        new_version(&self.version_context(), (tenant, policy), record, Template::Ready(Box::new(template)))
    }
}

/// Adds a cold version to the writer's map for every version `writer.manifest` names (of
/// `tenant` alone, if given) that it does not have yet; the versions added. Reads nothing.
pub(crate) fn add_versions(
    writer: &mut Writer,
    ctx: &VersionContext<'_>,
    tenant: Option<&str>,
) -> Vec<Arc<LoadedVersion>> {
    let versions: Box<dyn Iterator<Item = (&str, &str, &VersionRecord)>> = match tenant {
        None => Box::new(writer.manifest.versions()),
        Some(tenant) => Box::new(
            writer
                .manifest
                .tenants
                .get(tenant)
                .into_iter()
                .flat_map(move |r| r.versions().map(move |(n, v)| (tenant, n, v))),
        ),
    };
    let new: Vec<(VersionKey, Arc<LoadedVersion>)> = versions
        .filter(|(tenant, name, v)| {
            !writer.loaded.contains_key(&(tenant.to_string(), name.to_string(), v.version.clone()))
        })
        .map(|(tenant, name, v)| {
            let key = (tenant.to_string(), name.to_string(), v.version.clone());
            (key, new_version(ctx, (tenant, name), v, Template::Cold))
        })
        .collect();
    new.into_iter()
        .map(|(key, version)| {
            writer.loaded.insert(key, Arc::clone(&version));
            version
        })
        .collect()
}

/// Loads every version of `service` that is still cold, one at a time, each under a
/// compile permit (its configure takes one of the pool's slots for those): what start-up
/// leaves for after the server answers (unless `load_on_start` is off). A version a
/// selection loaded first is skipped.
pub async fn warm(service: Arc<Service>) {
    if !service.limits.load_on_start {
        return;
    }
    let started = std::time::Instant::now();
    let versions: Vec<Arc<LoadedVersion>> = service.snapshot().versions().cloned().collect();
    for version in &versions {
        let Ok(_permit) = service.system_compile_permits.acquire().await else { return };
        tokio::task::block_in_place(|| version.load());
    }
    tracing::info!(versions = versions.len(), took = ?started.elapsed(), "every stored version loaded");
}

/// Deletes blobs (and their compiled artifacts) that no version of the manifest names:
/// left by a crash between a record write and a collection, or by an upload dropped
/// between storing its blob and committing. Start-up holds the data dir's lock, so no
/// upload is in flight.
fn sweep_orphan_blobs(loader: &Loader, writer: &Writer) {
    let (store, engine) = (&loader.registry, &loader.engine);
    let blobs = match store.blob_names() {
        Ok(blobs) => blobs,
        Err(e) => return tracing::warn!(error = %e, "listing blobs for the start-up sweep"),
    };
    for blob in blobs.iter().filter(|b| !writer.names_blob(b)) {
        match store.remove_blob(blob, engine) {
            Ok(()) => tracing::info!(blob = %blob, "orphan blob removed at start-up"),
            Err(e) => tracing::warn!(blob = %blob, error = %e, "removing an orphan blob"),
        }
    }
}

/// Evicts versions unused for `evict_after_secs` until the process ends (never, at 0):
/// every quarter of that (1 s to 60 s), each loaded version not checked out since is made
/// cold again, and of the components no loaded version uses (whatever made it cold) only
/// the `max_unused_components` selected most recently stay. A version evicted loads again
/// on its next selection (from its kept component, else from the compiled cache). The
/// pass looks at every version: O(versions) every quarter of the idle time, not per
/// selection.
pub async fn evict(service: Arc<Service>) {
    let idle = service.limits.evict_after_secs;
    if idle == 0 {
        return;
    }
    let every = std::time::Duration::from_secs(idle / 4)
        .clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        let snapshot = service.snapshot();
        let evicted = snapshot.versions().filter(|v| v.evict_if_idle(idle)).count();
        if evicted > 0 {
            service.metrics.evicted(evicted as u64);
            tracing::debug!(evicted, "versions unused for {idle} s evicted");
        }
        // On every pass, not only after an eviction: versions also go cold otherwise (a
        // tier-up reloads them), and a component kept for them alone would stay until
        // some later pass evicted something (never, on a quiet server).
        let (mut in_use, mut last_used) = (HashSet::new(), HashMap::<&str, u64>::new());
        for v in snapshot.versions() {
            if v.is_loaded() {
                in_use.insert(v.blob());
            }
            let latest = last_used.entry(v.blob()).or_default();
            *latest = (*latest).max(v.last_used());
        }
        // Over the memory bound idle instances are shed by, no component is kept for
        // evicted versions either: they are the cheapest memory to give back (each
        // reloads from its artifact: BENCHMARKS.md, "Where the time goes").
        let unused = if service.idle_slots.over_memory() { 0 } else { service.limits.max_unused_components };
        service.loader.keep_only(&in_use, &last_used, unused);
        drop(snapshot);
        // The artifacts compiled since the last pass, checked now (off any selection's
        // path) rather than by the first reload of each after its version's eviction:
        // every version evicted on a later pass then reloads without hashing its
        // artifact. A pass comes at least every quarter of the idle time, so an artifact
        // is checked before any version using it can be evicted (but one written under a
        // second before a pass waits for the next).
        if let Some(cache) = service.loader.engine.artifact_cache().cloned() {
            let checked = tokio::task::spawn_blocking(move || cache.check_written()).await.unwrap_or(0);
            if checked > 0 {
                tracing::debug!(checked, "artifacts written since the last pass checked");
            }
        }
    }
}
