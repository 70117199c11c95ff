//! What a registry operation can fail with.

use crate::keys::Expected;

/// A registry operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// NATS is unreachable, timed out, or refused the operation: a replica keeps serving
    /// what it has and refuses writes (`registry-unavailable`).
    #[error("the registry is unavailable: {0}")]
    Unavailable(String),
    /// The key is no longer as the write expected: another replica changed it first.
    #[error("`{key}` changed since it was read (expected {expected:?}): reload it and decide again")]
    Conflict {
        /// The key written.
        key: String,
        /// What the write expected of it.
        expected: Expected,
    },
    /// A stored value this registry cannot read, or bytes that are not what their name says.
    #[error("`{key}` in the registry is not valid: {reason}")]
    Corrupt {
        /// The key or blob name.
        key: String,
        /// Why.
        reason: String,
    },
    /// The registry's address is not a NATS server URL: retrying cannot help.
    #[error("not a NATS server address: {0}")]
    Address(String),
    /// No blob of that sha256.
    #[error("no blob {0} in the registry")]
    NoBlob(String),
}

impl RegistryError {
    pub(crate) fn unavailable(e: impl std::fmt::Display) -> Self {
        Self::Unavailable(e.to_string())
    }

    pub(crate) fn corrupt(key: &str, reason: impl Into<String>) -> Self {
        Self::Corrupt { key: key.to_string(), reason: reason.into() }
    }
}
