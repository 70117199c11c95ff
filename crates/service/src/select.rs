//! `POST /v1/select`: the request JSON of `switchyard select --input` plus `"tenant"`;
//! the class is `classifier_class`, else `policy_class`; the answer says whether the
//! tenant's assignment of it decided (`class`), and counts those it did not. Blocking
//! (guest calls): run it off the async workers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use switchyard::selection::wire::{ClassRoute, DecidedBy, ErrorKind, SelectionAnswer, TenantAnswer};

use axum::http::StatusCode;
use switchyard::selection::wire::RequestJson;
use switchyard::{
    Decider, FailMode, Fault, FaultKind, GuardedSelector, SelectError, SelectionRequest, Selector,
    WorkerTable,
};

use crate::auth::{Principal, require_selector};
use crate::error::ApiError;
use crate::share::{TenantShare, thread_cpu};
use crate::state::{Generation, LoadedVersion, Route, Service, Target};
use crate::store::Shadow;
use crate::trials::{CanaryKey, ClassTrials, ShadowRun, captured_line};
use switchyard::selection::compare::compare;
use switchyard::selection::wire::CandidateCost;
use switchyard::selection::wire::Receipt;
use switchyard::selection::{CallReport, HeldTable};
use switchyard_guest_sdk::WorkerRank;

/// A selection error: no eligible worker (422), or a fault of a fail-closed policy: 503
/// while quarantined, overloaded or unavailable (the policy was not called; asking again
/// later can succeed), 502 for a fault of this call (the tenant's policy, our upstream in
/// effect, failed, not the caller).
pub fn select_error(e: SelectError) -> ApiError {
    match e {
        SelectError::NoEligibleWorker => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::NoEligibleWorker,
            "no worker is eligible for this request",
        ),
        SelectError::Fault { fault, .. } => {
            let status = match fault.kind {
                FaultKind::Quarantined | FaultKind::Overloaded | FaultKind::Unavailable => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::BAD_GATEWAY,
            };
            ApiError::new(status, fault.kind.into(), fault.message)
        }
    }
}

/// A selection decoded, validated and routed, ready to run: on the connection's own
/// thread when [`Prepared::inline`] says it is cheap, else on a blocking thread.
pub struct Prepared {
    tenant: String,
    class: Option<String>,
    route: Arc<Route>,
    assigned: bool,
    in_flight: InFlight,
    /// The request's own table, or the held one it named.
    table: Table,
    request: SelectionRequest,
    costs: Costs,
    /// The request's own facts (no workers, no rows), when its class captures.
    facts: Option<RequestJson>,
    /// What keeps the request on one version while its class's canary runs.
    session: Option<String>,
}

enum Table {
    Owned(WorkerTable),
    Held(Arc<HeldTable>),
}

impl Table {
    fn workers(&self) -> &WorkerTable {
        match self {
            Table::Owned(table) => table,
            Table::Held(held) => held.table(),
        }
    }
}

impl Service {
    /// One selection for `who`, from the raw body. `share` is the caller's own in-flight
    /// share when the caller is a tenant (taken from its token before the body was read,
    /// see `Service::enter`); for a router or the admin, the share of the tenant the body
    /// names is taken here, once that tenant is known to exist.
    pub fn select(
        &self,
        who: &Principal,
        share: Option<InFlight>,
        body: &[u8],
        encoding: Encoding,
    ) -> Result<TenantAnswer, ApiError> {
        self.prepare(who, share, body, encoding)?.run(self)
    }

