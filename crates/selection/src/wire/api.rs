//! The service's management API bodies: what the CLI sends and the service parses, and
//! what the service answers and the CLI (or any client) reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::containment::{BreakerState, FailMode};

/// `POST /v1/tenants`, `POST /v1/routers`: the name to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameBody {
    /// `[a-z0-9_-]`, 1–64 characters.
    pub name: String,
}

/// `PUT /v1/tenants/{tenant}/classes/{class}`: where the class routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignBody {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// A version to pin; `None` follows the policy's active version.
    #[serde(default)]
    pub version: Option<String>,
    /// What a fault of the policy does to the request.
    #[serde(default)]
    pub on_fault: FailMode,
}

/// A created tenant or router and its token (shown once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The tenant's name (`POST /v1/tenants`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The router's name (`POST /v1/routers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
    /// The bearer token.
    pub token: String,
}

/// `PUT /v1/tenants/{tenant}/policies/{name}`: the stored version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uploaded {
    /// The tenant.
    pub tenant: String,
    /// The policy's name.
    pub policy: String,
    /// The version: the component's and the canonical parameters' digest.
    pub version: String,
    /// sha256 of the component bytes.
    pub sha256: String,
    /// The component's size.
    pub size_bytes: usize,
    /// How this upload came by its compiled component.
    #[serde(default)]
    pub compile: CompileSource,
    /// How long this upload's compile took; 0 when it compiled nothing (`compile` is
    /// `reused` or `cached`).
    pub compile_ms: f64,
    /// Whose code the version serves from now: `cranelift` or `winch`. With `compiler =
    /// "tiered"`, `winch` until Cranelift's, compiled in the background, replaces it.
    #[serde(default)]
    pub compiler: String,
    /// Versions of the tenant's policies this write collected (no longer active, pinned
    /// or in a policy's kept history), by policy.
    #[serde(default)]
    pub collected: Vec<CollectedVersion>,
}

/// Where an upload's compiled component came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompileSource {
    /// Compiled by this upload.
    #[default]
    Compiled,
    /// The service held these bytes compiled already (an earlier upload's, of any
    /// tenant): nothing compiled.
    Reused,
    /// Loaded from the service's compiled-artifact cache: nothing compiled.
    Cached,
}

/// A version a write collected: it left the policy's record, and its component goes
/// once no version names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectedVersion {
    /// The policy.
    pub policy: String,
    /// The version.
    pub version: String,
}

/// `PUT /v1/tenants/{tenant}/classes/{class}`: the assignment as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    /// The tenant.
    pub tenant: String,
    /// The class.
    pub class: String,
    /// What it routes to.
    pub policy: String,
    /// Whether the version is pinned.
    pub pinned: bool,
    /// The version it routes to now (`None` for a builtin).
    pub version: Option<String>,
    /// What a fault does.
    pub on_fault: FailMode,
    /// Versions this assignment collected (no longer pinned by the class, nor active or
    /// in their policy's kept history).
    #[serde(default)]
    pub collected: Vec<CollectedVersion>,
}

/// `POST /v1/tenants/{tenant}/policies/{name}/rollback` and `…/rollforward`: what is
/// active now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolledBack {
    /// The tenant.
    pub tenant: String,
    /// The policy.
    pub policy: String,
    /// The version active now.
    pub version: String,
    /// The version it replaced (kept: a roll-forward after a rollback, or a rollback
    /// after a roll-forward, makes it active again).
    pub replaced: String,
    /// Older versions a rollback could go back to now, most recent last.
    #[serde(default)]
    pub previous: Vec<String>,
    /// Newer versions a roll-forward could go to now, the next one last.
    #[serde(default)]
    pub next: Vec<String>,
}

