//! Two policies' picks on the same selection, compared: what a shadow run records
//! against the live pick (the service) and what `switchyard replay --against` records
//! against the driving policy. One implementation, so the two agree on the same
//! selections.
//!
//! The *regret* of a comparison is the first (live) policy's cost of the second's pick
//! minus its cost of its own: how much worse, by the live policy's own measure, the other
//! pick would have been (0 when they agree; negative when the live picker sampled
//! something other than its cheapest). It is undefined when the second policy picked a
//! candidate the first did not score (filtered out by it).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::WorkerRank;

/// One selection compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compared {
    /// Both picked the same candidate.
    pub agree: bool,
    /// The first policy's cost of the second's pick minus its own; `None` when it did not
    /// score the second's pick.
    pub regret: Option<f64>,
}

/// Compares `other`'s pick with `first`'s, by `first_costs` (the first policy's
/// candidates and costs, in any order).
pub fn compare(
    first_costs: impl IntoIterator<Item = (WorkerRank, f64)>,
    first: WorkerRank,
    other: WorkerRank,
) -> Compared {
    if first == other {
        return Compared { agree: true, regret: Some(0.0) };
    }
    let (mut own, mut theirs) = (None, None);
    for (w, cost) in first_costs {
        if w == first {
            own = Some(cost);
        }
        if w == other {
            theirs = Some(cost);
        }
    }
    let regret = match (own, theirs) {
        (Some(own), Some(theirs)) => Some(theirs - own),
        _ => None,
    };
    Compared { agree: false, regret }
}

/// Comparisons added up, keeping the last `keep` regrets for their quantiles.
#[derive(Debug, Clone)]
pub struct Tally {
    compared: u64,
    agreed: u64,
    /// Disagreements where the first policy had not scored the other's pick.
    unscored: u64,
    regrets: VecDeque<f64>,
    keep: usize,
}

impl Tally {
    /// An empty tally keeping the last `keep` regrets (`usize::MAX`: all of them).
    pub fn new(keep: usize) -> Self {
        Self { compared: 0, agreed: 0, unscored: 0, regrets: VecDeque::new(), keep }
    }

    /// Adds one comparison.
    pub fn add(&mut self, c: Compared) {
        self.compared += 1;
        self.agreed += u64::from(c.agree);
        match c.regret {
            Some(r) => {
                if self.regrets.len() == self.keep {
                    self.regrets.pop_front();
                }
                if self.keep > 0 {
                    self.regrets.push_back(r);
                }
            }
            None => self.unscored += 1,
        }
    }

    /// What the tally says.
    pub fn summary(&self) -> Agreement {
        let mut sorted: Vec<f64> = self.regrets.iter().copied().collect();
        sorted.sort_unstable_by(f64::total_cmp);
        Agreement {
            compared: self.compared,
            agreed: self.agreed,
            agreement: if self.compared == 0 {
                None
            } else {
                Some(self.agreed as f64 / self.compared as f64)
            },
            unscored: self.unscored,
            regret: (!sorted.is_empty()).then(|| Regret {
                over: sorted.len() as u64,
                p50: quantile(&sorted, 0.50),
                p99: quantile(&sorted, 0.99),
                max: sorted[sorted.len() - 1],
            }),
        }
    }
}

/// The nearest-rank quantile `q` of `sorted` (not empty).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// How often two policies agreed, and the first's regret of the other's picks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Selections compared.
    pub compared: u64,
    /// Of them, those where both picked the same candidate.
    pub agreed: u64,
    /// `agreed / compared`; absent before the first comparison.
    pub agreement: Option<f64>,
    /// Disagreements where the first policy had not scored the other's pick (its filter
    /// removed it): no regret for them.
    pub unscored: u64,
    /// The regrets' distribution (over the last ones kept); absent with none.
    pub regret: Option<Regret>,
}

/// A distribution of regrets (nearest-rank quantiles).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Regret {
    /// How many regrets the quantiles are over.
    pub over: u64,
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(worker_id: u64) -> WorkerRank {
        WorkerRank { worker_id, dp_rank: 0 }
    }

    #[test]
    fn regret_is_the_first_policys_cost_of_the_others_pick_less_its_own() {
        let costs = [(w(1), 3.0), (w(2), 1.0), (w(3), 2.5)];
        assert_eq!(compare(costs, w(2), w(2)), Compared { agree: true, regret: Some(0.0) });
        assert_eq!(compare(costs, w(2), w(3)), Compared { agree: false, regret: Some(1.5) });
        // Sampled away from its cheapest: the other's cheaper pick is a negative regret.
        assert_eq!(compare(costs, w(1), w(2)), Compared { agree: false, regret: Some(-2.0) });
        // A pick the first filtered out has no cost by its measure.
        assert_eq!(compare(costs, w(2), w(9)), Compared { agree: false, regret: None });
    }

    #[test]
    fn a_tally_counts_agreement_and_keeps_the_last_regrets() {
        let mut tally = Tally::new(3);
        assert_eq!(tally.summary().agreement, None);
        for regret in [Some(0.0), Some(5.0), None, Some(1.0), Some(2.0)] {
            tally.add(Compared { agree: regret == Some(0.0), regret });
        }
        let s = tally.summary();
        assert_eq!((s.compared, s.agreed, s.unscored), (5, 1, 1));
        assert_eq!(s.agreement, Some(0.2));
        // The last three: 5, 1, 2.
        assert_eq!(s.regret, Some(Regret { over: 3, p50: 2.0, p99: 5.0, max: 5.0 }));
        assert_eq!(Tally::new(0).summary().regret, None);
    }
}
