//! Fault containment around a tenant's policy.
//!
//! A [`GuardedSelector`] runs the tenant's [`Selector`]; when it faults (fuel, deadline,
//! memory, stack, trap, invalid output, or its own error) the request is still answered:
//!
//! - fail-open (the default): the fallback (the native default policy) decides and the
//!   [`Decision`] carries the fault;
//! - fail-closed: the fault is returned as [`SelectError::Fault`].
//!
//! A policy that keeps faulting is quarantined by a circuit breaker: after
//! `quarantine_after` consecutive faults it is not called for `backoff_initial`
//! selections (served by the fallback, reported as `quarantined`), then called once as a
//! probe; a faulting probe doubles the wait (up to `backoff_max`), a success closes the
//! breaker. The backoff is counted in selections, not seconds: it is deterministic, and a
//! quiet tenant does not burn its quarantine while nobody is asking. The breaker is a type
//! of its own, [`Breaker`], so that a service pooling several instances of one policy
//! version shares one breaker across them (and its threads) with the same logic.
//!
//! A guest's own `policy-error` is a fault too (it produced no costs), reported with its
//! own kind. A fault in `on-selected` (the commit) is contained the same way: counted,
//! reported to the breaker, and the instance dropped; fail-open keeps the policy's pick
//! (it was valid) and says the commit faulted, fail-closed fails the selection. After any
//! fault the policy's instance is dropped, whatever the kind: the next call gets a fresh
//! one.
//!
//! This is the one implementation of containment: `switchyard select`, `switchyard
//! replay` and the service all run tenant policies through [`GuardedSelector`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::WorkerRank;

pub use crate::selection::{BreakerState, FailMode};
use crate::selection::{
    Fault, FaultKind, Scorer, SelectError, Selection, SelectionRequest, Selector, WorkerTable,
};

/// The circuit breaker's settings. Overridable from `[guard]` in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardConfig {
    /// Consecutive faults that quarantine a policy. 3: one fault can be a bad request,
    /// three in a row is a broken policy, and each fault costs a fresh instance.
    pub quarantine_after: u32,
    /// Selections served by the fallback before the first retry. 16: a retry costs an
    /// instantiation (BENCHMARKS.md, "Where the time goes") plus a likely fault; 1 in 16
    /// keeps that under 10%.
    pub backoff_initial: u64,
    /// Longest wait between retries, selections. 4,096: a broken policy is retried
    /// at least every few seconds at router rates, so a fixed upload recovers quickly.
    pub backoff_max: u64,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self { quarantine_after: 3, backoff_initial: 16, backoff_max: 4096 }
    }
}

/// The circuit breaker, apart from any policy. [`GuardedSelector`] owns one; a service
/// that pools several instances of one policy version shares one behind a mutex (no
/// method calls the policy, so the lock is held only for a few comparisons).
///
/// Each call of the policy is admitted with a [`Ticket`], and its outcome is handed back
/// with that ticket. Tickets matter only when calls overlap: an outcome from a call that
/// started before the breaker last opened or closed is stale and ignored (calls already
/// running when it opened must not each count as a failed probe and multiply the
/// backoff), and at most one probe is in flight at a time.
#[derive(Debug, Clone, Default)]
pub struct Breaker {
    config: GuardConfig,
    consecutive: u32,
    /// Times opened since the last success (0 = closed).
    trips: u32,
    /// Selections still skipped before the probe.
    remaining: u64,
    /// A probe has been admitted and has not reported yet.
    probing: bool,
    /// Bumped whenever the breaker opens or closes; a ticket of another epoch is stale.
    epoch: u64,
}

/// Permission to call the policy once, from [`Breaker::admit`]. Hand it back with the
/// outcome: [`Breaker::success`], [`Breaker::fault`] or [`Breaker::abandon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "report the call's outcome with its ticket"]
pub struct Ticket {
    epoch: u64,
    probe: bool,
}

impl Ticket {
    /// Whether this call is the probe of a quarantined policy.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// What [`Breaker::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Call the policy, then report the outcome with the ticket.
    Call(Ticket),
    /// Quarantined: do not call the policy.
    Skip {
        /// Selections still skipped before the probe (0: the probe is due, or already in
        /// flight on another thread).
        remaining: u64,
    },
}

