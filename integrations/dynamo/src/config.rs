//! The `parameters` of a `switchyard` worker-selection instance, validated once at
//! start-up (Dynamo's factory cannot fail later).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dynamo_kv_router::RoutingPartitionRef;
use dynamo_kv_router::plugins::{WorkerSelectionPolicyParameters, WorkerSelectionPolicyProviderError};
use serde::Deserialize;
use switchyard::{FailMode, GuardConfig, Limits, PolicyEngine, WorkerCommand};

/// A bad `parameters` field: which one, and why. Its `Display` is `field: reason`
/// (`temperature: must be finite and ≥ 0, got -1`); Dynamo prefixes it with the policy
/// type when it refuses the router configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: String,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }

    /// The path of the bad field (`policy.file`, `limits.fuel_base`), or `parameters` for
    /// the mapping as a whole.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Why it was refused.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for WorkerSelectionPolicyProviderError {
    fn from(e: ConfigError) -> Self {
        WorkerSelectionPolicyProviderError::new(e.to_string())
    }
}

/// Where the policy's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A component file, read once at start-up (`policy: {file: /path/policy.wasm}`).
    File(PathBuf),
    /// A tenant's class in a Switchyard data directory or a fleet's NATS registry,
    /// followed while the router runs (`policy: {store: {data_dir: …, tenant: …, class:
    /// …}}`, or `registry: nats://…` instead of `data_dir`).
    Store(StoreSource),
}

/// A class of one tenant, or of the tenant each routing partition names, in the data
/// directory a `switchyard serve` writes or the registry a fleet of them shares: the
/// version the class routes to now, swapped for the next one once that is compiled and
/// configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSource {
    at: StoreAt,
    tenant: TenantOf,
    class: String,
    poll: Duration,
    max_tenants: usize,
}

/// Where a store source reads the tenants' records and blobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAt {
    /// A data directory (`data_dir`, as `serve --data-dir`).
    DataDir(PathBuf),
    /// A fleet's NATS JetStream registry (`registry`, as `serve --registry`:
    /// `nats://HOST:PORT`, several comma-separated for a cluster).
    Registry(String),
}

/// Whose class a store source follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantOf {
    /// One tenant for every partition (`tenant: acme`).
    Named(String),
    /// The tenant each routing partition names (`tenant_from: routing_group`, with an
    /// optional `tenants` map from the partition's key to a tenant; a key the map does not
    /// list is the tenant's name itself).
    Partition {
        /// Which part of Dynamo's `RoutingPartitionRef` names the tenant.
        key: PartitionKey,
        /// Partition key → tenant.
        map: BTreeMap<String, String>,
    },
}

/// The part of a routing partition that names its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionKey {
    /// `RoutingPartitionRef::routing_group`.
    RoutingGroup,
    /// `RoutingPartitionRef::model_name`.
    ModelName,
}

impl StoreSource {
    /// Where the records are read.
    pub fn at(&self) -> &StoreAt {
        &self.at
    }

    /// The data directory (`serve --data-dir`), for a source that reads one.
    pub fn data_dir(&self) -> Option<&Path> {
        match &self.at {
            StoreAt::DataDir(dir) => Some(dir),
            StoreAt::Registry(_) => None,
        }
    }

    /// The fleet's registry (`serve --registry`), for a source that follows one.
    pub fn registry(&self) -> Option<&str> {
        match &self.at {
            StoreAt::Registry(url) => Some(url),
            StoreAt::DataDir(_) => None,
        }
    }

    /// Whose class is followed.
    pub fn tenant(&self) -> &TenantOf {
        &self.tenant
    }

    /// The tenant whose class `partition` runs.
    pub fn tenant_for<'a>(&'a self, partition: RoutingPartitionRef<'a>) -> &'a str {
        match &self.tenant {
            TenantOf::Named(tenant) => tenant,
            TenantOf::Partition { key, map } => {
                let key = match key {
                    PartitionKey::RoutingGroup => partition.routing_group,
                    PartitionKey::ModelName => partition.model_name,
                };
                map.get(key).map_or(key, String::as_str)
            }
        }
    }

