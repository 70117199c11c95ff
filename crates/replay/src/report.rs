//! The replay report: a canonical JSON document (sorted keys, finite numbers only, no
//! wall-clock figures) that two runs of the same inputs reproduce byte for byte.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use switchyard_guest_sdk::Pool;

use switchyard::selection::FaultKind;

use super::config::{Mode, PolicyLabel, ReplayConfig};
use super::trace::Trace;

/// The format's name and version, first thing a reader checks.
pub const FORMAT: &str = "switchyard-replay/1";

/// Per-request outcomes, filled as the simulation runs.
pub(super) struct Outcomes {
    ttft_ms: Vec<f64>,
    e2e_ms: Vec<f64>,
    prompt_blocks: u64,
    hit_blocks: u64,
    /// When the last request finished, simulated ms.
    finished_ms: f64,
}

impl Outcomes {
    pub fn new(rows: usize) -> Self {
        Self {
            ttft_ms: vec![f64::NAN; rows],
            e2e_ms: vec![f64::NAN; rows],
            prompt_blocks: 0,
            hit_blocks: 0,
            finished_ms: 0.0,
        }
    }
    pub fn set_ttft(&mut self, row: usize, ms: f64) {
        self.ttft_ms[row] = ms;
    }
    /// Request `row` finished at `now`, `ms` after it arrived.
    pub fn set_e2e(&mut self, row: usize, ms: f64, now: f64) {
        self.e2e_ms[row] = ms;
        self.finished_ms = self.finished_ms.max(now);
    }
    /// A prompt of `blocks` blocks was admitted with `hits` of them cached on its worker.
    pub fn add_prompt(&mut self, blocks: u64, hits: u64) {
        self.prompt_blocks += blocks;
        self.hit_blocks += hits;
    }
}

/// mean, p50, p90, p99 and max of a sample, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distribution {
    /// The arithmetic mean, ms.
    pub mean: f64,
    /// The median (nearest rank), ms.
    pub p50: f64,
    /// The 90th percentile (nearest rank), ms.
    pub p90: f64,
    /// The 99th percentile (nearest rank), ms.
    pub p99: f64,
    /// The largest, ms.
    pub max: f64,
}

impl Distribution {
    /// Nearest-rank percentiles of `sorted` (ascending, not empty).
    fn of(sorted: &[f64]) -> Self {
        let rank =
            |p: f64| sorted[((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Self { mean, p50: rank(50.0), p90: rank(90.0), p99: rank(99.0), max: sorted[sorted.len() - 1] }
    }

    fn to_json(self, field: &str) -> Result<Value, ReportError> {
        Ok(json!({
            "mean": finite(field, self.mean)?,
            "p50": finite(field, self.p50)?,
            "p90": finite(field, self.p90)?,
            "p99": finite(field, self.p99)?,
            "max": finite(field, self.max)?,
        }))
    }
}

/// Requests routed to each worker of one pool, in worker-id order.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolLoad {
    /// Which pool: aggregated, prefill or decode.
    pub pool: Pool,
    /// Index i is the pool's i-th worker (ids ascending).
    pub requests_per_worker: Vec<u64>,
}

impl PoolLoad {
    /// max / mean of the per-worker request counts: 1.0 is perfectly even.
    pub fn imbalance(&self) -> f64 {
        let max = self.requests_per_worker.iter().copied().max().unwrap_or(0) as f64;
        let total: u64 = self.requests_per_worker.iter().sum();
        let mean = total as f64 / self.requests_per_worker.len().max(1) as f64;
        if mean == 0.0 { 1.0 } else { max / mean }
    }
}

/// The policy's contained faults over a replay (fail-open): selections the fallback
/// answered and faulted commits, each by kind. All zero for a policy that never faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Selections the fallback answered, by the fault's kind (`quarantined` included).
    pub fallbacks: BTreeMap<FaultKind, u64>,
    /// Commits (`on-selected`) that faulted, by kind; the policy's pick stood.
    pub commits: BTreeMap<FaultKind, u64>,
}

impl Faults {
    pub(super) fn fallback(&mut self, kind: FaultKind) {
        *self.fallbacks.entry(kind).or_default() += 1;
    }
    pub(super) fn commit(&mut self, kind: FaultKind) {
        *self.commits.entry(kind).or_default() += 1;
    }
    /// Selections the fallback answered.
    pub fn fallback_count(&self) -> u64 {
        self.fallbacks.values().sum()
    }
    /// Commits that faulted.
    pub fn commit_count(&self) -> u64 {
        self.commits.values().sum()
    }

