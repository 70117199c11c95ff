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
//! quiet tenant does not burn its quarantine while nobody is asking.
//!
//! A guest's own `policy-error` is a fault too (it produced no costs); the decision
//! reports it as `invalid-output` with a message starting `policy error:`, while the
//! counters keep it apart as `policy-error`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::WorkerRank;

use crate::selection::{
    Fault, FaultKind, Scorer, SelectError, Selection, SelectionRequest, Selector, WorkerTable,
};

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

/// The circuit breaker's settings. Overridable from `[guard]` in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardConfig {
    /// Consecutive faults that quarantine a policy. 3: one fault can be a bad request,
    /// three in a row is a broken policy, and each fault costs a fresh instance.
    pub quarantine_after: u32,
    /// Selections served by the fallback before the first retry. 16: a retry costs an
    /// instantiation (~10 µs) plus a likely fault; 1 in 16 keeps that under 10%.
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

/// The breaker's state, for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum BreakerState {
    /// The policy is called.
    Closed { consecutive_faults: u32 },
    /// Quarantined: the next `remaining` selections skip the policy; then one probe.
    Open { remaining: u64, trips: u32 },
    /// The next selection is a probe.
    HalfOpen { trips: u32 },
}

#[derive(Debug, Clone, Default)]
struct Breaker {
    consecutive: u32,
    /// Times opened since the last success (0 = closed).
    trips: u32,
    remaining: u64,
}

impl Breaker {
    fn state(&self) -> BreakerState {
        match (self.trips, self.remaining) {
            (0, _) => BreakerState::Closed { consecutive_faults: self.consecutive },
            (trips, 0) => BreakerState::HalfOpen { trips },
            (trips, remaining) => BreakerState::Open { remaining, trips },
        }
    }

    /// Whether to call the policy now; consumes one quarantined selection if not.
    fn admit(&mut self) -> bool {
        if self.trips > 0 && self.remaining > 0 {
            self.remaining -= 1;
            return false;
        }
        true
    }

    fn success(&mut self) {
        *self = Breaker::default();
    }

