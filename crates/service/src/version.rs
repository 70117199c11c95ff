//! A tenant's version in memory: its accepted configuration (loaded when first needed),
//! its idle instances (bounded per version and, through [`IdleSlots`], across all of
//! them), its quarantine breaker; and the [`Loader`] its component comes from.
//!
//! Lazy: a version starts cold, with no component and no configuration. Start-up only
//! reads the registry, so `serve` answers at once however many versions it holds; a
//! background pass ([`crate::state::warm`]) then loads them one by one, and a selection
//! that reaches a cold version first loads it itself (from the compiled cache: no compile
//! unless the cache lost it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use switchyard::guard::GuardConfig;
use switchyard::selection::{Call, Scorer};
use switchyard::{FailMode, Fault, GuardedSelector, GuestScorer, SharedBreaker};
use switchyard_guest_sdk::{PolicyInfo, WorkerRank};

use crate::config::ServiceLimits;
pub use crate::idle::IdleSlots;
use crate::idle::{IdleOwner, IdleSlot};
pub use crate::loader::Loader;
use crate::loader::{Compile, LoadFailure};
use crate::metrics::{Metrics, PolicyMetrics};
use crate::store::VersionRecord;

/// What every loaded version shares: the service's settings, its metrics, the idle slots.
pub(crate) struct VersionContext<'a> {
    pub limits: &'a ServiceLimits,
    pub guard: &'a GuardConfig,
    pub metrics: &'a Metrics,
    pub idle: &'a Arc<IdleSlots>,
    pub loader: &'a Arc<Loader>,
    pub clock: Clock,
}

/// The service's coarse clock: whole seconds since it started (enough to tell a version
/// unused for minutes, and one relaxed store per selection).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(std::time::Instant);

impl Clock {
    pub(crate) fn new() -> Self {
        Self(std::time::Instant::now())
    }
    /// Seconds since the service started.
    pub(crate) fn now(&self) -> u64 {
        self.0.elapsed().as_secs()
    }
}

/// A version's configuration, as far as it got.
pub(crate) enum Template {
    /// Not loaded yet.
    Cold,
    /// The accepted configuration, with no instance: each instance is its sibling (see
    /// [`GuestScorer::sibling`]).
    Ready(Box<GuestScorer>),
    /// It did not load (a missing blob, a limit lowered below its size, a configure that
    /// now fails), and why: its classes fail open or closed, as assigned.
    Failed(Arc<str>),
}

/// Which configuration of a version an instance checked out was made from: given back
/// with it to [`LoadedVersion::checkin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

/// One version of a tenant's policy, with its idle instances.
pub struct LoadedVersion {
    /// The tenant whose version it is (a compile for it is counted as the tenant's).
    tenant: String,
    policy: String,
    version: String,
    /// What it loads from: the blob and the parameters.
    blob: String,
    params: String,
    /// Held only to read or set the state, never across a load.
    template: Mutex<Template>,
    /// Taken by a load for its whole length, so one version loads once at a time.
    loading: Mutex<()>,
    /// A background load of it is queued or running (see [`LoadedVersion::checkout`]).
    loading_later: AtomicBool,
    /// Bumped by [`LoadedVersion::reload`]: an instance checked out before is not kept.
    generation: AtomicU64,
    loader: Arc<Loader>,
    /// When it was last checked out, in seconds of the service's clock ([`Clock`]).
    last_used: AtomicU64,
    clock: Clock,
    /// Idle guarded selectors, each owning one guest instance (a Store is
    /// single-threaded, so a concurrent selection takes its own) and the idle slot it
    /// holds. Boxed, so that taking one out and putting it back moves a pointer, not the
    /// whole selector (hundreds of bytes, out of the caches when a version has been idle).
    idle: Mutex<Vec<(Box<GuardedSelector>, IdleSlot)>>,
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
    /// Itself, for the idle slots to find the version an instance is kept by.
    this: Weak<LoadedVersion>,
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

    /// Why it did not load, if it did not.
    pub fn failure(&self) -> Option<Arc<str>> {
        match &*self.template() {
            Template::Failed(reason) => Some(Arc::clone(reason)),
            Template::Cold | Template::Ready(_) => None,
        }
    }

    /// Whether it is loaded (configured, ready for instances).
    pub fn is_loaded(&self) -> bool {
        matches!(*self.template(), Template::Ready(_))
    }

    fn template(&self) -> std::sync::MutexGuard<'_, Template> {
        self.template.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads a cold version: its component (from the loader), configured once to check
    /// it and learn what it declares; the instance is not kept (it would hold a slot of
    /// the engine's pool while nobody selects). Blocking. The caller holds a compile
    /// permit: the configure takes one of the pool's slots for those.
    pub(crate) fn load(&self) {
        if !self.is_loaded() {
            let _ = self.configured(Compile::Now);
        }
    }

