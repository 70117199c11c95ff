//! Picker mode: Dynamo's eligible rows → the guarded guest's filter, score and pick →
//! the pick, committed and mapped back to Dynamo's row.

use dynamo_kv_router::plugins::worker_selection::{
    WorkerInputView, WorkerInputs as DynamoInputs, WorkerPicker, WorkerSelectionContext,
    WorkerSelectionPolicyError,
};
use std::sync::Arc;

use switchyard::GuardedSelector;
use switchyard_guest_sdk::Pool;

use crate::capacity::PartitionCapacities;
use crate::rows::{Converter, Framing, refused};
use crate::version::LivePolicy;

/// A [`WorkerPicker`] that runs a Switchyard policy (a guarded guest) over Dynamo's
/// eligible candidates. One per routing partition and pool (Dynamo calls it serially).
pub struct SwitchyardPicker {
    live: Arc<LivePolicy>,
    /// The generation `guard` runs.
    generation: u64,
    guard: GuardedSelector,
    framing: Framing,
    inputs: DynamoInputs,
    /// Dynamo's rows → Switchyard's table and request, its scratch reused.
    converter: Converter,
}

impl SwitchyardPicker {
    /// A picker running `live`'s policy for `pool`, at `temperature` unless the request
    /// overrides it.
    pub(crate) fn new(
        live: Arc<LivePolicy>,
        pool: Pool,
        temperature: f64,
        capacities: Option<PartitionCapacities>,
    ) -> Self {
        let (generation, policy) = live.now();
        Self {
            generation,
            guard: policy.guard(),
            inputs: live.inputs,
            live,
            framing: Framing { pool, temperature, pin: true },
            converter: Converter::with_capacities(capacities),
        }
    }

    /// The guarded selector (its counters, its breaker).
    pub fn guard(&self) -> &GuardedSelector {
        &self.guard
    }
}

impl WorkerPicker for SwitchyardPicker {
    fn required_worker_inputs(&self) -> DynamoInputs {
        self.inputs
    }

    fn pick(
        &mut self,
        context: &WorkerSelectionContext<'_>,
        input: WorkerInputView<'_>,
    ) -> Result<usize, WorkerSelectionPolicyError> {
        if input.candidates().is_empty() {
            return Err(WorkerSelectionPolicyError::failed("no candidate to pick from"));
        }
        // A followed source moved: this selection runs on the new version (a sibling,
        // instantiated on first use); the old one's instance goes with its guard.
        if let Some((generation, policy)) = self.live.changed_since(self.generation) {
            self.guard = policy.guard();
            self.generation = generation;
        }
        let request = self.converter.build(&input, context, &self.framing)?;
        let table = self.converter.table();
        let decision = self.guard.select(table, &request).map_err(|e| refused(&self.guard, e))?;
        let chosen = decision.selection.chosen;
        // The pick stands whatever the commit does in fail-open mode (its fault is
        // counted and the instance dropped); fail-closed fails the selection.
        self.guard.commit(table, &request, chosen).map_err(|e| refused(&self.guard, e))?;
        self.converter.row_of(chosen)
    }
}
