//! The Dynamo adapter following the data dir of a running `switchyard serve`, or a fleet's
//! NATS registry that a `switchyard serve --registry` replica writes: an upload and a
//! rollback through the service's API take effect inside Dynamo's selector while another
//! thread selects, with no failed selection and every answer from the old or the new
//! version; with a partition-aware source, each routing group runs its own tenant's policy
//! and one tenant's changes and faults leave the other groups alone.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dynamo_kv_router::protocols::{RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank};
use dynamo_kv_router::scheduling::{OverlapSignals, ScheduleMode};
use dynamo_kv_router::{
    KvRouterConfig, RoutingPartitionRef, SchedulingRequest, WorkerLoadProjection, WorkerSelectionInput,
    WorkerSelector, WorkerType,
};
use rustc_hash::FxHashMap;
use serde_json::json;
use switchyard_dynamo::{StorePolicies, SwitchyardConfig};
use switchyard_test_util::DEFAULT_POLICY;

use switchyard_test_util::fleet::replica;
use switchyard_test_util::nats::NatsServer;
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

#[derive(Default)]
struct TestWorker(HashSet<String>);

impl WorkerConfigLike for TestWorker {
    fn data_parallel_start_rank(&self) -> u32 {
        0
    }
    fn data_parallel_size(&self) -> u32 {
        1
    }
    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }
    fn total_kv_blocks(&self) -> Option<u64> {
        None
    }
    fn taints(&self) -> &HashSet<String> {
        &self.0
    }
}

/// Two workers whose order the default policy's `prefill_load_scale` decides: a 100-block
/// prompt; worker 1 has 150 decode blocks, worker 2 100 blocks of prefill queued. At scale
/// 1 worker 2 costs 200 and worker 1 250; at scale 4, 800 and 550.
fn request() -> SchedulingRequest {
    let load = |prefill_tokens: usize, decode_blocks: usize| WorkerLoadProjection {
        active_prefill_tokens: prefill_tokens,
        active_decode_blocks: decode_blocks,
        active_requests: 1,
        additional_active_blocks: 0,
    };
    let mut loads = FxHashMap::default();
    loads.insert(WorkerWithDpRank::new(1, 0), load(0, 150));
    loads.insert(WorkerWithDpRank::new(2, 0), load(1_600, 0));
    SchedulingRequest {
        mode: ScheduleMode::QueryOnly { request_id: None },
        token_seq: None,
        isl_tokens: 1_600,
        lora_name: None,
        expected_output_tokens: None,
        affinity_target: None,
        pinned_worker: None,
        allowed_worker_ids: None,
        routing_constraints: RoutingConstraints::default(),
        router_config_override: None,
        track_prefill_tokens: true,
        priority_jump: 0.0,
        strict_priority: 0,
        policy_class: None,
        session_context: None,
        overlap: OverlapSignals {
            tier_overlap_blocks: Default::default(),
            effective_overlap_blocks: FxHashMap::default(),
            effective_cached_tokens: FxHashMap::default(),
        },
        kv_transfer_candidates: None,
        retain_kv_transfer_chain: false,
        shared_cache_hits: None,
        worker_loads: loads,
        resp_tx: None,
    }
}

fn select(
    policy: &impl WorkerSelector<TestWorker>,
    workers: &HashMap<WorkerId, TestWorker>,
) -> Result<u64, String> {
    let request = request();
    let input = WorkerSelectionInput::configured(workers, &request, request.eligibility(), 16);
    policy.select_worker(input).map(|r| r.worker.worker_id).map_err(|e| e.to_string())
}