    pub(crate) fn to_json(&self) -> Value {
        let by_kind = |m: &BTreeMap<FaultKind, u64>| -> Map<String, Value> {
            m.iter().map(|(k, n)| (k.as_str().to_string(), json!(n))).collect()
        };
        json!({
            "fallbacks": self.fallback_count(),
            "fallbacks_by_kind": by_kind(&self.fallbacks),
            "commit_faults": self.commit_count(),
            "commit_faults_by_kind": by_kind(&self.commits),
        })
    }
}

/// A report refused: a number that is not finite.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("report field `{field}` is not a finite number ({value})")]
pub struct ReportError {
    field: String,
    value: f64,
}

fn finite(field: &str, value: f64) -> Result<Value, ReportError> {
    serde_json::Number::from_f64(value)
        .map(Value::Number)
        .ok_or_else(|| ReportError { field: field.to_string(), value })
}

/// The outcome of a replay.
#[derive(Debug, Clone)]
pub struct Report {
    metadata: Value,
    ttft_sorted: Vec<f64>,
    e2e_sorted: Vec<f64>,
    cache_hit_ratio: f64,
    pools: Vec<PoolLoad>,
    decisions: u64,
    decisions_sha256: String,
    /// When the last request finished, simulated ms from the start of the trace.
    simulated_ms: f64,
    faults: Faults,
}

impl Report {
    pub(super) fn new(
        trace: &Trace,
        policy: &PolicyLabel,
        config: &ReplayConfig,
        outcomes: Outcomes,
        pools: Vec<(Pool, Vec<u64>)>,
        decisions: u64,
        decisions_sha256: String,
    ) -> Self {
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v
        };
        let simulated_ms = outcomes.finished_ms;
        let ratio = if outcomes.prompt_blocks == 0 {
            0.0
        } else {
            outcomes.hit_blocks as f64 / outcomes.prompt_blocks as f64
        };
        let pools =
            pools.into_iter().map(|(pool, requests_per_worker)| PoolLoad { pool, requests_per_worker });
        let (prefill, decode) = match config.mode {
            Mode::Aggregated => (config.workers, 0),
            Mode::Disaggregated => (config.workers.div_ceil(2), config.workers / 2),
        };
        let metadata = json!({
            "format": FORMAT,
            "trace": {
                "sha256": trace.sha256(),
                "rows": trace.rows().len(),
                "block_size": trace.block_size(),
            },
            "topology": {
                "mode": config.mode.as_str(),
                "workers": config.workers,
                "prefill_workers": if config.mode == Mode::Disaggregated { json!(prefill) } else { Value::Null },
                "decode_workers": if config.mode == Mode::Disaggregated { json!(decode) } else { Value::Null },
                "dp_size": 1,
                "total_kv_blocks": config.total_kv_blocks,
            },
            "policy": {
                "name": policy.name,
                "parameters": policy.parameters,
                "component_sha256": policy.component_sha256,
            },
            "seed": config.seed,
            "speedup": config.speedup,
            "timing": config.timing,
        });
        Self {
            metadata,
            ttft_sorted: sorted(outcomes.ttft_ms),
            e2e_sorted: sorted(outcomes.e2e_ms),
            cache_hit_ratio: ratio,
            pools: pools.collect(),
            decisions,
            decisions_sha256,
            simulated_ms,
            faults: Faults::default(),
        }
    }

