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
    debug_assert!(!costs.is_empty());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    if temperature <= 0.0 {
        argmin_seeded(costs, &mut rng)
    } else {
        softmax_sample(costs, temperature, unit_f64(&mut rng))
    }
}

fn argmin_seeded(costs: &[f64], rng: &mut ChaCha8Rng) -> usize {
    // Three simple passes (minimum, tie count, first position) instead of one pass with
    // a loop-carried index: the first two vectorise, and the RNG is touched only on ties.
    let best_cost = minimum(costs);
    let ties = costs.iter().filter(|&&c| c == best_cost).count() as u64;
    let first = costs.iter().position(|&c| c == best_cost).unwrap_or(0);
    if ties == 1 {
        return first;
    }
    // Choose the k-th tied row uniformly.
    let k = uniform_below(rng, ties);
    costs.iter().enumerate().filter(|(_, c)| **c == best_cost).nth(k as usize).map_or(first, |(i, _)| i)
}

/// The smallest of `costs` (all finite), in four independent lanes so it vectorises
/// (a single running minimum is a dependency chain the compiler may not reorder).
fn minimum(costs: &[f64]) -> f64 {
    let mut lanes = [f64::INFINITY; 4];
    let (chunks, rest) = costs.as_chunks::<4>();
    for chunk in chunks {
        for (lane, &c) in lanes.iter_mut().zip(chunk) {
            *lane = if c < *lane { c } else { *lane };
        }
    }
    rest.iter().chain(&lanes).fold(f64::INFINITY, |m, &c| if c < m { c } else { m })
}

fn softmax_sample(costs: &[f64], temperature: f64, sample: f64) -> usize {
    let min = minimum(costs);
    let max = costs.iter().fold(f64::NEG_INFINITY, |hi, &c| hi.max(c));
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
