//! The keys of the records bucket, and what a write expects of the key it replaces.

use std::fmt;

/// What a write expects of the key it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The key does not exist (a new tenant or router).
    Absent,
    /// The key is still at this revision (what the writer read).
    Revision(u64),
}

/// A key of the records bucket.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// `tenant.<name>`.
    Tenant(String),
    /// `router.<name>`.
    Router(String),
}

impl Key {
    /// The key `text` names, if it is one this registry writes.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some(name) = text.strip_prefix("tenant.") {
            return Some(Self::Tenant(name.to_string()));
        }
        text.strip_prefix("router.").map(|name| Self::Router(name.to_string()))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tenant(name) => write!(f, "tenant.{name}"),
            Self::Router(name) => write!(f, "router.{name}"),
        }
    }
}