impl Breaker {
    /// A closed breaker with `config`'s thresholds.
    pub fn new(config: GuardConfig) -> Self {
        Self { config, ..Self::default() }
    }

    /// Its thresholds.
    pub fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// Closed, open or half-open, for operators.
    pub fn state(&self) -> BreakerState {
        match (self.trips, self.remaining) {
            (0, _) => BreakerState::Closed { consecutive_faults: self.consecutive },
            (trips, 0) => BreakerState::HalfOpen { trips },
            (trips, remaining) => BreakerState::Open { remaining, trips },
        }
    }

    /// Whether to call the policy now. A skipped selection counts against the backoff.
    pub fn admit(&mut self) -> Admission {
        if self.trips == 0 {
            return Admission::Call(Ticket { epoch: self.epoch, probe: false });
        }
        if self.remaining > 0 {
            self.remaining -= 1;
            return Admission::Skip { remaining: self.remaining };
        }
        if self.probing {
            // One probe at a time: the others would most likely fault too.
            return Admission::Skip { remaining: 0 };
        }
        self.probing = true;
        Admission::Call(Ticket { epoch: self.epoch, probe: true })
    }

    /// The admitted call succeeded (or validly found no eligible worker): resets the
    /// fault count; a successful probe closes the breaker.
    pub fn success(&mut self, ticket: Ticket) {
        if ticket.epoch != self.epoch {
            return;
        }
        if self.trips > 0 {
            // Only the probe holds a current ticket while the breaker is open.
            self.epoch = self.epoch.wrapping_add(1);
        }
        self.consecutive = 0;
        self.trips = 0;
        self.remaining = 0;
        self.probing = false;
    }

    /// The admitted call faulted. Returns true if this opened (or re-opened) the breaker.
    pub fn fault(&mut self, ticket: Ticket) -> bool {
        if ticket.epoch != self.epoch {
            return false;
        }
        self.consecutive = self.consecutive.saturating_add(1);
        if ticket.probe || self.consecutive >= self.config.quarantine_after.max(1) {
            self.trips = self.trips.saturating_add(1);
            let shift = (self.trips - 1).min(63);
            self.remaining =
                self.config.backoff_initial.max(1).saturating_mul(1u64 << shift).min(self.config.backoff_max);
            self.probing = false;
            self.epoch = self.epoch.wrapping_add(1);
            return true;
        }
        false
    }

    /// The admitted call ended without an outcome (e.g. its thread gave up): a probe's
    /// turn passes to the next selection instead of blocking the breaker open forever.
    pub fn abandon(&mut self, ticket: Ticket) {
        if ticket.epoch == self.epoch && ticket.probe {
            self.probing = false;
        }
    }
}

/// A [`Breaker`] shared by every instance of one policy version and every thread that
/// selects with it. The lock is held only for the breaker's bookkeeping, never across a
/// guest call.
#[derive(Debug, Default)]
pub struct SharedBreaker {
    breaker: Mutex<Breaker>,
}

impl SharedBreaker {
    /// A closed breaker with `config`'s thresholds, to share.
    pub fn new(config: GuardConfig) -> Self {
        Self { breaker: Mutex::new(Breaker::new(config)) }
    }

    /// A poisoned lock is still consistent: no breaker method panics halfway.
    fn lock(&self) -> MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closed, open or half-open, as of now.
    pub fn state(&self) -> BreakerState {
        self.lock().state()
    }

    /// Lets one call of the policy through ([`Attempt`]), or says how many selections
    /// remain skipped before the probe.
    fn admit(self: &Arc<Self>) -> Result<Attempt, u64> {
        match self.lock().admit() {
            Admission::Call(ticket) => Ok(Attempt { breaker: Arc::clone(self), ticket: Some(ticket) }),
            Admission::Skip { remaining } => Err(remaining),
        }
    }
}

/// One call the breaker let through, until its outcome is reported. Dropped without a
/// report (the selecting thread unwound), it is abandoned: a probe passes its turn to the
/// next selection rather than holding the breaker open forever.
#[derive(Debug)]
struct Attempt {
    breaker: Arc<SharedBreaker>,
    ticket: Option<Ticket>,
}

