//! Components by blob, loaded when a version first needs one: from the engine's artifact
//! cache when it holds this engine's compilation of the bytes, else compiled (and cached)
//! by a caller holding a compile permit.
//!
//! Uploads' compiles are scheduled here too ([`Loader::compile`]): at most
//! `compile_concurrency` at once, a tenant's uploads taking turns, each waiting at most
//! `compile_timeout_ms` for its turn and a permit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::Semaphore;

use switchyard::selection::wire::ErrorKind;
use switchyard::selection::wire::api::CompileSource;
use switchyard::{LoadErrorKind, PolicyComponent, PolicyEngine};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::registry::Registry;

/// Whether a load may compile a component the artifact cache lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compile {
    /// Yes: the caller holds a compile permit (an upload, a fleet change, the
    /// background loads).
    Now,
    /// No: a selection, which holds no permit. A component the cache lacks (wiped, or
    /// written by another wasmtime) is then not loaded yet: the selection is answered
    /// without it, and the version loads in the background under a permit.
    Later,
}

/// Why a component did not load.
#[derive(Debug)]
pub(crate) struct LoadFailure {
    pub reason: String,
    /// Only because the registry did not answer, or because compiling was left for
    /// later: the version stays cold, and its next selection tries again (a component
    /// that does not compile never will).
    pub transient: bool,
    /// Compiling was left for later ([`Compile::Later`]): the version is to be loaded in
    /// the background.
    pub deferred: bool,
}

impl LoadFailure {
    pub(crate) fn new(reason: String, transient: bool) -> Self {
        Self { reason, transient, deferred: false }
    }
}