    /// Records a fault; returns true if it opened (or re-opened) the breaker.
    fn fault(&mut self, config: &GuardConfig) -> bool {
        self.consecutive = self.consecutive.saturating_add(1);
        let probe_failed = self.trips > 0;
        if probe_failed || self.consecutive >= config.quarantine_after.max(1) {
            self.trips = self.trips.saturating_add(1);
            let shift = (self.trips - 1).min(63);
            self.remaining =
                config.backoff_initial.max(1).saturating_mul(1u64 << shift).min(config.backoff_max);
            return true;
        }
        false
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
    /// Faults by kind (`policy-error` apart from `invalid-output`).
    pub faults: BTreeMap<FaultKind, u64>,
    /// Selections skipped while quarantined.
    pub quarantined: u64,
    /// Times the breaker opened.
    pub breaker_trips: u64,
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decider {
    Policy,
    Fallback,
}

/// A guarded selection's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub selection: Selection,
    pub decided_by: Decider,
    /// Why the fallback decided: `None` when the policy did. Kinds as in the result JSON
    /// (`policy-error` reported as `invalid-output`).
    pub fallback: Option<Fault>,
}

/// A tenant's policy with a fallback, a failure mode, a breaker and counters.
pub struct GuardedSelector {
    name: String,
    policy: Selector,
    fallback: Selector,
    fallback_name: String,
    mode: FailMode,
    config: GuardConfig,
    breaker: Breaker,
    counters: GuardCounters,
    last: Decider,
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
            name,
            policy: Selector::new(policy),
            fallback: Selector::new(fallback),
            fallback_name,
            mode,
            config,
            breaker: Breaker::default(),
            counters: GuardCounters::default(),
            last: Decider::Policy,
        }
    }

    /// Guards `policy` with the native default policy (default parameters).
    pub fn with_default_fallback(policy: Box<dyn Scorer>, mode: FailMode, config: GuardConfig) -> Self {
        let fallback = crate::builtin::find("default")
            .expect("the default builtin exists")
            .native("{}")
            .expect("the default policy's defaults are valid");
        Self::new(policy, fallback, mode, config)
    }

    /// Selects a worker. `Err` only for no eligible worker, a fail-closed fault, or a
    /// fallback that cannot answer either.
    pub fn select(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
    ) -> Result<Decision, SelectError> {
        self.counters.selections += 1;
        if !self.breaker.admit() {
            self.counters.quarantined += 1;
            let fault = Fault::new(
                FaultKind::Quarantined,
                format!(
                    "`{}` is quarantined after repeated faults; retried in {} selections",
                    self.name, self.breaker.remaining
                ),
            );
            return self.contain(table, request, fault);
        }
        match self.policy.select(table, request) {
            Ok(selection) => {
                self.breaker.success();
                self.counters.answered += 1;
                self.last = Decider::Policy;
                Ok(Decision { selection, decided_by: Decider::Policy, fallback: None })
            }
            Err(SelectError::NoEligibleWorker) => {
                // A valid answer (e.g. the policy filtered everyone out), not a fault.
                self.breaker.success();
                self.last = Decider::Policy;
                Err(SelectError::NoEligibleWorker)
            }
            Err(SelectError::Fault { fault, .. }) => {
                *self.counters.faults.entry(fault.kind).or_default() += 1;
                if self.breaker.fault(&self.config) {
                    self.counters.breaker_trips += 1;
                }
                self.contain(table, request, reported(fault))
            }
        }
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

    /// Commits the last decision to whichever policy made it.
    pub fn commit(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        chosen: WorkerRank,
    ) -> Result<(), SelectError> {
        match self.last {
            Decider::Policy => self.policy.commit(table, request, chosen),
            Decider::Fallback => self.fallback.commit(table, request, chosen),
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

    pub fn counters(&self) -> &GuardCounters {
        &self.counters
    }

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

    /// The costs of the last decision, one per row of [`GuardedSelector::last_candidates`].
    pub fn last_costs(&self) -> &[f64] {
        self.last_selector().last_costs()
    }

    /// The candidates of the last decision.
    pub fn last_candidates(&self) -> impl Iterator<Item = WorkerRank> + '_ {
        self.last_selector().last_candidates()
    }
}

/// The fault as the result reports it: a guest's own error produced no costs, so it is
/// an invalid output.
fn reported(fault: Fault) -> Fault {
    match fault.kind {
        FaultKind::PolicyError => {
            Fault::new(FaultKind::InvalidOutput, format!("policy error: {}", fault.message))
        }
        _ => fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_backs_off_exponentially_and_closes_on_success() {
        let config = GuardConfig { quarantine_after: 2, backoff_initial: 3, backoff_max: 10 };
        let mut b = Breaker::default();
        assert!(b.admit());
        assert!(!b.fault(&config), "one fault does not open it");
        assert!(b.fault(&config), "the second in a row does");
        assert_eq!(b.state(), BreakerState::Open { remaining: 3, trips: 1 });
        let skipped = (0..10).take_while(|_| !b.admit()).count();
        assert_eq!(skipped, 3);
        assert!(b.fault(&config), "a failed probe re-opens it");
        assert_eq!(b.state(), BreakerState::Open { remaining: 6, trips: 2 });
        for _ in 0..6 {
            assert!(!b.admit());
        }
        assert!(b.fault(&config));
        assert_eq!(b.state(), BreakerState::Open { remaining: 10, trips: 3 }, "capped at backoff_max");
        (0..10).for_each(|_| assert!(!b.admit()));
        assert_eq!(b.state(), BreakerState::HalfOpen { trips: 3 });
        assert!(b.admit());
        b.success();
        assert_eq!(b.state(), BreakerState::Closed { consecutive_faults: 0 });
    }
}
