//! Every error kind the CLI prints and the service answers, in one enum: each name is
//! written once, here, and scripts match on it (`error: <kind>: …` on the CLI's stderr,
//! `{"error": {"kind": …}}` from the service).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares [`ErrorKind`] with each variant's stable name, once.
macro_rules! error_kinds {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// A stable, kebab-case error kind.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorKind {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorKind {
            /// Every kind, in declaration order.
            pub const ALL: &[ErrorKind] = &[$(ErrorKind::$variant,)*];

            /// The stable name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorKind::$variant => $name, )*
                }
            }
        }
    };
}

error_kinds! {
    // The request and its body.
    /// The request (or a CLI argument) is not what the format asks for.
    InvalidInput => "invalid-input",
    /// An API body that is not the JSON the route takes.
    InvalidBody => "invalid-body",
    /// A body larger than the route's limit.
    BodyTooLarge => "body-too-large",
    /// The body did not arrive in time.
    BodyTimeout => "body-timeout",
    /// A `Content-Type` (or `Accept`) the route does not speak.
    UnsupportedMediaType => "unsupported-media-type",
    /// A tenant, router, policy or class name outside `[a-z0-9_-]{1,64}`.
    InvalidName => "invalid-name",
    /// Policy parameters that are not a JSON object.
    InvalidParams => "invalid-params",
    /// A configuration file or limit that is not valid.
    InvalidConfig => "invalid-config",
    /// A replay trace that does not parse (names its line).
    InvalidTrace => "invalid-trace",

    // Selection.
    /// No worker passed the host's eligibility checks and the policy's filter.
    NoEligibleWorker => "no-eligible-worker",
    /// A replay stopped at a row whose selection failed.
    SelectionFailed => "selection-failed",

    // Who may do what; what exists.
    /// No token, or one that is not known.
    Unauthorized => "unauthorized",
    /// A known token that may not do this.
    Forbidden => "forbidden",
    /// No such route.
    NotFound => "not-found",
    /// The route exists, not with this method (the answer's `Allow` lists those it has).
    MethodNotAllowed => "method-not-allowed",
    /// No such tenant.
    UnknownTenant => "unknown-tenant",
    /// No such policy (builtin or the tenant's).
    UnknownPolicy => "unknown-policy",
    /// No such version of the policy.
    UnknownVersion => "unknown-version",
    /// A rollback with no older version in the policy's history.
    NoPreviousVersion => "no-previous-version",
    /// A roll-forward with no version rolled back from (none since, or an upload since).
    NoNewerVersion => "no-newer-version",
    /// A rollback or roll-forward whose target version was collected (the policy keeps
    /// at most `max_versions_per_policy`).
    VersionCollected => "version-collected",
    /// The tenant or router exists already.
    Exists => "exists",
    /// No held worker table of that name (never put, deleted, or lost with a restart of
    /// this replica: put it again).
    UnknownTable => "unknown-table",
    /// A delta or a selection based on a version of a held table other than its current
    /// one (the answer names both).
    TableVersion => "table-version",
    /// A rollout setting for a class the tenant has not assigned (a shadow, canary or
    /// capture belongs to an assigned class).
    UnknownClass => "unknown-class",
    /// A promote or abort of a class with no canary (none set, or it ended: the class's
    /// `last_canary` says how).
    NoCanary => "no-canary",

    // Quotas and shares.
    /// More versions than `max_versions_per_policy`.
    TooManyVersions => "too-many-versions",
    /// More policies than `max_policies_per_tenant`.
    TooManyPolicies => "too-many-policies",
    /// More classes than `max_classes_per_tenant`.
    TooManyClasses => "too-many-classes",
    /// More held worker tables than `max_tables_per_tenant`.
    TooManyTables => "too-many-tables",
    /// Over a per-minute write or upload allowance.
    RateLimited => "rate-limited",
    /// The tenant has `max_in_flight_per_tenant` selections, or `max_uploads_per_tenant`
    /// uploads, in flight.
    TenantBusy => "tenant-busy",
    /// The router has `max_in_flight_per_router` selections in flight.
    RouterBusy => "router-busy",
    /// Every compile permit is taken.
    CompileBusy => "compile-busy",
    /// The server (or its engine's instance pool) is at capacity: retry.
    Overloaded => "overloaded",
    /// Another replica of a fleet changed what this write replaces since this replica
    /// read it (409); retry on the new state.
    Conflict => "conflict",
    /// The fleet's registry (NATS) is unreachable: writes are refused (503) while
    /// selections go on from the last snapshot.
    RegistryUnavailable => "registry-unavailable",

    // A component refused at load (`switchyard policy check`, an upload).
    /// Not WebAssembly.
    NotWasm => "not-wasm",
    /// A core module, not a component.
    CoreModule => "core-module",
    /// A component of another world.
    WrongWorld => "wrong-world",
    /// Imports something the policy world does not offer (WASI, say).
    ForbiddenImport => "forbidden-import",
    /// Over the component size limit.
    TooLarge => "too-large",
    /// Cranelift refused it.
    CompileFailed => "compile-failed",
    /// Compiling took longer than `compile_timeout_ms`.
    CompileTimeout => "compile-timeout",
    /// `configure` refused the parameters, or faulted.
    ConfigureFailed => "configure-failed",
    /// Instantiation failed (a start function that faulted, a limit).
    InstantiateFailed => "instantiate-failed",

    // A fail-closed policy's fault, answered as the selection's error.
    /// Ran out of fuel.
    Fuel => "fuel",
    /// Passed its wall-clock deadline.
    Deadline => "deadline",
    /// Grew memory or a table past its limit.
    Memory => "memory",
    /// Overflowed the wasm stack.
    Stack => "stack",
    /// Trapped otherwise.
    Trap => "trap",
    /// Returned costs of the wrong length, or not finite.
    InvalidOutput => "invalid-output",
    /// Returned its own error.
    PolicyError => "policy-error",
    /// Not called: quarantined after repeated faults.
    Quarantined => "quarantined",
    /// Not called: the version did not load.
    Unavailable => "unavailable",

    // The CLI's own.
    /// Reading or writing a file.
    Io => "io",
    /// Could not reach the server.
    Connect => "connect",
    /// The server answered something that is not its error shape.
    Server => "server",
    /// `switchyard serve` could not start.
    Serve => "serve",
    /// The engine could not be built from the limits given.
    Engine => "engine",
    /// The CLI's configuration file.
    Config => "config",
    /// Wrapping a core module as a component failed.
    Componentize => "componentize",
    /// Writing a replay report failed.
    Report => "report",

    // Ours.
    /// Our fault, not the client's (storage, a panicked worker thread).
    Internal => "internal",
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no [`ErrorKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error kind `{0}`")]
pub struct UnknownErrorKind(pub String);

impl FromStr for ErrorKind {
    type Err = UnknownErrorKind;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        ErrorKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| UnknownErrorKind(name.into()))
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The service's error body: `{"error": {"kind": …, "message": …}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The kind and the message of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// The stable kind.
    pub kind: ErrorKind,
    /// What to fix, for a person.
    pub message: String,
}

impl ErrorBody {
    /// The body for `kind` and `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { error: ErrorDetail { kind, message: message.into() } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_kebab_case_unique_and_round_trips() {
        let mut seen = std::collections::BTreeSet::new();
        for &kind in ErrorKind::ALL {
            let name = kind.as_str();
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{name}");
            assert!(seen.insert(name), "{name} twice");
            assert_eq!(name.parse::<ErrorKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), kind);
        }
        assert!("no-such-kind".parse::<ErrorKind>().is_err());
    }
}
