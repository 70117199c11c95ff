//! What a policy fault means for one selection — the service's single seam for fault
//! containment. Today: fail-open (the native default policy decides and the answer says
//! why in `fallback`) or fail-closed (the selection fails with the fault's kind).
//! Quarantine with backoff belongs to the guard layer (issue 3), which replaces this
//! function at merge; the service calls nothing else on a fault.

use axum::http::StatusCode;
use switchyard::{Fault, SelectionRequest, Selector, WorkerTable, builtin};

use crate::error::ApiError;
use crate::select::Decision;
use crate::store::OnFault;

/// Decides a selection whose policy faulted with `fault`.
pub fn contain(
    fault: Fault,
    on_fault: OnFault,
    table: &WorkerTable,
    request: &SelectionRequest,
) -> Result<Decision, ApiError> {
    match on_fault {
        // 502: the tenant's policy (our upstream, in effect) failed, not the caller.
        OnFault::Closed => Err(ApiError::new(StatusCode::BAD_GATEWAY, fault.kind.as_str(), fault.message)),
        OnFault::Open => {
            let default = builtin::find("default").expect("the default builtin exists");
            let scorer = default.native("{}").map_err(|e| ApiError::internal(e.to_string()))?;
            let mut selector = Selector::new(scorer);
            let selection = selector.select(table, request).map_err(crate::select::select_error)?;
            Ok(Decision::new(&selector, selection, "default", "native", None, Some(fault)))
        }
    }
}
