//! The selector: columns → eligibility → filters → weighted scores → validated costs →
//! the picker.

use switchyard_guest_sdk::{InputGroups, WorkerRank};

use crate::columns::ColumnBuffers;
use crate::error::{Fault, FaultKind, SelectError};
use crate::facts::HostFacts;
use crate::picker::{CostRange, pick_in};
use crate::request::SelectionRequest;
use crate::scorer::{Call, Scorer};
use crate::workers::WorkerTable;

/// The outcome of one selection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// The chosen (worker, rank).
    pub chosen: WorkerRank,
    /// Its cost.
    pub cost: f64,
    /// Candidates that were scored.
    pub candidates: usize,
}

/// Selects workers with one or more weighted scorers. Holds reusable buffers, so keep
/// one per thread.
pub struct Selector {
    scorers: Vec<(f64, Box<dyn Scorer>)>,
    groups: InputGroups,
    temperature: f64,
    columns: ColumnBuffers,
    costs: Vec<f64>,
    scratch: Vec<f64>,
    keep: Vec<bool>,
}

impl Selector {
    /// One scorer, its costs used as they are.
    pub fn new(scorer: Box<dyn Scorer>) -> Self {
        Self::weighted(vec![(1.0, scorer)])
    }

    /// Several scorers; the cost of a row is Σ weight × cost.
    pub fn weighted(scorers: Vec<(f64, Box<dyn Scorer>)>) -> Self {
        let groups = scorers.iter().fold(InputGroups::NONE, |g, (_, s)| g | s.info().inputs);
        Self {
            scorers,
            groups,
            temperature: 0.0,
            columns: ColumnBuffers::default(),
            costs: Vec::new(),
            scratch: Vec::new(),
            keep: Vec::new(),
        }
    }

