//! The JSON request format of `switchyard select --input` (and of the service's select):
//! request facts, the worker table, and per-worker inputs as columns.
//! `crates/selection/sample-request.json` ([`SAMPLE_REQUEST`]) is a complete example;
//! docs/cli.md ("The request file") documents each field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use switchyard_guest_sdk::{Pool, RequestFacts, WorkerRank};

use crate::{InputError, RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable};

/// The most slots a configuration may allow one request: past this, one request's
/// columns alone take hundreds of megabytes.
pub const MAX_SLOTS_CEILING: usize = 1 << 20;

/// What one request may ask the host to build, checked by
/// [`RequestJson::into_parts_within`] before anything is allocated from it. Every field
/// of a request is bounded either here or by the size of the request's bytes; these
/// bound what is *derived* from a few bytes (a `dp_size` becomes that many slots,
/// `prompt_tokens / block_size` that many units of the guest's fuel budget) and the work
/// per candidate. Built from a [`RequestLimitsConfig`] by [`RequestLimits::new`], so a
/// value is always valid; `Default` is the defaults below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestLimits {
    config: RequestLimitsConfig,
}

/// The raw limits, as configured (`[service]` in `switchyard.toml` for the service).
/// Defaults, and why:
///
/// | limit | default | why |
/// | --- | --- | --- |
/// | `max_workers` | 10,000 | the largest fleets a KV-aware router fronts are thousands of workers |
/// | `max_dp_size` | 1,024 | attention data parallelism is 8–64 ranks on today's largest nodes |
/// | `max_slots` | 10,000 | Σ `dp_size` (one candidate per rank): the largest batch the sandbox's deadline is sized for |
/// | `max_taints_per_worker` | 1,024 | labels (zone, GPU model, one per LoRA adapter served); matching is linear |
/// | `max_preferred_taints` | 1,024 | as many as a worker may carry |
/// | `max_prefix_hashes` | 65,536 | one per block: a 1M-token prompt at 16 tokens a block |
/// | `max_prompt_blocks` | 65,536 | `ceil(prompt_tokens / block_size)` of the same 1M-token prompt; past it no request is real (a guest's fuel does not grow with it: its budget counts candidates and hashes) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLimitsConfig {
    /// Workers in one request's table (also bounds `allowed_workers`).
    pub max_workers: usize,
    /// Data-parallel ranks of one worker.
    pub max_dp_size: u32,
    /// Candidates (worker, rank) in one request: Σ `dp_size` (also bounds `inputs` rows).
    pub max_slots: usize,
    /// Taints of one worker.
    pub max_taints_per_worker: usize,
    /// Entries of `preferred_taints`.
    pub max_preferred_taints: usize,
    /// Entries of `prefix_hashes`.
    pub max_prefix_hashes: usize,
    /// `ceil(prompt_tokens / block_size)`.
    pub max_prompt_blocks: u32,
}

impl Default for RequestLimitsConfig {
    fn default() -> Self {
        Self {
            max_workers: 10_000,
            max_dp_size: 1_024,
            max_slots: 10_000,
            max_taints_per_worker: 1_024,
            max_preferred_taints: 1_024,
            max_prefix_hashes: 65_536,
            max_prompt_blocks: 65_536,
        }
    }
}