impl Attempt {
    /// The policy answered (or validly found no eligible worker).
    fn succeeded(mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.lock().success(ticket);
        }
    }

    /// The policy faulted; true if that opened the breaker.
    fn faulted(mut self) -> bool {
        self.ticket.take().is_some_and(|ticket| self.breaker.lock().fault(ticket))
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.lock().abandon(ticket);
        }
    }
}

/// Counters of one guarded policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GuardCounters {
    /// Selections asked of this policy.
    pub selections: u64,
    /// Selections the policy itself answered.
    pub answered: u64,
    /// Selections the fallback answered (faults and quarantine).
    pub fallbacks: u64,
    /// Selections refused (fail-closed faults and quarantine).
    pub refused: u64,
    /// Faults by kind, commits' included.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Of those, faults of `on-selected` (a commit).
    pub commit_faults: u64,
    /// Selections skipped while quarantined.
    pub quarantined: u64,
    /// Times the breaker opened.
    pub breaker_trips: u64,
    /// Selections the host could not run the policy for (`overloaded`: no instance to be
    /// had); not faults of the policy.
    pub overloaded: u64,
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decider {
    /// The guarded (tenant's) policy.
    Policy,
    /// The fallback, after a fault or while the policy is quarantined.
    Fallback,
}

/// A guarded selection's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The pick, its cost and the candidates scored.
    pub selection: Selection,
    /// Whether the policy or the fallback picked.
    pub decided_by: Decider,
    /// Why the fallback decided: `None` when the policy did.
    pub fallback: Option<Fault>,
}

/// A tenant's policy with a fallback, a failure mode, a breaker and counters.
pub struct GuardedSelector {
    name: String,
    /// How faults name the policy.
    label: String,
    policy: Selector,
    fallback: Selector,
    fallback_name: String,
    mode: FailMode,
    breaker: Arc<SharedBreaker>,
    counters: GuardCounters,
    last: Decider,
    /// The policy's last selection, whose outcome is reported to the breaker once its
    /// commit has run (policies that want commits; others report at once).
    pending: Option<Attempt>,
}

impl GuardedSelector {
    /// Guards `policy` (named after its scorer) with `fallback`.
    pub fn new(
        policy: Box<dyn Scorer>,
        fallback: Box<dyn Scorer>,
        mode: FailMode,
        config: GuardConfig,
    ) -> Self {
        let name = policy.name().to_string();
        let fallback_name = fallback.name().to_string();
        Self {
            label: format!("`{name}`"),
            name,
            policy: Selector::new(policy),
            fallback: Selector::new(fallback),
            fallback_name,
            mode,
            breaker: Arc::new(SharedBreaker::new(config)),
            counters: GuardCounters::default(),
            last: Decider::Policy,
            pending: None,
        }
    }

    /// Shares `breaker` (e.g. with the other pooled instances of one policy version)
    /// instead of a breaker of its own.
    pub fn with_breaker(mut self, breaker: Arc<SharedBreaker>) -> Self {
        self.breaker = breaker;
        self
    }

    /// How faults name the policy (default: its scorer's name in backticks), e.g. with a
    /// version.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Changes what a fault does from the next selection on (a pooled instance serves
    /// classes with either mode).
    pub fn set_fail_mode(&mut self, mode: FailMode) {
        self.mode = mode;
    }

