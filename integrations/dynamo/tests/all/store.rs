//! A store source whose next change cannot be taken (a component that does not load, the
//! tenant gone) keeps its running version, says why, and takes the next good change; at
//! start-up the same failures refuse the configuration, naming the store.

use std::path::Path;
use std::time::{Duration, Instant};

use switchyard_dynamo::{StorePolicies, SwitchyardConfig};
use switchyard_store::{Manifest, Store};

use crate::common::{Rng, policy, random_fixture};
use crate::records::{blob, manifest};

fn config(dir: &Path) -> SwitchyardConfig {
    SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"store": {"data_dir": dir, "tenant": "acme", "class": "latency", "poll_ms": 10}},
        "temperature": 0,
    }))
    .expect("valid parameters")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_change_that_cannot_be_taken_keeps_the_running_version() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("switchyard-dynamo-store-bad");
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).expect("a data dir");
    let good = blob(&store, switchyard_test_util::DEFAULT_POLICY);
    let bad = blob(&store, b"\0asm not a component");
    let good2 = blob(&store, &switchyard_test_util::variant(switchyard_test_util::DEFAULT_POLICY, 1));

    // At start-up: no tenant yet is a refusal naming the store.
    let e = StorePolicies::load(&config(&dir)).err().expect("refused");
    assert_eq!(e.field(), "policy.store");
    assert!(e.message().contains("tenant `acme` is not in"), "{e}");

    store.write_manifest(&manifest(&[("v1", &good)], "v1")).unwrap();
    let policies = StorePolicies::load(&config(&dir)).expect("loads");
    let live = policies.tenant("acme").expect("followed");
    let factory = std::sync::Arc::clone(&policies).factory();
    let mut rng = Rng::new(5);
    let mut select = || {
        let fixture = random_fixture(&mut rng);
        fixture.select(&policy(&factory, fixture.worker_type)).expect("answered")
    };
    select();

    // A version that does not load: the running one stays, and says why.
    store.write_manifest(&manifest(&[("v1", &good), ("v2", &bad)], "v2")).unwrap();
    wait_until("the bad version is reported", || live.last_error().is_some());
    let error = live.last_error().unwrap();
    assert!(error.contains("acme/mine@v2") && error.contains("not-wasm"), "{error}");
    assert_eq!(live.generation(), 0);
    select();

    // The tenant gone: the same.
    store.write_manifest(&Manifest::default()).unwrap();
    wait_until("the missing tenant is reported", || live.last_error().is_some_and(|e| e.contains("tenant")));
    assert_eq!(live.generation(), 0);
    select();

    // The next good change is taken.
    store.write_manifest(&manifest(&[("v1", &good), ("v3", &good2)], "v3")).unwrap();
    wait_until("v3 runs", || live.generation() == 1);
    assert_eq!(live.last_error(), None);
    assert!(live.current().name().ends_with("@v3"), "{}", live.current().name());
    select();
}

#[test]
fn partitions_name_their_tenants_up_to_max_tenants() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("switchyard-dynamo-store-partitions");
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).expect("a data dir");
    let good = blob(&store, switchyard_test_util::DEFAULT_POLICY);
    store.write_manifest(&manifest(&[("v1", &good)], "v1")).unwrap();
    let config = SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"store": {
            "data_dir": dir, "tenant_from": "model_name", "tenants": {"llama": "acme"},
            "class": "latency", "poll_ms": 10, "max_tenants": 2,
        }},
        "temperature": 0,
    }))
    .expect("valid parameters");
    let policies = StorePolicies::load(&config).expect("loads");
    assert_eq!(policies.tenants(), ["acme"]);
    let partition = |model| dynamo_kv_router::RoutingPartitionRef::new(model, "default");
    // The model name through the map, and a model named for a tenant not in the store.
    assert!(policies.for_partition(partition("llama")).current().name().starts_with("acme/mine@v1"));
    let other = policies.for_partition(partition("qwen"));
    assert_eq!(other.current().name(), "qwen/latency: default");
    assert_eq!(policies.tenants(), ["acme", "qwen"]);
    // Beyond max_tenants: the default, not followed.
    let over = policies.for_partition(partition("mistral"));
    assert!(over.current().name().contains("over max_tenants"), "{}", over.current().name());
    assert_eq!(policies.tenants(), ["acme", "qwen"]);
    // Each answers through Dynamo's selector.
    let factory = std::sync::Arc::clone(&policies).factory();
    let mut rng = Rng::new(9);
    for model in ["llama", "qwen", "mistral"] {
        let fixture = random_fixture(&mut rng);
        let policy =
            factory(&dynamo_kv_router::KvRouterConfig::default(), fixture.worker_type, partition(model));
        fixture.select(&policy).expect("answered");
    }
}
