//! Picker mode: Dynamo's eligible rows → the guarded guest's filter, score and pick →
//! the pick, committed and mapped back to Dynamo's row.

use dynamo_kv_router::plugins::worker_selection::{
    WorkerInputView, WorkerInputs as DynamoInputs, WorkerPicker, WorkerSelectionContext,
    WorkerSelectionPolicyError,
};
use switchyard::{GuardedSelector, SelectError};
use switchyard_guest_sdk::Pool;

use crate::rows::{self, Framing};

/// A [`WorkerPicker`] that runs a Switchyard policy (a guarded guest) over Dynamo's
/// eligible candidates. One per routing partition and pool (Dynamo calls it serially).
pub struct SwitchyardPicker {
    guard: GuardedSelector,
    framing: Framing,
    inputs: DynamoInputs,
    /// Dynamo's rows in ascending (worker id, dp rank): scratch, reused.
    order: Vec<usize>,
}

impl SwitchyardPicker {
    /// A picker running `guard`'s policy for `pool`, at `temperature` unless the request
    /// overrides it, reading `inputs` (what the guest declared, and in fail-open mode
    /// what its fallback reads).
    pub(crate) fn new(guard: GuardedSelector, inputs: DynamoInputs, pool: Pool, temperature: f64) -> Self {
        Self { guard, framing: Framing { pool, temperature, pin: true }, inputs, order: Vec::new() }
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
        let (table, request) = rows::build(&input, context, &self.framing, &mut self.order)?;
        let decision = self.guard.select(&table, &request).map_err(|e| refused(&self.guard, e))?;
        let chosen = decision.selection.chosen;
        // The pick stands whatever the commit does in fail-open mode (its fault is
        // counted and the instance dropped); fail-closed fails the selection.
        self.guard.commit(&table, &request, chosen).map_err(|e| refused(&self.guard, e))?;
        rows::row_of(&table, &self.order, chosen)
    }
}

/// A selection Switchyard refused, as Dynamo's policy error.
pub(crate) fn refused(guard: &GuardedSelector, e: SelectError) -> WorkerSelectionPolicyError {
    match e {
        SelectError::NoEligibleWorker => WorkerSelectionPolicyError::failed(format!(
            "switchyard policy `{}` filtered out every candidate",
            guard.name()
        )),
        SelectError::Fault { scorer, fault } => WorkerSelectionPolicyError::failed(format!(
            "switchyard policy `{scorer}` faulted ({}): {}",
            fault.kind, fault.message
        )),
    }
}
