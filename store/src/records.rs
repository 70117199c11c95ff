//! The registry's records: tenants (token hash, policies, versions, classes) and routers,
//! as the service commits them and a reader resolves a class's route.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchyard::FailMode;

/// Everything committed: the only state that survives a restart.
///
/// Persistent maps (`imbl`): a clone shares every record with the original, and changing
/// one tenant copies only that tenant's path through the map, so a write (and the
/// service's snapshot of it) costs the same with ten tenants or ten thousand.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    /// Tenant name → its token hash, policies and classes.
    pub tenants: imbl::OrdMap<String, Arc<TenantRecord>>,
    /// Router name → sha256 of its token (routers may select for any tenant).
    pub routers: imbl::OrdMap<String, String>,
}

/// One tenant: its token's hash, its policies and where its classes route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    /// sha256 of the tenant's token, hex. The token itself is never stored.
    pub token_sha256: String,
    /// Policy name → its versions.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyRecord>,
    /// Class name → where it routes (an unassigned class runs the builtin default).
    #[serde(default)]
    pub classes: BTreeMap<String, Assignment>,
}

/// One named policy of a tenant: every version uploaded, which is active, and the
/// versions active before it (most recent last) for rollback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    /// The versions kept (the active one, the rollback history, those classes pin), in
    /// the order they were first uploaded.
    pub versions: Vec<VersionRecord>,
    /// The version classes that follow the policy route to.
    pub active: String,
    /// The rollback history: versions active before, most recent last.
    #[serde(default)]
    pub previous: Vec<String>,
}

impl PolicyRecord {
    /// The record of `version`, if the policy keeps it.
    pub fn version(&self, version: &str) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.version == version)
    }
}

/// One uploaded version: the component (by its blob) and the parameters it runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionRecord {
    /// sha256 of the bytes, or of bytes + parameters (see `version_of`).
    pub version: String,
    /// sha256 of the component bytes: the blob's file name.
    pub blob: String,
    /// The parameters JSON it is configured with.
    pub params: String,
    /// Component size, bytes.
    pub size: usize,
}

/// A class's policy: a builtin name or one of the tenant's; `version` pins one, absent
/// follows the policy's active version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The pinned version; `None` follows the policy's active version.
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    /// What a policy fault does to the class's selections.
    pub on_fault: FailMode,
}

impl Assignment {
    /// The version this assignment routes to within `policy` (the policy it names): the
    /// pinned one, else the policy's active one.
    pub fn version_in<'a>(&'a self, policy: &'a PolicyRecord) -> &'a str {
        self.version.as_deref().unwrap_or(&policy.active)
    }
}

/// Where a tenant's class routes, as the manifest says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Routed<'a> {
    /// The class is unassigned: the builtin default, fail-open.
    Unassigned,
    /// A policy that is not the tenant's: a builtin's name (or nothing the service knows,
    /// which it does not route).
    Named {
        /// The policy name as assigned.
        policy: &'a str,
        /// What a fault does.
        on_fault: FailMode,
    },
    /// One of the tenant's uploaded versions.
    Version {
        /// The tenant's policy name.
        policy: &'a str,
        /// The version routed to (pinned or active).
        record: &'a VersionRecord,
        /// What a fault does.
        on_fault: FailMode,
    },
}

/// Whether `name` may name a tenant, router, policy or class: `[a-z0-9_-]`, 1–64
/// characters, so that it is safe in paths, file names and metric labels.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Manifest {
    /// Every version every tenant keeps: (tenant, policy name, version).
    pub fn versions(&self) -> impl Iterator<Item = (&str, &str, &VersionRecord)> {
        self.tenants
            .iter()
            .flat_map(|(tenant, record)| record.versions().map(move |(name, v)| (tenant.as_str(), name, v)))
    }
}

impl TenantRecord {
    /// Every version this tenant keeps: (policy name, version).
    pub fn versions(&self) -> impl Iterator<Item = (&str, &VersionRecord)> {
        self.policies
            .iter()
            .flat_map(|(name, policy)| policy.versions.iter().map(move |v| (name.as_str(), v)))
    }

    /// Where `class` routes. `Err` names what is missing when the class names one of the
    /// tenant's policies at a version the policy no longer keeps (the service never
    /// commits such a manifest).
    pub fn route(&self, class: &str) -> Result<Routed<'_>, String> {
        let Some(a) = self.classes.get(class) else { return Ok(Routed::Unassigned) };
        let Some(policy) = self.policies.get(&a.policy) else {
            return Ok(Routed::Named { policy: &a.policy, on_fault: a.on_fault });
        };
        let version = a.version_in(policy);
        let record = policy
            .version(version)
            .ok_or_else(|| format!("policy `{}` keeps no version {version}", a.policy))?;
        Ok(Routed::Version { policy: &a.policy, record, on_fault: a.on_fault })
    }
}