impl RequestLimits {
    /// Validates `config`: every limit at least 1, and `max_slots` at most
    /// [`MAX_SLOTS_CEILING`] (a larger value would let one request allocate without bound
    /// again). The error names the setting.
    pub fn new(config: RequestLimitsConfig) -> Result<Self, String> {
        let c = &config;
        let counts: [(&str, u64); 7] = [
            ("max_workers", c.max_workers as u64),
            ("max_dp_size", u64::from(c.max_dp_size)),
            ("max_slots", c.max_slots as u64),
            ("max_taints_per_worker", c.max_taints_per_worker as u64),
            ("max_preferred_taints", c.max_preferred_taints as u64),
            ("max_prefix_hashes", c.max_prefix_hashes as u64),
            ("max_prompt_blocks", u64::from(c.max_prompt_blocks)),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if c.max_slots > MAX_SLOTS_CEILING {
            return Err(format!("max_slots {} is over the ceiling of {MAX_SLOTS_CEILING}", c.max_slots));
        }
        Ok(Self { config })
    }

    /// The limits as configured.
    pub fn config(&self) -> &RequestLimitsConfig {
        &self.config
    }

    /// Checks `request` against the limits, reading only what it already holds: the
    /// first violation, named (`worker 0: dp_size 4294967295 exceeds max_dp_size 1024`).
    pub fn check(&self, request: &RequestJson) -> Result<(), InputError> {
        let c = &self.config;
        let refuse = |message: String| Err(InputError::new(message));
        self.check_workers(&request.workers)?;
        if request.inputs.len() > c.max_slots {
            return refuse(format!("inputs: {} rows exceed max_slots {}", request.inputs.len(), c.max_slots));
        }
        if let Some(allowed) = &request.allowed_workers
            && allowed.len() > c.max_workers
        {
            return refuse(format!(
                "allowed_workers: {} entries exceed max_workers {}",
                allowed.len(),
                c.max_workers
            ));
        }
        if let Some(ask) = request.receipt
            && ask.top > MAX_RECEIPT_TOP
        {
            return refuse(format!("receipt.top {} exceeds {MAX_RECEIPT_TOP}", ask.top));
        }
        if request.preferred_taints.len() > c.max_preferred_taints {
            return refuse(format!(
                "preferred_taints: {} entries exceed max_preferred_taints {}",
                request.preferred_taints.len(),
                c.max_preferred_taints
            ));
        }
        if let Some(hashes) = &request.prefix_hashes
            && hashes.len() > c.max_prefix_hashes
        {
            return refuse(format!(
                "prefix_hashes: {} hashes exceed max_prefix_hashes {}",
                hashes.len(),
                c.max_prefix_hashes
            ));
        }
        let blocks = request.prompt_tokens.div_ceil(request.block_size.max(1));
        if blocks > c.max_prompt_blocks {
            return refuse(format!(
                "prompt_tokens {} at block_size {}: {blocks} prompt blocks exceed max_prompt_blocks {}",
                request.prompt_tokens, request.block_size, c.max_prompt_blocks
            ));
        }
        Ok(())
    }

    /// Checks a worker table's rows: `max_workers`, each worker's `max_dp_size` and
    /// `max_taints_per_worker`, and Σ `dp_size` against `max_slots`.
    pub fn check_workers(&self, workers: &[WorkerJson]) -> Result<(), InputError> {
        self.check_shape(workers.len(), workers.iter().map(|w| (w.id, w.dp_size, w.taints.len())))
    }

    /// [`RequestLimits::check_workers`] on `(id, dp_size, taints)` of each of `count` workers.
    pub(crate) fn check_shape(
        &self,
        count: usize,
        workers: impl Iterator<Item = (u64, u32, usize)>,
    ) -> Result<(), InputError> {
        let c = &self.config;
        let refuse = |message: String| Err(InputError::new(message));
        if count > c.max_workers {
            return refuse(format!("workers: {count} workers exceed max_workers {}", c.max_workers));
        }
        let mut slots: u64 = 0;
        for (id, dp_size, taints) in workers {
            if dp_size > c.max_dp_size {
                return refuse(format!(
                    "worker {id}: dp_size {dp_size} exceeds max_dp_size {}",
                    c.max_dp_size
                ));
            }
            if taints > c.max_taints_per_worker {
                return refuse(format!(
                    "worker {id}: {taints} taints exceed max_taints_per_worker {}",
                    c.max_taints_per_worker
                ));
            }
            // A dp_size of 0 is one rank (see `Worker::new`).
            slots += u64::from(dp_size.max(1));
        }
        if slots > c.max_slots as u64 {
            return refuse(format!("workers: {slots} slots (Σ dp_size) exceed max_slots {}", c.max_slots));
        }
        Ok(())
    }
}

/// A sample request: 8 workers, one of them with a warm prefix cache.
pub const SAMPLE_REQUEST: &str = include_str!("../../sample-request.json");

/// One worker of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerJson {
    /// The worker's id, unique in the table.
    pub id: u64,
    /// Data-parallel ranks, default 1.
    #[serde(default = "one")]
    pub dp_size: u32,
    /// Advertised KV blocks; 0 or absent means unknown.
    #[serde(default)]
    pub total_kv_blocks: u32,
    /// Most tokens the worker batches per step, when it advertises it.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// Labels (zone, GPU model, one per LoRA adapter served) that `preferred_taints` match.
    #[serde(default)]
    pub taints: Vec<String>,
}

fn one() -> u32 {
    1
}

/// One candidate, (worker, data-parallel rank): what `pinned` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRankJson {
    /// The worker's id.
    pub worker_id: u64,
    /// The rank, default 0.
    #[serde(default)]
    pub dp_rank: u32,
}