    /// [`Service::select`] up to the policy's call: decoded, checked, routed.
    pub fn prepare(
        &self,
        who: &Principal,
        share: Option<InFlight>,
        body: &[u8],
        encoding: Encoding,
    ) -> Result<Prepared, ApiError> {
        let invalid = |m: String| ApiError::bad_request(ErrorKind::InvalidInput, m);
        // Straight into the request's own types: no JSON tree (many times the body's size)
        // is ever built from a client's bytes.
        let request: RequestJson = match encoding {
            Encoding::Json => {
                serde_json::from_slice(body).map_err(|e| invalid(format!("request JSON: {e}")))?
            }
            Encoding::Protobuf => {
                switchyard_proto::decode_request(body).map_err(|e| invalid(e.to_string()))?
            }
        };
        let tenant =
            request.tenant.clone().ok_or_else(|| invalid("`tenant` (a string) is required".into()))?;
        require_selector(who, &tenant)?;
        let class = request.classifier_class.clone().or_else(|| request.policy_class.clone());
        // The route alone is held while the selection runs, not the whole snapshot.
        let (route, assigned) =
            self.snapshot().route(&tenant, class.as_deref()).map(|(r, a)| (Arc::clone(r), a)).ok_or_else(
                || ApiError::not_found(ErrorKind::UnknownTenant, format!("no tenant `{tenant}`")),
            )?;
        // The tenant's share of the service: its own selections in flight. A tenant's
        // share came with its token (`require_selector` made sure the body names it).
        let in_flight = match share {
            Some(share) => share,
            None => self.enter(&tenant)?,
        };
        let mut request = request;
        let costs = Costs { all: request.costs, receipt: request.receipt.map(|r| r.top) };
        let session = request.session.take();
        let captures = route.trials.as_ref().is_some_and(|t| t.capture.is_some());
        let facts = captures.then(|| facts_of(&mut request));
        let limits = self.limits.requests();
        // A held table: this version's state, shared, and the request's own rows over it.
        let (table, request) = match request.table.clone() {
            Some(name) => {
                let held = self.tables.get(&tenant, &name)?;
                if let Some(asked) = request.table_version
                    && asked != held.version()
                {
                    return Err(crate::tables::wrong_version(
                        &name,
                        asked,
                        held.version(),
                        "the request names",
                    ));
                }
                let request = request.into_held_request(&held, limits).map_err(|e| invalid(e.to_string()))?;
                (Table::Held(held), request)
            }
            None => {
                let (table, request) =
                    request.into_parts_within(limits).map_err(|e| invalid(e.to_string()))?;
                (Table::Owned(table), request)
            }
        };
        Ok(Prepared { tenant, class, route, assigned, in_flight, table, request, costs, facts, session })
    }
}

/// A copy of `request`'s facts: everything but its workers and rows (the policy's view
/// of those is captured from the table and request it ran on).
fn facts_of(request: &mut RequestJson) -> RequestJson {
    let workers = std::mem::take(&mut request.workers);
    let inputs = std::mem::take(&mut request.inputs);
    let mut facts = request.clone();
    (request.workers, request.inputs) = (workers, inputs);
    (facts.tenant, facts.table, facts.table_version, facts.costs, facts.receipt) =
        (None, None, None, false, None);
    facts
}

impl Prepared {
    /// Whether the selection is cheap enough to run on the connection's own thread,
    /// sparing two thread hand-offs: a builtin's native build (linear in the candidates,
    /// which the limits bound), or a loaded guest version of a tenant whose last
    /// 64 guest selections each took at most 1 ms of CPU and none slower or
    /// faulted within 10 s (`share::INLINE_*`). So a hostile guest holds a
    /// connection thread at most once per demotion (then it runs where the OS shares the
    /// cores out), and never before its tenant has shown fast ones.
    pub fn inline(&self) -> bool {
        match &self.route.target {
            Target::Builtin(_) => true,
            Target::Guest(v) => v.is_loaded() && self.in_flight.0.trusted(),
        }
    }