/// `GET /v1/tenants/{tenant}/policies`: the tenant's policies and classes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The tenant.
    pub tenant: String,
    /// Its policies, by name.
    pub policies: Vec<PolicyEntry>,
    /// Its classes and where each routes.
    pub classes: BTreeMap<String, ClassEntry>,
    /// The builtins a class may route to.
    pub builtins: Vec<String>,
}

/// One policy of a [`Listing`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyEntry {
    /// Its name.
    pub name: String,
    /// The active version.
    pub active: String,
    /// Every stored version.
    pub versions: Vec<VersionEntry>,
    /// The versions active before, oldest first: a rollback goes to the last. Each is
    /// kept (listed in `versions`) or was collected.
    pub previous: Vec<String>,
    /// The versions rolled back from, the furthest first: a roll-forward goes to the last.
    #[serde(default)]
    pub next: Vec<String>,
    /// Selections it decided.
    pub selections: u64,
    /// Its faults, by kind.
    pub faults: BTreeMap<String, u64>,
}

/// One stored version of a [`PolicyEntry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionEntry {
    /// The version.
    pub version: String,
    /// sha256 of its component.
    pub sha256: String,
    /// The component's size.
    pub size_bytes: usize,
    /// Its parameters (canonical JSON text).
    pub params: String,
    /// Its quarantine breaker (`None` if not loaded).
    pub breaker: Option<BreakerState>,
    /// Why it did not load at start-up, if it did not.
    pub unavailable: Option<String>,
}

/// One class of a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassEntry {
    /// What it routes to.
    pub policy: String,
    /// Whether the version is pinned.
    pub pinned: bool,
    /// The version it routes to now.
    pub version: Option<String>,
    /// What a fault does.
    pub on_fault: FailMode,
}
/// A class's shadow: one of the tenant's versions (pinned when set) or a builtin, and the
/// share of selections it runs on. Fields a newer build adds are ignored here (kept at
/// the class level only), so a record stays readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shadow {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The tenant's policy's version; `None` for a builtin.
    #[serde(default)]
    pub version: Option<String>,
    /// The share of the class's selections the shadow runs on, 0 to 1.
    pub rate: f64,
}

/// A class's canary: a version deciding `weight` percent of its selections, sticky per
/// request key, until promoted, aborted or rolled back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Canary {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The tenant's policy's version (pinned when set); `None` for a builtin.
    #[serde(default)]
    pub version: Option<String>,
    /// Percent of the class's request keys routed to the canary, 0 to 100.
    pub weight: f64,
    /// The fault rate over the last `window` canary selections past which it rolls back.
    pub max_fault_rate: f64,
    /// Canary selections before its fault rate is judged (an open breaker rolls it back
    /// at once).
    pub min_selections: u32,
    /// The canary selections the fault rate is over: the most recent ones.
    pub window: u32,
    /// When it was set, seconds since the Unix epoch.
    pub since: u64,
}

/// How a canary ended, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryEnd {
    /// The canary's policy.
    pub policy: String,
    /// Its version.
    #[serde(default)]
    pub version: Option<String>,
    /// `promoted`, `aborted` or `rolled-back`.
    pub outcome: String,
    /// Why (a rollback's fault rate or breaker; who promoted or aborted).
    pub reason: String,
    /// Seconds since the Unix epoch.
    pub at: u64,
}

/// `PUT /v1/tenants/{tenant}/classes/{class}/shadow`: the version to run beside the
/// class's, and on what share of its selections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowBody {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// One of the policy's versions; absent: its active one, pinned now.
    #[serde(default)]
    pub version: Option<String>,
    /// The share of the class's selections it runs on, 0 to 1.
    pub rate: f64,
}

