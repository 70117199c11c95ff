//! The native picker: argmin with seeded ties, or softmax at a temperature.
//! Deterministic for a given seed, so replays and guest-vs-native runs agree.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Picks a row from `costs` (all finite, at least one).
///
/// - `temperature == 0`: the lowest cost; ties are broken uniformly at random among the
///   tied rows (reservoir over rows in (worker, rank) order, seeded by `seed`).
/// - `temperature > 0`: softmax over range-normalised costs,
///   `p_i ∝ exp(−((c_i − min) / (max − min)) / T)`, uniform if all costs are equal.
pub fn pick(costs: &[f64], temperature: f64, seed: u64) -> usize {
    pick_in(costs, &CostRange::of(costs), temperature, seed)
}

/// [`pick`] with the costs' [`CostRange`] already taken (the selector takes it once, to
/// check the costs and to pick).
pub(crate) fn pick_in(costs: &[f64], range: &CostRange, temperature: f64, seed: u64) -> usize {
    debug_assert!(!costs.is_empty());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    if temperature <= 0.0 {
        argmin_seeded(costs, range.min, &mut rng)
    } else {
        softmax_sample(costs, range, temperature, unit_f64(&mut rng))
    }
}

/// The lowest and highest of a batch of costs, and whether every one is finite: one pass,
/// in four independent lanes so that it vectorises (a single running minimum is a
/// dependency chain the compiler may not reorder). NaN takes no part in `min` and `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CostRange {
    pub min: f64,
    pub max: f64,
    pub all_finite: bool,
}

impl CostRange {
    pub fn of(costs: &[f64]) -> Self {
        let mut low = [f64::INFINITY; 4];
        let mut high = [f64::NEG_INFINITY; 4];
        // c · 0 is ±0 for a finite c and NaN for NaN or ±inf, and NaN survives any sum: a
        // finiteness test in two float operations (a 64-bit integer compare is not one
        // instruction on SSE2).
        let mut zero = [0.0f64; 4];
        let (chunks, rest) = costs.as_chunks::<4>();
        for chunk in chunks {
            for lane in 0..4 {
                let c = chunk[lane];
                low[lane] = if c < low[lane] { c } else { low[lane] };
                high[lane] = if c > high[lane] { c } else { high[lane] };
                zero[lane] += c * 0.0;
            }
        }
        let mut range = Self { min: f64::INFINITY, max: f64::NEG_INFINITY, all_finite: true };
        for &c in rest.iter().chain(&low) {
            range.min = if c < range.min { c } else { range.min };
        }
        for &c in rest.iter().chain(&high) {
            range.max = if c > range.max { c } else { range.max };
        }
        let sum = rest.iter().fold(zero.iter().sum::<f64>(), |z, &c| z + c * 0.0);
        range.all_finite = sum == 0.0;
        range
    }
}

fn argmin_seeded(costs: &[f64], best_cost: f64, rng: &mut ChaCha8Rng) -> usize {
    // The first lowest row, then how many later rows tie it: together one pass over the
    // costs, both vectorised, and the RNG is touched only on ties.
    let first = first_equal(costs, best_cost);
    let ties = 1 + costs[first + 1..].iter().fold(0u64, |n, &c| n + u64::from(c == best_cost));
    if ties == 1 {
        return first;
    }
    // Choose the k-th tied row uniformly.
    let k = uniform_below(rng, ties);
    costs.iter().enumerate().filter(|(_, c)| **c == best_cost).nth(k as usize).map_or(first, |(i, _)| i)
}

/// The first row equal to `value` (0 if none): eight rows at a time, each eight tested
/// with one branch-free OR so that the test vectorises.
fn first_equal(costs: &[f64], value: f64) -> usize {
    let (chunks, _) = costs.as_chunks::<8>();
    let skipped =
        chunks.iter().take_while(|chunk| !chunk.iter().fold(false, |hit, &c| hit | (c == value))).count();
    let from = skipped * 8;
    costs[from..].iter().position(|&c| c == value).map_or(0, |i| from + i)
}

fn softmax_sample(costs: &[f64], range: &CostRange, temperature: f64, sample: f64) -> usize {
    let CostRange { min, max, .. } = *range;
    if min == max {
        return ((sample * costs.len() as f64) as usize).min(costs.len() - 1);
    }
    let range = max - min;
    // Weights relative to the best row (exp(0) = 1), so nothing overflows.
    let weight = |c: f64| (-((c - min) / range) / temperature).exp();
    let total: f64 = costs.iter().map(|&c| weight(c)).sum();
    let target = sample * total;
    let mut cumulative = 0.0;
    for (i, &c) in costs.iter().enumerate() {
        cumulative += weight(c);
        if target < cumulative {
            return i;
        }
    }
    costs.len() - 1
}

/// Uniform in [0, 1) with 53 random bits.
fn unit_f64(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform in [0, n) without modulo bias (rejection sampling).
fn uniform_below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmin_without_ties_is_the_minimum() {
        assert_eq!(pick(&[3.0, 1.0, 2.0], 0.0, 7), 1);
        // The four-lane minimum: every length around a multiple of 4, the minimum in a
        // lane and in the remainder, negative costs included.
        for n in 1..=13 {
            for at in 0..n {
                let costs: Vec<f64> = (0..n).map(|i| if i == at { -5.0 } else { i as f64 }).collect();
                assert_eq!(pick(&costs, 0.0, 7), at, "n = {n}, minimum at {at}");
            }
        }
    }

    #[test]
    fn the_range_is_the_lowest_and_highest_and_flags_any_nan_or_infinity() {
        for n in 1..=13 {
            for at in 0..n {
                let mut costs: Vec<f64> = (0..n).map(|i| i as f64 - 3.0).collect();
                let range = CostRange::of(&costs);
                assert_eq!((range.min, range.max, range.all_finite), (-3.0, n as f64 - 4.0, true));
                for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                    costs[at] = bad;
                    assert!(!CostRange::of(&costs).all_finite, "n = {n}, {bad} at {at}");
                }
            }
        }
    }

    #[test]
    fn ties_are_seeded_and_cover_every_tied_row() {
        let costs = [1.0, 0.5, 0.5, 2.0, 0.5];
        let picks: std::collections::BTreeSet<usize> = (0..200).map(|s| pick(&costs, 0.0, s)).collect();
        assert_eq!(picks.into_iter().collect::<Vec<_>>(), vec![1, 2, 4]);
        assert_eq!(pick(&costs, 0.0, 42), pick(&costs, 0.0, 42));
    }

    #[test]
    fn softmax_prefers_low_costs_and_is_deterministic() {
        let costs = [0.0, 10.0];
        let low = (0..1000).filter(|&s| pick(&costs, 0.1, s) == 0).count();
        assert!(low > 990, "low-cost row picked {low}/1000 times at T=0.1");
        let even = (0..1000).filter(|&s| pick(&costs, 100.0, s) == 0).count();
        assert!((400..600).contains(&even), "T=100 should be near uniform, got {even}/1000");
        assert_eq!(pick(&costs, 0.7, 9), pick(&costs, 0.7, 9));
    }

    #[test]
    fn equal_costs_at_temperature_are_uniform() {
        let costs = [5.0; 4];
        let seen: std::collections::BTreeSet<usize> = (0..100).map(|s| pick(&costs, 0.5, s)).collect();
        assert_eq!(seen.len(), 4);
    }
}
