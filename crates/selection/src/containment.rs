//! What the host's fault containment (the guard, in `switchyard`) is told and reports,
//! as plain data: the wire types name them, so they live below the host.

use serde::{Deserialize, Serialize};

/// What a fault does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailMode {
    /// The fallback policy decides; the decision says why. The default: a tenant's bug
    /// must not take its traffic down.
    #[default]
    Open,
    /// The selection fails with the fault's kind.
    Closed,
}

/// The breaker's state, for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum BreakerState {
    /// The policy is called.
    Closed {
        /// Faults in a row so far; `quarantine_after` of them open the breaker.
        consecutive_faults: u32,
    },
    /// Quarantined: the next `remaining` selections skip the policy; then one probe.
    Open {
        /// Selections still skipped before the probe.
        remaining: u64,
        /// Times opened since the last success; each doubles the wait (to `backoff_max`).
        trips: u32,
    },
    /// The next selection is a probe.
    HalfOpen {
        /// Times opened since the last success.
        trips: u32,
    },
}

impl BreakerState {
    /// Open or half-open: the policy is not called until a probe succeeds.
    pub fn is_quarantined(&self) -> bool {
        !matches!(self, BreakerState::Closed { .. })
    }
}
