//! A stored record this build cannot read never keeps `switchyard serve` from starting:
//! a value that is not JSON, a key of a kind this build does not write (a fleet's), a
//! damaged tenant file (a data dir's). Each is skipped, counted in
//! `switchyard_registry_records_skipped_total`, and kept as it is: re-creating its tenant
//! is refused, not written over it. Fields a newer build added to a record are read, and
//! kept when this build writes the record. Real `serve` processes, a real nats-server.

use std::path::Path;

use serde_json::{Value, json};
use switchyard_registry_nats::{Buckets, NatsRegistry};
use switchyard_test_util::nats::NatsServer;

use switchyard_test_util::fleet::{acme_with_mine, kind, replica, wait_for_version};
use switchyard_test_util::server::{ADMIN, Body, Client, Server, temp_dir};

const SKIPPED: &str = "switchyard_registry_records_skipped_total";

/// Adds, to a tenant record as stored (JSON), the fields a newer build might have added:
/// one in the record, one in its class `latency`.
fn with_newer_fields(record: &mut Value) {
    record["quota"] = json!({ "selections_per_second": 5 });
    record["classes"]["latency"]["weight"] = json!(2);
}

/// Whether `record` (JSON) still holds what [`with_newer_fields`] added.
fn keeps_newer_fields(record: &Value) -> bool {
    record["quota"] == json!({ "selections_per_second": 5 }) && record["classes"]["latency"]["weight"] == 2
}

/// Re-creating tenant `name` through `client` is refused 409 `exists`, naming the
/// record it would have replaced (`at`).
fn recreate_refused(client: &Client, name: &str, at: &str) {
    let (status, v) = client.call("POST", "/v1/tenants", Some(ADMIN), Body::Json(json!({ "name": name })));
    assert_eq!((status, kind(&v)), (409, "exists"), "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(at) && message.contains("cannot read"), "{message}");
}

#[test]
fn a_replica_starts_past_registry_records_it_cannot_read_and_keeps_a_newer_records_fields() {
    let dir = temp_dir("fleet-unreadable");
    let nats = NatsServer::start(Path::new(env!("CARGO_TARGET_TMPDIR")), "fleet-unreadable");
    let a_server = replica(&dir, "a", &nats.url());
    let a = Client::new(&a_server);
    let (token, v1) = acme_with_mine(&a, "latency");

    // What a damaged registry, or a newer build sharing it, may hold.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let registry =
        runtime.block_on(NatsRegistry::connect(&nats.url(), &Buckets::default())).expect("connects");
    let kv = registry.records();
    let get = |key: &str| -> Option<Vec<u8>> {
        runtime.block_on(kv.get(key)).expect("reads the bucket").map(|bytes| bytes.to_vec())
    };
    let put = |key: &str, value: Vec<u8>| {
        runtime.block_on(kv.put(key, value.into())).expect("writes the bucket");
    };
    put("tenant.evil", b"not json".to_vec());
    put("widget.x", b"a kind of key a newer build writes".to_vec());
    let mut acme: Value = serde_json::from_slice(&get("tenant.acme").expect("acme is stored")).unwrap();
    with_newer_fields(&mut acme);
    put("tenant.acme", acme.to_string().into_bytes());
    // A, running, skips both in its watch, and takes acme's record with the new fields.
    assert!(a.wait_for_metric(SKIPPED, 2.0), "A counts the two it skipped: {}", a.metric(SKIPPED));

    // B starts on that registry, serves acme with its policy, and says what it skipped.
    let b_server = replica(&dir, "b", &nats.url());
    let b = Client::new(&b_server);
    wait_for_version(&b, &token, "latency", &v1, "B");
    assert_eq!(b.metric(SKIPPED), 2.0);
    recreate_refused(&b, "evil", "tenant.evil");
    assert_eq!(get("tenant.evil").as_deref(), Some(&b"not json"[..]), "kept as it was");

    // A write of acme by this build keeps the fields it does not know.
    b.assigned(&token, "acme", "batch", json!({ "policy": "mine" }));
    let stored: Value = serde_json::from_slice(&get("tenant.acme").unwrap()).unwrap();
    assert!(keeps_newer_fields(&stored), "{stored}");
    assert_eq!(stored["classes"]["batch"]["policy"], "mine", "{stored}");
    wait_for_version(&a, &token, "batch", &v1, "A");

    // acme's record becomes one this build cannot read: B goes on serving what it read
    // before, and refuses to write over the new record.
    put("tenant.acme", br#"{"token_sha256": 5}"#.to_vec());
    assert!(b.wait_for_metric(SKIPPED, 3.0), "B counts the write it skipped: {}", b.metric(SKIPPED));
    wait_for_version(&b, &token, "latency", &v1, "B");
    let (status, v) = b.assign(&token, "acme", "other", json!({ "policy": "mine" }));
    assert_eq!((status, kind(&v)), (409, "conflict"), "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or_default().contains("tenant.acme"), "{v}");
    assert_eq!(get("tenant.acme").as_deref(), Some(&br#"{"token_sha256": 5}"#[..]));
}

#[test]
fn a_server_starts_past_a_tenant_file_it_cannot_read_and_leaves_it_alone() {
    let dir = temp_dir("unreadable-file");
    let data = dir.join("data");
    let (token, v1) = {
        let server = Server::start(&data, None, Some(ADMIN));
        acme_with_mine(&Client::new(&server), "latency")
    };
    // A damaged record file, a blob no other record names (the damaged one may), and
    // acme's record as a newer build would have written it.
    let evil = data.join("tenants/evil.json");
    std::fs::write(&evil, b"{\"token_sha256\": ").unwrap();
    let bytes = switchyard_test_util::server::variant(switchyard_test_util::DEFAULT_POLICY, 7);
    let blob = data.join(format!("blobs/{}.wasm", switchyard_registry_nats::blobs::sha256(&bytes)));
    std::fs::write(&blob, &bytes).unwrap();
    let acme_file = data.join("tenants/acme.json");
    let mut acme: Value = serde_json::from_slice(&std::fs::read(&acme_file).unwrap()).unwrap();
    with_newer_fields(&mut acme);
    std::fs::write(&acme_file, acme.to_string()).unwrap();

    let server = Server::start(&data, None, Some(ADMIN));
    let client = Client::new(&server);
    wait_for_version(&client, &token, "latency", &v1, "the server");
    assert_eq!(client.metric(SKIPPED), 1.0);
    recreate_refused(&client, "evil", "tenants/evil.json");
    assert_eq!(std::fs::read(&evil).unwrap(), b"{\"token_sha256\": ", "kept as it was");
    assert!(blob.exists(), "no blob is swept as an orphan while a record cannot be read");
    // Other tenants come and go as ever.
    client.add_tenant("beta");
    client.assigned(&token, "acme", "batch", json!({ "policy": "mine" }));
    let stored: Value = serde_json::from_slice(&std::fs::read(&acme_file).unwrap()).unwrap();
    assert!(keeps_newer_fields(&stored), "{stored}");

    // And again after a restart: nothing of it was lost or written over.
    drop(server);
    let server = Server::start(&data, None, Some(ADMIN));
    let client = Client::new(&server);
    wait_for_version(&client, &token, "batch", &v1, "the restarted server");
    assert_eq!(client.metric(SKIPPED), 1.0);
    assert_eq!(std::fs::read(&evil).unwrap(), b"{\"token_sha256\": ");
    assert!(blob.exists());
}
