//! A shadow pass: a second policy asked, on every selection the driving policy makes, to
//! select on exactly what the driver saw, then told the driver's pick, as the service's
//! shadow runs are. Its picks are compared with the driver's by
//! [`switchyard::selection::compare`], the one implementation the service shares.
//!
//! The driver's selections come either from the simulated cluster ([`crate::replay_shadowed`])
//! or from a captured trace's recorded requests ([`replay_recorded`]).

use serde_json::{Value, json};
use switchyard::guard::{Decider, GuardedSelector};
use switchyard::selection::compare::{Agreement, Tally, compare};
use switchyard::selection::{SelectError, SelectionRequest, WorkerTable};
use switchyard_guest_sdk::WorkerRank;

use super::config::ReplayError;
use super::report::Faults;
use super::trace::Trace;

/// The shadowing policy and what it has been compared on so far.
pub struct Shadow {
    selector: GuardedSelector,
    tally: Tally,
    faults: Faults,
    no_eligible: u64,
    recorded: Option<Recorded>,
}

/// How often the driver's picks were the recorded answers' (a captured trace's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Recorded selections run again.
    pub compared: u64,
    /// Of them, those where the driver picked the recorded answer's candidate.
    pub matched: u64,
}

/// What a shadow pass found.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowReport {
    /// How often the shadow picked the driver's pick, and the driver's regret of its
    /// picks. Only the shadow's own picks are compared: a selection its fallback answered
    /// is counted in `faults` instead.
    pub agreement: Agreement,
    /// The shadow's contained faults, by kind; they never change the driver's run.
    pub faults: Faults,
    /// Selections where the shadow found no eligible worker (its filter removed them all).
    pub no_eligible: u64,
    /// With a captured trace's recorded requests: how often the driver's picks were the
    /// recorded answers.
    pub recorded: Option<Recorded>,
}

impl Shadow {
    /// `selector` shadows. Guard it fail-open: its faults are counted, never raised.
    pub fn new(selector: GuardedSelector) -> Self {
        Self {
            selector,
            tally: Tally::new(usize::MAX),
            faults: Faults::default(),
            no_eligible: 0,
            recorded: None,
        }
    }

    /// The shadow selects on `table` and `request` as `driver` just did, is told the
    /// driver's pick `chosen`, and the two picks are compared by the driver's costs.
    pub fn observe(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        driver: &GuardedSelector,
        chosen: WorkerRank,
    ) {
        let decision = match self.selector.select(table, request) {
            Ok(decision) => decision,
            Err(SelectError::NoEligibleWorker) => {
                self.no_eligible += 1;
                return;
            }
            // Fail-open, this is the fallback's own fault (it found no worker either).
            Err(SelectError::Fault { fault, .. }) => {
                self.faults.fallback(fault.kind);
                return;
            }
        };
        // The shadow learns what really happened.
        match self.selector.commit(table, request, chosen) {
            Ok(Some(fault)) | Err(SelectError::Fault { fault, .. }) => self.faults.commit(fault.kind),
            Ok(None) | Err(SelectError::NoEligibleWorker) => {}
        }
        if let Some(fault) = &decision.fallback {
            self.faults.fallback(fault.kind);
        }
        if decision.decided_by == Decider::Policy {
            let costs = driver.last_candidates().zip(driver.last_costs().iter().copied());
            self.tally.add(compare(costs, chosen, decision.selection.chosen));
        }
    }

    /// What the pass found.
    pub fn finish(self) -> ShadowReport {
        ShadowReport {
            agreement: self.tally.summary(),
            faults: self.faults,
            no_eligible: self.no_eligible,
            recorded: self.recorded,
        }
    }
}

