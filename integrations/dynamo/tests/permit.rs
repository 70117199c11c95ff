//! In its own process: the adapter's compile permit is one per process, and this test
//! holds it for seconds.

#[path = "all/records.rs"]
mod records;

use std::time::{Duration, Instant};

use switchyard_dynamo::{StorePolicies, SwitchyardConfig};
use switchyard_store::Store;

use records::{blob, manifest};

/// Compiles in-process (no `compile_worker`): a tenant's version that compiles past the
/// deadline is refused but holds the adapter's compile permit until Cranelift returns;
/// another tenant's version refused for the permit meanwhile is tried again once it is
/// free, not left on the builtin default until its record changes.
#[test]
fn a_version_refused_for_a_busy_compile_permit_is_taken_once_the_permit_is_free() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("switchyard-dynamo-store-permit");
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).expect("a data dir");
    let slow = blob(&store, &switchyard_test_util::fixtures::slow_component(2, 250));
    let good = blob(&store, switchyard_test_util::DEFAULT_POLICY);
    // acme's version compiles for seconds; globex's is the default policy's.
    let mut two = manifest(&[("v1", &slow)], "v1");
    let globex = manifest(&[("v1", &good)], "v1").tenants["acme"].clone();
    two.tenants.insert("globex".into(), globex);
    store.write_manifest(&two).unwrap();
    let config = SwitchyardConfig::from_json(serde_json::json!({
        "policy": {"store": {"data_dir": dir, "tenant_from": "routing_group", "class": "latency", "poll_ms": 10}},
        "limits": {"compile_timeout_ms": 1000, "max_component_bytes": 16_000_000},
        "temperature": 0,
    }))
    .expect("valid parameters");
    let policies =
        StorePolicies::load(&config).expect("a partition-aware source loads whatever its tenants hold");
    let acme = policies.tenant("acme").expect("followed");
    let error = acme.last_error().unwrap_or_default();
    assert!(error.contains("compile-timeout"), "acme's compile refused at its deadline: {error}");
    assert_eq!(acme.current().name(), "acme/latency: default");
    let globex = policies.tenant("globex").expect("followed");
    let refused = globex.last_error().unwrap_or_default();
    assert!(refused.contains("compile permit"), "globex's first compile waited on acme's: {refused}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !globex.current().name().starts_with("globex/mine@v1") {
        assert!(
            Instant::now() < deadline,
            "globex never got its version: {} ({:?})",
            globex.current().name(),
            globex.last_error()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(globex.last_error(), None);
}
