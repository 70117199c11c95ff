//! Components by blob, loaded when a version first needs one: from the engine's artifact
//! cache when it holds this engine's compilation of the bytes, else compiled (and cached)
//! by a caller holding a compile permit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use switchyard::{PolicyComponent, PolicyEngine};

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
/// `max_unused_components` used most recently ([`Loader::keep_only`]); never once no
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
}

impl Loader {
    pub(crate) fn new(
        registry: Registry,
        engine: PolicyEngine,
        metrics: Arc<Metrics>,
        load_permits: Arc<Semaphore>,
    ) -> Arc<Self> {
        let (components, sizes, unused) = (Mutex::default(), Mutex::default(), AtomicUsize::new(0));
        Arc::new(Self { registry, engine, metrics, load_permits, components, sizes, unused })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, PolicyComponent>> {
        self.components.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The component of `blob`, loaded now if it is not kept yet: from the artifact
    /// cache by the blob's name (its sha256) when this engine compiled it before, else
    /// compiled from the blob's bytes, only if `compile` is [`Compile::Now`]. Blocking (a
    /// blob read, maybe a compile). Two loads of one blob at once may both load it; the
    /// first kept wins.
    pub(crate) fn component(&self, blob: &str, compile: Compile) -> Result<PolicyComponent, LoadFailure> {
        if let Some(c) = self.kept(blob) {
            return Ok(c);
        }
        let failed = |e: switchyard::LoadError| LoadFailure::new(format!("loading: {e}"), false);
        let size = self.sizes().get(blob).copied();
        if let Some(loaded) = size.and_then(|size| PolicyComponent::load_cached(&self.engine, blob, size)) {
            return Ok(self.keep_loaded(blob, loaded.map_err(failed)?));
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
        Ok(self.keep_loaded(blob, component))
    }

    /// Counts `component` loaded and keeps it as `blob`'s (or the one kept meanwhile).
    fn keep_loaded(&self, blob: &str, component: PolicyComponent) -> PolicyComponent {
        self.metrics.loaded(&component);
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
        blob: &str,
        held: H,
    ) -> Result<PolicyComponent, String> {
        let bytes = self.registry.read_blob(blob).map_err(|e| format!("reading blob {blob}: {e}"))?;
        let component =
            PolicyComponent::load_in_background(&self.engine, &bytes, held).map_err(|e| e.to_string())?;
        self.metrics.loaded(&component);
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
    /// instantiates and configures (~0.1 ms) instead of loading its component too
    /// (mapping the artifact, registering its types and code: ~0.1–0.5 ms on a selection's
    /// path). What an unused component keeps is its metadata and its code (mapped from
    /// its artifact, or compiled by this process for an upload); evicting its versions
    /// already dropped their instances.
    ///
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
