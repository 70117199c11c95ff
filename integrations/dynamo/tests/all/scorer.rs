//! Scorer mode: a guest's costs composed with a Dynamo host's own native scorer in one
//! `WorkerSelectionPolicy`, and the policies scorer mode refuses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dynamo_kv_router::plugins::worker_selection::{
    WorkerCandidates, WorkerInputView, WorkerInputs, WorkerPicker, WorkerScorer, WorkerSelectionContext,
};
use dynamo_kv_router::protocols::WorkerWithDpRank;
use dynamo_kv_router::{KvRouterConfig, WorkerSelectionPolicy, WorkerSelectionPolicyError};
use switchyard::PolicyEngine;
use switchyard_dynamo::{LoadedPolicy, ScorerFactory, SwitchyardConfig};

use crate::common::{Fixture, Rng, component_file, policy, random_fixture, resolve};
use switchyard_test_util::hostile;

/// A host's own native scorer, as a Dynamo image would compile in: requests in flight.
struct RequestsScorer;

impl WorkerScorer for RequestsScorer {
    fn required_worker_inputs(&self) -> WorkerInputs {
        WorkerInputs::LOAD
    }
    fn score(
        &mut self,
        _context: &WorkerSelectionContext<'_>,
        candidates: WorkerCandidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), WorkerSelectionPolicyError> {
        for (cost, c) in costs.iter_mut().zip(candidates.iter()) {
            *cost = c.load().map_or(0.0, |l| l.active_requests() as f64) * 0.5;
        }
        Ok(())
    }
}

/// Records every candidate's total cost, then picks row 0.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<BTreeMap<(u64, u32), f64>>>);

impl WorkerPicker for Recorder {
    fn pick(
        &mut self,
        _context: &WorkerSelectionContext<'_>,
        input: WorkerInputView<'_>,
    ) -> Result<usize, WorkerSelectionPolicyError> {
        let mut costs = self.0.lock().unwrap();
        costs.clear();
        for c in input.candidates() {
            costs.insert((c.worker().worker_id, c.worker().dp_rank), c.cost());
        }
        Ok(0)
    }
}

fn loaded(name: &str, bytes: &[u8], on_fault: &str) -> Arc<LoadedPolicy> {
    let file = component_file(name, bytes);
    let config = SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"file": file}, "on_fault": on_fault, "temperature": 0
    }))
    .expect("valid parameters");
    let engine = PolicyEngine::new(config.limits().clone()).expect("engine");
    LoadedPolicy::from_bytes(&config, &engine, bytes, name.into()).expect("loads")
}

/// A policy of `scorers` and a recorder, and the recorder's costs after selecting.
fn costs_of(fixture: &Fixture, scorers: Vec<Box<dyn WorkerScorer>>) -> BTreeMap<(u64, u32), f64> {
    let recorder = Recorder::default();
    let label = fixture.worker_type.as_str();
    let policy =
        WorkerSelectionPolicy::new(KvRouterConfig::default(), label, scorers, Box::new(recorder.clone()));
    fixture.select(&policy).expect("selects");
    recorder.0.lock().unwrap().clone()
}

#[test]
fn a_guest_scorer_adds_its_costs_to_a_native_scorers() {
    let scorers: ScorerFactory =
        loaded("scorer-default", switchyard_test_util::DEFAULT_POLICY, "closed").scorers().expect("suits");
    let picker_file = component_file("scorer-picker", switchyard_test_util::DEFAULT_POLICY);
    let picker = resolve(
        "scorer-picker",
        &format!(
            "        policy: {{file: {}}}\n        on_fault: closed\n        temperature: 0",
            picker_file.display()
        ),
    )
    .expect("loads");
    let mut rng = Rng::new(0x5c0_4e5);
    let mut unique_minima = 0;
    for i in 0..300 {
        let fixture = random_fixture(&mut rng);
        let native = costs_of(&fixture, vec![Box::new(RequestsScorer)]);
        let guest = costs_of(&fixture, vec![Box::new(scorers.scorer(fixture.worker_type))]);
        let both =
            costs_of(&fixture, vec![Box::new(RequestsScorer), Box::new(scorers.scorer(fixture.worker_type))]);
        assert_eq!(both.len(), native.len(), "fixture {i}: every candidate scored");
        assert_eq!(guest.keys().collect::<Vec<_>>(), both.keys().collect::<Vec<_>>(), "fixture {i}");
        for (key, total) in &both {
            // Dynamo adds each scorer's contribution in declaration order, from 0.
            let expected = (0.0 + native[key]) + guest[key];
            assert_eq!(
                total.to_bits(),
                expected.to_bits(),
                "fixture {i}, worker {key:?}: {total} ≠ {expected}"
            );
            assert!(guest[key].is_finite() && guest[key] >= 0.0, "fixture {i}: a cost Dynamo accepts");
        }
        // The guest's costs are the picker's: where its minimum is unique, picker mode
        // (verified against Dynamo's own selector in `contract.rs`) picks it.
        let min = guest.values().copied().fold(f64::INFINITY, f64::min);
        let argmin: Vec<_> = guest.iter().filter(|(_, c)| **c == min).map(|(k, _)| *k).collect();
        if let [only] = argmin[..] {
            unique_minima += 1;
            let picked = fixture.select(&policy(&picker, fixture.worker_type)).expect("picks");
            assert_eq!(WorkerWithDpRank::new(only.0, only.1), picked, "fixture {i}");
        }
    }
    assert!(unique_minima > 100, "the check above ran on {unique_minima} fixtures only");
}

#[test]
fn scorer_mode_refuses_a_policy_that_filters_or_wants_commits() {
    let filters = switchyard_builtins::find("request-limit").expect("builtin").component;
    let e = loaded("scorer-filters", filters, "open").scorers().err().expect("refused");
    assert_eq!(e.field(), "policy");
    assert!(e.message().contains("filters candidates"), "{e}");
    let commits = switchyard_builtins::find("sglang-cache-aware").expect("builtin").component;
    let e = loaded("scorer-commits", commits, "open").scorers().err().expect("refused");
    assert!(e.message().contains("wants commits"), "{e}");
}

#[test]
fn a_hostile_guest_scorer_is_contained_in_both_modes() {
    let mut rng = Rng::new(99);
    // Fail-open: the native default's costs stand in, and the host's scorer still adds.
    let open = loaded("scorer-iloop-open", hostile::ILOOP, "open").scorers().expect("suits");
    let reference =
        loaded("scorer-reference", switchyard_test_util::DEFAULT_POLICY, "closed").scorers().expect("suits");
    for i in 0..6 {
        let fixture = random_fixture(&mut rng);
        let ours = costs_of(&fixture, vec![Box::new(open.scorer(fixture.worker_type))]);
        let fallback = costs_of(&fixture, vec![Box::new(reference.scorer(fixture.worker_type))]);
        assert_eq!(ours, fallback, "fixture {i}: the fallback's costs");
    }
    // Fail-closed: Dynamo's policy error, naming the fault.
    let closed = loaded("scorer-panic-closed", hostile::PANIC, "closed").scorers().expect("suits");
    let fixture = random_fixture(&mut rng);
    let policy = WorkerSelectionPolicy::new(
        KvRouterConfig::default(),
        fixture.worker_type.as_str(),
        vec![Box::new(closed.scorer(fixture.worker_type))],
        Box::new(Recorder::default()),
    );
    let e = fixture.select(&policy).expect_err("fail-closed refuses");
    assert!(e.contains("switchyard policy") && e.contains("trap"), "{e}");
}
