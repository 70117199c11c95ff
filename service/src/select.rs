//! `POST /v1/select`: the request JSON of `switchyard select --input` plus `"tenant"`;
//! the class is `classifier_class`, else `policy_class`. Blocking (guest calls): run it
//! off the async workers.

use std::time::Instant;

use axum::http::StatusCode;
use serde_json::{Value, json};
use switchyard::input::RequestJson;
use switchyard::{Fault, SelectError, Selection, SelectionRequest, Selector, WorkerTable};

use crate::auth::{Principal, require_selector};
use crate::error::ApiError;
use crate::state::{LoadedVersion, Service, Target};
use crate::store::OnFault;

/// A decided selection, as answered.
pub struct Decision {
    selection: Selection,
    policy: String,
    build: &'static str,
    version: Option<String>,
    fallback: Option<Fault>,
    costs: Vec<Value>,
}

impl Decision {
    pub fn new(
        selector: &Selector,
        selection: Selection,
        policy: &str,
        build: &'static str,
        version: Option<String>,
        fallback: Option<Fault>,
    ) -> Self {
        let costs = selector
            .last_candidates()
            .zip(selector.last_costs())
            .map(|(w, c)| json!({ "worker_id": w.worker_id, "dp_rank": w.dp_rank, "cost": c }))
            .collect();
        Self { selection, policy: policy.to_string(), build, version, fallback, costs }
    }

    /// The same fields as `switchyard select`, plus the tenant and class.
    fn to_json(&self, tenant: &str, class: Option<&str>) -> Value {
        json!({
            "tenant": tenant,
            "policy_class": class,
            "worker_id": self.selection.chosen.worker_id,
            "dp_rank": self.selection.chosen.dp_rank,
            "cost": self.selection.cost,
            "policy": self.policy,
            "build": self.build,
            "version": self.version,
            "fallback": self.fallback.as_ref().map(|f| json!({ "kind": f.kind.as_str(), "message": f.message })),
            "candidates": self.selection.candidates,
            "costs": self.costs,
        })
    }
}

/// A selection error that is not a fault to contain.
pub fn select_error(e: SelectError) -> ApiError {
    match e {
        SelectError::NoEligibleWorker => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "no-eligible-worker",
            "no worker is eligible for this request",
        ),
        SelectError::Fault { scorer, fault } => {
            ApiError::internal(format!("the fallback policy `{scorer}` faulted: {fault}"))
        }
    }
}

impl Service {
    /// One selection for `who`, from the raw body.
    pub fn select(&self, who: &Principal, body: &[u8]) -> Result<Value, ApiError> {
        let invalid = |m: String| ApiError::bad_request("invalid-input", m);
        let mut value: Value =
            serde_json::from_slice(body).map_err(|e| invalid(format!("request JSON: {e}")))?;
        let object =
            value.as_object_mut().ok_or_else(|| invalid("the request must be a JSON object".into()))?;
        let tenant = match object.remove("tenant") {
            Some(Value::String(t)) => t,
            _ => return Err(invalid("`tenant` (a string) is required".into())),
        };
        require_selector(who, &tenant)?;
        let request: RequestJson =
            serde_json::from_value(value).map_err(|e| invalid(format!("request JSON: {e}")))?;
        let class = request.classifier_class.clone().or_else(|| request.policy_class.clone());
        let (table, request) =
            request.into_parts_within(&self.limits.requests).map_err(|e| invalid(e.to_string()))?;

        let started = Instant::now();
        let route = self
            .snapshot()
            .route(&tenant, class.as_deref())
            .ok_or_else(|| ApiError::not_found("unknown-tenant", format!("no tenant `{tenant}`")))?;
        let metrics = match &route.target {
            Target::Guest(v) => v.metrics().clone(),
            Target::Builtin(_) => self.metrics.policy(&tenant, &route.policy),
        };
        let outcome = match &route.target {
            Target::Builtin(b) => {
                let scorer = b.native("{}").map_err(|e| ApiError::internal(e.to_string()))?;
                let mut selector = Selector::new(scorer);
                let selection = selector.select(&table, &request).map_err(select_error)?;
                Ok(Decision::new(&selector, selection, b.name, "native", None, None))
            }
            Target::Guest(v) => run_guest(v, route.on_fault, &table, &request),
        };
        let decision = outcome?;
        metrics.selected(started.elapsed(), decision.fallback.is_some());
        Ok(decision.to_json(&tenant, class.as_deref()))
    }
}

/// Runs a tenant's version on an instance of its own, behind the version's breaker; a
/// fault (or quarantine) goes to [`crate::fault`].
fn run_guest(
    v: &LoadedVersion,
    on_fault: OnFault,
    table: &WorkerTable,
    request: &SelectionRequest,
) -> Result<Decision, ApiError> {
    let contain = |fault: Fault| {
        v.metrics().fault(fault.kind);
        crate::fault::contain(fault, on_fault, table, request)
    };
    let attempt = match v.breaker().admit(v.policy(), v.version()) {
        Ok(attempt) => attempt,
        // Quarantined: the guest is not called, not even instantiated.
        Err(fault) => return contain(fault),
    };
    let mut selector = match v.checkout() {
        Ok(selector) => selector,
        Err(fault) => {
            attempt.faulted();
            return contain(fault);
        }
    };
    let result =
        selector.select(table, request).and_then(|s| selector.commit(table, request, s.chosen).map(|()| s));
    let outcome = match result {
        Ok(s) => {
            attempt.succeeded();
            Ok(Decision::new(&selector, s, v.policy(), "guest", Some(v.version().into()), None))
        }
        Err(SelectError::Fault { fault, .. }) => {
            attempt.faulted();
            contain(fault)
        }
        Err(e) => {
            // No eligible worker: a valid answer of the policy, not a fault.
            attempt.succeeded();
            Err(select_error(e))
        }
    };
    // After a fault the scorer has dropped its poisoned instance itself and starts a
    // fresh one on its next call, so the selector is reusable either way.
    v.checkin(selector);
    outcome
}