/// The whole request file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestJson {
    /// Whose policy selects: required by `switchyard serve`'s `/v1/select`, ignored by
    /// `switchyard select` (so one file serves both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Prompt length, tokens.
    pub prompt_tokens: u32,
    /// KV block size, tokens (≥ 1).
    pub block_size: u32,
    /// Expected output length, tokens, when the caller knows it (a `max_tokens`).
    #[serde(default)]
    pub expected_output_tokens: Option<u32>,
    /// The pool being routed; default `aggregated`.
    #[serde(default)]
    pub pool: Pool,
    /// Per-request seed for ties and sampling (and the policy's only randomness).
    #[serde(default)]
    pub seed: u64,
    /// Picker temperature; absent uses the selector's (0: argmin).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Chained per-block hashes; absent or null: none tracked.
    #[serde(default)]
    pub prefix_hashes: Option<Vec<u64>>,
    /// The policy class the tenant's router chose (`latency`, `batch`, …): picks the
    /// service's route, and a policy may read it.
    #[serde(default)]
    pub policy_class: Option<String>,
    /// A request classifier's class; replaces `policy_class` when present.
    #[serde(default)]
    pub classifier_class: Option<String>,
    /// The one candidate the request may go to, if pinned.
    #[serde(default)]
    pub pinned: Option<WorkerRankJson>,
    /// Only these workers are eligible; absent: every worker.
    #[serde(default)]
    pub allowed_workers: Option<Vec<u64>>,
    /// Taint → weight (finite); a candidate's cost multiplier is
    /// `exp(−tanh(Σ weights of the taints it carries))`.
    #[serde(default)]
    pub preferred_taints: BTreeMap<String, f64>,
    /// The worker table: ids unique, each with `dp_size` ranks. Empty when the request
    /// names a `table` the service holds instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerJson>,
    /// The held worker table to select from (`PUT /v1/tenants/{tenant}/tables/{table}`),
    /// instead of `workers`: the service's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The held table's version this request was decided on; absent: whichever is current.
    /// Another version than the current is refused (`table-version`), never selected from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
    /// Per-worker inputs as columns (rows for workers with any); see [`WorkerInputs`].
    /// With a held `table`, the rows this request changes: each column given replaces the
    /// held value of the rows listed (the request's overlaps, say), the rest stay held.
    #[serde(default)]
    pub inputs: WorkerInputs,
    /// Whether the answer lists every candidate's cost (`costs`); by default it carries
    /// the pick alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub costs: bool,
    /// Asks for a route receipt in the answer: why this worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<ReceiptAsk>,
    /// The conversation (or user) the request belongs to: keeps it on one version while a
    /// class's canary runs (else its `seed` does). The service's only; no policy reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// The most candidates a receipt lists.
pub const MAX_RECEIPT_TOP: usize = 64;

/// What a receipt should hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptAsk {
    /// How many of the cheapest candidates to list, at most [`MAX_RECEIPT_TOP`]; default 8.
    #[serde(default = "eight")]
    pub top: usize,
}

fn eight() -> usize {
    8
}

impl RequestJson {
    /// Parses a request; the error says where the JSON is wrong.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        serde_json::from_str(text).map_err(|e| InputError::new(format!("request JSON: {e}")))
    }

    /// The worker table and the validated request, within the default [`RequestLimits`].
    pub fn into_parts(self) -> Result<(WorkerTable, SelectionRequest), InputError> {
        self.into_parts_within(&RequestLimits::default())
    }

    /// The worker table and the validated request. `limits` are checked first, before
    /// any slot or column is built: a request over one is refused with a message that
    /// names the limit and the offending field.
    pub fn into_parts_within(
        mut self,
        limits: &RequestLimits,
    ) -> Result<(WorkerTable, SelectionRequest), InputError> {
        if let Some(table) = &self.table {
            return Err(InputError::new(format!(
                "the request names a held table (`table`: `{table}`): only `switchyard serve` \
                 holds tables; give `workers` instead"
            )));
        }
        if self.block_size == 0 {
            return Err(InputError::new("block_size must be at least 1 token"));
        }
        limits.check(&self)?;
        let workers = std::mem::take(&mut self.workers);
        let table = WorkerTable::new(workers.into_iter().map(WorkerJson::into_worker).collect())?;
        let inputs = std::mem::take(&mut self.inputs);
        let (facts, options) = self.into_facts();
        let request = SelectionRequest::new(&table, facts, options, inputs)?;
        Ok((table, request))
    }

    /// The request's facts and options (everything but the table and the inputs).
    pub(crate) fn into_facts(self) -> (RequestFacts, RequestOptions) {
        let facts = RequestFacts {
            prompt_tokens: self.prompt_tokens,
            block_size: self.block_size,
            request_blocks: self.prompt_tokens.div_ceil(self.block_size),
            expected_output_tokens: self.expected_output_tokens,
            pinned: self.pinned.map(|p| WorkerRank { worker_id: p.worker_id, dp_rank: p.dp_rank }),
            pool: self.pool,
            seed: self.seed,
        };
        let options = RequestOptions {
            prefix_hashes: self.prefix_hashes,
            policy_class: self.policy_class,
            classifier_class: self.classifier_class,
            preferred_taints: self.preferred_taints,
            allowed_workers: self.allowed_workers,
            temperature: self.temperature,
            // The JSON names taints; the caller's own multipliers are an embedding's API.
            worker_multipliers: None,
        };
        (facts, options)
    }
}

