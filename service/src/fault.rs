//! What a policy fault means for a selection — the service's single seam for fault
//! containment.
//!
//! Each tenant policy version runs behind one [`SharedBreaker`]: the runtime's circuit
//! breaker ([`switchyard::Breaker`], the same logic `switchyard select` uses), shared by
//! every pooled instance of the version and every thread selecting with it. Consecutive
//! faults of the version open it; while it is open the guest is not called at all and the
//! selection is contained as a `quarantined` fault, counted against the backoff; then one
//! probe is let through, and its outcome closes the breaker or doubles the wait. A new
//! version (an upload) starts with a closed breaker of its own; a rollback returns to the
//! old version's breaker as it was. Breakers live in memory: a restart closes them all.
//!
//! Whatever the fault, [`contain`] decides the selection: fail-open (the native default
//! policy decides and the answer says why in `fallback`) or fail-closed (the selection
//! fails with the fault's kind).

use std::sync::{Mutex, MutexGuard};

use axum::http::StatusCode;
use switchyard::guard::{Admission, Breaker, BreakerState, GuardConfig, Ticket};
use switchyard::{Fault, FaultKind, SelectionRequest, Selector, WorkerTable, builtin};

use crate::error::ApiError;
use crate::select::Decision;
use crate::store::OnFault;

/// The breaker of one tenant policy version, shared across its instances and threads.
/// The lock is held only for the breaker's bookkeeping, never across a guest call.
pub struct SharedBreaker {
    breaker: Mutex<Breaker>,
}

impl SharedBreaker {
    pub fn new(config: GuardConfig) -> Self {
        Self { breaker: Mutex::new(Breaker::new(config)) }
    }

    /// A poisoned lock is still consistent: no breaker method panics halfway.
    fn lock(&self) -> MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn state(&self) -> BreakerState {
        self.lock().state()
    }

    /// Lets one call of the guest through, or answers the `quarantined` fault to contain
    /// instead (naming `policy` and its `version`).
    pub fn admit(&self, policy: &str, version: &str) -> Result<Attempt<'_>, Fault> {
        let admission = self.lock().admit();
        match admission {
            Admission::Call(ticket) => Ok(Attempt { breaker: self, ticket: Some(ticket) }),
            Admission::Skip { remaining } => {
                let short = version.get(..12).unwrap_or(version);
                let when = match remaining {
                    0 => "a probe is running".to_string(),
                    n => format!("probed again after {n} more selections"),
                };
                Err(Fault::new(
                    FaultKind::Quarantined,
                    format!("`{policy}` version {short} is quarantined after repeated faults; {when}"),
                ))
            }
        }
    }
}

/// One call the breaker let through; report how it went. Dropped without a report (the
/// selection thread unwound), it is abandoned: a probe passes its turn to the next
/// selection rather than holding the breaker open forever.
pub struct Attempt<'a> {
    breaker: &'a SharedBreaker,
    ticket: Option<Ticket>,
}

impl Attempt<'_> {
    /// The guest answered (or validly found no eligible worker).
    pub fn succeeded(mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.lock().success(ticket);
        }
    }

    /// The guest faulted; true if that opened the breaker.
    pub fn faulted(mut self) -> bool {
        self.ticket.take().is_some_and(|ticket| self.breaker.lock().fault(ticket))
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.lock().abandon(ticket);
        }
    }
}

/// Decides a selection whose policy faulted (or is quarantined) with `fault`.
pub fn contain(
    fault: Fault,
    on_fault: OnFault,
    table: &WorkerTable,
    request: &SelectionRequest,
) -> Result<Decision, ApiError> {
    match on_fault {
        OnFault::Closed => {
            // 503 while quarantined: the policy was not called and will be retried, so
            // asking again later can succeed. 502 for a fault of this call: the tenant's
            // policy (our upstream, in effect) failed, not the caller.
            let status = match fault.kind {
                FaultKind::Quarantined => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            };
            Err(ApiError::new(status, fault.kind.as_str(), fault.message))
        }
        OnFault::Open => {
            let default = builtin::find("default").expect("the default builtin exists");
            let scorer = default.native("{}").map_err(|e| ApiError::internal(e.to_string()))?;
            let mut selector = Selector::new(scorer);
            let selection = selector.select(table, request).map_err(crate::select::select_error)?;
            Ok(Decision::new(&selector, selection, "default", "native", None, Some(fault)))
        }
    }
}
