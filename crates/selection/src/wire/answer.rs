//! The answer to a selection: what `switchyard select` prints, and within the service's
//! `POST /v1/select` answer ([`TenantAnswer`]: the tenant, and how its class routed).

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::WorkerRank;

use crate::error::Fault;
use crate::scorer::CallReport;
use crate::selector::Selection;
use crate::{SelectionRequest, WorkerTable};

/// One decided selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionAnswer {
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
    /// Every candidate's cost, in row order: `switchyard select`'s always; the service's
    /// when the request asks (`"costs": true`), else absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<CandidateCost>,
    /// Why this worker, when the request asked (`"receipt": {"top": k}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
}

/// A route receipt: how the pick was come to, from what the picker used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The candidates of lowest cost, lowest first (ties in row order): at most the `top`
    /// asked for. The pick is among them unless the picker sampled (`temperature` > 0).
    pub top: Vec<CandidateCost>,
    /// The table's (worker, rank) slots.
    pub slots: usize,
    /// Slots the host ruled out because the request pinned another.
    pub not_pinned: usize,
    /// Slots the host ruled out because their worker is not in `allowed_workers`.
    pub not_allowed: usize,
    /// Candidates the policy's own filter removed.
    pub filtered_by_policy: usize,
    /// Candidates scored: `slots` less all of the above.
    pub candidates: usize,
    /// Fuel the policy's scoring used, import charges included (a guest's; absent for a
    /// native build, which has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// The contract's imports the policy's scoring called (a guest's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
}

impl Receipt {
    /// The receipt of a selection on `table` for `request` that scored `costs` (the
    /// candidates in row order), keeping the `top` cheapest; `call`, what the scoring
    /// spent and read.
    pub fn new(
        table: &WorkerTable,
        request: &SelectionRequest,
        costs: impl Iterator<Item = (WorkerRank, f64)>,
        top: usize,
        call: Option<CallReport>,
    ) -> Self {
        // (cost, row): equal costs keep row order, as the picker breaks ties. The `top`
        // are selected first, in linear time, and only they are sorted.
        let mut scored: Vec<(f64, usize, WorkerRank)> =
            costs.enumerate().map(|(row, (w, cost))| (cost, row, w)).collect();
        let candidates = scored.len();
        let order = |a: &(f64, usize, WorkerRank), b: &(f64, usize, WorkerRank)| {
            a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
        };
        if top < scored.len() {
            scored.select_nth_unstable_by(top, order);
            scored.truncate(top);
        }
        scored.sort_unstable_by(order);
        let scored = scored
            .into_iter()
            .map(|(cost, _, w)| CandidateCost { worker_id: w.worker_id, dp_rank: w.dp_rank, cost })
            .collect();
        let (not_pinned, not_allowed) = request.ruled_out(table);
        let slots = table.slots().len();
        let eligible = slots - not_pinned - not_allowed;
        let (fuel, imports) = call.map_or((None, Vec::new()), |c| (Some(c.fuel), c.imports));
        Self {
            top: scored,
            slots,
            not_pinned,
            not_allowed,
            filtered_by_policy: eligible.saturating_sub(candidates),
            candidates,
            fuel,
            imports,
        }
    }
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
            receipt: None,
        }
    }
}

/// The service's answer to `POST /v1/select`: the selection, with the tenant and how the
/// request's class was routed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantAnswer {
    /// The tenant the service selected for.
    pub tenant: String,
    /// The class the request named (its `classifier_class`, else its `policy_class`);
    /// `null` when it named none.
    pub policy_class: Option<String>,
    /// Whether that class routed by an assignment of the tenant's, and if not, why.
    pub class: ClassRoute,
    /// The version of the held table selected from, when the request named a `table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
    /// The selection.
    #[serde(flatten)]
    pub answer: SelectionAnswer,
}

/// How a selection's class was routed. A class routes by the tenant's assignment of it;
/// any other (none named, or a name the tenant never assigned: a misspelling, say) runs
/// the tenant's default route, the builtin `default`, fail-open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassRoute {
    /// The class the request named, as `policy_class` says.
    pub requested: Option<String>,
    /// Whether the tenant's assignment of that class decided the route.
    pub assigned: bool,
    /// Why the default route answered instead; `null` when `assigned`.
    pub reason: Option<UnroutedClass>,
}

/// Why a selection's class did not route by an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnroutedClass {
    /// The request named no class.
    NoClass,
    /// The tenant has assigned no class of that name.
    UnassignedClass,
}

impl ClassRoute {
    /// The route of `requested`: `assigned` when the tenant's assignment of it decided.
    pub fn new(requested: Option<&str>, assigned: bool) -> Self {
        let reason = match (requested, assigned) {
            (_, true) => None,
            (None, false) => Some(UnroutedClass::NoClass),
            (Some(_), false) => Some(UnroutedClass::UnassignedClass),
        };
        Self { requested: requested.map(str::to_string), assigned, reason }
    }
}
