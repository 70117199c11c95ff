//! What selections read: an immutable snapshot of every tenant's routes, swapped whole
//! by the writer after each commit. A commit changes one tenant (or a router), and the
//! snapshot's maps are persistent (`imbl`): the next snapshot shares every other tenant's
//! routes with this one, so building it costs the same at ten tenants or ten thousand.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use switchyard::FailMode;
use switchyard_builtins::{self as builtin, Builtin};
use switchyard_registry_nats::Key;

use crate::auth::{Principal, Tokens};
use crate::metrics::{Metrics, PolicyMetrics, TenantVersions};
use crate::store::{Canary, Manifest, Shadow, TenantRecord};
use crate::trials::{ClassTrials, Trials};
use crate::version::LoadedVersion;
use crate::version::{VersionKey, Versions, tenant_range};

/// What runs for a class.
#[derive(Clone)]
pub enum Target {
    /// A builtin, native build.
    Builtin(&'static Builtin),
    /// A tenant's version, as a guest. One that does not load (see
    /// [`LoadedVersion::failure`]) fails its classes open (the native default answers) or
    /// closed (503 `unavailable`), as assigned.
    Guest(Arc<LoadedVersion>),
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
    /// The class's shadow, canary and capture, if it has any.
    pub trials: Option<RouteTrials>,
    /// The counters of a builtin's route, from the service's
    /// metrics on its first selection through this snapshot (so a series still appears
    /// on a policy's first selection, and later ones take no lock).
    metrics: OnceLock<Arc<PolicyMetrics>>,
}

/// A class's trials: a version run beside its own, one deciding a share of it, its
/// selections kept.
#[derive(Clone)]
pub struct RouteTrials {
    /// The class.
    pub class: String,
    /// The shadow's setting and what runs it.
    pub shadow: Option<(Shadow, Arc<Route>)>,
    /// The canary's setting and its route (the class's `on_fault`).
    pub canary: Option<(Canary, Arc<Route>)>,
    /// Selections captured.
    pub capture: Option<usize>,
    /// The class's trials on this replica, from the service's on the first selection
    /// through this snapshot (later ones take no lock).
    state: OnceLock<Arc<ClassTrials>>,
}

impl RouteTrials {
    /// The class's trials of `tenant` in `all`.
    pub(crate) fn state(&self, tenant: &str, all: &Trials) -> &Arc<ClassTrials> {
        self.state.get_or_init(|| all.of(tenant, &self.class))
    }
}

impl Route {
    fn new(policy: String, target: Target, on_fault: FailMode) -> Self {
        Self { policy, target, on_fault, trials: None, metrics: OnceLock::new() }
    }

