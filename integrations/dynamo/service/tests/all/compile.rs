//! `switchyard-dynamo` compiles in worker processes of its own, killed at
//! `limits.compile_timeout_ms`: a tenant's version that compiles for seconds stops at the
//! deadline (that tenant runs the builtin default and says why), and the other tenants'
//! versions load and serve without waiting for it.

use std::time::{Duration, Instant};

use serde_json::json;
use sha2::Digest;
use switchyard_test_util::DEFAULT_POLICY;
use switchyard_test_util::fixtures::slow_component;
use switchyard_test_util::server::{Client, Server, temp_dir};

use crate::common::{Dynamo, Engine, switchyard_binary};

#[test]
fn a_version_that_compiles_past_the_deadline_is_killed_and_the_other_tenants_serve() {
    let dir = temp_dir("dynamo-service-compile");
    switchyard_binary();
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    for tenant in ["acme", "globex"] {
        let token = c.add_tenant(tenant);
        c.uploaded(&token, tenant, "mine", DEFAULT_POLICY, None);
        c.assigned(&token, tenant, "latency", json!({ "policy": "mine", "on_fault": "closed" }));
    }
    drop(server);
    // acme's version made one whose component Cranelift takes many seconds over (written
    // into the store: `serve` refuses this one at upload, being no policy, but a policy can
    // compile as slowly).
    let data = dir.join("data");
    let slow = slow_component(24, 600);
    let sha256 = hex::encode(sha2::Sha256::digest(&slow));
    let store = switchyard_store::Store::open(&data).unwrap();
    store.write_blob(&sha256, &slow).unwrap();
    let mut acme = switchyard_store::StoreReader::new(&data).unwrap().load_tenant("acme").unwrap().unwrap();
    for version in &mut acme.policies.get_mut("mine").unwrap().versions {
        (version.blob, version.size) = (sha256.clone(), slow.len());
    }
    store.write_tenant("acme", Some(&acme)).unwrap();
    drop(store);

    // Every tenant is loaded before the service answers: acme's compile must end at its
    // deadline (in-process it would run on for its whole length, seconds more).
    let deadline = Duration::from_millis(1_000);
    let started = Instant::now();
    let dynamo = Dynamo::start(
        &dir,
        &format!(
            "[switchyard]\ntemperature = 0\n[switchyard.limits]\ncompile_timeout_ms = {}\nmax_component_bytes = 16000000\n[switchyard.policy.store]\ndata_dir = {data:?}\ntenant_from = \"routing_group\"\nclass = \"latency\"\n[switchyard.policy.store.tenants]\ngroup-a = \"acme\"\ngroup-b = \"globex\"\n",
            deadline.as_millis()
        ),
    );
    let took = started.elapsed();
    println!("answering after {took:?}");
    assert!(took < deadline + Duration::from_secs(4), "the service answered only after {took:?}");
    let log = dynamo.log();
    assert!(
        log.contains("tenant=\"acme\"") && log.contains("compile-timeout"),
        "acme's version refused at its deadline: {log}"
    );
    // In-process, acme's compile would run on holding the compile permit, and globex's
    // would be refused waiting for it.
    assert!(!log.contains("tenant=\"globex\""), "globex's version loads: {log}");
    // Both groups select: globex by its version, acme by the builtin default.
    let context = zmq::Context::new();
    let mut engines = Vec::new();
    for (group, id) in [("group-a", 1), ("group-b", 2)] {
        let engine = Engine::new(&context);
        dynamo.register(group, id, &engine, 1000);
        engines.push(engine);
        let (status, v) =
            dynamo.call("POST", "/select", Some(&json!({"routing_group": group, "token_ids": [1, 2, 3, 4]})));
        assert_eq!((status, v["worker_id"].as_u64()), (200, Some(id)), "{group}: {v}");
    }
}