/// `PUT /v1/tenants/{tenant}/classes/{class}/canary`: the version to route a share of
/// the class's selections to, and when it rolls back by itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryBody {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// One of the policy's versions; absent: its active one, pinned now.
    #[serde(default)]
    pub version: Option<String>,
    /// Percent of the class's request keys (`session`, else `seed`) it decides, 0 to 100.
    pub weight: f64,
    /// The fault rate over the last `window` canary selections past which it rolls back;
    /// default 0.05.
    #[serde(default)]
    pub max_fault_rate: Option<f64>,
    /// Canary selections before the fault rate is judged; default 20.
    #[serde(default)]
    pub min_selections: Option<u32>,
    /// How many of the most recent canary selections the fault rate is over; default 100.
    #[serde(default)]
    pub window: Option<u32>,
}

/// `PUT /v1/tenants/{tenant}/classes/{class}/capture`: how many of the class's last
/// selections to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureBody {
    /// Selections kept, the oldest dropped first (and whenever the tenant's captures
    /// pass `max_capture_bytes_per_tenant`).
    pub selections: u32,
}

/// A policy and version a class runs, shadows or canaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRef {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The version (`None` for a builtin).
    pub version: Option<String>,
}

/// What a class's rollout settings are now: the answer of every rollout write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// The tenant.
    pub tenant: String,
    /// The class.
    pub class: String,
    /// What decides the class's selections (but the canary's share).
    pub live: PolicyRef,
    /// Its shadow, if any.
    pub shadow: Option<Shadow>,
    /// Its canary, if any.
    pub canary: Option<Canary>,
    /// How many selections it captures, if it does.
    pub capture: Option<u32>,
    /// How its last canary ended.
    pub last_canary: Option<CanaryEnd>,
}

/// One selection the shadow disagreed on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The request's seed.
    pub seed: u64,
    /// The live pick, at the live policy's cost.
    pub live: crate::wire::CandidateCost,
    /// The shadow's pick, at the shadow's own cost.
    pub shadow: crate::wire::CandidateCost,
    /// The live policy's cost of the shadow's pick minus its own (absent: it had not
    /// scored it).
    pub regret: Option<f64>,
    /// The live policy's cheapest candidates.
    pub live_top: Vec<crate::wire::CandidateCost>,
    /// The shadow's cheapest candidates.
    pub shadow_top: Vec<crate::wire::CandidateCost>,
}

/// Latency quantiles, µs (nearest rank, over the last selections kept).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// `GET /v1/tenants/{tenant}/classes/{class}/shadow`: this replica's comparison of the
/// class's shadow with its live policy since the shadow was set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowReport {
    /// The tenant.
    pub tenant: String,
    /// The class.
    pub class: String,
    /// The class's live policy.
    pub live: PolicyRef,
    /// The shadow and its rate (absent: none is set; the report is of the last one).
    pub shadow: Option<Shadow>,
    /// Selections sampled for the shadow.
    pub sampled: u64,
    /// Sampled selections not run, by why: `queue-full` (the service's shadow queue),
    /// `tenant-full` (the tenant's share of it), `unavailable` (the shadow's version did
    /// not load).
    pub dropped: BTreeMap<String, u64>,
    /// Shadow runs that faulted, by kind (not compared).
    pub faults: BTreeMap<String, u64>,
    /// The comparison of the shadow's picks with the live ones.
    pub comparison: crate::compare::Agreement,
    /// The live selections' time, and the shadow's (its own call alone).
    pub latency: BTreeMap<String, Latency>,
    /// The last disagreements, most recent last.
    pub disagreements: Vec<Disagreement>,
}

/// `GET /v1/tenants/{tenant}/classes/{class}/canary`: the canary and this replica's count
/// of its selections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryStatus {
    /// The tenant.
    pub tenant: String,
    /// The class.
    pub class: String,
    /// The class's stable policy.
    pub live: PolicyRef,
    /// The canary, if one is set.
    pub canary: Option<Canary>,
    /// Canary selections on this replica since it was set (with none set, of the last).
    pub selections: u64,
    /// Of them, those that faulted (each answered by the stable version instead).
    pub faults: u64,
    /// How its last canary ended.
    pub last_canary: Option<CanaryEnd>,
}
