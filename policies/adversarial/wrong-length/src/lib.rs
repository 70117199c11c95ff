//! Hostile guest: `score` returns one cost fewer than there are candidates. The SDK sizes
//! the costs for a policy, so this crate writes its own bindings (wit-bindgen, as a tenant
//! without the SDK would) to return what it likes.

#[cfg(target_arch = "wasm32")]
mod export {
    wit_bindgen::generate!({ path: "../../../wit", world: "selection-policy" });

    use exports::switchyard::policy::policy;
    use switchyard::policy::types as wit;

    struct WrongLength;

    impl policy::Guest for WrongLength {
        fn describe() -> wit::PolicyInfo {
            wit::PolicyInfo { inputs: wit::InputGroups::LOAD, filters: false, wants_commits: false }
        }
        fn configure(_parameters: String) -> Result<(), wit::PolicyError> {
            Ok(())
        }
        fn score(
            _request: wit::RequestFacts,
            candidates: wit::Candidates,
        ) -> Result<Vec<f64>, wit::PolicyError> {
            let n = candidates.worker_id.len().saturating_sub(1);
            Ok(vec![1.0; n])
        }
        fn filter(
            _request: wit::RequestFacts,
            candidates: wit::Candidates,
        ) -> Result<Vec<bool>, wit::PolicyError> {
            Ok(vec![true; candidates.worker_id.len()])
        }
        fn on_selected(_request: wit::RequestFacts, _chosen: wit::WorkerRank) {}
    }

    export!(WrongLength);
}
