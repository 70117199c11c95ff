//! Stateful test guest for isolation. `configure({"secret": "…"})` keeps
//! `MARKER + secret` in its memory. `score` scans the instance's whole linear memory for
//! `MARKER` and fails on purpose with an `internal` error whose message is a JSON report:
//! `{"own": <its secret or null>, "found": [<every secret after a marker>]}`.
//!
//! The marker is stored encoded (every byte + 1) and decoded once at `configure`, so the
//! only plain copies in memory are the needle itself and a configured secret.

use serde_json::{Value, json};
use switchyard_guest_sdk::{Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request};

/// "SWITCHYARD-SECRET:" with every byte + 1.
const ENCODED_MARKER: &[u8] = b"TXJUDIZBSE.TFDSFU;";

/// The isolation probe (see the crate's documentation).
pub struct Secret {
    needle: Vec<u8>,
    own: Option<String>,
    /// `MARKER + secret`: what another tenant must never see.
    kept: Option<Vec<u8>>,
}

impl Policy for Secret {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(if parameters.trim().is_empty() { "{}" } else { parameters })
            .map_err(|e| PolicyError::invalid_parameters(e.to_string()))?;
        let needle: Vec<u8> = ENCODED_MARKER.iter().map(|b| b - 1).collect();
        let own = value.get("secret").and_then(Value::as_str).map(str::to_string);
        let kept = own.as_ref().map(|s| [needle.as_slice(), s.as_bytes(), b"\0"].concat());
        Ok(Secret { needle, own, kept })
    }
    fn info(&self) -> PolicyInfo {
        PolicyInfo { inputs: InputGroups::NONE, filters: false, wants_commits: false }
    }
    fn score(
        &mut self,
        _r: &Request<'_>,
        _c: &Candidates<'_>,
        _costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let found = scan(&self.needle);
        std::hint::black_box(&self.kept);
        Err(PolicyError::internal(json!({ "own": self.own, "found": found }).to_string()))
    }
}

/// Every NUL-terminated string after a copy of `needle` anywhere in linear memory (but
/// the needle itself).
#[cfg(target_arch = "wasm32")]
fn scan(needle: &[u8]) -> Vec<String> {
    let size = core::arch::wasm32::memory_size(0) * 65536;
    let mine = needle.as_ptr() as usize;
    let mut found = Vec::new();
    // Address 0 is null to Rust; a policy's data starts well above it.
    let mut at = 1024;
    while at + needle.len() <= size {
        // SAFETY: `at..at + needle.len()` is inside linear memory (checked above); a
        // wasm load anywhere in bounds is defined, and reads are volatile so the
        // compiler assumes nothing about the bytes.
        let hit = at != mine
            && (0..needle.len())
                .all(|i| unsafe { std::ptr::read_volatile((at + i) as *const u8) } == needle[i]);
        if hit {
            let mut secret = Vec::new();
            let mut p = at + needle.len();
            while p < size && secret.len() < 64 {
                // SAFETY: `p < size`, in bounds as above.
                let b = unsafe { std::ptr::read_volatile(p as *const u8) };
                if b == 0 {
                    break;
                }
                secret.push(b);
                p += 1;
            }
            found.push(String::from_utf8_lossy(&secret).into_owned());
        }
        at += 1;
    }
    found
}

#[cfg(not(target_arch = "wasm32"))]
fn scan(_needle: &[u8]) -> Vec<String> {
    Vec::new()
}

switchyard_guest_sdk::export_policy!(Secret);
