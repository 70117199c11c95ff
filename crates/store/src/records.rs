//! The registry's records: tenants (token hash, policies, versions, classes) and routers,
//! as the service commits them and a reader resolves a class's route.
//!
//! Forward compatible: a field this build does not know (one a newer build added, in the
//! record or in a policy, version or class of it) is no error. It is kept
//! ([`UnknownFields`]) and written back when this build rewrites the record, so an older
//! replica's upload or assignment does not strip what a newer one stored. A record this
//! build cannot read at all is skipped and kept as it is ([`Unreadable`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use switchyard_selection::FailMode;
pub use switchyard_selection::wire::api::{Canary, CanaryEnd, Shadow};

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
    /// The stored records this build could not read, by where they are (a data dir's
    /// file, `tenants/acme.json`, or a fleet's key, `tenant.acme`): skipped, so what they
    /// hold is not served, and never written over (see [`Manifest::unreadable_tenant`]).
    pub unreadable: imbl::OrdMap<String, Unreadable>,
}

/// A stored record this build cannot read: damaged, or a newer build's in a form this one
/// does not know (a value it cannot parse, a key or file of a kind it does not write).
/// Skipped at load and in a fleet's watch rather than stopping the service; kept as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// What the record holds, as its key or file name says.
    pub holds: Holds,
    /// Why this build cannot read it.
    pub reason: String,
}

/// What a stored record holds, as its key or file name says: the tenant or router whose
/// writes must wait until the record is readable again (or removed), so that none of
/// them replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holds {
    /// Tenant `name`'s record.
    Tenant(String),
    /// Router `name`'s token hash (a fleet's registry keeps one key per router).
    Router(String),
    /// Every router's token hash (the data dir's `routers.json`).
    Routers,
    /// Nothing this build knows of: a key or file of a kind it does not write.
    Unknown,
}

/// A JSON object's fields.
type Fields = serde_json::Map<String, serde_json::Value>;

/// The fields of a stored tenant record, and of its policies, versions and class
/// assignments, that this build does not know: a newer build's. Kept as read and written
/// back with the record; those of a policy, version or class this build removes go with it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnknownFields {
    record: Fields,
    /// Policy name → its unknown fields.
    policies: BTreeMap<String, Fields>,
    /// Policy name → version → that version's unknown fields.
    versions: BTreeMap<String, BTreeMap<String, Fields>>,
    /// Class name → its assignment's unknown fields.
    classes: BTreeMap<String, Fields>,
}

impl UnknownFields {
    /// Whether the record had no field this build does not know.
    pub fn is_empty(&self) -> bool {
        self.record.is_empty()
            && self.policies.is_empty()
            && self.versions.is_empty()
            && self.classes.is_empty()
    }
}

/// One tenant: its token's hash, its policies and where its classes route. Stored as
/// JSON; fields this build does not know are kept in [`TenantRecord::unknown`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantRecord {
    /// sha256 of the tenant's token, hex. The token itself is never stored.
    pub token_sha256: String,
    /// Policy name → its versions.
    pub policies: BTreeMap<String, PolicyRecord>,
    /// Class name → where it routes (an unassigned class runs the builtin default).
    pub classes: BTreeMap<String, Assignment>,
    /// What the stored record held that this build does not know, written back with it.
    pub unknown: UnknownFields,
}

/// One named policy of a tenant: every version uploaded, which is active, and the
/// versions active before it (most recent last) for rollback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// The versions kept (the active one, the rollback history, those classes pin), in
    /// the order they were first uploaded.
    pub versions: Vec<VersionRecord>,
    /// The version classes that follow the policy route to.
    pub active: String,
    /// The rollback history: versions active before, most recent last. A name may
    /// outlive its version (collected, see `versions`).
    #[serde(default)]
    pub previous: Vec<String>,
    /// The roll-forward history: versions rolled back from, the next one last. Cleared by
    /// an upload. Absent from a record that has none, as older builds wrote it (an older
    /// build keeps it as an unknown field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next: Vec<String>,
}

impl PolicyRecord {
    /// The record of `version`, if the policy keeps it.
    pub fn version(&self, version: &str) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.version == version)
    }
}

/// One uploaded version: the component (by its blob) and the parameters it runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The pinned version; `None` follows the policy's active version.
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    /// What a policy fault does to the class's selections.
    pub on_fault: FailMode,
    /// A version run beside the class's on a sample of its selections, after each is
    /// answered, and compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
    /// A version deciding a share of the class's selections, rolled back by itself when
    /// it faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// How many of the class's last selections to keep, as a trace to replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<u32>,
    /// How the class's last canary ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_canary: Option<CanaryEnd>,
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
    /// The record this build could not read that a write of tenant `name` would replace:
    /// (where it is, why it was skipped).
    pub fn unreadable_tenant(&self, name: &str) -> Option<(&str, &Unreadable)> {
        self.unreadable_holding(|holds| matches!(holds, Holds::Tenant(t) if t == name))
    }

    /// The record this build could not read that a write of router `name` would replace
    /// (its own key, or the data dir's one file of every router).
    pub fn unreadable_router(&self, name: &str) -> Option<(&str, &Unreadable)> {
        self.unreadable_holding(|holds| match holds {
            Holds::Router(r) => r == name,
            Holds::Routers => true,
            Holds::Tenant(_) | Holds::Unknown => false,
        })
    }

    fn unreadable_holding(&self, holds: impl Fn(&Holds) -> bool) -> Option<(&str, &Unreadable)> {
        // A walk: there are none, or a few, and only a write asks.
        self.unreadable.iter().find(|(_, u)| holds(&u.holds)).map(|(at, u)| (at.as_str(), u))
    }

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

