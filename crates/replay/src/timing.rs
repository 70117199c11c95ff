//! The simulated cluster's timing model: deliberately simple, documented, and the same
//! for every policy, so differences in the report come from the routing alone.
//!
//! - **Prefill** runs one request at a time per worker, first come first served:
//!   `prefill_ms = prefill_base_ms + uncached_tokens × prefill_ms_per_token`, where the
//!   uncached tokens are the prompt minus the prefix the worker holds when the request is
//!   admitted. TTFT = queueing for the prefill slot + prefill.
//! - **Decode** starts when prefill ends; its batch size `b` is the number of requests
//!   decoding on that worker at that moment, itself included, held for the request:
//!   `decode_ms = output_tokens × (decode_step_ms + b × decode_ms_per_sequence)`.
//! - Disaggregated: prefill runs on a prefill worker, decode on a decode worker; the KV
//!   transfer costs `transfer_ms_per_block` per prompt block before decode starts.
//!
//! The defaults are of the order of an 8B model on one H100-class GPU.

use serde::Serialize;

/// The model's figures (see the module's documentation for how they combine).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimingModel {
    /// Fixed cost of a prefill, ms.
    pub prefill_base_ms: f64,
    /// Prefill cost per uncached prompt token, ms (0.05 ms = 20,000 tokens/s).
    pub prefill_ms_per_token: f64,
    /// Cost of one decode step with an empty batch, ms.
    pub decode_step_ms: f64,
    /// Extra cost of a decode step per sequence in the batch, ms.
    pub decode_ms_per_sequence: f64,
    /// KV transfer from a prefill to a decode worker, ms per prompt block (disaggregated).
    pub transfer_ms_per_block: f64,
}

impl Default for TimingModel {
    fn default() -> Self {
        Self {
            prefill_base_ms: 5.0,
            prefill_ms_per_token: 0.05,
            decode_step_ms: 10.0,
            decode_ms_per_sequence: 0.25,
            transfer_ms_per_block: 0.5,
        }
    }
}

impl TimingModel {
    /// How long a prefill of `uncached_tokens` takes, ms.
    pub fn prefill_ms(&self, uncached_tokens: u64) -> f64 {
        self.prefill_base_ms + uncached_tokens as f64 * self.prefill_ms_per_token
    }

    /// How long decoding `output_tokens` takes in a batch of `batch` sequences, ms.
    pub fn decode_ms(&self, output_tokens: u32, batch: u32) -> f64 {
        f64::from(output_tokens) * (self.decode_step_ms + f64::from(batch) * self.decode_ms_per_sequence)
    }

    /// How long moving `blocks` prompt blocks to a decode worker takes, ms.
    pub fn transfer_ms(&self, blocks: usize) -> f64 {
        blocks as f64 * self.transfer_ms_per_block
    }

    /// Every figure must be finite and ≥ 0.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("prefill_base_ms", self.prefill_base_ms),
            ("prefill_ms_per_token", self.prefill_ms_per_token),
            ("decode_step_ms", self.decode_step_ms),
            ("decode_ms_per_sequence", self.decode_ms_per_sequence),
            ("transfer_ms_per_block", self.transfer_ms_per_block),
        ];
        match fields.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
            Some((name, v)) => Err(format!("timing `{name}` must be finite and ≥ 0, got {v}")),
            None => Ok(()),
        }
    }
}
