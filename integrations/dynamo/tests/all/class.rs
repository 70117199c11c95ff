//! The policy class: a session's `x-dynamo-meta-policy-class` agent header reaches the
//! policy's `policy-class()` import, in Dynamo's own selection path.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use dynamo_kv_router::protocols::WorkerWithDpRank;
use dynamo_kv_router::scheduling::OverlapSignals;
use dynamo_kv_router::{SessionContext, WorkerLoadProjection, WorkerType};
use rustc_hash::FxHashMap;
use switchyard::selection::{RequestOptions, Worker, WorkerInputs};
use switchyard::{SelectionRequest, Selector, WorkerTable};
use switchyard_guest_sdk::{Column, Pool, RequestFacts};

use crate::common::{Fixture, TestWorker, component_file, policy, query, resolve};

/// Worker 10 is cold and idle; worker 20 holds the whole 1,024-token prompt but has 100
/// decode blocks. Dynamo's default cost (the class-aware policy's default row) prefers 10
/// (64 prefill blocks vs 100); `latency` doubles the prefill cost and prefers 20.
fn fixture(class: Option<&str>) -> Fixture {
    let (cold, warm) = (WorkerWithDpRank::new(10, 0), WorkerWithDpRank::new(20, 0));
    let mut effective = FxHashMap::default();
    let mut cached = FxHashMap::default();
    effective.insert(warm, 64.0);
    cached.insert(warm, 1024);
    let mut loads = FxHashMap::default();
    loads.insert(cold, WorkerLoadProjection::default());
    loads.insert(warm, WorkerLoadProjection { active_decode_blocks: 100, ..Default::default() });
    let session = class.map(|c| {
        let headers =
            BTreeMap::from([("x-dynamo-meta-policy-class".to_string(), vec![" ".into(), c.into()])]);
        SessionContext::new("s".into(), None, None, None).with_agent_headers(Arc::new(headers))
    });
    let overlap = OverlapSignals {
        tier_overlap_blocks: Default::default(),
        effective_overlap_blocks: effective,
        effective_cached_tokens: cached,
    };
    let mut request = query(1024, overlap, loads);
    request.session_context = session;
    let workers = HashMap::from([
        (10, TestWorker { dp_size: 1, ..Default::default() }),
        (20, TestWorker { dp_size: 1, ..Default::default() }),
    ]);
    Fixture { workers, request, block_size: 16, worker_type: WorkerType::Aggregated }
}

/// Switchyard's own selection of the same rows by the class-aware policy, with `class`.
fn switchyard_pick(class: Option<&str>) -> u64 {
    let table = WorkerTable::new(vec![Worker::new(10, 1, 0, None), Worker::new(20, 1, 0, None)]).unwrap();
    let facts = RequestFacts {
        prompt_tokens: 1024,
        block_size: 16,
        request_blocks: 64,
        expected_output_tokens: None,
        pinned: None,
        pool: Pool::Aggregated,
        seed: 0,
    };
    let options = RequestOptions {
        policy_class: class.map(str::to_string),
        temperature: Some(0.0),
        ..Default::default()
    };
    let inputs = WorkerInputs::new(vec![10, 20])
        .with(Column::DeviceOverlapBlocks, vec![0, 64])
        .with(Column::CachedTokens, vec![0, 1024])
        .with(Column::DecodeBlocks, vec![0, 100]);
    let request = SelectionRequest::new(&table, facts, options, inputs).unwrap();
    let scorer = switchyard_builtins::find("class-aware").unwrap().native("{}").unwrap();
    Selector::new(scorer).select(&table, &request).unwrap().chosen.worker_id
}

#[test]
fn the_class_header_reaches_the_policy() {
    let bytes = switchyard_builtins::find("class-aware").unwrap().component;
    let file = component_file("class-aware", bytes);
    let parameters = format!(
        "        policy: {{file: {}}}\n        on_fault: closed\n        temperature: 0",
        file.display()
    );
    let factory = resolve("class-aware", &parameters).expect("the class-aware guest loads");
    let ours = policy(&factory, WorkerType::Aggregated);
    let pick = |class: Option<&str>| fixture(class).select(&ours).expect("selects").worker_id;
    assert_eq!(pick(None), 10, "no class: the default row");
    assert_eq!(pick(Some("latency")), 20, "latency: cache affinity");
    for class in [None, Some("latency"), Some("batch")] {
        assert_eq!(pick(class), switchyard_pick(class), "{class:?}: as Switchyard picks");
    }
    // Too long to be a class: routed as no class, not refused.
    assert_eq!(pick(Some(&"l".repeat(65))), 10);
}
