//! Scorer mode: the guest as one of Dynamo's scorers, its costs added to those of the
//! host's own scorers in a `WorkerSelectionPolicy`, whose picker then decides.

use dynamo_kv_router::plugins::worker_selection::{
    WorkerCandidates, WorkerInputs as DynamoInputs, WorkerScorer, WorkerSelectionContext,
    WorkerSelectionPolicyError,
};
use switchyard::GuardedSelector;
use switchyard_guest_sdk::Pool;

use std::sync::Arc;

use dynamo_kv_router::WorkerType;

use crate::rows::{Converter, Framing, pool_of, refused};
use crate::version::LoadedPolicy;

/// A [`WorkerScorer`] that writes a Switchyard policy's costs (a guarded guest's, or in
/// fail-open mode after a fault its fallback's) for every candidate Dynamo hands it.
///
/// Made by [`ScorerFactory::scorer`](crate::ScorerFactory::scorer), which only exists for
/// policies that neither filter (a scorer cannot drop a row) nor want commits (a scorer
/// never learns the pick).
pub struct SwitchyardScorer {
    guard: GuardedSelector,
    framing: Framing,
    inputs: DynamoInputs,
    converter: Converter,
}

impl SwitchyardScorer {
    pub(crate) fn new(guard: GuardedSelector, inputs: DynamoInputs, pool: Pool) -> Self {
        // Temperature 0: the guard's pick is discarded, only the costs are read.
        Self {
            guard,
            framing: Framing { pool, temperature: 0.0, pin: false },
            inputs,
            converter: Converter::default(),
        }
    }

    /// The guarded selector (its counters, its breaker).
    pub fn guard(&self) -> &GuardedSelector {
        &self.guard
    }
}

impl WorkerScorer for SwitchyardScorer {
    fn required_worker_inputs(&self) -> DynamoInputs {
        self.inputs
    }

    fn score(
        &mut self,
        context: &WorkerSelectionContext<'_>,
        candidates: WorkerCandidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), WorkerSelectionPolicyError> {
        if candidates.is_empty() {
            return Ok(());
        }
        let request = self.converter.build(&candidates, context, &self.framing)?;
        let table = self.converter.table();
        // The guard scores every row (the policy does not filter), contained as a
        // selection is; its costs are those of whichever policy decided.
        self.guard.select(table, &request).map_err(|e| refused(&self.guard, e))?;
        let scored = self.guard.last_costs();
        if scored.len() != costs.len() {
            return Err(WorkerSelectionPolicyError::failed(format!(
                "switchyard scored {} of {} candidates",
                scored.len(),
                costs.len()
            )));
        }
        // No filter and no pin: the candidates scored are the table's slots, in slot
        // order (checked, one comparison each), so Dynamo's row `r` has the cost of slot
        // `slot_of(r)`, with no search per row.
        if !self.guard.last_candidates().eq(table.slots().iter().copied()) {
            return Err(WorkerSelectionPolicyError::failed(
                "switchyard scored other candidates than it was given",
            ));
        }
        for (row, cost) in costs.iter_mut().enumerate() {
            *cost = scored[self.converter.slot_of(row)];
        }
        Ok(())
    }
}

/// Makes a [`SwitchyardScorer`] per routing partition and pool, for a policy checked to
/// suit scorer mode ([`LivePolicy::scorers`](crate::LivePolicy::scorers)).
#[derive(Clone)]
pub struct ScorerFactory {
    policy: Arc<LoadedPolicy>,
}

impl ScorerFactory {
    pub(crate) fn new(policy: Arc<LoadedPolicy>) -> Self {
        Self { policy }
    }

    /// A scorer for `worker_type`'s pool: a sibling instance of the guest, guarded as a
    /// picker's is.
    pub fn scorer(&self, worker_type: WorkerType) -> SwitchyardScorer {
        SwitchyardScorer::new(self.policy.guard(), self.policy.inputs(), pool_of(worker_type))
    }
}
