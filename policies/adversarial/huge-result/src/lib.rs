//! Hostile guest: `score` returns `{"len": n}` costs of 1.0 (default 5,000,000, 40 MB),
//! whatever the number of candidates. The SDK sizes the costs for a policy, so this
//! crate implements the generated `Guest` trait directly (through the SDK's hidden
//! `guest` module) to return what it likes. The host must reject the wrong length as
//! invalid output without trouble (the result is lifted within its limits), and answer
//! the selection.

#[cfg(target_arch = "wasm32")]
mod export {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::Value;
    wit_bindgen::generate!({ path: "../../../wit", world: "selection-policy" });

    use exports::switchyard::policy::policy;
    use switchyard::policy::types as wit;

    /// The number of costs `score` returns, set by `configure` (one instance per
    /// component instance, so one value per instance).
    static LEN: AtomicUsize = AtomicUsize::new(DEFAULT_LEN);

    const DEFAULT_LEN: usize = 5_000_000;

    struct HugeResult;

    fn invalid_parameters(message: String) -> wit::PolicyError {
        wit::PolicyError { kind: wit::ErrorKind::InvalidParameters, message }
    }

    impl policy::Guest for HugeResult {
        fn describe() -> wit::PolicyInfo {
            wit::PolicyInfo { inputs: wit::InputGroups::LOAD, filters: false, wants_commits: false }
        }
        fn configure(parameters: String) -> Result<(), wit::PolicyError> {
            let json = if parameters.trim().is_empty() { "{}" } else { parameters.as_str() };
            let value: Value = serde_json::from_str(json).map_err(|e| invalid_parameters(e.to_string()))?;
            let len = value.get("len").and_then(Value::as_u64).unwrap_or(DEFAULT_LEN as u64);
            let len = usize::try_from(len).map_err(|e| invalid_parameters(format!("field `len`: {e}")))?;
            LEN.store(len, Ordering::Relaxed);
            Ok(())
        }
        fn score(
            _request: wit::RequestFacts,
            _candidates: wit::Candidates,
        ) -> Result<Vec<f64>, wit::PolicyError> {
            Ok(vec![1.0; LEN.load(Ordering::Relaxed)])
        }
        fn filter(
            _request: wit::RequestFacts,
            candidates: wit::Candidates,
        ) -> Result<Vec<bool>, wit::PolicyError> {
            Ok(vec![true; candidates.worker_id.len()])
        }
        fn on_selected(_request: wit::RequestFacts, _chosen: wit::WorkerRank) {}
    }

    export!(HugeResult);
}
