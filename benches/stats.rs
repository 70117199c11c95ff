//! The one quantile the CLI's one-run benches report (nearest rank on the sorted samples).

/// The `q` quantile of `samples` (0.5: the median); NaN for no samples.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(((sorted.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN)
}