/// Where components come from: the registry's blobs, loaded from the engine's artifact
/// cache when it holds them, else compiled. Each blob's component is kept once, shared by
/// every version naming it, while a loaded version uses it, and after that among the
/// `max_unused_components` used most recently (`Loader::keep_only`); never once no
/// version names the blob.
pub struct Loader {
    pub(crate) registry: Registry,
    pub(crate) engine: PolicyEngine,
    metrics: Arc<Metrics>,
    /// The permit of the service's own loads (shared with start-up's and the fleet's),
    /// which a version's background load takes.
    pub(crate) load_permits: Arc<Semaphore>,
    components: Mutex<HashMap<String, PolicyComponent>>,
    /// The size of every blob loaded before (a blob's name is the sha256 of its bytes):
    /// a version evicted and selected again loads from the compiled cache by that name,
    /// without reading the blob and hashing it again.
    sizes: Mutex<HashMap<String, usize>>,
    /// Components kept that no loaded version used at the last [`Loader::keep_only`].
    unused: AtomicUsize,
    /// The `compile_concurrency` permits of tenants' uploads ([`Loader::compile`]).
    compile_permits: Semaphore,
    compile_concurrency: usize,
    /// Each tenant's turn to compile: one upload of a tenant waits for a compile permit
    /// at a time, so a tenant's uploads never queue ahead of another's more than once.
    compile_turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One of the `compile_concurrency` compile permits, taken from the semaphore (and
/// forgotten there) by an upload. Shared by the upload and Cranelift's thread
/// (`PolicyComponent::load_holding`): returned when both have let go, so a compile that
/// outlives its upload still holds it until Cranelift really returns.
pub(crate) struct CompilePermit {
    loader: Arc<Loader>,
    /// The upload was answered `compile-timeout` while Cranelift still ran (counted in
    /// `switchyard_compiles_abandoned` until it ends).
    abandoned: AtomicBool,
}

impl Drop for CompilePermit {
    fn drop(&mut self) {
        // The permit first: once the gauge says no abandoned compile runs, its permit is free.
        self.loader.compile_permits.add_permits(1);
        if self.abandoned.load(Ordering::Acquire) {
            self.loader.metrics.abandoned_compile_ended();
        }
    }
}

impl Loader {
    /// A loader of `registry`'s blobs with `engine`; the service's own loads take
    /// `load_permits`, tenants' uploads one of `compile_concurrency` permits of its own.
    pub(crate) fn new(
        registry: Registry,
        engine: PolicyEngine,
        metrics: Arc<Metrics>,
        load_permits: Arc<Semaphore>,
        compile_concurrency: usize,
    ) -> Arc<Self> {
        let (components, sizes, unused) = (Mutex::default(), Mutex::default(), AtomicUsize::new(0));
        Arc::new(Self {
            registry,
            engine,
            metrics,
            load_permits,
            components,
            sizes,
            unused,
            compile_permits: Semaphore::new(compile_concurrency),
            compile_concurrency,
            compile_turns: Mutex::default(),
        })
    }

    /// The compiled component for `bytes` and the compile permit its upload holds: from
    /// memory if these bytes were compiled before, else compiled (in a worker process
    /// under `switchyard serve`, killed at `compile_timeout_ms`), so uploads never take
    /// the async workers and at most `compile_concurrency` compiles run. The permit is
    /// taken on both paths: the upload's configure check that follows instantiates the
    /// component under it, and the engine's pool has `compile_concurrency` slots for
    /// those checks (see `Service::open`). Compiled in-process, a compile that outlives
    /// its deadline holds the permit until Cranelift returns
    /// (`switchyard_compiles_abandoned`).
    ///
    /// A tenant's uploads take turns: one waits for a permit at a time, so another
    /// tenant's upload waits behind at most one compile of each other tenant. An upload
    /// waits for its turn and a permit at most `compile_timeout_ms` in all, then is
    /// refused 503 `compile-busy`: a compile frees its permit within that time.
    pub(crate) async fn compile(
        self: &Arc<Self>,
        tenant: &str,
        blob: &str,
        bytes: Arc<[u8]>,
    ) -> Result<(PolicyComponent, CompileSource, Arc<CompilePermit>), ApiError> {
        let wait = Duration::from_millis(self.engine.limits().compile_timeout_ms);
        let turn = self.compile_turn(tenant);
        let acquired = tokio::time::timeout(wait, async {
            let turn = turn.lock_owned().await;
            (turn, self.compile_permits.acquire().await)
        })
        .await;
        let _turn = match acquired {
            Ok((turn, Ok(permit))) => {
                permit.forget();
                turn
            }
            Ok((_, Err(e))) => return Err(ApiError::internal(format!("the compile permits: {e}"))),
            Err(_) => {
                self.metrics.compile_busy();
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorKind::CompileBusy,
                    format!(
                        "no compile permit freed up within {} ms (`compile_timeout_ms`): all {} \
                         (`compile_concurrency`) are taken, or this tenant's previous upload is \
                         still compiling; try again later",
                        wait.as_millis(),
                        self.compile_concurrency,
                    ),
                ));
            }
        };
        let permit = Arc::new(CompilePermit { loader: Arc::clone(self), abandoned: AtomicBool::new(false) });
        if let Some(c) = self.kept(blob) {
            return Ok((c, CompileSource::Reused, permit));
        }
        let held = Arc::clone(&permit);
        let (engine, blob) = (self.engine.clone(), blob.to_string());
        let loaded = tokio::task::spawn_blocking(move || match engine.first_tier() {
            // Tiered: Winch compiles it now, unless Cranelift's code is cached already
            // (looked up here, off the async workers: a file mapped and hashed).
            Some(first) => match PolicyComponent::load_cached(&engine, &blob, bytes.len()) {
                Some(Ok(cached)) => Ok(cached),
                Some(Err(_)) | None => PolicyComponent::load_holding(first, &bytes, held),
            },
            None => PolicyComponent::load_holding(&engine, &bytes, held),
        })
        .await
        .map_err(|e| ApiError::internal(format!("the compile thread: {e}")))?;
        // Compiled in-process, Cranelift's thread may still hold its share of the permit.
        if loaded.as_ref().is_err_and(|e| e.kind == LoadErrorKind::CompileTimeout)
            && Arc::strong_count(&permit) > 1
        {
            // Counted before our reference goes: whichever of us and Cranelift's thread
            // lets go last frees the permit and uncounts it.
            self.metrics.compile_abandoned();
            permit.abandoned.store(true, Ordering::Release);
        }
        let component = loaded?;
        self.metrics.loaded(tenant, &component);
        let source = if component.from_cache() { CompileSource::Cached } else { CompileSource::Compiled };
        Ok((component, source, permit))
    }

