//! Offline replay of request traces through the real selection path.
//!
//! A [`Trace`] (Mooncake JSONL) drives a simulated cluster: N workers, each with a prefix
//! cache keyed by the chained block ids (LRU at `total_kv_blocks`), in-flight prefill and
//! decode load, and the [`TimingModel`]. Every routing decision is the real
//! [`GuardedSelector`]'s `select` then `commit`, with a native scorer or a guest, run as
//! production runs it: fail-open by default (a fault is answered by the fallback and
//! counted by kind in the report), or fail-closed, which stops at the first fault and
//! names its row. So a replay is both a what-if for an operator and an oracle that guest
//! and native builds agree: the canonical [`Report`] of the two builds of one policy is
//! byte-identical.
//!
//! A crate of its own (`switchyard-replay`): it uses only the host library's public
//! selection API, and the library a router embeds (`switchyard`) does not carry it.
//!
//! - [`trace`]: reading and checking the trace (errors carry line numbers).
//! - `cache`, `cluster`: the simulated workers and the columns the router derives.
//! - [`timing`]: the documented timing model.
//! - `sim`: the event-driven, deterministic simulation.
//! - [`report`]: statistics and the canonical JSON.

mod cache;
mod cluster;
pub mod report;
mod sim;
pub mod timing;
pub mod trace;

pub use cache::PrefixCache;
pub use report::{Distribution, Faults, PoolLoad, Report, ReportError, canonical_json};
pub use timing::TimingModel;
pub use trace::{Trace, TraceError, TraceRow};

use switchyard::guard::GuardedSelector;

/// How the cluster is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every worker prefills and decodes; requests carry their prefix hashes.
    Aggregated,
    /// ceil(N/2) prefill workers (requests carry no prefix hashes) and floor(N/2) decode
    /// workers (hashes unique per request); each request is routed twice.
    Disaggregated,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Aggregated => "aggregated",
            Mode::Disaggregated => "disaggregated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "aggregated" => Some(Mode::Aggregated),
            "disaggregated" => Some(Mode::Disaggregated),
            _ => None,
        }
    }
}

/// The simulated cluster and run.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// Workers in all (split between pools when disaggregated).
    pub workers: u32,
    pub mode: Mode,
    /// The run's seed: every request's seed (ties, sampling) derives from it.
    pub seed: u64,
    /// Arrivals happen at `timestamp / speedup`: 2.0 replays the trace twice as fast.
    pub speedup: f64,
    /// KV blocks (of the trace's block size) per worker: the prefix cache's capacity,
    /// advertised to policies as `total-kv-blocks`.
    pub total_kv_blocks: u32,
    pub timing: TimingModel,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            mode: Mode::Aggregated,
            seed: 0,
            speedup: 1.0,
            // 2,048 blocks of 512 tokens ≈ 1M tokens of KV: an 8B model on an 80 GB GPU.
            total_kv_blocks: 2048,
            timing: TimingModel::default(),
        }
    }
}

impl ReplayConfig {
    pub fn validate(&self) -> Result<(), ReplayError> {
        let bad = |m: String| Err(ReplayError::Config(m));
        let least = if self.mode == Mode::Disaggregated { 2 } else { 1 };
        if self.workers < least {
            return bad(format!(
                "{} mode needs at least {least} workers, got {}",
                self.mode.as_str(),
                self.workers
            ));
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return bad(format!("speedup must be finite and > 0, got {}", self.speedup));
        }
        self.timing.validate().map_err(ReplayError::Config)
    }
}

/// Names the policy in the report. The build (native or guest) is deliberately absent:
/// the two builds of one source must produce the same report.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyLabel {
    /// The builtin's name, or the component file's stem.
    pub name: String,
    /// The parameters it was configured with (a JSON object).
    pub parameters: serde_json::Value,
    /// sha256 of an uploaded component; `None` for a builtin (named by its source).
    pub component_sha256: Option<String>,
}

/// Why a replay stopped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplayError {
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A selection failed (a fail-closed policy fault, or no eligible worker); `row` is
    /// 1-based.
    #[error("trace row {row}: {message}")]
    Selection { row: usize, message: String },
}

/// Replays `trace` with `selector` (guarding the policy `policy` names). `progress` is
/// called with the number of rows routed so far.
pub fn replay(
    trace: &Trace,
    selector: &mut GuardedSelector,
    policy: &PolicyLabel,
    config: &ReplayConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ReplayError> {
    config.validate()?;
    sim::Simulation::new(trace, selector, config)?.run(policy, progress)
}