/// Waits until the selecting thread's last answer is `worker`.
fn wait_for(answers: &std::sync::Mutex<Vec<u64>>, worker: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while answers.lock().unwrap().last() != Some(&worker) {
        assert!(Instant::now() < deadline, "{what}: Dynamo's selector never answered worker {worker}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dynamo_follows_an_upload_and_a_rollback_while_selecting() {
    let dir = temp_dir("dynamo-store");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let v1 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "latency", json!({ "policy": "mine", "on_fault": "closed" }));

    let config = SwitchyardConfig::from_json(json!({
        "policy": {"store": {"data_dir": dir.join("data"), "tenant": "acme", "class": "latency", "poll_ms": 20}},
        "temperature": 0,
    }))
    .expect("valid parameters");
    let policies = StorePolicies::load(&config).expect("the class's version loads");
    let live = policies.tenant("acme").expect("the named tenant is followed");
    assert!(
        live.current().name().starts_with(&format!("acme/mine@{}", &v1[..12])),
        "{}",
        live.current().name()
    );
    let factory = Arc::clone(&policies).factory();

    // Another thread selects throughout, as Dynamo's router would.
    let stop = Arc::new(AtomicBool::new(false));
    let (answers, thread) = selecting(&factory, ("m", "d"), &stop);
    wait_for(&answers, 2, "v1 (scale 1)");

    // A new upload becomes the policy's active version, which the class follows.
    let params = "%7B%22prefill_load_scale%22%3A4%7D";
    let v2 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(params));
    assert_ne!(v1, v2);
    wait_for(&answers, 1, "v2 (scale 4)");
    assert!(live.current().name().contains(&v2[..12]), "{}", live.current().name());

    // A rollback through the API: v1 answers again.
    let (status, v) = c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&token), Body::None);
    assert_eq!(status, 200, "{v}");
    wait_for(&answers, 2, "v1 after the rollback");
    let settled = answers.lock().unwrap().len();
    while answers.lock().unwrap().len() < settled + 50 {
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let failed = thread.join().expect("the selecting thread");

    assert!(failed.is_empty(), "selections failed: {failed:?}");
    assert_eq!(live.generation(), 2, "one swap for the upload, one for the rollback");
    assert_eq!(live.last_error(), None);
    // Each answer is one version's: v1's worker 2, then v2's worker 1, then v1's again,
    // never back and forth (no selection mixes the versions, none flaps).
    let answers = answers.lock().unwrap();
    let mut runs: Vec<u64> = answers.clone();
    runs.dedup();
    assert_eq!(runs, [2, 1, 2], "{} answers", answers.len());
}

#[test]
fn dynamo_refuses_a_blob_whose_bytes_are_not_its_name_or_over_the_limit() {
    let dir = temp_dir("dynamo-store-blob");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let v1 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "latency", json!({ "policy": "mine", "on_fault": "closed" }));
    drop(server);
    let config = SwitchyardConfig::from_json(json!({
        "policy": {"store": {"data_dir": dir.join("data"), "tenant": "acme", "class": "latency"}},
    }))
    .expect("valid parameters");
    let blob = dir.join("data").join("blobs").join(format!("{v1}.wasm"));

    // Other bytes of the same size under this blob's name: never compiled as it.
    let mut other = DEFAULT_POLICY.to_vec();
    let last = other.len() - 1;
    other[last] ^= 1;
    std::fs::write(&blob, other).unwrap();
    let refused = StorePolicies::load(&config).err().expect("a blob that is not its name is refused");
    assert!(refused.to_string().contains("not to their name"), "{refused}");

    // A file far over what compiles: refused before it is read.
    std::fs::write(&blob, vec![0u8; 5 << 20]).unwrap();
    let refused = StorePolicies::load(&config).err().expect("an oversized blob is refused");
    assert!(refused.to_string().contains("over"), "{refused}");
}

