//! What can go wrong: bad input from the caller ([`InputError`]), a scorer's fault
//! ([`Fault`], [`FaultKind`]) and why a selection has no answer ([`SelectError`]).

use serde::{Deserialize, Serialize};

use crate::wire::ErrorKind;

/// Bad input from the caller: a message that says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    message: String,
}

impl InputError {
    /// An error whose message, shown as is, says what to fix.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

/// What went wrong inside a scorer. Stable names: scripts match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Ran out of fuel: the CPU budget of the call.
    Fuel,
    /// Passed its wall-clock deadline.
    Deadline,
    /// Tried to grow memory or a table past its limit.
    Memory,
    /// Overflowed the wasm stack.
    Stack,
    /// Trapped otherwise (panic, unreachable, out-of-bounds access…).
    Trap,
    /// Returned costs of the wrong length, or NaN/±inf.
    InvalidOutput,
    /// Returned its own error.
    PolicyError,
    /// Not called: quarantined after repeated faults.
    Quarantined,
    /// Not the policy's doing: the host had no instance to run it on (the engine's pool is
    /// in use). Never counted against the policy, never trips its breaker.
    Overloaded,
    /// Not the policy's doing: the version did not load (a missing blob, a limit lowered
    /// below its size); the host answers for it.
    Unavailable,
}

impl FaultKind {
    /// The faults that are the policy's doing (every kind but the host's `Overloaded`
    /// and `Unavailable`), in the order counters are kept.
    pub const POLICY: [FaultKind; 8] = [
        FaultKind::Fuel,
        FaultKind::Deadline,
        FaultKind::Memory,
        FaultKind::Stack,
        FaultKind::Trap,
        FaultKind::InvalidOutput,
        FaultKind::PolicyError,
        FaultKind::Quarantined,
    ];

    /// The stable name: the [`ErrorKind`]'s it is answered as.
    pub fn as_str(self) -> &'static str {
        ErrorKind::from(self).as_str()
    }
}

impl From<FaultKind> for ErrorKind {
    fn from(kind: FaultKind) -> Self {
        match kind {
            FaultKind::Fuel => ErrorKind::Fuel,
            FaultKind::Deadline => ErrorKind::Deadline,
            FaultKind::Memory => ErrorKind::Memory,
            FaultKind::Stack => ErrorKind::Stack,
            FaultKind::Trap => ErrorKind::Trap,
            FaultKind::InvalidOutput => ErrorKind::InvalidOutput,
            FaultKind::PolicyError => ErrorKind::PolicyError,
            FaultKind::Quarantined => ErrorKind::Quarantined,
            FaultKind::Overloaded => ErrorKind::Overloaded,
            FaultKind::Unavailable => ErrorKind::Unavailable,
        }
    }
}

impl FaultKind {
    /// Whether the policy is to blame (everything but a host condition).
    pub fn is_policy_fault(self) -> bool {
        !matches!(self, FaultKind::Overloaded | FaultKind::Unavailable)
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scorer's fault: its kind and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Fault {
    /// What kind of fault: the stable name scripts and the breaker go by.
    pub kind: FaultKind,
    /// What happened, in one line, for an operator.
    pub message: String,
}

impl Fault {
    /// A fault of `kind`, described by `message`.
    pub fn new(kind: FaultKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// Why a selection has no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectError {
    /// No candidate survived the host's eligibility checks and the policies' filters: a
    /// valid answer, not a fault.
    #[error("no eligible worker")]
    NoEligibleWorker,
    /// A scorer faulted, and nothing answered in its place.
    #[error("policy `{scorer}` faulted: {fault}")]
    Fault {
        /// The scorer's name (or `weighted sum` when only the sum of several overflowed).
        scorer: String,
        /// What went wrong.
        fault: Fault,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_kind_is_named_and_serialised_as_its_error_kind() {
        for kind in FaultKind::POLICY.into_iter().chain([FaultKind::Overloaded, FaultKind::Unavailable]) {
            assert_eq!(kind.is_policy_fault(), FaultKind::POLICY.contains(&kind));
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.as_str()));
            assert_eq!(kind.as_str().parse::<ErrorKind>(), Ok(ErrorKind::from(kind)));
        }
    }
}