    /// The counters the route's selections count into: a guest version's own, else
    /// those of (`tenant`, the policy) in `all`.
    pub fn metrics(&self, tenant: &str, all: &Metrics) -> &Arc<PolicyMetrics> {
        match &self.target {
            Target::Guest(v) => v.metrics(),
            Target::Builtin(_) => self.metrics.get_or_init(|| all.policy(tenant, &self.policy)),
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
    /// The committed registry (a clone of the writer's: shares every record).
    manifest: Manifest,
    /// tenant → its routes.
    routes: imbl::HashMap<String, Arc<TenantRoutes>>,
    /// Every version, routed or not, loaded or not (for listing their breakers).
    versions: imbl::OrdMap<VersionKey, Arc<LoadedVersion>>,
    /// Token hash → whose it is (tenants and routers).
    tokens: Tokens,
}

impl Snapshot {
    /// The committed manifest this snapshot was built from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Whose token each hash is (tenants and routers; not the admin's).
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// A loaded version of a tenant's policy.
    pub fn version(&self, tenant: &str, policy: &str, version: &str) -> Option<&Arc<LoadedVersion>> {
        self.versions.get(&(tenant.to_string(), policy.to_string(), version.to_string()))
    }

    /// Why a stored version did not load, if it did not.
    pub fn unavailable(&self, tenant: &str, policy: &str, version: &str) -> Option<Arc<str>> {
        self.version(tenant, policy, version).and_then(|v| v.failure())
    }

    /// Every version, in (tenant, policy, version) order.
    pub fn versions(&self) -> impl Iterator<Item = &Arc<LoadedVersion>> {
        self.versions.values()
    }

    /// Each tenant's versions, known (in its record) and loaded, and how many stored
    /// versions did not load: for a scrape, in one walk over every version.
    pub fn version_counts(&self) -> (BTreeMap<String, TenantVersions>, usize) {
        let mut tenants: BTreeMap<String, TenantVersions> = BTreeMap::new();
        let mut unavailable = 0;
        for ((tenant, _, _), v) in &self.versions {
            let entry = tenants.entry(tenant.clone()).or_default();
            entry.known += 1;
            entry.loaded += u64::from(v.is_loaded());
            unavailable += usize::from(v.failure().is_some());
        }
        (tenants, unavailable)
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

    /// The route of `class` for `tenant`, and whether the tenant's assignment of the class
    /// decided it: `None` for an unknown tenant; the builtin default (fail-open, `false`)
    /// for no class or an unassigned one.
    pub fn route(&self, tenant: &str, class: Option<&str>) -> Option<(&Arc<Route>, bool)> {
        let routes = self.routes.get(tenant)?;
        Some(match class.and_then(|c| routes.classes.get(c)) {
            Some(route) => (route, true),
            None => (&routes.default, false),
        })
    }

    /// Every tenant's routes from the writer's state (at start-up), each loaded version
    /// marked routed or retired.
    pub(crate) fn build(manifest: &Manifest, loaded: &Versions) -> Self {
        let mut routes = imbl::HashMap::new();
        for (tenant, record) in &manifest.tenants {
            routes.insert(tenant.clone(), Arc::new(tenant_routes(loaded, tenant, record)));
        }
        let tokens = Tokens::of(manifest);
        let snapshot = Self { manifest: manifest.clone(), routes, versions: loaded.clone(), tokens };
        for (tenant, _) in &manifest.tenants {
            snapshot.mark_routed(loaded, tenant);
        }
        snapshot
    }

    /// The snapshot after the writer's manifest replaced `old` by changing `key` alone:
    /// that tenant's routes rebuilt (its versions marked routed or retired), everything
    /// else shared with this one.
    pub(crate) fn update(
        &self,
        (manifest, loaded): (&Manifest, &Versions),
        old: &Manifest,
        key: &Key,
    ) -> Self {
        let mut routes = self.routes.clone();
        let mut tokens = self.tokens.clone();
        match key {
            Key::Tenant(name) => {
                tokens.replace(
                    old.tenants.get(name).map(|r| r.token_sha256.as_str()),
                    manifest
                        .tenants
                        .get(name)
                        .map(|r| (r.token_sha256.as_str(), Principal::Tenant(name.clone()))),
                );
                match manifest.tenants.get(name) {
                    Some(record) => {
                        routes.insert(name.clone(), Arc::new(tenant_routes(loaded, name, record)));
                    }
                    None => {
                        routes.remove(name);
                    }
                }
            }
            Key::Router(name) => tokens.replace(
                old.routers.get(name).map(String::as_str),
                manifest.routers.get(name).map(|h| (h.as_str(), Principal::Router(name.clone()))),
            ),
        }
        let snapshot = Self { manifest: manifest.clone(), routes, versions: loaded.clone(), tokens };
        if let Key::Tenant(name) = key {
            snapshot.mark_routed(loaded, name);
        }
        snapshot
    }

    /// Marks each of `tenant`'s loaded versions routed if this snapshot routes a class to
    /// it, else retired (which drops its idle instances).
    fn mark_routed(&self, loaded: &Versions, tenant: &str) {
        let routed: HashSet<*const LoadedVersion> = self
            .routes
            .get(tenant)
            .into_iter()
            .flat_map(|routes| routes.classes.values())
            .flat_map(|r| {
                let trials = r.trials.iter();
                let shadow = trials.clone().flat_map(|t| t.shadow.iter().map(|(_, r)| r));
                let canary = trials.flat_map(|t| t.canary.iter().map(|(_, r)| r));
                std::iter::once(r).chain(shadow).chain(canary)
            })
            .filter_map(|r| match &r.target {
                Target::Guest(v) => Some(Arc::as_ptr(v)),
                Target::Builtin(_) => None,
            })
            .collect();
        for (_, v) in tenant_range(loaded, tenant) {
            v.set_routed(routed.contains(&Arc::as_ptr(v)));
        }
    }
}

/// `tenant`'s routes from its record: a class names a builtin or one of the tenant's
/// policies (pinned version, or the policy's active one).
fn tenant_routes(loaded: &Versions, tenant: &str, record: &TenantRecord) -> TenantRoutes {
    let mut classes = HashMap::new();
    // A builtin, or one of the tenant's versions (the one named, else the active one).
    let target = |policy: &str, version: Option<&str>| {
        if let Some(p) = record.policies.get(policy) {
            let version = version.unwrap_or(&p.active);
            loaded
                .get(&(tenant.to_string(), policy.to_string(), version.to_string()))
                .cloned()
                .map(Target::Guest)
        } else {
            builtin::find(policy).map(Target::Builtin)
        }
    };
    for (class, a) in &record.classes {
        let Some(live) = target(&a.policy, a.version.as_deref()) else { continue };
        let mut route = Route::new(a.policy.clone(), live, a.on_fault);
        let shadow = a.shadow.as_ref().and_then(|s| {
            let t = target(&s.policy, s.version.as_deref())?;
            Some((s.clone(), Arc::new(Route::new(s.policy.clone(), t, FailMode::Closed))))
        });
        let canary = a.canary.as_ref().and_then(|c| {
            let t = target(&c.policy, c.version.as_deref())?;
            Some((c.clone(), Arc::new(Route::new(c.policy.clone(), t, a.on_fault))))
        });
        let capture = a.capture.map(|n| n as usize);
        if shadow.is_some() || canary.is_some() || capture.is_some() {
            route.trials =
                Some(RouteTrials { class: class.clone(), shadow, canary, capture, state: OnceLock::new() });
        }
        classes.insert(class.clone(), Arc::new(route));
    }
    let default = Arc::new(Route::new(
        "default".into(),
        Target::Builtin(builtin::find("default").expect("the default builtin exists")),
        FailMode::Open,
    ));
    TenantRoutes { classes, default }
}