    /// Runs the policy and answers; then, for a class with trials, keeps the selection
    /// (capture) and queues its shadow run.
    pub fn run(self, service: &Service) -> Result<TenantAnswer, ApiError> {
        let Prepared { tenant, class, route, assigned, in_flight, table, request, costs, facts, session } =
            self;
        let table_version = match &table {
            Table::Held(held) => Some(held.version()),
            Table::Owned(_) => None,
        };
        let started = Instant::now();
        let trials = route.trials.as_ref().map(|t| (t, t.state(&tenant, &service.trials)));
        // Sampled, and its place in the queue taken, before the live run: the comparison
        // needs every live cost, and a sample with no room costs the live run nothing.
        let shadow = trials.as_ref().and_then(|(t, state)| {
            let (setting, route) = t.shadow.as_ref().filter(|(s, _)| state.sample(s.rate))?;
            state.shadow_sampled(setting);
            match service.shadows.reserve(&tenant) {
                Ok(place) => Some((setting, route, state, place)),
                Err(why) => {
                    state.shadow_dropped(why);
                    None
                }
            }
        });
        let live_costs = Costs { all: costs.all || shadow.is_some(), ..costs };
        let share = &in_flight.0;
        let canary = trials.as_ref().and_then(|(t, state)| {
            let (setting, canary) = t.canary.as_ref()?;
            let key = match &session {
                Some(s) => CanaryKey::Session(s),
                None => CanaryKey::Seed(request.facts().seed),
            };
            state.to_canary(setting, key).then_some((setting, canary, state))
        });
        let (decided, outcome) = match canary {
            Some((setting, canary, state)) => {
                let outcome = decide(&tenant, canary, table.workers(), &request, live_costs, share);
                let faulted = match &outcome {
                    Ok(answer) => answer.fallback.is_some() || answer.commit_fault.is_some(),
                    Err(e) => e.status() != StatusCode::UNPROCESSABLE_ENTITY,
                };
                let breaker_open =
                    matches!(&canary.target, Target::Guest(v) if v.breaker().state().is_quarantined());
                if let Some(reason) = state.canary_ran(setting, faulted, breaker_open) {
                    service.roll_back_canary(&tenant, &route, setting, reason);
                }
                // A canary's fault never fails a selection: the stable version answers it.
                match faulted {
                    true => (&route, decide(&tenant, &route, table.workers(), &request, live_costs, share)),
                    false => (canary, outcome),
                }
            }
            None => (&route, decide(&tenant, &route, table.workers(), &request, live_costs, share)),
        };
        let mut answer = outcome?;
        let took = started.elapsed();
        decided.metrics(&tenant, &service.metrics).selected(took, answer.fallback.is_some());
        if class.is_some() && !assigned {
            service.metrics.unassigned_class(&tenant);
        }
        let chosen = WorkerRank { worker_id: answer.worker_id, dp_rank: answer.dp_rank };
        if let Some((t, state)) = &trials
            && let (Some(keep), Some(facts)) = (t.capture, facts)
        {
            let answered = serde_json::json!({
                "worker_id": answer.worker_id,
                "dp_rank": answer.dp_rank,
                "policy": answer.policy,
                "version": answer.version,
                "fallback": answer.fallback.is_some(),
            });
            let max = service.limits.max_capture_bytes_per_tenant;
            state.capture(keep, max, |ms| {
                captured_line(ms, facts, table.workers(), request.inputs(), answered)
            });
        }
        if let Some((setting, shadow, state, place)) = shadow {
            let live_costs = match costs.all {
                true => answer.costs.clone(),
                false => std::mem::take(&mut answer.costs),
            };
            let live =
                CandidateCost { worker_id: chosen.worker_id, dp_rank: chosen.dp_rank, cost: answer.cost };
            let job = ShadowJob {
                setting: setting.clone(),
                route: Arc::clone(shadow),
                state: Arc::clone(state),
                table,
                request,
                live,
                live_costs,
                took,
            };
            if let Err(why) = service.shadows.push(place, move || job.run()) {
                state.shadow_dropped(why);
            }
        }
        let class_route = ClassRoute::new(class.as_deref(), assigned);
        Ok(TenantAnswer { tenant, policy_class: class, class: class_route, table_version, answer })
    }
}

/// `route`'s policy decides one selection: a builtin natively, a version as a guest (or,
/// not loaded, as its fail mode says).
fn decide(
    tenant: &str,
    route: &Route,
    table: &WorkerTable,
    request: &SelectionRequest,
    costs: Costs,
    share: &TenantShare,
) -> Result<SelectionAnswer, ApiError> {
    match &route.target {
        Target::Builtin(b) => native(b, table, request, costs),
        Target::Guest(v) => {
            let v: &LoadedVersion = v;
            match v.checkout(route.on_fault) {
                Ok((guarded, generation)) => {
                    run_guest(tenant, v, (guarded, generation), table, request, costs, share)
                }
                Err(reason) => {
                    let fault = Fault::new(
                        FaultKind::Unavailable,
                        format!("`{}` did not load on this replica: {reason}", route.policy),
                    );
                    unavailable(fault, route.on_fault, table, request, costs)
                }
            }
        }
    }
}

