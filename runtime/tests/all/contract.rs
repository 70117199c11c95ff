//! The contract: a guest reads every import through a scorer and sees exactly what the
//! host holds; the native build of the same probe sees the same.

use serde_json::{Value, json};
use switchyard::selection::{NativeScorer, RequestOptions, Scorer, Worker, WorkerInputs, hashes_for_pool};
use switchyard::{FaultKind, GuestScorer, SelectError, Selector, WorkerTable};
use switchyard_guest_sdk::Column;
use switchyard_guest_sdk::{Policy, Pool, WorkerRank};
use switchyard_probe::Probe;

use switchyard_test_util::fixtures::{DEFAULT_POLICY, PROBE, component, facts, request};
use switchyard_test_util::{C_FACTS, DEFAULT_POLICY_C, NOOP};

/// What the probe reported, via its deliberate `internal` error.
fn report(scorer: Box<dyn Scorer>, table: &WorkerTable, req: &switchyard::SelectionRequest) -> Value {
    let mut selector = Selector::new(scorer);
    match selector.select(table, req) {
        Err(SelectError::Fault { fault, .. }) => {
            assert_eq!(fault.kind, FaultKind::PolicyError, "{fault}");
            let json = fault.message.strip_prefix("internal error: ").expect("the probe's report");
            serde_json::from_str(json).expect("the report is JSON")
        }
        other => panic!("the probe always reports through an error, got {other:?}"),
    }
}

fn both(table: &WorkerTable, req: &switchyard::SelectionRequest) -> Value {
    both_with(table, req, "{}")
}

/// [`both`] with the probe's parameters (e.g. `{"only": "columns"}`: the host keeps 1 KiB
/// of a guest's error message, so a large report is asked for in parts).
fn both_with(table: &WorkerTable, req: &switchyard::SelectionRequest, params: &str) -> Value {
    let guest = GuestScorer::new("probe", component(PROBE), params).expect("probe instantiates");
    let guest = report(Box::new(guest), table, req);
    let native = Probe::configure(params).expect("probe configures");
    let native = report(Box::new(NativeScorer::new("probe", native)), table, req);
    assert_eq!(guest, native, "guest and native builds of the probe saw different facts");
    guest
}

fn capacity_table() -> WorkerTable {
    WorkerTable::new(vec![
        Worker::new(10, 1, 4096, Some(8192)),
        Worker::new(11, 1, 0, Some(8192)), // advertised zero: unknown
        Worker::new(12, 2, 2048, None),
    ])
    .unwrap()
}

fn inputs() -> WorkerInputs {
    WorkerInputs::new(vec![12, 10])
        .with(Column::DpRank, vec![1, 0])
        .with(Column::DeviceOverlapBlocks, vec![3, 5])
        .with(Column::HostOverlapBlocks, vec![1, 0])
        .with(Column::DiskOverlapBlocks, vec![0, 2])
        .with(Column::CachedTokens, vec![48, 80])
        .with(Column::ActivePrefillTokens, vec![100, 200])
        .with(Column::DecodeBlocks, vec![7, 9])
        .with(Column::ActiveRequests, vec![1, 2])
}

#[test]
fn guest_sees_hashes_class_capacities_and_columns_as_the_host_holds_them() {
    let table = capacity_table();
    let options = RequestOptions {
        prefix_hashes: Some(vec![101, 102, 103]),
        policy_class: Some("batch".into()),
        classifier_class: Some("latency".into()),
        ..Default::default()
    };
    let mut f = facts(40, 16, Pool::Aggregated, 77);
    f.expected_output_tokens = Some(128);
    let req = request(&table, f, options, inputs());
    let seen = both(&table, &req);

    assert_eq!(seen["prefix_hashes"], json!([101, 102, 103]));
    assert_eq!(seen["policy_class"], json!("latency"), "the classifier's override wins");
    let c4096 = json!({ "total_kv_blocks": 4096, "max_num_batched_tokens": 8192 });
    let c2048 = json!({ "total_kv_blocks": 2048, "max_num_batched_tokens": null });
    // Candidates: (10,0), (11,0), (12,0), (12,1).
    let expected = json!([c4096, null, c2048, c2048]);
    assert_eq!(seen["capacity_single"], expected, "zero capacity is none");
    assert_eq!(seen["capacity_batch"], seen["capacity_single"], "batched form agrees with the single form");
    assert_eq!(seen["capacity_unknown_worker"], Value::Null);
    assert_eq!(
        seen["facts"],
        json!({ "prompt_tokens": 40, "block_size": 16, "request_blocks": 3, "expected_output_tokens": 128,
                "pinned": null, "pool": "aggregated", "seed": 77 })
    );
    let cols = &seen["columns"];
    assert_eq!(cols["worker_id"], json!([10, 11, 12, 12]));
    assert_eq!(cols["dp_rank"], json!([0, 0, 0, 1]));
    assert_eq!(cols["device_overlap_blocks"], json!([5, 0, 0, 3]), "rows without input are zero");
    assert_eq!(cols["disk_overlap_blocks"], json!([2, 0, 0, 0]));
    assert_eq!(cols["active_prefill_tokens"], json!([200, 0, 0, 100]));
    assert_eq!(cols["preferred_multiplier"], Value::Null, "no preferred taints: no multipliers");
}

