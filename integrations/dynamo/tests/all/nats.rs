//! A store source on a fleet's NATS registry (a real nats-server, the records written as a
//! replica writes them): the watch wakes the follower at once, each tenant changes alone,
//! and a registry lost while the router runs leaves every tenant's version running, says
//! so on each, and is followed again once it is back. (`tests/all/dynamo_nats.rs` at the
//! workspace root drives the same through a real `switchyard serve --registry`.)

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dynamo_kv_router::{KvRouterConfig, RoutingPartitionRef, WorkerSelectionPolicyFactory, WorkerType};
use switchyard::FailMode;
use switchyard_dynamo::{LivePolicy, StorePolicies, SwitchyardConfig};
use switchyard_registry_nats::{Buckets, Expected, NatsRegistry, blobs::sha256};
use switchyard_store::{Assignment, PolicyRecord, TenantRecord, VersionRecord};
use switchyard_test_util::nats::NatsServer;

use crate::common::{Rng, random_fixture};

/// Writes the registry as a `serve` replica does: blobs, then each tenant's record as a
/// compare-and-set on the revision it last wrote.
struct Writer {
    runtime: tokio::runtime::Runtime,
    registry: NatsRegistry,
    revisions: HashMap<String, u64>,
}

impl Writer {
    fn connect(url: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let registry = runtime.block_on(NatsRegistry::connect(url, &Buckets::default())).expect("connects");
        Self { runtime, registry, revisions: HashMap::new() }
    }

    /// `bytes` stored as a blob, and `tenant`'s class `latency` routed (fail-closed) to
    /// them as policy `mine` with `params`: the version's name.
    fn put(&mut self, tenant: &str, bytes: &[u8], params: &str) -> String {
        let blob = sha256(bytes);
        let version = sha256(&[bytes, params.as_bytes()].concat());
        let record = VersionRecord {
            version: version.clone(),
            blob: blob.clone(),
            params: params.into(),
            size: bytes.len(),
        };
        let mut tenant_record = TenantRecord { token_sha256: "00".into(), ..Default::default() };
        let policy =
            PolicyRecord { versions: vec![record], active: version.clone(), previous: vec![], next: vec![] };
        tenant_record.policies.insert("mine".into(), policy);
        let assignment = Assignment {
            policy: "mine".into(),
            version: None,
            on_fault: FailMode::Closed,
            ..Assignment::default()
        };
        tenant_record.classes.insert("latency".into(), assignment);
        let expected = self.revisions.get(tenant).map_or(Expected::Absent, |r| Expected::Revision(*r));
        let revision = self.runtime.block_on(async {
            self.registry.put_blob(&blob, bytes).await.expect("the blob is stored");
            self.registry.put_tenant(tenant, &tenant_record, expected).await.expect("the record is written")
        });
        self.revisions.insert(tenant.into(), revision);
        version
    }

