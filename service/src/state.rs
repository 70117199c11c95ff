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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use switchyard::builtin::{self, Builtin};
use switchyard::guard::GuardConfig;
use switchyard::selection::{Call, Scorer};
use switchyard::{
    ArtifactCache, FailMode, Fault, GuardedSelector, GuestScorer, Limits, PolicyComponent, PolicyEngine,
    SharedBreaker,
};
use switchyard_guest_sdk::{PolicyInfo, WorkerRank};
use tokio::sync::{MutexGuard, Semaphore};

use crate::config::ServiceLimits;
use crate::error::ApiError;
use crate::metrics::{Metrics, PolicyMetrics, TenantVersions};
use crate::store::{Manifest, Store};

/// (tenant, policy name, version).
pub type VersionKey = (String, String, String);

/// One compiled version of a tenant's policy, with its idle instances.
pub struct LoadedVersion {
    policy: String,
    version: String,
    /// The accepted configuration of the version, with no instance: each pooled
    /// instance is its sibling (see [`GuestScorer::sibling`]).
    template: Mutex<GuestScorer>,
    /// Idle guarded selectors, each owning one guest instance (a Store is
    /// single-threaded, so a concurrent selection takes its own).
    idle: Mutex<Vec<GuardedSelector>>,
    max_idle: usize,
    /// Whether a route uses this version; a retired version keeps no idle instances
    /// (they hold slots of the engine's instance pool).
    routed: AtomicBool,
    metrics: Arc<PolicyMetrics>,
    /// Quarantine of this version, shared by all its instances and threads.
    breaker: Arc<SharedBreaker>,
    guard: GuardConfig,
}

impl LoadedVersion {
    pub fn policy(&self) -> &str {
        &self.policy
    }
    pub fn version(&self) -> &str {
        &self.version
    }
    pub fn metrics(&self) -> &Arc<PolicyMetrics> {
        &self.metrics
    }
    pub fn breaker(&self) -> &SharedBreaker {
        &self.breaker
    }

    /// An idle guarded selector, or a new one whose guest instantiates on its first call
    /// (a failure then is contained like any fault). Fails as `mode` says.
    pub fn checkout(&self, mode: FailMode) -> GuardedSelector {
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut selector = pooled.unwrap_or_else(|| {
            let scorer = self.template.lock().unwrap_or_else(|p| p.into_inner()).sibling();
            self.wrap(scorer)
        });
        selector.set_fail_mode(mode);
        selector
    }

    /// Returns a selector for reuse (or drops it when retired or the pool is full).
    pub fn checkin(&self, selector: GuardedSelector) {
        if self.routed.load(Ordering::Acquire) {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < self.max_idle {
                idle.push(selector);
            }
        }
    }

    fn wrap(&self, scorer: GuestScorer) -> GuardedSelector {
        let short = self.version.get(..12).unwrap_or(&self.version);
        let scorer = Metered { inner: scorer, metrics: self.metrics.clone() };
        GuardedSelector::with_default_fallback(Box::new(scorer), FailMode::Open, self.guard.clone())
            .with_breaker(Arc::clone(&self.breaker))
            .with_label(format!("`{}` version {short}", self.policy))
    }