#[test]
fn preferred_taints_arrive_as_one_multiplier_per_row_in_both_builds() {
    let table = WorkerTable::new(vec![
        Worker::new(10, 1, 4096, None).with_taints(vec!["fast".into()]),
        Worker::new(11, 1, 4096, None),
        Worker::new(12, 2, 4096, None).with_taints(vec!["fast".into(), "big".into()]),
    ])
    .unwrap();
    let taints = std::collections::BTreeMap::from([("fast".to_string(), 0.5), ("big".to_string(), 1.0)]);
    let options = RequestOptions { preferred_taints: taints, ..Default::default() };
    let req = request(&table, facts(40, 16, Pool::Aggregated, 3), options, inputs());
    let seen = both_with(&table, &req, r#"{"only": "columns"}"#);
    let m = seen["preferred_multiplier"].as_array().expect("multipliers present").clone();
    let m: Vec<f64> = m.iter().map(|v| v.as_f64().unwrap()).collect();
    // Rows: (10,0), (11,0), (12,0), (12,1); untainted 11 is exactly 1, the others below 1
    // (a preference lowers the cost), and both ranks of 12 agree.
    assert_eq!(m.len(), 4);
    assert_eq!(m[1], 1.0);
    assert!(m[0] < 1.0 && m[2] < m[0], "two matching preferences weigh more than one: {m:?}");
    assert_eq!(m[2], m[3]);
}

#[test]
fn caller_class_is_seen_when_no_classifier_ran_and_none_when_absent() {
    let table = capacity_table();
    let with = RequestOptions { policy_class: Some("batch".into()), ..Default::default() };
    let req = request(&table, facts(16, 16, Pool::Aggregated, 1), with, WorkerInputs::default());
    assert_eq!(both(&table, &req)["policy_class"], json!("batch"));
    let req = request(
        &table,
        facts(16, 16, Pool::Aggregated, 1),
        RequestOptions::default(),
        WorkerInputs::default(),
    );
    assert_eq!(both(&table, &req)["policy_class"], Value::Null);
}

#[test]
fn prefill_pool_has_no_hashes_and_decode_pool_hashes_are_unique_per_request() {
    let table = capacity_table();
    let hashes = vec![1, 2, 3, 4];
    let prefill = RequestOptions {
        prefix_hashes: hashes_for_pool(Pool::Prefill, hashes.clone(), 1),
        ..Default::default()
    };
    let req = request(&table, facts(64, 16, Pool::Prefill, 1), prefill, WorkerInputs::default());
    assert_eq!(both(&table, &req)["prefix_hashes"], Value::Null);

    let decode_for = |salt: u64| {
        let options = RequestOptions {
            prefix_hashes: hashes_for_pool(Pool::Decode, hashes.clone(), salt),
            ..Default::default()
        };
        let req = request(&table, facts(64, 16, Pool::Decode, salt), options, WorkerInputs::default());
        let seen: Vec<u64> = serde_json::from_value(both(&table, &req)["prefix_hashes"].clone()).unwrap();
        seen
    };
    let (a, b) = (decode_for(1), decode_for(2));
    assert_eq!(a.len(), hashes.len());
    assert!(a.iter().all(|h| !hashes.contains(h)), "decode-pool hashes never match the shared prefix");
    assert!(a.iter().all(|h| !b.contains(h)), "two requests never share decode-pool hashes");
}

#[test]
fn pinned_request_shows_only_the_pinned_candidate() {
    let table = capacity_table();
    let mut f = facts(16, 16, Pool::Aggregated, 3);
    f.pinned = Some(WorkerRank { worker_id: 12, dp_rank: 1 });
    let req = request(&table, f, RequestOptions::default(), inputs());
    let seen = both(&table, &req);
    assert_eq!(seen["columns"]["worker_id"], json!([12]));
    assert_eq!(seen["columns"]["dp_rank"], json!([1]));
    assert_eq!(seen["facts"]["pinned"], json!([12, 1]));
}

/// `on-selected` runs on `Selector::commit` only: selections alone (dry runs, retries)
/// leave a stateful policy as it was. Shown with the SGLang policy, whose tree sizes
/// steer a request that matches nothing to the smallest tree.
#[test]
fn on_selected_is_called_on_commit_and_never_on_select_guest_and_native() {
    let builtin = switchyard_builtins::find("sglang-cache-aware").unwrap();
    let guest = GuestScorer::new("sglang", component(builtin.component), "{}").unwrap();
    let table = WorkerTable::new((0..3).map(|id| Worker::new(id, 1, 1000, None)).collect()).unwrap();
    let with_hashes = |hashes: Vec<u64>, seed: u64| {
        let options = RequestOptions { prefix_hashes: Some(hashes), ..Default::default() };
        request(&table, facts(64, 16, Pool::Aggregated, seed), options, WorkerInputs::default())
    };
    let worker = |id: u64| WorkerRank { worker_id: id, dp_rank: 0 };
    for scorer in [Box::new(guest) as Box<dyn Scorer>, builtin.native("{}").unwrap()] {
        assert!(scorer.info().wants_commits);
        let mut selector = Selector::new(scorer);
        let a = with_hashes(vec![1, 2, 3, 4], 1);
        let d = with_hashes(vec![50, 51, 52, 53], 2);
        let e = with_hashes(vec![90, 91, 92, 93], 3);
        // Commit A to worker 0: its tree holds 4 blocks, workers 1 and 2 none.
        selector.select(&table, &a).unwrap();
        selector.commit(&table, &a, worker(0)).unwrap();
        // Dry runs of D: the smallest tree (worker 1, first of the tie) each time.
        for _ in 0..5 {
            assert_eq!(selector.select(&table, &d).unwrap().chosen, worker(1));
        }
        // Had a dry run inserted D under worker 1, E (matching nothing) would go to the
        // now smallest tree, worker 2. It still goes to worker 1: nothing was inserted.
        assert_eq!(selector.select(&table, &e).unwrap().chosen, worker(1));
        // Commit D to worker 1: now E goes to worker 2, and D follows its cache.
        selector.select(&table, &d).unwrap();
        selector.commit(&table, &d, worker(1)).unwrap();
        assert_eq!(selector.select(&table, &e).unwrap().chosen, worker(2));
        assert_eq!(selector.select(&table, &d).unwrap().chosen, worker(1));
        assert_eq!(selector.select(&table, &a).unwrap().chosen, worker(0));
    }
}

/// The canonical-ABI post-return functions a component's core module exports, by the
/// export they clean up after (`cabi_post_<export>`), and how many lifted functions
/// name one.
fn post_returns(bytes: &[u8]) -> (Vec<String>, usize) {
    use wasmparser::{CanonicalFunction, CanonicalOption, Parser, Payload};
    let (mut exported, mut lifted) = (Vec::new(), 0);
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.expect("a valid component") {
            Payload::ExportSection(exports) => {
                for export in exports {
                    if let Some(after) = export.unwrap().name.strip_prefix("cabi_post_") {
                        exported.push(after.to_string());
                    }
                }
            }
            Payload::ComponentCanonicalSection(functions) => {
                for function in functions {
                    if let CanonicalFunction::Lift { options, .. } = function.unwrap() {
                        lifted +=
                            options.iter().filter(|o| matches!(o, CanonicalOption::PostReturn(_))).count();
                    }
                }
            }
            _ => {}
        }
    }
    (exported, lifted)
}

#[test]
fn sdk_guests_answer_score_and_filter_without_a_post_return() {
    // Both SDKs answer from buffers the instance keeps, so the host makes no second call
    // into the guest after each batch; only `configure`'s answer is freed afterwards.
    for (name, bytes) in [
        ("default", DEFAULT_POLICY),
        ("probe", PROBE),
        ("noop", NOOP),
        ("default-c", DEFAULT_POLICY_C),
        ("c-facts", C_FACTS),
    ] {
        let (exported, lifted) = post_returns(bytes);
        assert_eq!(exported, ["switchyard:policy/policy@0.2.0#configure"], "{name}");
        assert_eq!(lifted, 1, "{name}");
    }
}