/// A sampled selection's shadow run, queued after the live answer.
struct ShadowJob {
    setting: Shadow,
    route: Arc<Route>,
    state: Arc<ClassTrials>,
    table: Table,
    request: SelectionRequest,
    /// The live pick, at the live policy's cost, and every live candidate's cost.
    live: CandidateCost,
    live_costs: Vec<CandidateCost>,
    /// The live selection's time.
    took: Duration,
}

impl ShadowJob {
    /// Runs the shadow on the live selection's table and request, tells it the live pick
    /// (its commit: it learns what was really routed, as a live policy does), and tallies
    /// the comparison. A fault is counted by kind, against the shadow's version too; the
    /// live class never sees it.
    fn run(self) {
        let ShadowJob { setting, route, state, table, request, live, live_costs, took } = self;
        let table = table.workers();
        let all = Costs { all: true, receipt: None };
        let live_rank = WorkerRank { worker_id: live.worker_id, dp_rank: live.dp_rank };
        let started = Instant::now();
        let ran: Result<(CandidateCost, Vec<CandidateCost>), String> = match &route.target {
            Target::Builtin(b) => native(b, table, &request, all)
                .map(|a| {
                    (CandidateCost { worker_id: a.worker_id, dp_rank: a.dp_rank, cost: a.cost }, a.costs)
                })
                .map_err(|e| e.kind().to_string()),
            Target::Guest(v) => match v.checkout(FailMode::Closed) {
                Ok((mut guarded, generation)) => {
                    let ran = shadow_guest(&mut guarded, table, &request, live_rank);
                    match &ran {
                        Err(Some(fault)) if fault.kind.is_policy_fault() => v.metrics().fault(fault.kind),
                        Err(Some(_)) => v.metrics().overloaded(),
                        _ => {}
                    }
                    v.checkin(guarded, generation);
                    ran.map_err(|f| {
                        f.map_or_else(|| "no-eligible-worker".to_string(), |f| f.kind.to_string())
                    })
                }
                Err(_) => return state.shadow_dropped("unavailable"),
            },
        };
        let took_shadow = started.elapsed();
        match ran {
            Ok((pick, shadow_costs)) => {
                let rank = WorkerRank { worker_id: pick.worker_id, dp_rank: pick.dp_rank };
                let compared = compare(
                    live_costs
                        .iter()
                        .map(|c| (WorkerRank { worker_id: c.worker_id, dp_rank: c.dp_rank }, c.cost)),
                    live_rank,
                    rank,
                );
                let run = ShadowRun {
                    seed: request.facts().seed,
                    compared,
                    live_pick: live,
                    shadow_pick: pick,
                    live_costs,
                    shadow_costs,
                    live: took,
                    took: took_shadow,
                };
                state.shadow_ran(&setting, run);
            }
            Err(kind) => state.shadow_fault(&setting, kind),
        }
    }
}

/// A shadow guest's selection (fail-closed: a fault is its own, never the fallback's
/// pick) and its commit of the live pick. `Err(None)`: its filter left no candidate.
fn shadow_guest(
    guarded: &mut GuardedSelector,
    table: &WorkerTable,
    request: &SelectionRequest,
    live: WorkerRank,
) -> Result<(CandidateCost, Vec<CandidateCost>), Option<Fault>> {
    let decision = match guarded.select(table, request) {
        Ok(decision) => decision,
        Err(SelectError::Fault { fault, .. }) => return Err(Some(fault)),
        Err(SelectError::NoEligibleWorker) => return Err(None),
    };
    let costs = guarded
        .last_candidates()
        .zip(guarded.last_costs().iter().copied())
        .map(|(w, cost)| CandidateCost { worker_id: w.worker_id, dp_rank: w.dp_rank, cost })
        .collect();
    let chosen = decision.selection.chosen;
    let pick =
        CandidateCost { worker_id: chosen.worker_id, dp_rank: chosen.dp_rank, cost: decision.selection.cost };
    match guarded.commit(table, request, live) {
        Ok(None) | Err(SelectError::NoEligibleWorker) => Ok((pick, costs)),
        Ok(Some(fault)) | Err(SelectError::Fault { fault, .. }) => Err(Some(fault)),
    }
}