    /// The class followed.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// How often each followed tenant's record is checked for a change: one `stat` of its
    /// file in a data directory; in a registry, whose watch reports each change at once,
    /// only a look at what the watch last reported.
    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// How many tenants one instance follows at most (partitions naming more run the
    /// builtin default, unfollowed).
    pub fn max_tenants(&self) -> usize {
        self.max_tenants
    }
}

/// The default of `policy.store.poll_ms`.
const DEFAULT_POLL_MS: u64 = 200;

/// The default of `policy.store.max_tenants`.
const DEFAULT_MAX_TENANTS: usize = 4096;

/// The YAML mapping as written; every field is checked again in [`SwitchyardConfig`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    policy: RawSource,
    #[serde(default)]
    params: Option<serde_json::Value>,
    #[serde(default)]
    on_fault: Option<FailMode>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    limits: Option<Limits>,
    #[serde(default)]
    guard: Option<GuardConfig>,
    #[serde(default)]
    compile_worker: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum RawSource {
    File(PathBuf),
    Store(RawStore),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    #[serde(default)]
    data_dir: Option<PathBuf>,
    #[serde(default)]
    registry: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    tenant_from: Option<PartitionKey>,
    #[serde(default)]
    tenants: Option<BTreeMap<String, String>>,
    class: String,
    #[serde(default)]
    poll_ms: Option<u64>,
    #[serde(default)]
    max_tenants: Option<usize>,
}

/// A validated `switchyard` instance configuration.
///
/// ```yaml
/// worker_selection:
///   aggregated: tenant-a
///   instances:
///     - name: tenant-a
///       type: switchyard
///       parameters:
///         policy: {file: /etc/switchyard/tenant-a.wasm}   # required: a file, or
///         # policy: {store: {data_dir: /var/lib/switchyard, tenant: acme, class: latency, poll_ms: 200}}
///         # policy: {store: {data_dir: /var/lib/switchyard, tenant_from: routing_group,
///         #                  tenants: {group-a: acme}, class: latency, max_tenants: 4096}}
///         # policy: {store: {registry: "nats://nats:4222", tenant_from: routing_group, class: latency}}
///         params: {overlap_score_credit: 0.5}             # the policy's own; default {} (file only)
///         on_fault: open                                  # open (default) | closed (file only)
///         temperature: 0.0                                # default: Dynamo's router_temperature
///         limits: {fuel_base: 2000000}                    # Switchyard's [limits]; optional
///         guard: {quarantine_after: 3}                    # Switchyard's [guard]; optional
///         compile_worker: /usr/local/bin/switchyard       # compiles in `switchyard compile-worker`
///                                                         # processes; optional
/// ```
///
/// Without `compile_worker` a compile runs on a thread of the router: past
/// `limits.compile_timeout_ms` it is refused, but Cranelift cannot be stopped, so it runs
/// on to its end holding the adapter's compile permit. In a worker process it is killed at
/// the deadline, and its CPU and memory are bounded.
///
/// With a `store` source, the version's own parameters (set at upload) and the class's
/// `on_fault` (set at assignment) apply, so `params` and `on_fault` are refused there.
#[derive(Debug, Clone)]
pub struct SwitchyardConfig {
    source: PolicySource,
    params: String,
    fail_mode: FailMode,
    temperature: Option<f64>,
    limits: Limits,
    guard: GuardConfig,
    compile_workers: Option<WorkerCommand>,
}

impl SwitchyardConfig {
    /// Parses and checks Dynamo's `parameters` for this instance.
    pub fn from_parameters(parameters: &WorkerSelectionPolicyParameters) -> Result<Self, ConfigError> {
        // Through a JSON value, so a refusal can name the field's path.
        let value: serde_json::Value = parameters
            .deserialize()
            .map_err(|e| ConfigError::new("parameters", format!("not a mapping Switchyard can read: {e}")))?;
        Self::from_json(value)
    }

