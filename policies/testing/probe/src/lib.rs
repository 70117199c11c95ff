//! A contract probe. `score` reads every import and every column and fails on purpose
//! with an `internal` error whose message is a JSON report of what it saw, so a test can
//! compare it with what the host holds (and native with guest). The host keeps 1 KiB of a
//! guest's message: `{"only": "columns"}` (any top-level key) reports that part alone.

use serde_json::json;
use switchyard_guest_sdk::{
    Candidates, Capacity, InputGroups, Policy, PolicyError, PolicyInfo, Pool, Request,
};

/// Reports what it sees (all of it, or only the `only` key).
#[derive(Default)]
pub struct Probe {
    only: Option<String>,
}

fn capacity(c: Option<Capacity>) -> serde_json::Value {
    match c {
        Some(c) => {
            json!({ "total_kv_blocks": c.total_kv_blocks, "max_num_batched_tokens": c.max_num_batched_tokens })
        }
        None => serde_json::Value::Null,
    }
}

impl Policy for Probe {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: serde_json::Value =
            serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
                .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        Ok(Probe { only: value.get("only").and_then(|v| v.as_str()).map(str::to_string) })
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::ALL, filters: false, wants_commits: false }
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        c: &Candidates<'_>,
        _costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let f = request.facts();
        let single: Vec<_> = c.worker_ids().iter().map(|&id| capacity(request.worker_capacity(id))).collect();
        let batch: Vec<_> = request.candidate_capacities().iter().map(|&c| capacity(c)).collect();
        let report = json!({
            "prefix_hashes": request.prefix_hashes().map(|h| h.into_owned()),
            "policy_class": request.policy_class().map(|c| c.into_owned()),
            "capacity_single": single,
            "capacity_batch": batch,
            "capacity_unknown_worker": capacity(request.worker_capacity(u64::MAX)),
            "facts": {
                "prompt_tokens": f.prompt_tokens,
                "block_size": f.block_size,
                "request_blocks": f.request_blocks,
                "expected_output_tokens": f.expected_output_tokens,
                "pinned": f.pinned.map(|w| [w.worker_id, u64::from(w.dp_rank)]),
                "pool": match f.pool { Pool::Aggregated => "aggregated", Pool::Prefill => "prefill", Pool::Decode => "decode" },
                "seed": f.seed,
            },
            "columns": {
                "worker_id": c.worker_ids(),
                "dp_rank": c.dp_ranks(),
                "device_overlap_blocks": c.device_overlap_blocks(),
                "host_overlap_blocks": c.host_overlap_blocks(),
                "disk_overlap_blocks": c.disk_overlap_blocks(),
                "cached_tokens": c.cached_tokens(),
                "active_prefill_tokens": c.active_prefill_tokens(),
                "decode_blocks": c.decode_blocks(),
                "active_requests": c.active_requests(),
                "preferred_multiplier": c.preferred_multiplier(),
            },
        });
        let report = match &self.only {
            Some(key) => report.get(key).cloned().unwrap_or(serde_json::Value::Null),
            None => report,
        };
        Err(PolicyError::internal(report.to_string()))
    }
}

switchyard_guest_sdk::export_policy!(Probe);
