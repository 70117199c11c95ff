//! A store source: the version each followed tenant's class routes to in a Switchyard
//! data directory or a fleet's NATS registry, followed while the router runs. One thread
//! per instance checks the stamp of each followed tenant's record (in a data directory
//! one `stat` per tenant every `poll_ms`; in a registry the revision its watch last
//! reported, at once when it reports one); when a class routes elsewhere it reads,
//! compiles and configures the new version (off the selection path, under the adapter's
//! compile permit and deadline) and only then swaps it in, so no selection waits on a
//! compile or fails for an upload. A change it cannot take (a component that does not
//! load, a named tenant removed) leaves that tenant's running version in place and is
//! reported ([`LivePolicy::last_error`], a `tracing` warning); no other tenant is touched.
//! A registry that cannot be reached leaves every tenant's running version in place, and
//! each one's `last_error` says so until it is followed again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use dynamo_kv_router::RoutingPartitionRef;
use dynamo_kv_router::plugins::worker_selection::WorkerInputs as DynamoInputs;
use sha2::Digest;

use switchyard::{FailMode, GuardConfig, PolicyEngine};
use switchyard_store::Routed;

use crate::config::{ConfigError, PolicySource, StoreSource, SwitchyardConfig, TenantOf};
use crate::source::{Records, Stamp, Wake};
use crate::version::{LivePolicy, LoadedPolicy, Version};

/// The tenants one store-sourced instance runs, each one's class followed: a single named
/// tenant for every partition, or the tenant each routing partition names.
pub struct StorePolicies {
    source: StoreSource,
    followed: Mutex<BTreeMap<String, Arc<LivePolicy>>>,
    /// Raised when a partition names a tenant not followed before (and by a registry's
    /// watch on every change), so the follower checks now rather than a poll later.
    wake: Arc<Wake>,
    /// The builtin default's guest, compiled once: what a tenant without a policy for the
    /// class runs (a fork per tenant, so breakers are never shared).
    default: Arc<LoadedPolicy>,
    /// What partitions beyond `max_tenants` run, unfollowed.
    overflow: Arc<LivePolicy>,
    temperature: Option<f64>,
}

/// Every group: a later version may read any of them, and Dynamo fixes what a picker
/// declares when it builds the policy.
fn all_inputs() -> DynamoInputs {
    DynamoInputs::CACHE | DynamoInputs::LOAD | DynamoInputs::PREFERRED_TAINT
}

impl StorePolicies {
    /// Loads the class's version for every tenant the source can reach now (the named
    /// tenant, or every tenant of the data directory or registry for a partition-aware
    /// source, up to `max_tenants`) and starts following them. A data directory that is
    /// not one, or a registry that does not answer now, refuses the configuration (on
    /// `policy.store.data_dir`, `policy.store.registry`). A named tenant that is missing
    /// or whose version does not load refuses the configuration (on `policy.store`); a
    /// partition-aware source runs the builtin default for such a tenant and says why
    /// ([`LivePolicy::last_error`]), since one tenant's upload must not stop the router.
    /// The follower thread ends when the returned handle (and every factory made from
    /// it) is dropped.
    pub fn load(config: &SwitchyardConfig) -> Result<Arc<Self>, ConfigError> {
        let PolicySource::Store(source) = config.source() else {
            return Err(ConfigError::new(
                "policy",
                "not a store source (a file is loaded by `LivePolicy::load`)",
            ));
        };
        let engine = config.engine()?;
        let wake = Wake::new();
        let records = Records::open(source.at(), &wake)?;
        let mut follower = Follower {
            records,
            source: source.clone(),
            engine,
            guard: config.guard().clone(),
            temperature: config.temperature(),
            states: HashMap::new(),
            templates: HashMap::new(),
            down: None,
        };
        let default = follower
            .build(&default_running(), "default".into())
            .map_err(|e| ConfigError::new("policy.store", format!("the builtin default: {}", e.message)))?;
        let overflow = LivePolicy::new(
            default.fork(format!("{}: default (over max_tenants)", source.class()), FailMode::Open),
            all_inputs(),
            config.temperature(),
            false,
        );
        let policies = Arc::new(Self {
            source: source.clone(),
            followed: Mutex::new(BTreeMap::new()),
            wake: Arc::clone(&wake),
            default,
            overflow,
            temperature: config.temperature(),
        });
        match source.tenant() {
            TenantOf::Named(tenant) => {
                let first = follower
                    .check(tenant)
                    .map_err(|e| ConfigError::new("policy.store", e))?
                    .expect("the first check always loads a version");
                let live = LivePolicy::new(first, all_inputs(), config.temperature(), true);
                policies.lock().insert(tenant.clone(), live);
            }
            TenantOf::Partition { .. } => {
                let tenants = follower.records.tenants()?;
                for tenant in tenants.iter().take(source.max_tenants()) {
                    follower.states.entry(tenant.clone()).or_default().running = Some(default_running());
                    match follower.check(tenant) {
                        Ok(Some(first)) => {
                            let live = LivePolicy::new(first, all_inputs(), config.temperature(), true);
                            policies.lock().insert(tenant.clone(), live);
                        }
                        Ok(None) => drop(policies.start(tenant)),
                        Err(e) => {
                            tracing::warn!(tenant, error = %e, "switchyard: a tenant's version did not load; it runs the builtin default");
                            policies.start(tenant).set_error(Some(e));
                        }
                    }
                }
            }
        }
        let weak = Arc::downgrade(&policies);
        std::thread::Builder::new()
            .name(format!("switchyard-follow-{}", source.class()))
            .spawn(move || follower.run(&weak, &wake))
            .map_err(|e| {
                ConfigError::new("policy.store", format!("cannot start the follower thread: {e}"))
            })?;
        Ok(policies)
    }