    /// An instance of the version for a selection: a sibling of its configuration, or,
    /// when it is cold, the instance its load configured. `Err`: why it does not load.
    /// Loads of one version take turns (`loading`), and none holds `template` while it
    /// reads a blob or compiles: a listing or a scrape reads the state on an async
    /// worker, and must not wait on I/O that needs that worker.
    fn configured(&self, compile: Compile) -> Result<GuestScorer, Arc<str>> {
        let settled = || match &*self.template() {
            Template::Ready(t) => Some(Ok(t.sibling())),
            Template::Failed(reason) => Some(Err(Arc::clone(reason))),
            Template::Cold => None,
        };
        if let Some(settled) = settled() {
            return settled;
        }
        let _turn = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        // Another load may have settled it while this one waited its turn.
        if let Some(settled) = settled() {
            return settled;
        }
        let loaded = self.configure(compile);
        let mut template = self.template();
        match loaded {
            Ok(scorer) => {
                *template = Template::Ready(Box::new(scorer.sibling()));
                Ok(scorer)
            }
            // Cold still: the next selection tries again (and a background load compiles it).
            Err(LoadFailure { reason, transient: true, deferred }) => {
                drop(template);
                if deferred {
                    self.load_later();
                }
                Err(reason.into())
            }
            Err(LoadFailure { reason, transient: false, .. }) => {
                let reason: Arc<str> = reason.into();
                *template = Template::Failed(Arc::clone(&reason));
                Err(reason)
            }
        }
    }

    /// A fresh instance of the version, configured; `Err`: why it does not load.
    fn configure(&self, compile: Compile) -> Result<GuestScorer, LoadFailure> {
        let started = std::time::Instant::now();
        let loaded = self.loader.component(&self.tenant, &self.blob, compile).and_then(|component| {
            GuestScorer::new(self.policy.clone(), component, &self.params)
                .map_err(|e| LoadFailure::new(format!("configuring: {e}"), false))
        });
        self.loader.metrics().version_loaded(started.elapsed());
        loaded.inspect_err(|e| {
            let (reason, transient) = (&e.reason, e.transient);
            tracing::warn!(policy = %self.policy, version = %self.version, %reason, transient, "stored version unavailable");
        })
    }

    /// Loads the version in the background, under a compile permit, unless that is
    /// queued already: what a selection that found its component uncompiled leaves
    /// behind (a selection holds no permit, so it never compiles). Outside a tokio
    /// runtime nothing is queued, and the next selection asks again.
    fn load_later(&self) {
        let (Some(this), Ok(runtime)) = (self.this.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        if self.loading_later.swap(true, Ordering::AcqRel) {
            return;
        }
        let permits = Arc::clone(&self.loader.load_permits);
        runtime.spawn(async move {
            if let Ok(_permit) = permits.acquire().await {
                let version = Arc::clone(&this);
                let _ = tokio::task::spawn_blocking(move || version.load()).await;
            }
            this.loading_later.store(false, Ordering::Release);
        });
    }

    /// An idle guarded selector, or a new one whose guest instantiates on its first call
    /// (a failure then is contained like any fault). Fails as `mode` says. A cold version
    /// is loaded first, and the instance its configure made is this selection's (within
    /// the selection's own slot of the engine's pool); a component the artifact cache
    /// lacks is not compiled here but in the background (`Compile::Later`), and this
    /// selection is answered without it. `Err`: the version does not load, and why.
    pub fn checkout(&self, mode: FailMode) -> Result<(Box<GuardedSelector>, Generation), Arc<str>> {
        self.last_used.store(self.clock.now(), Ordering::Relaxed);
        let generation = Generation(self.generation.load(Ordering::Acquire));
        // The idle slot goes back as the entry is taken apart.
        let pooled =
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop().map(|(selector, _slot)| selector);
        let mut selector = match pooled {
            Some(selector) => selector,
            None => {
                self.loader.metrics().idle_miss();
                self.wrap(self.configured(Compile::Later)?)
            }
        };
        selector.set_fail_mode(mode);
        Ok((selector, generation))
    }

    /// Returns a selector for reuse, or drops it (and its instance, freeing its slot and
    /// its tenant's share) when the version is retired, the idle pools are full, or it
    /// was reloaded since `generation` (the instance runs code it no longer uses). A
    /// selector kept holds nothing of its last request (`GuardedSelector::release`).
    pub fn checkin(&self, mut selector: Box<GuardedSelector>, generation: Generation) {
        selector.release();
        let room = |idle: &Vec<_>| {
            self.routed.load(Ordering::Acquire)
                && idle.len() < self.max_idle
                && self.generation.load(Ordering::Acquire) == generation.0
        };
        if !room(&self.idle.lock().unwrap_or_else(|p| p.into_inner())) {
            return;
        }
        // Taken without our lock held: the slot freed may be one of ours.
        let owner: Weak<dyn IdleOwner> = self.this.clone();
        let Some(slot) = self.idle_slots.take(&owner) else { return };
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // Checked again under the lock that `set_routed` clears the pool under: a version
        // retired meanwhile keeps nothing (the slot goes back as it is dropped).
        if room(&idle) {
            idle.push((selector, slot));
        }
    }

    fn wrap(&self, scorer: GuestScorer) -> Box<GuardedSelector> {
        let short = self.version.get(..12).unwrap_or(&self.version);
        let scorer = Metered { inner: scorer, metrics: self.metrics.clone() };
        Box::new(
            switchyard_builtins::guarded(Box::new(scorer), FailMode::Open, self.guard.clone())
                .with_breaker(Arc::clone(&self.breaker))
                .with_label(format!("`{}` version {short}", self.policy)),
        )
    }

    /// Evicts the version if it is loaded and was not checked out in the last `idle`
    /// seconds: its configuration and idle instances go (a selection running on it
    /// finishes on its own instance), and its next selection loads it again. Whether it
    /// was evicted.
    pub(crate) fn evict_if_idle(&self, idle: u64) -> bool {
        let template = self.template();
        let unused = self.clock.now().saturating_sub(self.last_used.load(Ordering::Relaxed)) >= idle;
        if !(unused && matches!(*template, Template::Ready(_))) {
            return false;
        }
        self.make_cold(template);
        true
    }

    /// Sets a loaded version's state to cold (under `template`, its state's lock) and
    /// drops its idle instances, their slots coming back with them.
    fn make_cold(&self, mut template: std::sync::MutexGuard<'_, Template>) {
        if matches!(*template, Template::Ready(_)) {
            *template = Template::Cold;
        }
        drop(template);
        let dropped = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|p| p.into_inner()));
        drop(dropped);
    }

    /// Makes a loaded version cold again, whatever its use: its configuration and idle
    /// instances go, and instances checked out now are not kept; its next selection loads
    /// it again, from the component the loader keeps now (Cranelift's, after a tier-up).
    /// Blocking: waits for a load of it in progress (which may have used the old
    /// component) to end first.
    pub(crate) fn reload(&self) {
        let _turn = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.make_cold(self.template());
    }

    /// When it was last checked out, in seconds of the service's clock.
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// The blob it loads from.
    pub(crate) fn blob(&self) -> &str {
        &self.blob
    }

    /// Marks the version routed or retired; a retired one drops its idle instances, and
    /// their slots come back with them.
    pub(crate) fn set_routed(&self, routed: bool) {
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
    fn last_call(&self) -> Option<switchyard::selection::CallReport> {
        self.inner.last_call()
    }
    fn reset(&mut self) {
        self.inner.reset();
    }
}