/// Selects for `partition` on a thread of its own until `stop`, as Dynamo's router would:
/// every answer in order, and every failure.
fn selecting(
    factory: &dynamo_kv_router::WorkerSelectionPolicyFactory,
    partition: (&'static str, &'static str),
    stop: &Arc<AtomicBool>,
) -> (Arc<std::sync::Mutex<Vec<u64>>>, std::thread::JoinHandle<Vec<String>>) {
    let answers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (factory, out, stop) = (Arc::clone(factory), Arc::clone(&answers), Arc::clone(stop));
    let thread = std::thread::spawn(move || {
        let policy = factory(
            &KvRouterConfig::default(),
            WorkerType::Aggregated,
            RoutingPartitionRef::new(partition.0, partition.1),
        );
        let workers: HashMap<WorkerId, TestWorker> =
            [(1, TestWorker::default()), (2, TestWorker::default())].into();
        let mut failed = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            match select(&policy, &workers) {
                Ok(worker) => out.lock().unwrap().push(worker),
                Err(e) => failed.push(e),
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        failed
    });
    (answers, thread)
}

/// Waits until `answers` has grown by `n` more.
fn more(answers: &std::sync::Mutex<Vec<u64>>, n: usize) {
    let from = answers.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while answers.lock().unwrap().len() < from + n {
        assert!(Instant::now() < deadline, "no more answers");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What two routing groups of two tenants (group-a acme's, group-b globex's) and a group
/// of none run while they select: every answer in order, each thread's failures.
struct Groups {
    policies: Arc<StorePolicies>,
    factory: dynamo_kv_router::WorkerSelectionPolicyFactory,
    stop: Arc<AtomicBool>,
    acme: String,
    a: Arc<std::sync::Mutex<Vec<u64>>>,
    b: Arc<std::sync::Mutex<Vec<u64>>>,
    n: Arc<std::sync::Mutex<Vec<u64>>>,
    threads: Vec<(&'static str, std::thread::JoinHandle<Vec<String>>)>,
}

/// A partition-aware source on `place` (`{"data_dir": …}` or `{"registry": …}`, and more
/// of the instance's parameters in `extra`) that `c`'s service writes: acme's and globex's
/// policies from the first selection of their groups, the builtin default for a group
/// naming no tenant; then acme uploads a v2 through `c` and rolls it back, moving group-a
/// alone.
fn two_groups(c: &Client, place: serde_json::Value, extra: serde_json::Value) -> Groups {
    let scale4 = Some("%7B%22prefill_load_scale%22%3A4%7D");
    // acme's policy answers worker 2, globex's worker 1 (see `request`).
    let acme = c.add_tenant("acme");
    let a1 = c.uploaded(&acme, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&acme, "acme", "latency", json!({ "policy": "mine", "on_fault": "closed" }));
    let globex = c.add_tenant("globex");
    c.uploaded(&globex, "globex", "theirs", DEFAULT_POLICY, scale4);
    c.assigned(&globex, "globex", "latency", json!({ "policy": "theirs", "on_fault": "closed" }));

    let mut store = json!({
        "tenant_from": "routing_group", "tenants": {"group-a": "acme", "group-b": "globex"}, "class": "latency",
    });
    store.as_object_mut().unwrap().extend(place.as_object().unwrap().clone());
    let mut parameters = json!({"policy": {"store": store}, "temperature": 0});
    parameters.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let config = SwitchyardConfig::from_json(parameters).expect("valid parameters");
    let policies = StorePolicies::load(&config).expect("every tenant's version loads");
    assert_eq!(policies.tenants(), ["acme", "globex"], "every tenant of the store, loaded at start-up");
    let factory = Arc::clone(&policies).factory();
    let stop = Arc::new(AtomicBool::new(false));
    let (a, a_thread) = selecting(&factory, ("m", "group-a"), &stop);
    let (b, b_thread) = selecting(&factory, ("m", "group-b"), &stop);
    // A group no map names and no tenant has: the builtin default (worker 2, as scale 1).
    let (n, n_thread) = selecting(&factory, ("m", "nobody"), &stop);
    more(&a, 20);
    more(&b, 20);
    more(&n, 20);
    assert_eq!(a.lock().unwrap()[0], 2, "acme's policy from the first selection");
    assert_eq!(b.lock().unwrap()[0], 1, "globex's policy from the first selection");

    // An upload by acme moves group-a only; its rollback moves it back.
    let a2 = c.uploaded(&acme, "acme", "mine", DEFAULT_POLICY, scale4);
    assert_ne!(a1, a2);
    wait_for(&a, 1, "acme's v2");
    let acme_live = policies.tenant("acme").expect("followed");
    assert!(acme_live.current().name().contains(&a2[..12]), "{}", acme_live.current().name());
    let (status, v) = c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&acme), Body::None);
    assert_eq!(status, 200, "{v}");
    wait_for(&a, 2, "acme's v1 after its rollback");
    more(&b, 20);
    more(&n, 20);
    let threads = vec![("group-a", a_thread), ("group-b", b_thread), ("nobody", n_thread)];
    Groups { policies, factory, stop, acme, a, b, n, threads }
}

impl Groups {
    /// Stops every selecting thread: the failures of each, by group.
    fn stop(self) -> Vec<(&'static str, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|(group, thread)| (group, thread.join().expect("a selecting thread")))
            .collect()
    }

    /// group-a's answers went v1, v2, v1; group-b's never moved; the group of no tenant
    /// ran the default.
    fn check_answers(&self) {
        let mut runs = self.a.lock().unwrap().clone();
        runs.dedup();
        assert_eq!(runs, [2, 1, 2], "group-a: v1, v2, v1 again, each answer one version's");
        assert!(self.b.lock().unwrap().iter().all(|w| *w == 1), "globex's picks never moved");
        assert!(self.n.lock().unwrap().iter().all(|w| *w == 2), "no tenant: the default");
        let globex = self.policies.tenant("globex").expect("followed");
        assert_eq!((globex.generation(), globex.last_error()), (0, None), "globex never swapped");
        let nobody = self.policies.tenant("nobody").expect("followed");
        assert_eq!(nobody.current().name(), "nobody/latency: default");
    }
}

#[test]
fn each_routing_group_runs_its_own_tenants_policy_and_changes_alone() {
    let dir = temp_dir("dynamo-partitions");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    // Every compile in a `switchyard compile-worker` process of the real binary.
    let more_parameters = json!({"compile_worker": switchyard_test_util::server::binary()});
    let mut groups = two_groups(&c, json!({"data_dir": dir.join("data"), "poll_ms": 20}), more_parameters);

    // A tenant created now, its group first seen before: followed from then on.
    let (i, i_thread) = selecting(&groups.factory, ("m", "initech"), &groups.stop);
    more(&i, 5);
    let initech = c.add_tenant("initech");
    c.uploaded(&initech, "initech", "p", DEFAULT_POLICY, Some("%7B%22prefill_load_scale%22%3A4%7D"));
    c.assigned(&initech, "initech", "latency", json!({ "policy": "p", "on_fault": "closed" }));
    wait_for(&i, 1, "initech's own policy");
    groups.threads.push(("initech", i_thread));

    // A hostile policy for acme, which spins: group-a's selections fail (fail-closed),
    // its breaker opens; group-b's go on, every one globex's.
    let bad = c.uploaded(&groups.acme, "acme", "spin", switchyard_test_util::hostile::ILOOP, None);
    c.assigned(&groups.acme, "acme", "latency", json!({ "policy": "spin", "on_fault": "closed" }));
    let acme_live = groups.policies.tenant("acme").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !acme_live.current().name().contains(&bad[..12]) {
        assert!(
            Instant::now() < deadline,
            "acme's hostile version never ran: {}",
            acme_live.current().name()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let b_before = groups.b.lock().unwrap().len();
    more(&groups.b, 200);
    assert!(groups.b.lock().unwrap().len() >= b_before + 200);
    groups.check_answers();
    for (group, failed) in groups.stop() {
        if group == "group-a" {
            assert!(!failed.is_empty(), "acme's spinning policy fails its own selections (fail-closed)");
        } else {
            assert!(failed.is_empty(), "{group}: selections failed: {failed:?}");
        }
    }
}

/// The same source on a fleet's NATS registry: a real nats-server and a real `switchyard
/// serve --registry` replica.
#[test]
fn each_routing_group_follows_its_tenant_in_a_fleets_registry() {
    let dir = temp_dir("dynamo-nats");
    let nats = NatsServer::start(Path::new(env!("CARGO_TARGET_TMPDIR")), "dynamo-nats");
    let server = replica(&dir, "a", &nats.url());
    let c = Client::new(&server);
    // A poll far longer than the test: the registry's watch alone brings each change.
    let groups = two_groups(&c, json!({"registry": nats.url(), "poll_ms": 60_000}), json!({}));
    groups.check_answers();
    let acme = groups.policies.tenant("acme").expect("followed");
    assert_eq!((acme.generation(), acme.last_error()), (2, None), "the upload, the rollback");
    for (group, failed) in groups.stop() {
        assert!(failed.is_empty(), "{group}: selections failed: {failed:?}");
    }
}