/// The shadow pass over a captured trace's recorded requests, in order, without the
/// simulated cluster: for each row the table and request are built from its `request`,
/// `driver` selects (and commits its pick), then `shadow` does (told the driver's pick).
/// The driver's picks are also checked against the recorded answers. `progress` is called
/// with the rows done so far.
pub fn replay_recorded(
    trace: &Trace,
    driver: &mut GuardedSelector,
    shadow: &mut Shadow,
    progress: &mut dyn FnMut(usize),
) -> Result<(), ReplayError> {
    let mut recorded = Recorded { compared: 0, matched: 0 };
    for (row, r) in trace.rows().iter().enumerate() {
        let line = trace.line(row);
        let fail = |message: String| ReplayError::Recorded { line, message };
        let captured =
            r.captured.as_ref().ok_or_else(|| fail("the row carries no recorded request".into()))?;
        let (table, request) =
            captured.request.clone().into_parts().map_err(|e| fail(format!("request: {e}")))?;
        let decision = driver.select(&table, &request).map_err(|e| fail(e.to_string()))?;
        let chosen = decision.selection.chosen;
        // A commit fault of the driver's stands contained (fail-open) as in the service.
        driver.commit(&table, &request, chosen).map_err(|e| fail(e.to_string()))?;
        shadow.observe(&table, &request, driver, chosen);
        recorded.compared += 1;
        let answer = &captured.answer;
        recorded.matched +=
            u64::from(chosen == WorkerRank { worker_id: answer.worker_id, dp_rank: answer.dp_rank });
        progress(row + 1);
    }
    shadow.recorded = Some(recorded);
    Ok(())
}

impl ShadowReport {
    /// The pass as JSON: `agreement` (an [`Agreement`]), `faults` (as a report's),
    /// `no_eligible`, and `recorded_answers` (`{compared, matched}`, or null).
    pub fn to_json(&self) -> Value {
        json!({
            "agreement": self.agreement,
            "faults": self.faults.to_json(),
            "no_eligible": self.no_eligible,
            "recorded_answers": self.recorded.map(|r| json!({"compared": r.compared, "matched": r.matched})),
        })
    }
}

#[cfg(test)]
mod tests {
    use switchyard::selection::wire::{RequestJson, SAMPLE_REQUEST};
    use switchyard::selection::{Call, Fault, FaultKind, Scorer};
    use switchyard::{FailMode, GuardConfig};
    use switchyard_guest_sdk::{InputGroups, PolicyInfo};

    use super::*;
    use crate::{PolicyLabel, ReplayConfig, replay, replay_shadowed};

    fn builtin(name: &str) -> GuardedSelector {
        let scorer = switchyard_builtins::find(name).unwrap().native("{}").unwrap();
        switchyard_builtins::guarded(scorer, FailMode::Open, GuardConfig::default())
    }

    fn label() -> PolicyLabel {
        PolicyLabel { name: "default".into(), parameters: serde_json::json!({}), component_sha256: None }
    }

    /// `rows` requests sharing a few prefixes, 10 ms apart.
    fn trace(rows: u64) -> Trace {
        let text: String = (0..rows)
            .map(|i| {
                let prefix = i % 5;
                format!(
                    "{{\"timestamp\": {}, \"input_length\": 1500, \"output_length\": 50, \"hash_ids\": [{prefix}, {}, {}]}}\n",
                    i * 10,
                    100 + prefix,
                    1000 + i
                )
            })
            .collect();
        Trace::parse(text.as_bytes(), Some(512), None).unwrap()
    }

    fn shadowed(driver: &str, shadow: &str) -> (String, ShadowReport) {
        let config = ReplayConfig { workers: 4, ..ReplayConfig::default() };
        let mut shadow = Shadow::new(builtin(shadow));
        let report =
            replay_shadowed(&trace(200), &mut builtin(driver), &mut shadow, &label(), &config, &mut |_| {})
                .unwrap();
        (report.canonical().unwrap(), shadow.finish())
    }

    #[test]
    fn a_shadow_never_changes_the_drivers_run_and_a_policy_agrees_with_itself() {
        let config = ReplayConfig { workers: 4, ..ReplayConfig::default() };
        let alone = replay(&trace(200), &mut builtin("default"), &label(), &config, &mut |_| {}).unwrap();
        let (report, same) = shadowed("default", "default");
        assert_eq!(report, alone.canonical().unwrap());
        let a = &same.agreement;
        assert_eq!((a.compared, a.agreed, a.agreement, a.unscored), (200, 200, Some(1.0), 0));
        assert_eq!(a.regret.map(|r| (r.p50, r.p99, r.max)), Some((0.0, 0.0, 0.0)));
        assert_eq!((same.faults, same.no_eligible, same.recorded), (Faults::default(), 0, None));

        let (report, other) = shadowed("default", "chwbl");
        assert_eq!(report, alone.canonical().unwrap(), "whoever shadows");
        let a = &other.agreement;
        assert_eq!(a.compared, 200);
        assert!(a.agreed < 200, "{a:?}");
        // The driver's cheapest pick (temperature 0): the other's costs it at least as much.
        assert!(a.regret.unwrap().max > 0.0 && a.regret.unwrap().p50 >= 0.0, "{a:?}");
    }