/// Runs a tenant's version on `guarded`, an instance of its own checked out of `v` (the
/// runtime's containment: the version's shared breaker, fail-open or closed as the class
/// says, the instance dropped after any fault). Every fault, a commit's included, is
/// counted for the version.
fn run_guest(
    tenant: &str,
    v: &LoadedVersion,
    (mut guarded, generation): (Box<GuardedSelector>, Generation),
    table: &WorkerTable,
    request: &SelectionRequest,
    costs: Costs,
    share: &TenantShare,
) -> Result<SelectionAnswer, ApiError> {
    let trips = guarded.counters().breaker_trips;
    // The guest's own time: its calls, not the instance's making nor the answer's.
    let called = thread_cpu();
    let outcome = select_and_commit(&mut guarded, table, request, costs.receipt.is_some());
    // No eligible worker is the request's doing, not the guest's.
    let faulted = match &outcome {
        Ok((decision, commit_fault, _)) => decision.fallback.is_some() || commit_fault.is_some(),
        Err(SelectError::Fault { .. }) => true,
        Err(SelectError::NoEligibleWorker) => false,
    };
    share.ran_guest(thread_cpu().saturating_sub(called), faulted);
    if guarded.counters().breaker_trips > trips {
        tracing::warn!(
            tenant = %tenant,
            policy = %v.policy(),
            version = %v.version(),
            breaker = ?guarded.breaker(),
            "breaker opened: version quarantined"
        );
    }
    let faults = match &outcome {
        Ok((decision, commit_fault, _)) => [decision.fallback.as_ref(), commit_fault.as_ref()],
        Err(SelectError::Fault { fault, .. }) => [Some(fault), None],
        Err(SelectError::NoEligibleWorker) => [None, None],
    };
    for fault in faults.into_iter().flatten() {
        if fault.kind.is_policy_fault() {
            v.metrics().fault(fault.kind);
        } else {
            v.metrics().overloaded();
        }
    }
    let answer = outcome.map(|(decision, commit_fault, call)| {
        let scored = || guarded.last_candidates().zip(guarded.last_costs().iter().copied());
        let receipt = costs.receipt(table, request, scored(), call);
        let candidates = costs.listed(scored());
        let by = match decision.decided_by {
            Decider::Policy => {
                DecidedBy { policy: v.policy().into(), build: "guest", version: Some(v.version().into()) }
            }
            Decider::Fallback => {
                DecidedBy { policy: guarded.fallback_name().into(), build: "native", version: None }
            }
        };
        let mut answer =
            SelectionAnswer::new(decision.selection, by, candidates, decision.fallback, commit_fault);
        answer.receipt = receipt;
        answer
    });
    v.checkin(guarded, generation);
    answer.map_err(select_error)
}

/// A class whose version did not load: fail-open, the native default answers with the
/// reason in `fallback`; fail-closed, 503 `unavailable`. No policy ran, so nothing is
/// counted against one.
fn unavailable(
    fault: Fault,
    on_fault: FailMode,
    table: &WorkerTable,
    request: &SelectionRequest,
    costs: Costs,
) -> Result<SelectionAnswer, ApiError> {
    if on_fault == FailMode::Closed {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, fault.kind.into(), fault.message));
    }
    let default = switchyard_builtins::find("default").expect("the default builtin exists");
    let mut answer = native(default, table, request, costs)?;
    answer.fallback = Some(fault);
    Ok(answer)
}

