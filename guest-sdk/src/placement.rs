//! Building blocks of prefix-affinity policies with bounded loads (CHWBL, two-choice):
//! the key a request is placed by, and the load bound that decides whether the
//! candidate the key names may take it.
//!
//! Both are written once here so that every policy that uses them computes the same
//! bits: a policy's costs must match between its native and guest builds, and between
//! policies that claim the same rule.

use crate::{Candidates, Request};

/// The chained prefix hash that names the prompt's first `min(blocks, n)` blocks of its
/// `n`: with chained hashes, entry `i` of the prefix hashes already covers blocks `0..=i`,
/// so the key of the first K blocks is simply entry `min(K, n) − 1`.
///
/// `None` when there is nothing to key on: the host tracks no blocks (a prefill pool)
/// or the prompt has none. The caller then falls back on something else (typically the
/// request's seed), as it sees fit. `blocks` is meant to be validated ≥ 1; 0 is read as 1
/// rather than indexing before the first hash.
pub fn prefix_key(request: &Request<'_>, blocks: u32) -> Option<u64> {
    let hashes = request.prefix_hashes()?;
    let k = (blocks as usize).min(hashes.len()).max(1);
    hashes.get(k - 1).copied()
}

/// The bounded-load test of consistent hashing with bounded loads (Mirrokni, Thorup,
/// Zadimoghaddam, SODA'18), as KubeAI's CHWBL and smg's `prefix_hash` apply it:
///
/// ```text
/// admits(w)  ⇔  in_flight_w ≤ (Σ in_flight + 1) / N × load_factor      (N = candidates)
/// ```
///
/// The `+ 1` counts the request being placed: with `load_factor > 0` an idle candidate
/// is always admitted, and with `load_factor ≥ 1` so is the least loaded one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadBound {
    bound: f64,
}

impl LoadBound {
    /// The bound over `candidates`' requests in flight (the `load` column group must be
    /// declared). Summed in u64, so no total of u32 counts overflows.
    pub fn new(candidates: &Candidates<'_>, load_factor: f64) -> Self {
        let total: u64 = candidates.active_requests().iter().map(|&r| u64::from(r)).sum();
        Self { bound: (total + 1) as f64 / candidates.len() as f64 * load_factor }
    }

    /// The most requests in flight a candidate may have and still be admitted.
    pub fn bound(&self) -> f64 {
        self.bound
    }

    /// Whether a candidate with `in_flight` requests is within the bound.
    #[inline]
    pub fn admits(&self, in_flight: u32) -> bool {
        f64::from(in_flight) <= self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Column;
    use crate::testing::Case;

    #[test]
    fn the_key_is_the_hash_of_the_first_k_blocks_or_of_all_when_shorter() {
        let mut case = Case::new(1);
        case.lazy.prefix_hashes = Some(vec![10, 20, 30]);
        let key = |blocks| case.with_request(|request| prefix_key(request, blocks));
        assert_eq!((key(1), key(2), key(3), key(16)), (Some(10), Some(20), Some(30), Some(30)));
        assert_eq!(key(0), Some(10), "0 reads as 1 instead of indexing before the first");
    }

    #[test]
    fn no_key_without_hashes() {
        let mut case = Case::new(1);
        assert_eq!(case.with_request(|request| prefix_key(request, 16)), None);
        case.lazy.prefix_hashes = Some(vec![]);
        assert_eq!(case.with_request(|request| prefix_key(request, 16)), None);
    }

    #[test]
    fn the_bound_counts_the_new_request_against_the_mean() {
        let mut case = Case::new(4);
        case[Column::ActiveRequests] = vec![1, 0, 3, 0];
        // (4 + 1) / 4 × 1.25 = 1.5625.
        let bound = case.with_candidates(|candidates| LoadBound::new(candidates, 1.25));
        assert_eq!(bound.bound(), 1.5625);
        assert!(bound.admits(1) && !bound.admits(2));
        case[Column::ActiveRequests] = vec![u32::MAX; 4];
        let bound = case.with_candidates(|candidates| LoadBound::new(candidates, 1.0));
        assert!(bound.admits(u32::MAX), "no overflow in the total");
    }
}
