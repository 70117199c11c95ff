//! The [`Policy`] trait every policy implements once, and what it declares
//! ([`PolicyInfo`]).

use crate::candidates::Candidates;
use crate::error::PolicyError;
use crate::groups::InputGroups;
use crate::request::{Request, WorkerRank};

/// What a policy tells the host about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInfo {
    /// Column groups `score` and `filter` read.
    pub inputs: InputGroups,
    /// Whether the host should call [`Policy::filter`].
    pub filters: bool,
    /// Whether the host should call [`Policy::on_selected`] after each accepted pick.
    pub wants_commits: bool,
}

/// A worker-selection policy. Lower cost is better.
///
/// The host calls `configure` once per instance, then `info`, then for each request
/// `filter` (if [`PolicyInfo::filters`]), `score`, and after the host accepts a pick,
/// `on_selected` (if [`PolicyInfo::wants_commits`]).
pub trait Policy: Sized + 'static {
    /// Builds the policy from the tenant's JSON parameters (`{}` means defaults).
    /// Use [`crate::parse_parameters`] so that an error names the offending field, and
    /// [`crate::check`] for ranges, so that every policy states them the same way.
    fn configure(parameters: &str) -> Result<Self, PolicyError>;

    /// Describes the policy.
    fn info(&self) -> PolicyInfo;

    /// Writes one finite cost per candidate into `costs` (`costs.len() == candidates.len()`,
    /// zero-filled on entry).
    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError>;

    /// Clears `keep[i]` for candidates to exclude (`keep` is all true on entry).
    fn filter(
        &mut self,
        _request: &Request<'_>,
        _candidates: &Candidates<'_>,
        _keep: &mut [bool],
    ) -> Result<(), PolicyError> {
        Ok(())
    }

    /// The host accepted `chosen` for this request. Stateful policies update here, so
    /// that dry runs and abandoned retries leave no trace.
    fn on_selected(&mut self, _request: &Request<'_>, _chosen: WorkerRank) {}
}
