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