/// A builtin's native build decides (default parameters).
fn native(
    builtin: &switchyard_builtins::Builtin,
    table: &WorkerTable,
    request: &SelectionRequest,
    costs: Costs,
) -> Result<SelectionAnswer, ApiError> {
    let scorer = builtin.native("{}").map_err(|e| ApiError::internal(e.to_string()))?;
    let mut selector = Selector::new(scorer);
    let selection = selector.select(table, request).map_err(select_error)?;
    let scored = || selector.last_candidates().zip(selector.last_costs().iter().copied());
    let by = DecidedBy { policy: builtin.name.into(), build: "native", version: None };
    let mut answer = SelectionAnswer::new(selection, by, costs.listed(scored()), None, None);
    answer.receipt = costs.receipt(table, request, scored(), None);
    Ok(answer)
}

/// What the answer tells beyond the pick: every candidate's cost (the request's `costs`),
/// a receipt of the cheapest `receipt` (its `receipt.top`).
#[derive(Clone, Copy)]
struct Costs {
    all: bool,
    receipt: Option<usize>,
}

impl Costs {
    /// `costs`, when asked for; else none.
    fn listed<T>(self, costs: impl Iterator<Item = T>) -> impl Iterator<Item = T> {
        costs.take(if self.all { usize::MAX } else { 0 })
    }

    /// The receipt, when asked for: built only then, so a selection without one pays
    /// nothing for it.
    fn receipt(
        self,
        table: &WorkerTable,
        request: &SelectionRequest,
        scored: impl Iterator<Item = (WorkerRank, f64)>,
        call: Option<CallReport>,
    ) -> Option<Receipt> {
        self.receipt.map(|top| Receipt::new(table, request, scored, top, call))
    }
}

/// How a select body is encoded (its `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json` (or no `Content-Type`).
    Json,
    /// `application/x-protobuf` (`proto/switchyard/v1/select.proto`), into the same types.
    Protobuf,
}

impl Encoding {
    /// The media types spoken, for a refusal's message.
    pub const NAMES: &str = "application/json, application/x-protobuf (or application/protobuf)";

    /// The encoding of a media type (`type/subtype`, no parameters), if spoken.
    pub fn of(media: &str) -> Option<Self> {
        match media.to_ascii_lowercase().as_str() {
            "application/json" => Some(Encoding::Json),
            "application/x-protobuf" | "application/protobuf" => Some(Encoding::Protobuf),
            _ => None,
        }
    }
}

/// One guarded selection and its commit; with `report`, what the policy's scoring spent
/// and read (taken before the commit's call replaces it; none when the fallback decided).
fn select_and_commit(
    guarded: &mut GuardedSelector,
    table: &WorkerTable,
    request: &SelectionRequest,
    report: bool,
) -> Result<(switchyard::Decision, Option<Fault>, Option<CallReport>), SelectError> {
    let decision = guarded.select(table, request)?;
    let call = (report && decision.decided_by == Decider::Policy)
        .then(|| guarded.policy().scorers().find_map(|s| s.last_call()))
        .flatten();
    let commit_fault = guarded.commit(table, request, decision.selection.chosen)?;
    Ok((decision, commit_fault, call))
}

/// One selection in flight for a tenant; the count drops when it ends.
pub struct InFlight(Arc<TenantShare>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Service {
    /// Admits one more selection of `tenant`, or refuses with 429 `tenant-busy` when its
    /// `max_in_flight_per_tenant` are all running: one tenant's burst (or a slow policy,
    /// or bodies that never finish arriving) takes at most its share of the selection
    /// slots. Only for a tenant that exists (one a token names, or one a route was found
    /// for), so the counters are never kept for names a caller made up.
    pub(crate) fn enter(&self, tenant: &str) -> Result<InFlight, ApiError> {
        let counter = {
            let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(map.entry(tenant.to_string()).or_default())
        };
        let max = self.limits.max_in_flight_per_tenant;
        match counter
            .in_flight
            .try_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
        {
            Ok(_) => Ok(InFlight(counter)),
            Err(n) => Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::TenantBusy,
                format!("tenant `{tenant}` has {n} selections in flight (max_in_flight_per_tenant = {max})"),
            )),
        }
    }
}