    /// The picker's temperature when the request does not set one (default 0: argmin).
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = temperature.max(0.0);
        self
    }

    /// The scorers, e.g. to read a guest's counters.
    pub fn scorers(&self) -> impl Iterator<Item = &dyn Scorer> {
        self.scorers.iter().map(|(_, s)| s.as_ref())
    }

    /// Selects a worker for `request`. Does not commit: call [`Selector::commit`] once
    /// the pick is accepted.
    pub fn select(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
    ) -> Result<Selection, SelectError> {
        self.columns.materialise(table, request, self.groups);
        if self.columns.is_empty() {
            return Err(SelectError::NoEligibleWorker);
        }
        for (_, scorer) in &mut self.scorers {
            if !scorer.info().filters {
                continue;
            }
            let call = Call { request, columns: &self.columns, facts: facts(request, table, &self.columns) };
            scorer.filter(&call, &mut self.keep).map_err(|fault| fail(scorer.as_ref(), fault))?;
            if self.keep.len() != self.columns.len() {
                let fault = Fault::new(
                    FaultKind::InvalidOutput,
                    format!(
                        "filter returned {} flags for {} candidates",
                        self.keep.len(),
                        self.columns.len()
                    ),
                );
                scorer.reset();
                return Err(fail(scorer.as_ref(), fault));
            }
            if self.keep.iter().any(|k| !k) {
                self.columns.retain(&self.keep);
            }
            if self.columns.is_empty() {
                return Err(SelectError::NoEligibleWorker);
            }
        }
        let n = self.columns.len();
        let single = self.scorers.len() == 1 && self.scorers[0].0 == 1.0;
        let mut range = None;
        for (index, (weight, scorer)) in self.scorers.iter_mut().enumerate() {
            let call = Call { request, columns: &self.columns, facts: facts(request, table, &self.columns) };
            let out = if single || index == 0 { &mut self.costs } else { &mut self.scratch };
            scorer.score(&call, out).map_err(|fault| fail(scorer.as_ref(), fault))?;
            match validate_costs(out, n) {
                Ok(checked) => range = Some(checked),
                Err(fault) => {
                    scorer.reset();
                    return Err(fail(scorer.as_ref(), fault));
                }
            }
            if single {
                break;
            }
            if index == 0 {
                self.costs.iter_mut().for_each(|c| *c *= *weight);
            } else {
                self.costs.iter_mut().zip(&self.scratch).for_each(|(c, s)| *c += *weight * s);
            }
        }
        // A single scorer's costs were checked above (their range is the pick's); a weighted
        // sum can still overflow.
        let range = match range {
            Some(range) if single => range,
            _ => {
                let range = CostRange::of(&self.costs);
                if !range.all_finite {
                    let i = first_non_finite(&self.costs);
                    let fault = Fault::new(
                        FaultKind::InvalidOutput,
                        format!("weighted cost of row {i} is not finite"),
                    );
                    return Err(SelectError::Fault { scorer: "weighted sum".into(), fault });
                }
                range
            }
        };
        let temperature = request.temperature().unwrap_or(self.temperature);
        let row = pick_in(&self.costs, &range, temperature, request.facts().seed);
        Ok(Selection { chosen: self.columns.worker_rank(row), cost: self.costs[row], candidates: n })
    }

    /// Tells every scorer that wants commits that `chosen` was accepted for `request`.
    /// Call after [`Selector::select`] with the same request.
    pub fn commit(
        &mut self,
        table: &WorkerTable,
        request: &SelectionRequest,
        chosen: WorkerRank,
    ) -> Result<(), SelectError> {
        for (_, scorer) in &mut self.scorers {
            if scorer.info().wants_commits {
                let call =
                    Call { request, columns: &self.columns, facts: facts(request, table, &self.columns) };
                scorer.on_selected(&call, chosen).map_err(|fault| fail(scorer.as_ref(), fault))?;
            }
        }
        Ok(())
    }

    /// Whether any scorer wants its picks committed.
    pub fn wants_commits(&self) -> bool {
        self.scorers.iter().any(|(_, s)| s.info().wants_commits)
    }

    /// Drops whatever state the scorers hold (a guest's instance): after a fault.
    pub fn reset(&mut self) {
        self.scorers.iter_mut().for_each(|(_, s)| s.reset());
    }

    /// Lets go of what the selector holds of its last selection (the request's rows, the
    /// costs and flags its scorers answered, each buffer's memory), so that a selector
    /// kept idle holds nothing sized by a request ([`ColumnBuffers::release`]).
    /// Afterwards [`Selector::last_candidates`] and [`Selector::last_costs`] are empty.
    /// For a selector set aside between selections; one reused back to back (a thread's
    /// own) need not: its buffers are allocated again after this.
    pub fn release(&mut self) {
        self.columns.release();
        self.costs = Vec::new();
        self.scratch = Vec::new();
        self.keep = Vec::new();
    }

    /// The costs of the last selection, one per row of [`Selector::last_candidates`].
    pub fn last_costs(&self) -> &[f64] {
        &self.costs
    }

    /// The candidates of the last selection, in row order.
    pub fn last_candidates(&self) -> impl Iterator<Item = WorkerRank> + '_ {
        (0..self.columns.len()).map(|row| self.columns.worker_rank(row))
    }
}

fn facts<'a>(
    request: &'a SelectionRequest,
    table: &'a WorkerTable,
    columns: &'a ColumnBuffers,
) -> HostFacts<'a> {
    HostFacts::new(request, table, columns)
}

fn fail(scorer: &dyn Scorer, fault: Fault) -> SelectError {
    SelectError::Fault { scorer: scorer.name().to_string(), fault }
}

/// Costs must be one finite number per candidate; their range, for the pick.
fn validate_costs(costs: &[f64], n: usize) -> Result<CostRange, Fault> {
    if costs.len() != n {
        return Err(Fault::new(
            FaultKind::InvalidOutput,
            format!("returned {} costs for {n} candidates", costs.len()),
        ));
    }
    let range = CostRange::of(costs);
    if !range.all_finite {
        let i = first_non_finite(costs);
        return Err(Fault::new(FaultKind::InvalidOutput, format!("cost of row {i} is {}", costs[i])));
    }
    Ok(range)
}

/// The first row that is NaN or infinite, once [`CostRange`] has found that one is.
fn first_non_finite(costs: &[f64]) -> usize {
    costs.iter().position(|c| !c.is_finite()).unwrap_or(0)
}