impl WorkerJson {
    /// The table's worker.
    pub fn into_worker(self) -> Worker {
        Worker::new(self.id, self.dp_size, self.total_kv_blocks, self.max_num_batched_tokens)
            .with_taints(self.taints)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{RequestJson, RequestLimits, RequestLimitsConfig};

    fn request(value: serde_json::Value) -> RequestJson {
        serde_json::from_value(value).expect("a well-formed request")
    }

    fn refusal(value: serde_json::Value) -> String {
        request(value).into_parts().expect_err("refused").to_string()
    }

    #[test]
    fn the_dp_size_bomb_is_refused_before_a_slot_is_built() {
        let message = refusal(json!({
            "prompt_tokens": 16, "block_size": 16, "workers": [{"id": 0, "dp_size": u32::MAX}]
        }));
        assert_eq!(message, "worker 0: dp_size 4294967295 exceeds max_dp_size 1024");
        // Under the per-worker limit, but over the total.
        let workers: Vec<_> = (0..10).map(|id| json!({"id": id, "dp_size": 1024})).collect();
        let message = refusal(json!({"prompt_tokens": 16, "block_size": 16, "workers": workers}));
        assert_eq!(message, "workers: 10240 slots (Σ dp_size) exceed max_slots 10000");
    }

    #[test]
    fn every_limit_is_named_with_the_offending_field() {
        let base = || json!({"prompt_tokens": 32, "block_size": 16, "workers": [{"id": 7}]});
        let cases = [
            ("workers", json!((0..10_001).map(|id| json!({"id": id})).collect::<Vec<_>>()), "max_workers"),
            ("workers", json!([{"id": 7, "taints": vec!["t"; 1025]}]), "worker 7: 1025 taints"),
            ("allowed_workers", json!((0..10_001).collect::<Vec<u64>>()), "allowed_workers: 10001"),
            (
                "preferred_taints",
                json!(
                    (0..1025).map(|i| (format!("t{i}"), 1.0)).collect::<std::collections::BTreeMap<_, _>>()
                ),
                "max_preferred_taints 1024",
            ),
            ("prefix_hashes", json!(vec![1u64; 65_537]), "max_prefix_hashes 65536"),
            ("prompt_tokens", json!(65_536 * 16 + 1), "65537 prompt blocks exceed max_prompt_blocks 65536"),
            ("inputs", json!({"worker_id": vec![7u64; 10_001]}), "inputs: 10001 rows exceed max_slots"),
        ];
        for (field, value, expected) in cases {
            let mut r = base();
            r[field] = value;
            let message = refusal(r);
            assert!(message.contains(expected), "{field}: {message}");
        }
        // At the limits: accepted.
        let mut r = base();
        r["workers"] = json!([{"id": 7, "dp_size": 1024, "taints": vec!["t"; 1024]}]);
        r["prompt_tokens"] = json!(65_536 * 16);
        r["prefix_hashes"] = json!(vec![1u64; 65_536]);
        let (table, _) = request(r).into_parts().expect("at the limits");
        assert_eq!(table.slots().len(), 1024);
    }

    #[test]
    fn configured_limits_are_validated_and_applied() {
        let config = RequestLimitsConfig { max_dp_size: 2, ..Default::default() };
        let limits = RequestLimits::new(config).unwrap();
        let r = json!({"prompt_tokens": 1, "block_size": 1, "workers": [{"id": 3, "dp_size": 3}]});
        let message = request(r).into_parts_within(&limits).unwrap_err().to_string();
        assert_eq!(message, "worker 3: dp_size 3 exceeds max_dp_size 2");
        let zero = RequestLimitsConfig { max_slots: 0, ..Default::default() };
        assert_eq!(RequestLimits::new(zero).unwrap_err(), "max_slots must be at least 1");
        let huge = RequestLimitsConfig { max_slots: usize::MAX, ..Default::default() };
        assert!(RequestLimits::new(huge).unwrap_err().contains("ceiling"));
        assert_eq!(RequestLimits::default(), RequestLimits::new(RequestLimitsConfig::default()).unwrap());
    }
}