/// A version of `tenant`'s `policy` stored as `record`, with a closed breaker of its own
/// and no instance yet: `template` is [`Template::Cold`] (loaded when first needed) or an
/// instance-less sibling of a scorer that configured successfully (an upload's). Retired
/// until a commit (or start-up) routes a class to it.
pub(crate) fn new_version(
    ctx: &VersionContext<'_>,
    (tenant, policy): (&str, &str),
    record: &VersionRecord,
    template: Template,
) -> Arc<LoadedVersion> {
    Arc::new_cyclic(|this| LoadedVersion {
        tenant: tenant.to_string(),
        policy: policy.to_string(),
        version: record.version.clone(),
        blob: record.blob.clone(),
        params: record.params.clone(),
        template: Mutex::new(template),
        loading: Mutex::new(()),
        loading_later: AtomicBool::new(false),
        generation: AtomicU64::new(0),
        loader: Arc::clone(ctx.loader),
        last_used: AtomicU64::new(ctx.clock.now()),
        clock: ctx.clock,
        idle: Mutex::new(Vec::new()),
        max_idle: ctx.limits.idle_instances_per_version,
        routed: AtomicBool::new(false),
        metrics: ctx.metrics.policy(tenant, policy),
        breaker: Arc::new(SharedBreaker::new(ctx.guard.clone())),
        guard: ctx.guard.clone(),
        idle_slots: Arc::clone(ctx.idle),
        this: Weak::clone(this),
    })
}

impl IdleOwner for LoadedVersion {
    /// Its slot is wanted for an instance used more recently.
    fn drop_idle(&self, stamp: u64) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = idle.iter().position(|(_, slot)| slot.stamp() == stamp).map(|i| idle.remove(i));
        drop(idle);
        drop(dropped);
    }
}

/// (tenant, policy name, version).
pub type VersionKey = (String, String, String);

/// Every version, by key: a persistent map, so the writer's and each snapshot's share it.
pub type Versions = imbl::OrdMap<VersionKey, Arc<LoadedVersion>>;

/// The entries of `map` (keyed by [`VersionKey`]) of one tenant, in order.
pub(crate) fn tenant_range<'a, V: Clone>(
    map: &'a imbl::OrdMap<VersionKey, V>,
    tenant: &'a str,
) -> impl Iterator<Item = (&'a VersionKey, &'a V)> + 'a {
    map.range((tenant.to_string(), String::new(), String::new())..).take_while(move |(k, _)| k.0 == tenant)
}