    /// Selects a worker. `Err` only for no eligible worker, a fail-closed fault, or a
    /// fallback that cannot answer either.
    pub fn select(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
    ) -> Result<Decision, SelectError> {
        // A selection that was never committed: its outcome stands as it was.
        if let Some(attempt) = self.pending.take() {
            attempt.succeeded();
        }
        self.counters.selections += 1;
        let attempt = match self.breaker.admit() {
            Ok(attempt) => attempt,
            Err(remaining) => {
                self.counters.quarantined += 1;
                let when = match remaining {
                    0 => "a probe is running".to_string(),
                    n => format!("probed again after {n} more selections"),
                };
                let fault = Fault::new(
                    FaultKind::Quarantined,
                    format!("{} is quarantined after repeated faults; {when}", self.label),
                );
                return self.contain(table, request, fault);
            }
        };
        match self.policy.select(table, request) {
            Ok(selection) => {
                if self.policy.wants_commits() {
                    self.pending = Some(attempt);
                } else {
                    attempt.succeeded();
                }
                self.counters.answered += 1;
                self.last = Decider::Policy;
                Ok(Decision { selection, decided_by: Decider::Policy, fallback: None })
            }
            Err(SelectError::NoEligibleWorker) => {
                // A valid answer (e.g. the policy filtered everyone out), not a fault.
                attempt.succeeded();
                self.last = Decider::Policy;
                Err(SelectError::NoEligibleWorker)
            }
            Err(SelectError::Fault { fault, .. }) if !fault.kind.is_policy_fault() => {
                // The host's condition: the breaker hears nothing (the attempt is
                // abandoned), the policy is not blamed, the selection is contained.
                drop(attempt);
                self.counters.overloaded += 1;
                self.contain(table, request, fault)
            }
            Err(SelectError::Fault { fault, .. }) => {
                self.fault(attempt, &fault);
                self.contain(table, request, fault)
            }
        }
    }

    /// Counts a fault of the policy, reports it to the breaker and drops the instance.
    fn fault(&mut self, attempt: Attempt, fault: &Fault) {
        *self.counters.faults.entry(fault.kind).or_default() += 1;
        if attempt.faulted() {
            self.counters.breaker_trips += 1;
        }
        // Whatever the kind (its own error and invalid output included): the state that
        // produced it goes.
        self.policy.reset();
    }

    /// Fail-open or fail-closed on `fault`.
    fn contain(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        fault: Fault,
    ) -> Result<Decision, SelectError> {
        if self.mode == FailMode::Closed {
            self.counters.refused += 1;
            return Err(SelectError::Fault { scorer: self.name.clone(), fault });
        }
        self.counters.fallbacks += 1;
        self.last = Decider::Fallback;
        let selection = self.fallback.select(table, request)?;
        Ok(Decision { selection, decided_by: Decider::Fallback, fallback: Some(fault) })
    }