    fn set_routed(&self, routed: bool) {
        self.routed.store(routed, Ordering::Release);
        if !routed {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
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
}

/// A class's route: the policy, what runs it, and what a fault does.
#[derive(Clone)]
pub struct Route {
    pub policy: String,
    pub target: Target,
    pub on_fault: FailMode,
}

/// An immutable view for readers: swapped whole on every change.
pub struct Snapshot {
    manifest: Arc<Manifest>,
    /// tenant → class → route.
    routes: HashMap<String, HashMap<String, Route>>,
    /// Every loaded version, routed or not (for listing their breakers).
    versions: HashMap<VersionKey, Arc<LoadedVersion>>,
}

impl Snapshot {
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// A loaded version of a tenant's policy.
    pub fn version(&self, tenant: &str, policy: &str, version: &str) -> Option<&Arc<LoadedVersion>> {
        self.versions.get(&(tenant.to_string(), policy.to_string(), version.to_string()))
    }

    /// (tenant, policy) pairs with a routed version whose breaker is open or half-open:
    /// the policy is quarantined for some class. A retired version's breaker does not
    /// count: no traffic reaches it.
    pub fn quarantined(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (tenant, classes) in &self.routes {
            for route in classes.values() {
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
    pub fn route(&self, tenant: &str, class: Option<&str>) -> Option<Route> {
        let classes = self.routes.get(tenant)?;
        Some(class.and_then(|c| classes.get(c)).cloned().unwrap_or_else(|| Route {
            policy: "default".into(),
            target: Target::Builtin(builtin::find("default").expect("the default builtin exists")),
            on_fault: FailMode::Open,
        }))
    }
}

/// What only the writer touches.
pub struct Writer {
    pub manifest: Manifest,
    /// Compiled components by blob sha256 (several versions may share one).
    pub components: HashMap<String, PolicyComponent>,
    pub loaded: HashMap<VersionKey, Arc<LoadedVersion>>,
}

/// The running service.
pub struct Service {
    pub(crate) limits: ServiceLimits,
    /// Each version's breaker settings (`[guard]`).
    pub(crate) guard: GuardConfig,
    pub(crate) engine: PolicyEngine,
    pub(crate) store: Store,
    pub(crate) admin_sha256: String,
    pub(crate) writer: tokio::sync::Mutex<Writer>,
    snapshot: ArcSwap<Snapshot>,
    pub(crate) compile_permits: Semaphore,
    pub(crate) metrics: Metrics,
    /// Each tenant's uploads and writes in the last minute (`uploads_per_minute`,
    /// `writes_per_minute`).
    pub(crate) rates: Mutex<HashMap<String, crate::manage::TenantRates>>,
}

impl Service {
    /// Opens the data directory and loads every committed version: from our artifact
    /// cache in `cache_dir` when it holds this engine's compilation of the component,
    /// else compiled (and cached). Blocking: call before serving, or off the async runtime.
    pub fn open(
        data_dir: &Path,
        cache_dir: &Path,
        limits: ServiceLimits,
        guard: GuardConfig,
        engine_limits: Limits,
        admin_token: Option<String>,
    ) -> anyhow::Result<Arc<Self>> {
        let store = Store::open(data_dir)
            .map_err(|e| anyhow::anyhow!("opening the data dir {}: {e}", data_dir.display()))?;
        let manifest = store.load_manifest().map_err(anyhow::Error::msg)?;
        let admin_sha256 = crate::auth::admin_token_hash(data_dir, admin_token)
            .map_err(|e| anyhow::anyhow!("the admin token in {}: {e}", data_dir.display()))?;
        let cache = ArtifactCache::open(cache_dir)
            .map_err(|e| anyhow::anyhow!("the compiled-artifact cache {}: {e}", cache_dir.display()))?;
        let engine = PolicyEngine::new(engine_limits)?.with_artifact_cache(cache);
        let metrics = Metrics::default();
        let mut writer = Writer { manifest, components: HashMap::new(), loaded: HashMap::new() };
        let mut keys = Vec::new();
        for (tenant, record) in &writer.manifest.tenants {
            for (name, policy) in &record.policies {
                for v in &policy.versions {
                    keys.push((tenant.clone(), name.clone(), v.clone()));
                }
            }
        }
        for (tenant, name, v) in keys {
            if !writer.components.contains_key(&v.blob) {
                let bytes = store.read_blob(&v.blob).map_err(|e| anyhow::anyhow!("blob {}: {e}", v.blob))?;
                let component = PolicyComponent::load(&engine, &bytes)
                    .map_err(|e| anyhow::anyhow!("recompiling {tenant}/{name} {}: {e}", v.version))?;
                metrics.loaded(&component);
                writer.components.insert(v.blob.clone(), component);
            }
            let component = writer.components[&v.blob].clone();
            // Configured once to learn what it declares; the instance is not kept (it
            // would hold a slot of the engine's instance pool while nobody selects).
            let accepted = GuestScorer::new(name.clone(), component, &v.params)
                .map_err(|e| anyhow::anyhow!("configuring {tenant}/{name} {}: {e}", v.version))?;
            let loaded =
                new_version(&limits, &guard, &metrics, (&tenant, &name, &v.version), accepted.sibling());
            writer.loaded.insert((tenant, name, v.version), loaded);
        }
        let snapshot = build_snapshot(&writer);
        record_state(&metrics, &writer);
        let service = Arc::new(Self {
            compile_permits: Semaphore::new(limits.compile_concurrency.max(1)),
            limits,
            guard,
            engine,
            store,
            admin_sha256,
            writer: tokio::sync::Mutex::new(writer),
            snapshot: ArcSwap::from_pointee(snapshot),
            metrics,
            rates: Mutex::default(),
        });
        Ok(service)
    }

    /// The current snapshot (lock-free).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// `/metrics`: the counters, with each policy's quarantine state as it is now.
    pub fn render_metrics(&self) -> String {
        self.metrics.render(&self.snapshot().quarantined())
    }

    /// Makes `manifest` durable, then visible: writes it (temp + fsync + rename), adopts
    /// it, releases what it no longer names (see [`Service::release_unnamed`]) and swaps
    /// in a new snapshot. On a write error nothing changes.
    pub(crate) fn commit(
        &self,
        writer: &mut MutexGuard<'_, Writer>,
        manifest: Manifest,
    ) -> Result<(), ApiError> {
        tokio::task::block_in_place(|| self.store.write_manifest(&manifest))
            .map_err(|e| ApiError::internal(format!("writing the manifest: {e}")))?;
        let old = std::mem::replace(&mut writer.manifest, manifest);
        self.release_unnamed(writer, &old);
        let snapshot = build_snapshot(writer);
        let routed: HashSet<*const LoadedVersion> = snapshot
            .routes
            .values()
            .flat_map(|classes| classes.values())
            .filter_map(|r| match &r.target {
                Target::Guest(v) => Some(Arc::as_ptr(v)),
                Target::Builtin(_) => None,
            })
            .collect();
        self.snapshot.store(Arc::new(snapshot));
        for v in writer.loaded.values() {
            v.set_routed(routed.contains(&Arc::as_ptr(v)));
        }
        record_state(&self.metrics, writer);
        Ok(())
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
        writer.loaded.retain(|(t, p, v), _| named.contains_key(&(t.as_str(), p.as_str(), v.as_str())));
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
                let _ = self.store.remove_blob(blob, &self.engine);
            }
        });
    }

    /// A loaded version for the writer's map; `first` is the scorer the upload's
    /// configure check created, its instance kept as the first idle one.
    pub(crate) fn new_version(&self, key: &VersionKey, first: GuestScorer) -> Arc<LoadedVersion> {
        new_version(&self.limits, &self.guard, &self.metrics, (&key.0, &key.1, &key.2), first)
    }
}

/// A loaded version of (tenant, policy, version), with a closed breaker of its own.
/// `accepted` is a scorer that configured successfully; its instance, if it has one
/// (an upload's configure check), is kept as the first idle one.
fn new_version(
    limits: &ServiceLimits,
    guard: &GuardConfig,
    metrics: &Metrics,
    (tenant, policy, version): (&str, &str, &str),
    accepted: GuestScorer,
) -> Arc<LoadedVersion> {
    let loaded = Arc::new(LoadedVersion {
        policy: policy.to_string(),
        version: version.to_string(),
        template: Mutex::new(accepted.sibling()),
        idle: Mutex::new(Vec::new()),
        max_idle: limits.idle_instances_per_version,
        routed: AtomicBool::new(true),
        metrics: metrics.policy(tenant, policy),
        breaker: Arc::new(SharedBreaker::new(guard.clone())),
        guard: guard.clone(),
    });
    let selector = loaded.wrap(accepted);
    loaded.checkin(selector);
    loaded
}

/// Every version `manifest` names: ((tenant, policy, version), blob).
fn versions_of(manifest: &Manifest) -> impl Iterator<Item = ((&str, &str, &str), &str)> {
    manifest.tenants.iter().flat_map(|(tenant, record)| {
        record.policies.iter().flat_map(move |(name, policy)| {
            policy
                .versions
                .iter()
                .map(move |v| ((tenant.as_str(), name.as_str(), v.version.as_str()), v.blob.as_str()))
        })
    })
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
                let version = a.version.clone().unwrap_or_else(|| policy.active.clone());
                match writer.loaded.get(&(tenant.clone(), a.policy.clone(), version)) {
                    Some(v) => Target::Guest(v.clone()),
                    None => continue,
                }
            } else if let Some(b) = builtin::find(&a.policy) {
                Target::Builtin(b)
            } else {
                continue;
            };
            classes.insert(class.clone(), Route { policy: a.policy.clone(), target, on_fault: a.on_fault });
        }
        routes.insert(tenant.clone(), classes);
    }
    Snapshot { manifest: Arc::new(writer.manifest.clone()), routes, versions: writer.loaded.clone() }
}
