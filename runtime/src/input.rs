//! The JSON request format of `switchyard select --input` (and of the service's select):
//! request facts, the worker table, and per-worker inputs as columns.
//! `tests/fixtures/request.json` is a complete example; README documents each field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::{Pool, RequestFacts, WorkerRank};

use crate::selection::{InputError, RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable};

/// A sample request: 8 workers, one of them with a warm prefix cache.
pub const SAMPLE_REQUEST: &str = include_str!("../../tests/fixtures/request.json");

/// One worker of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerJson {
    pub id: u64,
    /// Data-parallel ranks, default 1.
    #[serde(default = "one")]
    pub dp_size: u32,
    /// Advertised KV blocks; 0 or absent means unknown.
    #[serde(default)]
    pub total_kv_blocks: u32,
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    #[serde(default)]
    pub taints: Vec<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PoolJson {
    #[default]
    Aggregated,
    Prefill,
    Decode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRankJson {
    pub worker_id: u64,
    #[serde(default)]
    pub dp_rank: u32,
}

/// The whole request file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestJson {
    /// Prompt length, tokens.
    pub prompt_tokens: u32,
    /// KV block size, tokens (≥ 1).
    pub block_size: u32,
    #[serde(default)]
    pub expected_output_tokens: Option<u32>,
    #[serde(default)]
    pub pool: PoolJson,
    /// Per-request seed for ties and sampling (and the policy's only randomness).
    #[serde(default)]
    pub seed: u64,
    /// Picker temperature; absent uses the selector's (0: argmin).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Chained per-block hashes; absent or null: none tracked.
    #[serde(default)]
    pub prefix_hashes: Option<Vec<u64>>,
    #[serde(default)]
    pub policy_class: Option<String>,
    /// A request classifier's class; replaces `policy_class` when present.
    #[serde(default)]
    pub classifier_class: Option<String>,
    #[serde(default)]
    pub pinned: Option<WorkerRankJson>,
    #[serde(default)]
    pub allowed_workers: Option<Vec<u64>>,
    #[serde(default)]
    pub preferred_taints: BTreeMap<String, f64>,
    pub workers: Vec<WorkerJson>,
    /// Per-worker inputs as columns (rows for workers with any); see [`WorkerInputs`].
    #[serde(default)]
    pub inputs: WorkerInputs,
}

impl RequestJson {
    /// Parses a request; the error says where the JSON is wrong.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        serde_json::from_str(text).map_err(|e| InputError::new(format!("request JSON: {e}")))
    }

    /// The worker table and the validated request.
    pub fn into_parts(self) -> Result<(WorkerTable, SelectionRequest), InputError> {
        if self.block_size == 0 {
            return Err(InputError::new("block_size must be at least 1 token"));
        }
        let table = WorkerTable::new(
            self.workers
                .into_iter()
                .map(|w| {
                    Worker::new(w.id, w.dp_size, w.total_kv_blocks, w.max_num_batched_tokens)
                        .with_taints(w.taints)
                })
                .collect(),
        )?;
        let facts = RequestFacts {
            prompt_tokens: self.prompt_tokens,
            block_size: self.block_size,
            request_blocks: self.prompt_tokens.div_ceil(self.block_size),
            expected_output_tokens: self.expected_output_tokens,
            pinned: self.pinned.map(|p| WorkerRank { worker_id: p.worker_id, dp_rank: p.dp_rank }),
            pool: match self.pool {
                PoolJson::Aggregated => Pool::Aggregated,
                PoolJson::Prefill => Pool::Prefill,
                PoolJson::Decode => Pool::Decode,
            },
            seed: self.seed,
        };
        let options = RequestOptions {
            prefix_hashes: self.prefix_hashes,
            policy_class: self.policy_class,
            classifier_class: self.classifier_class,
            preferred_taints: self.preferred_taints,
            allowed_workers: self.allowed_workers,
            temperature: self.temperature,
        };
        let request = SelectionRequest::new(&table, facts, options, self.inputs)?;
        Ok((table, request))
    }
}