    /// `tenant`'s turn to compile (see [`Loader::compile`]); turns nobody holds or waits
    /// for are dropped as another is handed out, so there are about as many as tenants
    /// uploading at once.
    fn compile_turn(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.compile_turns.lock().unwrap_or_else(|p| p.into_inner());
        turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        Arc::clone(turns.entry(tenant.to_string()).or_default())
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, PolicyComponent>> {
        self.components.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The component of `blob`, loaded now if it is not kept yet: from the artifact
    /// cache by the blob's name (its sha256) when this engine compiled it before, else
    /// compiled from the blob's bytes, only if `compile` is [`Compile::Now`]. Blocking (a
    /// blob read, maybe a compile). Two loads of one blob at once may both load it; the
    /// first kept wins.
    pub(crate) fn component(
        &self,
        tenant: &str,
        blob: &str,
        compile: Compile,
    ) -> Result<PolicyComponent, LoadFailure> {
        if let Some(c) = self.kept(blob) {
            return Ok(c);
        }
        let failed = |e: switchyard::LoadError| LoadFailure::new(format!("loading: {e}"), false);
        let size = self.sizes().get(blob).copied();
        if let Some(loaded) = size.and_then(|size| PolicyComponent::load_cached(&self.engine, blob, size)) {
            return Ok(self.keep_loaded(tenant, blob, loaded.map_err(failed)?));
        }
        let bytes = self.registry.read_blob(blob).map_err(|e| {
            LoadFailure::new(format!("reading blob {blob}: {e}"), crate::registry::is_transient(&e))
        })?;
        self.sizes().insert(blob.to_string(), bytes.len());
        let component = match compile {
            Compile::Now => PolicyComponent::load(&self.engine, &bytes).map_err(failed)?,
            Compile::Later => match PolicyComponent::load_cached(&self.engine, blob, bytes.len()) {
                Some(loaded) => loaded.map_err(failed)?,
                None => {
                    let reason = "not compiled on this replica yet (compiling in the background)";
                    return Err(LoadFailure { reason: reason.into(), transient: true, deferred: true });
                }
            },
        };
        Ok(self.keep_loaded(tenant, blob, component))
    }

    /// Counts `component` loaded (for `tenant`, whose version it loaded for) and keeps it
    /// as `blob`'s (or the one kept meanwhile).
    fn keep_loaded(&self, tenant: &str, blob: &str, component: PolicyComponent) -> PolicyComponent {
        self.metrics.loaded(tenant, &component);
        self.map().entry(blob.to_string()).or_insert(component).clone()
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The component of `blob`, if it is kept.
    pub(crate) fn kept(&self, blob: &str) -> Option<PolicyComponent> {
        self.map().get(blob).cloned()
    }

    /// Keeps `component` (an upload's, just compiled) as `blob`'s.
    pub(crate) fn keep(&self, blob: &str, component: PolicyComponent) {
        self.sizes().insert(blob.to_string(), component.size());
        self.map().entry(blob.to_string()).or_insert(component);
    }

    /// Whether the component kept for `blob` is Winch's code awaiting its tier-up
    /// (`compiler = "tiered"`). A Winch component stays kept until then (see
    /// [`Loader::keep_only`]), so none kept means no version names the blob any more.
    pub(crate) fn awaiting_tier_up(&self, blob: &str) -> bool {
        self.kept(blob).is_some_and(|c| self.on_first_tier(&c))
    }

    /// Compiles `blob` with Cranelift (caching the artifact), for its tier-up. Blocking,
    /// and meant for a thread at the lowest priority: it takes none of our locks, so such
    /// a thread never holds one another waits for. Bounded by the compiler's CPU time, not
    /// the wall clock (a busy host would time every one out); `held` (the tier-up permit)
    /// stays with Cranelift until it returns, timed out or not: one runs at a time.
    pub(crate) fn compile_tier_up<H: Send + 'static>(
        &self,
        tenant: &str,
        blob: &str,
        held: H,
    ) -> Result<PolicyComponent, String> {
        let bytes = self.registry.read_blob(blob).map_err(|e| format!("reading blob {blob}: {e}"))?;
        let component =
            PolicyComponent::load_in_background(&self.engine, &bytes, held).map_err(|e| e.to_string())?;
        self.metrics.loaded(tenant, &component);
        Ok(component)
    }

    /// Keeps `component` (Cranelift's, from [`Loader::compile_tier_up`]) for `blob` if
    /// Winch's is still kept; whether it did (then the versions of `blob` are to drop
    /// their Winch instances).
    pub(crate) fn swap_tier_up(&self, blob: &str, component: PolicyComponent) -> bool {
        let mut map = self.map();
        match map.get_mut(blob) {
            Some(kept) if self.on_first_tier(kept) => {
                *kept = component;
                drop(map);
                self.metrics.tiered_up();
                true
            }
            Some(_) | None => false,
        }
    }

    /// Drops `blob`'s component (versions already configured from it keep theirs): no
    /// version names it any more.
    pub(crate) fn forget(&self, blob: &str) {
        self.map().remove(blob);
        self.sizes().remove(blob);
    }

    /// Components kept.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// Keeps the components of the blobs in `in_use` (a loaded version uses them) and,
    /// of the others, the `unused` whose versions were selected most recently
    /// (`last_used`: each blob's latest selection, any clock; a blob it lacks counts as
    /// the oldest); drops the rest.
    ///
    /// Why keep code no version uses: an evicted version's next selection then only
    /// instantiates and configures instead of loading its component too (mapping the
    /// artifact, registering its types and code, on a selection's path; BENCHMARKS.md,
    /// "Where the time goes"). What an unused component keeps is its metadata and its code
    /// (mapped from its artifact, or compiled by this process for an upload); evicting its
    /// versions already dropped their instances.
    /// A version loading meanwhile keeps its own component; only the shared copy goes. A
    /// first-tier (Winch) component stays until its tier-up replaces it: no Cranelift
    /// artifact exists yet to load it again from, and without it a version evicted before
    /// its tier-up would be answered without its policy while it compiles.
    pub(crate) fn keep_only(
        &self,
        in_use: &std::collections::HashSet<&str>,
        last_used: &HashMap<&str, u64>,
        unused: usize,
    ) {
        // Under the lock selections take to find a component: O(components), no sort and
        // no allocation but this list and the names of those dropped.
        let mut map = self.map();
        let mut idle: Vec<(u64, &str)> = map
            .iter()
            .filter(|(blob, c)| !in_use.contains(blob.as_str()) && !self.on_first_tier(c))
            .map(|(blob, _)| (last_used.get(blob.as_str()).copied().unwrap_or(0), blob.as_str()))
            .collect();
        let kept = idle.len().min(unused);
        let dropped: Vec<String> = if idle.len() > unused {
            // The `unused` most recently used first; those after them go.
            if unused > 0 {
                idle.select_nth_unstable_by(unused - 1, |a, b| b.cmp(a));
            }
            idle[unused..].iter().map(|(_, blob)| blob.to_string()).collect()
        } else {
            Vec::new()
        };
        for blob in &dropped {
            map.remove(blob);
        }
        self.unused.store(kept, Ordering::Relaxed);
    }

    /// Components kept that no loaded version used at the last eviction pass.
    pub(crate) fn unused(&self) -> usize {
        self.unused.load(Ordering::Relaxed)
    }

    /// Whether `component` is Winch's code kept until its tier-up (`compiler = "tiered"`).
    pub(crate) fn on_first_tier(&self, component: &PolicyComponent) -> bool {
        component.compiled_by() != self.engine.limits().compiler.of_code()
    }

    /// The service's metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Guest instances alive now (the engine's pool slots in use).
    pub(crate) fn instances(&self) -> u64 {
        let live =
            |e: &PolicyEngine| e.engine().pooling_allocator_metrics().map_or(0, |m| m.component_instances());
        live(&self.engine) + self.engine.first_tier().map_or(0, live)
    }
}
