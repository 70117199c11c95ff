//! The one interface the selector calls: a native policy and a guest are both a
//! [`Scorer`].

use switchyard_guest_sdk::{PolicyInfo, WorkerRank};

use crate::columns::ColumnBuffers;
use crate::error::Fault;
use crate::facts::HostFacts;
use crate::request::SelectionRequest;

/// A policy as the selector sees it: native or guest.
pub trait Scorer: Send {
    /// A name for errors and reports.
    fn name(&self) -> &str;
    /// What the policy declared.
    fn info(&self) -> PolicyInfo;
    /// Writes one cost per row of `columns` into `costs` (resized by the callee).
    fn score(&mut self, call: &Call<'_>, costs: &mut Vec<f64>) -> Result<(), Fault>;
    /// Writes one keep flag per row into `keep`; called only if `info().filters`.
    fn filter(&mut self, call: &Call<'_>, keep: &mut Vec<bool>) -> Result<(), Fault>;
    /// Tells the policy its pick was accepted; called only if `info().wants_commits`.
    fn on_selected(&mut self, call: &Call<'_>, chosen: WorkerRank) -> Result<(), Fault>;
    /// The host rejected this scorer's output (wrong length, not finite): drop whatever
    /// state produced it. A guest discards its instance; the next call gets a fresh one.
    fn reset(&mut self) {}
    /// What its last call spent and read, for a route receipt: a guest's; `None` for a
    /// native policy, which has neither fuel nor imports.
    fn last_call(&self) -> Option<CallReport> {
        None
    }
}

/// What one guest call spent and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallReport {
    /// Fuel consumed, import charges included (0 without a fuel budget).
    pub fuel: u64,
    /// The contract's imports it called (`prefix-hashes`, `policy-class`,
    /// `worker-capacity`, `candidate-capacities`), in that order.
    pub imports: Vec<String>,
}

/// Everything one scorer call sees.
pub struct Call<'a> {
    /// The validated request: its facts and options.
    pub request: &'a SelectionRequest,
    /// The candidates still in play, one row each (eligible, and kept by earlier filters).
    pub columns: &'a ColumnBuffers,
    /// What the policy may fetch lazily (prefix hashes, class, capacities).
    pub facts: HostFacts<'a>,
}
