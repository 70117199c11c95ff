//! What a replay is asked to do: the cluster's deployment [`Mode`], the
//! [`ReplayConfig`], the [`PolicyLabel`] the report names, and why a replay stops.

use crate::timing::TimingModel;

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
    /// The name the CLI takes and the report writes: `aggregated` or `disaggregated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Aggregated => "aggregated",
            Mode::Disaggregated => "disaggregated",
        }
    }

    /// The mode named `s` (see [`Mode::as_str`]), if any.
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
    /// How the workers are deployed; default aggregated.
    pub mode: Mode,
    /// The run's seed: every request's seed (ties, sampling) derives from it.
    pub seed: u64,
    /// Arrivals happen at `timestamp / speedup`: 2.0 replays the trace twice as fast.
    pub speedup: f64,
    /// KV blocks (of the trace's block size) per worker: the prefix cache's capacity,
    /// advertised to policies as `total-kv-blocks`.
    pub total_kv_blocks: u32,
    /// How long prefill, decode and KV transfers take.
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
    /// Enough workers for the mode (2 when disaggregated), a finite positive speedup and
    /// a valid timing model; the error names the setting.
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
    /// The [`ReplayConfig`] is not valid: what is wrong with which setting.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A selection failed (a fail-closed policy fault, or no eligible worker).
    #[error("trace row {row}: {message}")]
    Selection {
        /// The trace row that was being routed, 1-based.
        row: usize,
        /// Why its selection failed.
        message: String,
    },
    /// A captured trace's recorded selection could not be run again.
    #[error("trace line {line}: {message}")]
    Recorded {
        /// The line of the captured trace, 1-based.
        line: usize,
        /// Why.
        message: String,
    },
}