impl TenantRecord {
    /// Tenant `name`'s record from its stored JSON, checked as the service requires of
    /// what it commits (the names it routes and labels metrics by; blob names that are
    /// hex digits). `Err` says why this build cannot use it.
    pub fn from_stored(name: &str, json: &[u8]) -> Result<Self, String> {
        if !valid_name(name) {
            return Err(format!("`{name}` is not a tenant name (a-z, 0-9, `-`, `_`; 1–64)"));
        }
        let record: Self = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        record.check()?;
        Ok(record)
    }

    fn check(&self) -> Result<(), String> {
        let name = |what: &str, name: &str| match valid_name(name) {
            true => Ok(()),
            false => Err(format!("{what} `{name}` is not a name (a-z, 0-9, `-`, `_`; 1–64)")),
        };
        for (policy, record) in &self.policies {
            name("policy", policy)?;
            for v in &record.versions {
                if v.blob.is_empty() || !v.blob.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!(
                        "policy `{policy}` version {}: blob `{}` is not hex digits",
                        v.version, v.blob
                    ));
                }
            }
        }
        for (class, assignment) in &self.classes {
            name("class", class)?;
            name(&format!("class `{class}`'s policy"), &assignment.policy)?;
        }
        Ok(())
    }
}

// The stored form of a tenant record: the known fields, and beside each object's the
// ones this build does not know (`flatten` into a map takes every field the struct did
// not), so that they go back where they were.

/// `T`'s fields and the others of its object.
#[derive(Deserialize)]
struct Stored<T> {
    #[serde(flatten)]
    known: T,
    #[serde(flatten)]
    unknown: Fields,
}

#[derive(Deserialize)]
struct StoredTenant {
    token_sha256: String,
    #[serde(default)]
    policies: BTreeMap<String, StoredPolicy>,
    #[serde(default)]
    classes: BTreeMap<String, Stored<Assignment>>,
    #[serde(flatten)]
    unknown: Fields,
}

#[derive(Deserialize)]
struct StoredPolicy {
    versions: Vec<Stored<VersionRecord>>,
    active: String,
    #[serde(default)]
    previous: Vec<String>,
    #[serde(default)]
    next: Vec<String>,
    #[serde(flatten)]
    unknown: Fields,
}

/// [`Stored`], borrowed, to write.
#[derive(Serialize)]
struct StoredRef<'a, T> {
    #[serde(flatten)]
    known: &'a T,
    #[serde(flatten)]
    unknown: Option<&'a Fields>,
}

#[derive(Serialize)]
struct StoredTenantRef<'a> {
    token_sha256: &'a str,
    policies: BTreeMap<&'a str, StoredPolicyRef<'a>>,
    classes: BTreeMap<&'a str, StoredRef<'a, Assignment>>,
    #[serde(flatten)]
    unknown: &'a Fields,
}

#[derive(Serialize)]
struct StoredPolicyRef<'a> {
    versions: Vec<StoredRef<'a, VersionRecord>>,
    active: &'a str,
    previous: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    next: &'a [String],
    #[serde(flatten)]
    unknown: Option<&'a Fields>,
}

impl<'de> Deserialize<'de> for TenantRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = StoredTenant::deserialize(deserializer)?;
        let mut unknown = UnknownFields { record: stored.unknown, ..UnknownFields::default() };
        let mut policies = BTreeMap::new();
        for (name, policy) in stored.policies {
            let mut versions = Vec::with_capacity(policy.versions.len());
            for v in policy.versions {
                if !v.unknown.is_empty() {
                    let of_policy = unknown.versions.entry(name.clone()).or_default();
                    of_policy.insert(v.known.version.clone(), v.unknown);
                }
                versions.push(v.known);
            }
            if !policy.unknown.is_empty() {
                unknown.policies.insert(name.clone(), policy.unknown);
            }
            policies.insert(
                name,
                PolicyRecord {
                    versions,
                    active: policy.active,
                    previous: policy.previous,
                    next: policy.next,
                },
            );
        }
        let mut classes = BTreeMap::new();
        for (class, a) in stored.classes {
            if !a.unknown.is_empty() {
                unknown.classes.insert(class.clone(), a.unknown);
            }
            classes.insert(class, a.known);
        }
        Ok(Self { token_sha256: stored.token_sha256, policies, classes, unknown })
    }
}

impl Serialize for TenantRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let unknown = &self.unknown;
        let policies = self
            .policies
            .iter()
            .map(|(name, policy)| {
                let of_policy = unknown.versions.get(name);
                let versions = policy
                    .versions
                    .iter()
                    .map(|v| StoredRef { known: v, unknown: of_policy.and_then(|m| m.get(&v.version)) })
                    .collect();
                let stored = StoredPolicyRef {
                    versions,
                    active: &policy.active,
                    previous: &policy.previous,
                    next: &policy.next,
                    unknown: unknown.policies.get(name),
                };
                (name.as_str(), stored)
            })
            .collect();
        let classes = self
            .classes
            .iter()
            .map(|(class, a)| (class.as_str(), StoredRef { known: a, unknown: unknown.classes.get(class) }))
            .collect();
        StoredTenantRef { token_sha256: &self.token_sha256, policies, classes, unknown: &unknown.record }
            .serialize(serializer)
    }
}
