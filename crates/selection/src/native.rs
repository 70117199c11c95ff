//! A policy linked into the host, called directly.

use switchyard_guest_sdk::{Policy, PolicyInfo, Request, WorkerRank};

use crate::error::{Fault, FaultKind};
use crate::scorer::{Call, Scorer};

/// Runs a [`Policy`] natively: the same source a guest build compiles.
pub struct NativeScorer<P> {
    name: String,
    policy: P,
    info: PolicyInfo,
}

impl<P: Policy + Send> NativeScorer<P> {
    /// `policy`, called `name` in errors and reports.
    pub fn new(name: impl Into<String>, policy: P) -> Self {
        let info = policy.info();
        Self { name: name.into(), policy, info }
    }

    /// Configures `P` from JSON parameters.
    pub fn configure(
        name: impl Into<String>,
        parameters: &str,
    ) -> Result<Self, switchyard_guest_sdk::PolicyError> {
        Ok(Self::new(name, P::configure(parameters)?))
    }
}

fn policy_fault(e: switchyard_guest_sdk::PolicyError) -> Fault {
    Fault::new(FaultKind::PolicyError, e.to_string())
}

impl<P: Policy + Send> Scorer for NativeScorer<P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn info(&self) -> PolicyInfo {
        self.info
    }

    fn score(&mut self, call: &Call<'_>, costs: &mut Vec<f64>) -> Result<(), Fault> {
        let view = call.columns.view().map_err(|e| Fault::new(FaultKind::InvalidOutput, e.to_string()))?;
        costs.clear();
        costs.resize(view.len(), 0.0);
        let request = Request::new(call.request.facts(), &call.facts);
        self.policy.score(&request, &view, costs).map_err(policy_fault)
    }

    fn filter(&mut self, call: &Call<'_>, keep: &mut Vec<bool>) -> Result<(), Fault> {
        let view = call.columns.view().map_err(|e| Fault::new(FaultKind::InvalidOutput, e.to_string()))?;
        keep.clear();
        keep.resize(view.len(), true);
        let request = Request::new(call.request.facts(), &call.facts);
        self.policy.filter(&request, &view, keep).map_err(policy_fault)
    }

    fn on_selected(&mut self, call: &Call<'_>, chosen: WorkerRank) -> Result<(), Fault> {
        let request = Request::new(call.request.facts(), &call.facts);
        self.policy.on_selected(&request, chosen);
        Ok(())
    }
}
