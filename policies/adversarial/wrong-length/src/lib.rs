//! Hostile guest: `score` returns one cost fewer than there are candidates. The SDK sizes
//! the costs for a policy, so this crate implements the generated `Guest` trait directly
//! (through the SDK's hidden `guest` module) to return what it likes.

#[cfg(target_arch = "wasm32")]
mod export {
    use switchyard_guest_sdk::guest::exports::switchyard::policy::policy as exports;
    use switchyard_guest_sdk::guest::switchyard::policy::types as wit;

    struct WrongLength;

    impl exports::Guest for WrongLength {
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

    switchyard_guest_sdk::guest::__export_selection_policy!(WrongLength with_types_in switchyard_guest_sdk::guest);
}
