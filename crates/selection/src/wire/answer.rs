//! The answer to a selection: what `switchyard select` prints and the service's
//! `POST /v1/select` answers (the service adds the tenant and class).

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::WorkerRank;

use crate::error::Fault;
use crate::selector::Selection;

/// One decided selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionAnswer {
    /// The tenant the service selected for; absent from the CLI's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The policy class the service routed by, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_class: Option<String>,
    /// The chosen worker.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// The chosen candidate's cost.
    pub cost: f64,
    /// The policy that decided: the tenant's, or the fallback after a fault.
    pub policy: String,
    /// `native` or `guest`.
    pub build: String,
    /// The version that decided (an uploaded policy's), else `null`.
    pub version: Option<String>,
    /// The fault the fallback answered for, if the policy faulted (fail-open).
    pub fallback: Option<Fault>,
    /// A fault of the commit (`on-selected`) after the pick; the pick stands.
    pub commit_fault: Option<Fault>,
    /// Candidates scored.
    pub candidates: usize,
    /// Every candidate's cost, in row order.
    pub costs: Vec<CandidateCost>,
}

/// One candidate and its cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CandidateCost {
    /// The worker.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// What the policy (or the weighted sum of scorers) made of it.
    pub cost: f64,
}

/// Who decided a [`SelectionAnswer`], and with what build.
#[derive(Debug, Clone, PartialEq)]
pub struct DecidedBy {
    /// The policy's name.
    pub policy: String,
    /// `native` or `guest`.
    pub build: &'static str,
    /// An uploaded policy's version.
    pub version: Option<String>,
}

impl SelectionAnswer {
    /// The answer for `selection`, decided by `by`, with every candidate's cost.
    pub fn new(
        selection: Selection,
        by: DecidedBy,
        costs: impl Iterator<Item = (WorkerRank, f64)>,
        fallback: Option<Fault>,
        commit_fault: Option<Fault>,
    ) -> Self {
        Self {
            tenant: None,
            policy_class: None,
            worker_id: selection.chosen.worker_id,
            dp_rank: selection.chosen.dp_rank,
            cost: selection.cost,
            policy: by.policy,
            build: by.build.to_string(),
            version: by.version,
            fallback,
            commit_fault,
            candidates: selection.candidates,
            costs: costs
                .map(|(w, cost)| CandidateCost { worker_id: w.worker_id, dp_rank: w.dp_rank, cost })
                .collect(),
        }
    }

    /// The same answer, for `tenant` and its `class` (the service's).
    pub fn for_tenant(mut self, tenant: &str, class: Option<&str>) -> Self {
        self.tenant = Some(tenant.to_string());
        self.policy_class = class.map(str::to_string);
        self
    }
}