    /// Parses and checks the parameters given as a JSON value (the same fields as the
    /// YAML).
    pub fn from_json(value: serde_json::Value) -> Result<Self, ConfigError> {
        if value.is_null() {
            return Err(ConfigError::new("parameters", "missing: at least `policy` is required"));
        }
        let raw: Raw = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let field = if path.is_empty() || path == "." { "parameters".to_string() } else { path };
            ConfigError::new(field, e.into_inner().to_string())
        })?;
        let source = match raw.policy {
            RawSource::File(path) if path.as_os_str().is_empty() => {
                return Err(ConfigError::new("policy.file", "empty path"));
            }
            RawSource::File(path) => PolicySource::File(path),
            RawSource::Store(store) => {
                let at = match (store.data_dir, store.registry) {
                    (Some(_), Some(_)) => {
                        return Err(ConfigError::new(
                            "policy.store.registry",
                            "give either `data_dir` (a data directory) or `registry` (a fleet's NATS registry), not both",
                        ));
                    }
                    (None, None) => {
                        return Err(ConfigError::new(
                            "policy.store",
                            "missing `data_dir` (a data directory) or `registry` (nats://HOST:PORT)",
                        ));
                    }
                    (Some(dir), None) if dir.as_os_str().is_empty() => {
                        return Err(ConfigError::new("policy.store.data_dir", "empty path"));
                    }
                    (Some(dir), None) => StoreAt::DataDir(dir),
                    (None, Some(url)) if url.trim().is_empty() => {
                        return Err(ConfigError::new("policy.store.registry", "empty"));
                    }
                    (None, Some(url)) => StoreAt::Registry(url),
                };
                if store.class.is_empty() {
                    return Err(ConfigError::new("policy.store.class", "empty"));
                }
                let tenant = match (store.tenant, store.tenant_from, store.tenants) {
                    (Some(_), Some(_), _) => {
                        return Err(ConfigError::new(
                            "policy.store.tenant_from",
                            "give either `tenant` (one tenant) or `tenant_from` (each partition's), not both",
                        ));
                    }
                    (None, None, _) => {
                        return Err(ConfigError::new(
                            "policy.store",
                            "missing `tenant` (one tenant) or `tenant_from` (routing_group or model_name)",
                        ));
                    }
                    (Some(_), None, Some(_)) => {
                        return Err(ConfigError::new(
                            "policy.store.tenants",
                            "maps partitions to tenants, so it goes with `tenant_from`, not `tenant`",
                        ));
                    }
                    (Some(tenant), None, None) if tenant.is_empty() => {
                        return Err(ConfigError::new("policy.store.tenant", "empty"));
                    }
                    (Some(tenant), None, None) => TenantOf::Named(tenant),
                    (None, Some(key), map) => {
                        let map = map.unwrap_or_default();
                        for (from, to) in &map {
                            if from.is_empty() || to.is_empty() {
                                return Err(ConfigError::new(
                                    format!("policy.store.tenants.{from}"),
                                    "partition keys and tenant names must not be empty",
                                ));
                            }
                        }
                        TenantOf::Partition { key, map }
                    }
                };
                let max_tenants = store.max_tenants.unwrap_or(DEFAULT_MAX_TENANTS);
                if !(1..=1_000_000).contains(&max_tenants) {
                    return Err(ConfigError::new(
                        "policy.store.max_tenants",
                        format!("must be 1 to 1000000, got {max_tenants}"),
                    ));
                }
                let poll_ms = store.poll_ms.unwrap_or(DEFAULT_POLL_MS);
                if !(10..=60_000).contains(&poll_ms) {
                    return Err(ConfigError::new(
                        "policy.store.poll_ms",
                        format!("must be 10 to 60000 (ms), got {poll_ms}"),
                    ));
                }
                if raw.params.is_some() {
                    return Err(ConfigError::new(
                        "params",
                        "a store source runs each version with the parameters it was uploaded with",
                    ));
                }
                if raw.on_fault.is_some() {
                    return Err(ConfigError::new(
                        "on_fault",
                        "a store source takes what a fault does from the class's assignment",
                    ));
                }
                PolicySource::Store(StoreSource {
                    at,
                    tenant,
                    class: store.class,
                    poll: Duration::from_millis(poll_ms),
                    max_tenants,
                })
            }
        };
        let params = match raw.params {
            None => "{}".to_string(),
            Some(v) => serde_json::to_string(&v).map_err(|e| ConfigError::new("params", e.to_string()))?,
        };
        let temperature = raw.temperature;
        if let Some(t) = temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(ConfigError::new("temperature", format!("must be finite and ≥ 0, got {t}")));
        }
        let limits = raw.limits.unwrap_or_default();
        // The runtime's own check (the engine refuses the same); its message names the field.
        limits.validate().map_err(|e| match e.split_once(": ") {
            Some((field, why)) => ConfigError::new(field, why),
            None => ConfigError::new("limits", e),
        })?;
        let compile_workers = match raw.compile_worker {
            None => None,
            Some(path) if !path.is_file() => {
                return Err(ConfigError::new(
                    "compile_worker",
                    format!("{}: not a file (the `switchyard` binary)", path.display()),
                ));
            }
            Some(path) => Some(WorkerCommand::new(path, ["compile-worker"])),
        };
        Ok(Self {
            source,
            params,
            fail_mode: raw.on_fault.unwrap_or_default(),
            temperature,
            limits,
            guard: raw.guard.unwrap_or_default(),
            compile_workers,
        })
    }

    /// Compiles in worker processes `command` starts (a program serving
    /// [`switchyard::compile_worker_main::serve_worker`]), unless the parameters named a
    /// `compile_worker` already: how a host that is such a program itself (the
    /// `switchyard-dynamo` binary) makes its compiles killable by default.
    #[must_use]
    pub fn or_compile_workers(mut self, command: WorkerCommand) -> Self {
        self.compile_workers.get_or_insert(command);
        self
    }

    /// How compile workers are started, if compiles run in them.
    pub fn compile_workers(&self) -> Option<&WorkerCommand> {
        self.compile_workers.as_ref()
    }

    /// The engine every version of this instance is compiled and run on.
    pub(crate) fn engine(&self) -> Result<PolicyEngine, ConfigError> {
        let engine = PolicyEngine::new(self.limits.clone())
            .map_err(|e| ConfigError::new("limits", format!("{e:#}")))?;
        Ok(match &self.compile_workers {
            Some(command) => engine.with_compile_workers(command.clone()),
            None => engine,
        })
    }

    /// Where the component comes from.
    pub fn source(&self) -> &PolicySource {
        &self.source
    }

    /// The component file, for a file source.
    pub fn file(&self) -> Option<&Path> {
        match &self.source {
            PolicySource::File(path) => Some(path),
            PolicySource::Store(_) => None,
        }
    }

    /// The policy's own parameters, as the JSON text its `configure` receives.
    pub fn params(&self) -> &str {
        &self.params
    }

    /// Fail-open (Switchyard's native default decides) or fail-closed (Dynamo's policy
    /// error), for a file source (a store source's comes with each version).
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode
    }

    /// The picker's temperature when the request carries no override; `None`: the
    /// router's own `router_temperature`, as Dynamo's default selector uses.
    pub fn temperature(&self) -> Option<f64> {
        self.temperature
    }

    /// The sandbox's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The quarantine breaker's thresholds.
    pub fn guard(&self) -> &GuardConfig {
        &self.guard
    }
}