    /// The policy `partition` runs: its tenant's, followed from now on if it was not
    /// (running the builtin default until the follower has loaded the tenant's version,
    /// which it starts at once).
    pub fn for_partition(&self, partition: RoutingPartitionRef<'_>) -> Arc<LivePolicy> {
        let tenant = self.source.tenant_for(partition);
        if let Some(live) = self.lock().get(tenant) {
            return Arc::clone(live);
        }
        if self.lock().len() >= self.source.max_tenants() {
            tracing::warn!(
                tenant,
                max_tenants = self.source.max_tenants(),
                "switchyard: a partition names a tenant beyond max_tenants; it runs the builtin default"
            );
            return Arc::clone(&self.overflow);
        }
        let live = self.start(tenant);
        self.wake.raise();
        live
    }

    /// The followed tenant `tenant`'s policy, if it is followed.
    pub fn tenant(&self, tenant: &str) -> Option<Arc<LivePolicy>> {
        self.lock().get(tenant).cloned()
    }

    /// The tenants followed now.
    pub fn tenants(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// `tenant` followed, running the builtin default until its version is loaded.
    fn start(&self, tenant: &str) -> Arc<LivePolicy> {
        let mut followed = self.lock();
        let live = followed.entry(tenant.to_string()).or_insert_with(|| {
            let name = format!("{tenant}/{}: default", self.source.class());
            LivePolicy::new(self.default.fork(name, FailMode::Open), all_inputs(), self.temperature, true)
        });
        Arc::clone(live)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<LivePolicy>>> {
        self.followed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for StorePolicies {
    /// The follower ends now rather than a poll later.
    fn drop(&mut self) {
        self.wake.raise();
    }
}

/// What a tenant runs now, to tell a real change from a rewrite of its record that leaves
/// this class where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Running {
    component: Component,
    params: String,
    fail_mode: FailMode,
}

/// A followed tenant's record as last read, what its class runs, and why its last change
/// was not taken (if it was not).
#[derive(Default)]
struct TenantState {
    stamp: Option<Stamp>,
    running: Option<Running>,
    error: Option<String>,
}

/// Why a version was not built, and whether the same record is worth trying again (its
/// blob could not be read from a registry that was unreachable).
struct NotBuilt {
    message: String,
    again: bool,
}

impl From<String> for NotBuilt {
    fn from(message: String) -> Self {
        Self { message, again: false }
    }
}

struct Follower {
    records: Records,
    source: StoreSource,
    engine: PolicyEngine,
    guard: GuardConfig,
    temperature: Option<f64>,
    states: HashMap<String, TenantState>,
    /// Compiled versions by component and parameters: another tenant running the same
    /// bytes with the same parameters gets a fork (its own breaker and name), not a
    /// second compile. Weak: a version nobody runs is not kept for this.
    templates: HashMap<(Component, String), Weak<LoadedPolicy>>,
    /// Why the records cannot be followed now, as last reported to every tenant.
    down: Option<String>,
}

impl Follower {
    /// Records that `tenant` runs the builtin default now (as [`StorePolicies::start`]
    /// made it), then loads its class's version if it has one.
    fn follow(&mut self, tenant: &str, live: &LivePolicy) {
        self.states.entry(tenant.to_string()).or_default().running.get_or_insert_with(default_running);
        self.take(tenant, live, true);
    }

    /// Checks `tenant` once and swaps in its new version, or reports why not (and, if
    /// `show`, shows its error again: the records' state changed).
    fn take(&mut self, tenant: &str, live: &LivePolicy, show: bool) {
        let before = self.states.get(tenant).and_then(|s| s.error.clone());
        match self.check(tenant) {
            Ok(Some(next)) => {
                tracing::info!(version = next.name(), "switchyard: the followed class moved");
                live.swap(next);
            }
            Ok(None) if !show => return,
            Ok(None) => {}
            Err(e) => {
                // Once per distinct reason: a lasting one (an unreadable record is
                // retried every poll) is not logged every poll.
                if before.as_deref() != Some(e.as_str()) {
                    tracing::warn!(tenant, error = %e, "switchyard: a change in the store was not taken");
                }
            }
        }
        self.report(tenant, live);
    }

    /// Shows on `live` why the records cannot be followed now, else why `tenant`'s last
    /// change was not taken, else nothing.
    fn report(&self, tenant: &str, live: &LivePolicy) {
        let own = self.states.get(tenant).and_then(|s| s.error.as_ref());
        let shown = self.down.as_ref().or(own);
        if live.last_error().as_ref() != shown {
            live.set_error(shown.cloned());
        }
    }

    /// The version to swap in for `tenant`, if its class routes somewhere new since the
    /// last check; the tenant's error is kept (cleared by a version to swap in).
    fn check(&mut self, tenant: &str) -> Result<Option<Arc<LoadedPolicy>>, String> {
        let checked = self.check_now(tenant);
        let state = self.states.entry(tenant.to_string()).or_default();
        match &checked {
            Ok(Some(_)) => state.error = None,
            Ok(None) => {}
            Err(e) => state.error = Some(e.clone()),
        }
        checked
    }

    fn check_now(&mut self, tenant: &str) -> Result<Option<Arc<LoadedPolicy>>, String> {
        let class = self.source.class();
        let stamp = self.records.stamp(tenant);
        let state = self.states.entry(tenant.to_string()).or_default();
        if state.running.is_some() && stamp == state.stamp {
            return Ok(None);
        }
        let record = self.records.load_tenant(tenant)?;
        // Read once: a failure below is not retried until the record changes again (but
        // for a blob the registry could not be asked for, or a compile permit another
        // compile held).
        let seen = std::mem::replace(&mut state.stamp, stamp);
        let route = match (&record, self.source.tenant()) {
            (Some(record), _) => {
                record.route(class).map_err(|e| format!("tenant `{tenant}` class `{class}`: {e}"))?
            }
            (None, TenantOf::Named(_)) => {
                return Err(format!("tenant `{tenant}` is not in {}", self.records.place()));
            }
            // A partition's tenant that does not exist runs the default, as `serve`
            // routes a class nobody assigned.
            (None, TenantOf::Partition { .. }) => Routed::Unassigned,
        };
        let (running, name) = match route {
            Routed::Unassigned => (default_running(), format!("{tenant}/{class}: default")),
            Routed::Named { policy, on_fault } => {
                let b = switchyard_builtins::find(policy).ok_or_else(|| {
                    format!("tenant `{tenant}` class `{class}` routes to `{policy}`, neither a builtin nor one of its policies")
                })?;
                (builtin(b, on_fault), format!("{tenant}/{class}: {policy}"))
            }
            Routed::Version { policy, record, on_fault } => {
                let component = Component::Blob { sha256: record.blob.clone(), size: record.size };
                let running = Running { component, params: record.params.clone(), fail_mode: on_fault };
                let short = record.version.get(..12).unwrap_or(&record.version);
                (running, format!("{tenant}/{policy}@{short}"))
            }
        };
        if self.states.get(tenant).and_then(|s| s.running.as_ref()) == Some(&running) {
            return Ok(None);
        }
        let policy = match self.build(&running, name) {
            Ok(policy) => policy,
            Err(e) => {
                if e.again {
                    self.states.entry(tenant.to_string()).or_default().stamp = seen;
                }
                return Err(e.message);
            }
        };
        self.states.entry(tenant.to_string()).or_default().running = Some(running);
        Ok(Some(policy))
    }

    /// `running` compiled and configured as `name`: a fork of a template running the same
    /// bytes with the same parameters, else a compile.
    fn build(&mut self, running: &Running, name: String) -> Result<Arc<LoadedPolicy>, NotBuilt> {
        let key = (running.component.clone(), running.params.clone());
        if let Some(template) = self.templates.get(&key).and_then(Weak::upgrade) {
            return Ok(template.fork(name, running.fail_mode));
        }
        let bytes = match &running.component {
            Component::Builtin(name) => {
                switchyard_builtins::find(name).expect("a builtin by its own name").component.to_vec()
            }
            Component::Blob { sha256, size } => self
                .blob(sha256, *size)
                .map_err(|e| NotBuilt { message: format!("{name}: blob: {}", e.message), again: e.again })?,
        };
        let version = Version { name: name.clone(), params: &running.params, fail_mode: running.fail_mode };
        let policy = LoadedPolicy::build(&self.engine, &bytes, version, &self.guard, self.temperature)
            .map_err(|e| NotBuilt { again: e.busy, message: format!("{name}: {}", e.message) })?;
        self.templates.retain(|_, t| t.strong_count() > 0);
        self.templates.insert(key, Arc::downgrade(&policy));
        Ok(policy)
    }

    /// The bytes of blob `sha256`, the record saying they are `size` long: refused unread
    /// when the file or the record is over `max_component_bytes` (nothing larger would
    /// compile), and refused unless the bytes are that long and hash to their name (a
    /// blob is named by its sha256: whatever else is there was not uploaded as it).
    fn blob(&self, sha256: &str, size: usize) -> Result<Vec<u8>, NotBuilt> {
        let most = self.engine.limits().max_component_bytes;
        if size > most {
            return Err(format!("the record says {size} bytes; the limit is {most} bytes").into());
        }
        let bytes = self
            .records
            .read_blob_at_most(sha256, most as u64)
            .map_err(|e| NotBuilt { message: e.message, again: e.transient })?;
        if bytes.len() != size {
            return Err(format!("{} bytes, but the record says {size}", bytes.len()).into());
        }
        let actual = hex::encode(sha2::Sha256::digest(&bytes));
        if !actual.eq_ignore_ascii_case(sha256) {
            return Err(format!("its bytes hash to {actual}, not to their name").into());
        }
        Ok(bytes)
    }

    /// Checks every followed tenant every `poll` (at once when a partition adds one, or a
    /// registry's watch reports a change) until the instance is dropped.
    fn run(mut self, policies: &Weak<StorePolicies>, wake: &Wake) {
        loop {
            wake.wait(self.source.poll());
            let Some(policies) = policies.upgrade() else { return };
            let followed: Vec<(String, Arc<LivePolicy>)> =
                policies.lock().iter().map(|(t, l)| (t.clone(), Arc::clone(l))).collect();
            drop(policies);
            let down = self.records.down();
            let moved = down != self.down;
            self.down = down;
            for (tenant, live) in followed {
                if !self.states.contains_key(&tenant) {
                    self.follow(&tenant, &live);
                } else if self.down.is_some() {
                    // Nothing new can be read meanwhile: each keeps its running version.
                    if moved {
                        self.report(&tenant, &live);
                    }
                } else {
                    self.take(&tenant, &live, moved);
                }
            }
        }
    }
}

/// Where a version's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Component {
    /// A builtin's guest build, by name.
    Builtin(&'static str),
    /// A blob in the store or registry, by sha256, and its size as its record says.
    Blob {
        /// Its name: the sha256 of its bytes.
        sha256: String,
        /// Its size, bytes.
        size: usize,
    },
}

/// What a tenant runs before its version is loaded, and without one: the builtin default.
fn default_running() -> Running {
    builtin(switchyard_builtins::find("default").expect("the default builtin exists"), FailMode::Open)
}

/// A builtin's guest build, run with its default parameters.
fn builtin(b: &'static switchyard_builtins::Builtin, fail_mode: FailMode) -> Running {
    Running { component: Component::Builtin(b.name), params: "{}".into(), fail_mode }
}