    /// Faults on every selection and commit.
    struct Faulty;

    impl Scorer for Faulty {
        fn name(&self) -> &str {
            "faulty"
        }
        fn info(&self) -> PolicyInfo {
            PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: true }
        }
        fn score(&mut self, _: &Call<'_>, _: &mut Vec<f64>) -> Result<(), Fault> {
            Err(Fault::new(FaultKind::Trap, "no"))
        }
        fn filter(&mut self, _: &Call<'_>, _: &mut Vec<bool>) -> Result<(), Fault> {
            Ok(())
        }
        fn on_selected(&mut self, _: &Call<'_>, _: WorkerRank) -> Result<(), Fault> {
            Ok(())
        }
    }

    #[test]
    fn a_faulting_shadow_is_counted_by_kind_and_not_compared() {
        let config = ReplayConfig { workers: 4, ..ReplayConfig::default() };
        let faulty = switchyard_builtins::guarded(Box::new(Faulty), FailMode::Open, GuardConfig::default());
        let mut shadow = Shadow::new(faulty);
        let report =
            replay_shadowed(&trace(50), &mut builtin("default"), &mut shadow, &label(), &config, &mut |_| {})
                .unwrap();
        let alone = replay(&trace(50), &mut builtin("default"), &label(), &config, &mut |_| {}).unwrap();
        assert_eq!(report.canonical().unwrap(), alone.canonical().unwrap());
        let found = shadow.finish();
        assert_eq!(found.agreement.compared, 0);
        // Trapped, then quarantined by its breaker: every selection answered by the fallback.
        assert_eq!(found.faults.fallback_count(), 50, "{:?}", found.faults);
        assert!(found.faults.fallbacks.contains_key(&FaultKind::Trap), "{:?}", found.faults);
    }

    /// A captured trace of `rows` variations of the sample request, answered by `answer`.
    fn captured(rows: u64, answer: &mut GuardedSelector) -> Trace {
        let text: String = (0..rows)
            .map(|i| {
                let mut request = RequestJson::parse(SAMPLE_REQUEST).unwrap();
                request.seed = i;
                request.temperature = Some(if i % 2 == 0 { 0.0 } else { 1.0 });
                request.inputs[switchyard_guest_sdk::Column::ActivePrefillTokens][(i % 9) as usize] += 3000;
                let (table, parts) = request.clone().into_parts().unwrap();
                let chosen = answer.select(&table, &parts).unwrap().selection.chosen;
                let hashes = request.prefix_hashes.clone().unwrap();
                serde_json::to_string(&serde_json::json!({
                    "timestamp": i, "input_length": request.prompt_tokens,
                    "output_length": request.expected_output_tokens.unwrap(), "hash_ids": hashes,
                    "request": request,
                    "answer": {"worker_id": chosen.worker_id, "dp_rank": chosen.dp_rank,
                               "policy": "default", "version": null, "fallback": false},
                }))
                .unwrap()
                    + "\n"
            })
            .collect();
        Trace::parse(text.as_bytes(), None, None).unwrap()
    }

    #[test]
    fn recorded_requests_are_selected_again_and_checked_against_their_answers() {
        let trace = captured(40, &mut builtin("default"));
        let mut shadow = Shadow::new(builtin("default"));
        replay_recorded(&trace, &mut builtin("default"), &mut shadow, &mut |_| {}).unwrap();
        let found = shadow.finish();
        assert_eq!(found.recorded, Some(Recorded { compared: 40, matched: 40 }));
        assert_eq!(found.agreement.agreement, Some(1.0));

        // Another live policy than the one replayed: its answers are not all matched.
        let trace = captured(40, &mut builtin("chwbl"));
        let mut shadow = Shadow::new(builtin("chwbl"));
        replay_recorded(&trace, &mut builtin("default"), &mut shadow, &mut |_| {}).unwrap();
        let found = shadow.finish();
        let recorded = found.recorded.unwrap();
        assert!(recorded.matched < 40, "{recorded:?}");
        // What the shadow agrees on is what the recorded answers say: chwbl answered them.
        let a = &found.agreement;
        assert_eq!((a.compared, a.agreed), (40, recorded.matched), "{a:?}");
    }
}