    /// The revision of `tenant`'s key now.
    fn revision_of(&self, tenant: &str) -> u64 {
        let loaded = self.runtime.block_on(self.registry.load()).expect("loads");
        loaded.revisions[&format!("tenant.{tenant}")]
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Selects for routing group `group` on a thread of its own until `stop`, as Dynamo's
/// router would: how many answered, and every failure.
fn selecting(
    factory: &WorkerSelectionPolicyFactory,
    group: &'static str,
    stop: &Arc<AtomicBool>,
) -> (Arc<AtomicUsize>, std::thread::JoinHandle<Vec<String>>) {
    let answered = Arc::new(AtomicUsize::new(0));
    let (factory, count, stop) = (Arc::clone(factory), Arc::clone(&answered), Arc::clone(stop));
    let thread = std::thread::spawn(move || {
        let partition = RoutingPartitionRef::new("m", group);
        let policies: Vec<_> = [WorkerType::Aggregated, WorkerType::Prefill, WorkerType::Decode]
            .into_iter()
            .map(|t| (t, factory(&KvRouterConfig::default(), t, partition)))
            .collect();
        let mut rng = Rng::new(group.len() as u64 + 3);
        let mut failed = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let fixture = random_fixture(&mut rng);
            let (_, policy) = policies.iter().find(|(t, _)| *t == fixture.worker_type).expect("each pool");
            match fixture.select(policy) {
                Ok(_) => drop(count.fetch_add(1, Ordering::Relaxed)),
                Err(e) => failed.push(e),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        failed
    });
    (answered, thread)
}

/// Waits until `answered` has grown by `n` more.
fn more(answered: &AtomicUsize, n: usize) {
    let from = answered.load(Ordering::Relaxed);
    wait_until("more answers", || answered.load(Ordering::Relaxed) >= from + n);
}

fn runs(live: &LivePolicy, version: &str) -> bool {
    live.current().name().contains(&version[..12])
}

#[test]
fn the_registry_lost_and_back_keeps_every_tenants_version_and_follows_again() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut nats = NatsServer::start(tmp, "dynamo-registry");
    let named = |tenant: &str| {
        SwitchyardConfig::from_json(serde_json::json!({
            "policy": {"store": {"registry": nats.url(), "tenant": tenant, "class": "latency"}},
        }))
        .expect("valid parameters")
    };
    // A named tenant the registry does not have: refused at start-up, naming the store.
    let e = StorePolicies::load(&named("acme")).err().expect("refused");
    assert_eq!(e.field(), "policy.store");
    assert!(e.message().contains(&format!("tenant `acme` is not in the registry at {}", nats.url())), "{e}");

    let mut writer = Writer::connect(&nats.url());
    let policy = switchyard_test_util::DEFAULT_POLICY;
    let a1 = writer.put("acme", policy, "{}");
    writer.put("globex", policy, r#"{"prefill_load_scale":4}"#);
    assert!(runs(&StorePolicies::load(&named("acme")).unwrap().tenant("acme").unwrap(), &a1));

    // A poll far longer than the test: only the watch can make the follower take a change.
    let config = SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"store": {
            "registry": nats.url(), "tenant_from": "routing_group",
            "tenants": {"group-a": "acme", "group-b": "globex"}, "class": "latency", "poll_ms": 60_000,
        }},
        "temperature": 0,
    }))
    .expect("valid parameters");
    let policies = StorePolicies::load(&config).expect("every tenant's version loads");
    assert_eq!(policies.tenants(), ["acme", "globex"], "every tenant of the registry, at start-up");
    let (acme, globex) = (policies.tenant("acme").unwrap(), policies.tenant("globex").unwrap());
    assert!(runs(&acme, &a1), "{}", acme.current().name());
    let factory = Arc::clone(&policies).factory();
    let stop = Arc::new(AtomicBool::new(false));
    let (a, a_thread) = selecting(&factory, "group-a", &stop);
    let (b, b_thread) = selecting(&factory, "group-b", &stop);
    more(&a, 20);
    more(&b, 20);

    // A change to acme's record is taken at once, and moves acme alone.
    let a2 = writer.put("acme", &switchyard_test_util::variant(policy, 1), "{}");
    wait_until("acme's v2 runs", || runs(&acme, &a2));
    assert_eq!((acme.generation(), globex.generation()), (1, 0));

    // The registry gone: each keeps its version, and says why.
    nats.kill();
    let lost = |live: &LivePolicy| live.last_error().is_some_and(|e| e.contains(&nats.url()));
    wait_until("both say the registry is lost", || lost(&acme) && lost(&globex));
    more(&a, 50);
    more(&b, 50);
    assert!(runs(&acme, &a2));
    assert_eq!((acme.generation(), globex.generation()), (1, 0));

    // Back: followed again, with the changes made since.
    nats.start_again();
    wait_until("the errors clear", || acme.last_error().is_none() && globex.last_error().is_none());
    let mut writer = Writer::connect(&nats.url());
    let revision = writer.revision_of("acme");
    writer.revisions.insert("acme".into(), revision);
    let a3 = writer.put("acme", &switchyard_test_util::variant(policy, 2), "{}");
    wait_until("acme's v3 runs", || runs(&acme, &a3));
    more(&a, 20);
    more(&b, 20);

    stop.store(true, Ordering::Relaxed);
    for (group, thread) in [("group-a", a_thread), ("group-b", b_thread)] {
        let failed = thread.join().expect("a selecting thread");
        assert!(failed.is_empty(), "{group}: selections failed: {failed:?}");
    }
    assert_eq!((acme.generation(), globex.generation()), (2, 0), "globex never moved");
    assert_eq!(acme.last_error(), None);
}