    /// The policy's contained faults over the run.
    pub(super) fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The policy's contained faults, by kind.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Time to first token, ms, ascending (one per request).
    pub fn ttft_ms(&self) -> &[f64] {
        &self.ttft_sorted
    }
    /// Time to first token (arrival to the end of prefill), ms.
    pub fn ttft(&self) -> Distribution {
        Distribution::of(&self.ttft_sorted)
    }
    /// Arrival to last token, ms.
    pub fn e2e(&self) -> Distribution {
        Distribution::of(&self.e2e_sorted)
    }
    /// Prompt blocks served from the admitting worker's cache / all prompt blocks.
    pub fn cache_hit_ratio(&self) -> f64 {
        self.cache_hit_ratio
    }
    /// Per-pool request counts: one pool (aggregated), or prefill then decode.
    pub fn pools(&self) -> &[PoolLoad] {
        &self.pools
    }
    /// Routing decisions made (two per request when disaggregated).
    pub fn decisions(&self) -> u64 {
        self.decisions
    }
    /// sha256 over every decision: (row, pool, worker, rank, cost bits) in decision order.
    pub fn decisions_sha256(&self) -> &str {
        &self.decisions_sha256
    }
    /// Requests replayed (trace rows).
    pub fn requests(&self) -> usize {
        self.ttft_sorted.len()
    }
    /// What was replayed, and how: the trace's digest, the topology, the policy, the
    /// seed, the speedup and the timing model (the report's `metadata`).
    pub fn metadata(&self) -> &Value {
        &self.metadata
    }

    /// The canonical report as a JSON value.
    pub fn to_json(&self) -> Result<Value, ReportError> {
        let mut pools = Map::new();
        for load in &self.pools {
            let name = match load.pool {
                Pool::Aggregated => "aggregated",
                Pool::Prefill => "prefill",
                Pool::Decode => "decode",
            };
            pools.insert(
                name.to_string(),
                json!({
                    "requests_per_worker": load.requests_per_worker,
                    "load_imbalance": finite("load_imbalance", load.imbalance())?,
                }),
            );
        }
        Ok(json!({
            "metadata": self.metadata,
            "summary": {
                "requests": self.requests(),
                "ttft_ms": self.ttft().to_json("ttft_ms")?,
                "e2e_ms": self.e2e().to_json("e2e_ms")?,
                "cache_hit_ratio": finite("cache_hit_ratio", self.cache_hit_ratio)?,
                "pools": pools,
                "simulated_ms": finite("simulated_ms", self.simulated_ms)?,
                "faults": self.faults.to_json(),
            },
            "decisions": { "count": self.decisions, "sha256": self.decisions_sha256 },
        }))
    }

    /// The canonical bytes: compact JSON, keys sorted at every level, one trailing newline.
    pub fn canonical(&self) -> Result<String, ReportError> {
        canonical_json(&self.to_json()?)
    }
}

/// Writes `value` as compact JSON with object keys sorted (whatever order the map kept)
/// and refuses non-finite numbers, so the bytes depend on the content alone.
pub fn canonical_json(value: &Value) -> Result<String, ReportError> {
    fn write(value: &Value, out: &mut String) -> Result<(), ReportError> {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out)?;
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out)?;
                }
                out.push(']');
            }
            Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                    && !f.is_finite()
                {
                    return Err(ReportError { field: "number".into(), value: f });
                }
                out.push_str(&n.to_string());
            }
            other => out.push_str(&other.to_string()),
        }
        Ok(())
    }
    let mut out = String::new();
    write(value, &mut out)?;
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let value = json!({"b": 1, "a": {"z": [2.5, {"y": 1, "x": null}], "c": "s"}});
        assert_eq!(
            canonical_json(&value).unwrap(),
            "{\"a\":{\"c\":\"s\",\"z\":[2.5,{\"x\":null,\"y\":1}]},\"b\":1}\n"
        );
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        assert!(finite("x", f64::NAN).is_err());
        assert!(finite("x", f64::INFINITY).is_err());
        assert_eq!(finite("x", 1.5).unwrap(), json!(1.5));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        let d = Distribution::of(&sorted);
        assert_eq!((d.p50, d.p90, d.p99, d.max, d.mean), (50.0, 90.0, 99.0, 100.0, 50.5));
        let one = Distribution::of(&[7.0]);
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
    }
}