    /// Commits the last decision to whichever policy made it. A fault of the policy's
    /// commit is contained like a selection's: fail-open returns it (`Ok(Some(fault))`:
    /// the pick stands, the policy's state was dropped), fail-closed as the error.
    pub fn commit(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        chosen: WorkerRank,
    ) -> Result<Option<Fault>, SelectError> {
        if self.last == Decider::Fallback {
            return self.fallback.commit(table, request, chosen).map(|()| None);
        }
        let attempt = self.pending.take();
        match self.policy.commit(table, request, chosen) {
            Ok(()) => {
                if let Some(attempt) = attempt {
                    attempt.succeeded();
                }
                Ok(None)
            }
            Err(SelectError::Fault { fault, .. }) => {
                if fault.kind.is_policy_fault() {
                    self.counters.commit_faults += 1;
                    match attempt {
                        Some(attempt) => self.fault(attempt, &fault),
                        None => {
                            *self.counters.faults.entry(fault.kind).or_default() += 1;
                            self.policy.reset();
                        }
                    }
                } else {
                    // No instance could be had for the commit: the policy's state is gone
                    // already, and that is not the policy's fault.
                    drop(attempt);
                    self.counters.overloaded += 1;
                }
                // Contained as a selection's fault is (`contain`), counted the same way.
                match self.mode {
                    FailMode::Open => Ok(Some(fault)),
                    FailMode::Closed => {
                        self.counters.refused += 1;
                        Err(SelectError::Fault { scorer: self.name.clone(), fault })
                    }
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The guarded policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fallback's name.
    pub fn fallback_name(&self) -> &str {
        &self.fallback_name
    }

    /// What this guarded selector has counted so far (its own, not its breaker's sharers').
    pub fn counters(&self) -> &GuardCounters {
        &self.counters
    }

    /// The (possibly shared) breaker's state now.
    pub fn breaker(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The tenant's selector, e.g. to read a guest's counters.
    pub fn policy(&self) -> &Selector {
        &self.policy
    }

    fn last_selector(&self) -> &Selector {
        match self.last {
            Decider::Policy => &self.policy,
            Decider::Fallback => &self.fallback,
        }
    }

    /// Lets go of what the policy and the fallback hold of the last selection
    /// ([`Selector::release`]): call it before keeping the selector idle. Afterwards
    /// [`GuardedSelector::last_candidates`] and [`GuardedSelector::last_costs`] are empty.
    pub fn release(&mut self) {
        self.policy.release();
        self.fallback.release();
    }

    /// The costs of the last decision, one per row of [`GuardedSelector::last_candidates`].
    pub fn last_costs(&self) -> &[f64] {
        self.last_selector().last_costs()
    }

    /// The candidates of the last decision.
    pub fn last_candidates(&self) -> impl Iterator<Item = WorkerRank> + '_ {
        self.last_selector().last_candidates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(b: &mut Breaker) -> Ticket {
        match b.admit() {
            Admission::Call(t) => t,
            skip => panic!("expected a call, got {skip:?}"),
        }
    }

    #[test]
    fn the_breaker_opens_backs_off_exponentially_and_closes_on_success() {
        let config = GuardConfig { quarantine_after: 2, backoff_initial: 3, backoff_max: 10 };
        let mut b = Breaker::new(config);
        let t = call(&mut b);
        assert!(!b.fault(t), "one fault does not open it");
        let t = call(&mut b);
        assert!(b.fault(t), "the second in a row does");
        assert_eq!(b.state(), BreakerState::Open { remaining: 3, trips: 1 });
        assert!(b.state().is_quarantined());
        let skips: Vec<Admission> = (0..3).map(|_| b.admit()).collect();
        assert_eq!(skips, [2, 1, 0].map(|remaining| Admission::Skip { remaining }));
        assert_eq!(b.state(), BreakerState::HalfOpen { trips: 1 });
        let probe = call(&mut b);
        assert!(probe.is_probe());
        assert!(b.fault(probe), "a failed probe re-opens it");
        assert_eq!(b.state(), BreakerState::Open { remaining: 6, trips: 2 });
        for _ in 0..6 {
            assert!(matches!(b.admit(), Admission::Skip { .. }));
        }
        let probe = call(&mut b);
        assert!(b.fault(probe));
        assert_eq!(b.state(), BreakerState::Open { remaining: 10, trips: 3 }, "capped at backoff_max");
        (0..10).for_each(|_| assert!(matches!(b.admit(), Admission::Skip { .. })));
        assert_eq!(b.state(), BreakerState::HalfOpen { trips: 3 });
        let probe = call(&mut b);
        b.success(probe);
        assert_eq!(b.state(), BreakerState::Closed { consecutive_faults: 0 });
        assert!(!b.state().is_quarantined());
        assert!(!call(&mut b).is_probe());
    }

    #[test]
    fn overlapping_calls_one_probe_at_a_time_and_stale_outcomes_ignored() {
        let config = GuardConfig { quarantine_after: 2, backoff_initial: 2, backoff_max: 100 };
        let mut b = Breaker::new(config);
        // Five calls in flight at once (pooled instances on several threads).
        let tickets: Vec<Ticket> = (0..5).map(|_| call(&mut b)).collect();
        let opened: Vec<bool> = tickets[..4].iter().map(|t| b.fault(*t)).collect();
        assert_eq!(opened, [false, true, false, false], "the late faults are stale");
        assert_eq!(b.state(), BreakerState::Open { remaining: 2, trips: 1 }, "backoff not multiplied");
        // A success of a call that started before the breaker opened does not close it.
        b.success(tickets[4]);
        assert_eq!(b.state(), BreakerState::Open { remaining: 2, trips: 1 });
        for _ in 0..2 {
            assert!(matches!(b.admit(), Admission::Skip { .. }));
        }
        // Half-open: one probe; the others are skipped while it runs.
        let first = call(&mut b);
        assert!(first.is_probe());
        assert_eq!(b.admit(), Admission::Skip { remaining: 0 });
        assert_eq!(b.admit(), Admission::Skip { remaining: 0 });
        // A probe that never reports passes its turn on.
        b.abandon(first);
        let probe = call(&mut b);
        assert!(probe.is_probe());
        b.success(probe);
        assert_eq!(b.state(), BreakerState::Closed { consecutive_faults: 0 });
        // The abandoned probe's outcome, arriving late, changes nothing.
        assert!(!b.fault(first));
        assert_eq!(b.state(), BreakerState::Closed { consecutive_faults: 0 });
    }
}
