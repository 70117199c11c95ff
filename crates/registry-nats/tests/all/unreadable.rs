//! Keys this build cannot read (a value that does not parse, a kind of key it does not
//! write, a record naming what the service cannot have) are skipped at load and in the
//! watch, never an error; fields a newer build added are read, and kept by a rewrite.

use std::time::Duration;

use switchyard_registry_nats::{Buckets, Event, Expected, Key, NatsRegistry, RegistryError};
use switchyard_store::{Holds, TenantRecord};

use crate::server::{registry, start};
use crate::watch::next_event;

/// A tenant record as a newer build might write it: fields this build does not know, in
/// the record and in a class of it.
fn newer_record(token: &str) -> serde_json::Value {
    serde_json::json!({
        "token_sha256": token,
        "policies": {},
        "classes": {"latency": {"policy": "lmetric", "version": null, "on_fault": "open", "weight": 2}},
        "quota": {"selections_per_second": 5},
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_this_build_cannot_read_are_skipped_and_a_newer_records_fields_kept() {
    let server = start("unreadable");
    let client = registry(&server).await;
    let kv = client.records();
    client
        .put_tenant(
            "good",
            &TenantRecord { token_sha256: "gg".into(), ..Default::default() },
            Expected::Absent,
        )
        .await
        .unwrap();
    kv.put("tenant.evil", "not json".into()).await.unwrap();
    kv.put("widget.x", "a newer kind of key".into()).await.unwrap();
    kv.put("tenant.Bad", r#"{"token_sha256": "bb"}"#.into()).await.unwrap();
    kv.put("tenant.newer", newer_record("nn").to_string().into()).await.unwrap();

    let loaded = client.load().await.expect("loads, skipping what it cannot read");
    assert_eq!(loaded.manifest.tenants.keys().collect::<Vec<_>>(), ["good", "newer"]);
    let skipped: Vec<(&str, &Holds)> =
        loaded.manifest.unreadable.iter().map(|(k, u)| (k.as_str(), &u.holds)).collect();
    assert_eq!(
        skipped,
        [
            ("tenant.Bad", &Holds::Tenant("Bad".into())),
            ("tenant.evil", &Holds::Tenant("evil".into())),
            ("widget.x", &Holds::Unknown),
        ]
    );
    assert!(loaded.manifest.unreadable["tenant.evil"].reason.contains("expected ident"));
    assert!(loaded.revisions.contains_key("tenant.evil"), "its revision, for the watch to skip past");

    // The newer record, written again by this build, keeps what it did not know.
    let mut newer = (*loaded.manifest.tenants["newer"]).clone();
    newer.token_sha256 = "n2".into();
    client.put_tenant("newer", &newer, Expected::Revision(loaded.revisions["tenant.newer"])).await.unwrap();
    let stored = kv.get("tenant.newer").await.unwrap().expect("stored");
    let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(stored, newer_record("n2"));

    // The watch: an unreadable write is an event saying why, a removal of an unknown
    // key one too; readable changes go on around them.
    let mut events = Box::pin(client.watch(loaded.last_revision).await.unwrap());
    assert!(
        matches!(next_event(&mut events).await, Event::Change(c) if c.key == Key::Tenant("newer".into()))
    );
    let revision = kv.put("tenant.good", "{\"token_sha256\": 5}".into()).await.unwrap();
    match next_event(&mut events).await {
        Event::Unreadable { key, revision: r, record: Some(u) } => {
            assert_eq!((key.as_str(), r, &u.holds), ("tenant.good", revision, &Holds::Tenant("good".into())));
            assert!(u.reason.contains("invalid type"), "{}", u.reason);
        }
        other => panic!("{other:?}"),
    }
    kv.delete("widget.x").await.unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        Event::Unreadable { key, record: None, .. } if key == "widget.x"
    ));
    kv.put("tenant.evil", r#"{"token_sha256": "ee"}"#.into()).await.unwrap();
    match next_event(&mut events).await {
        Event::Change(c) => assert_eq!(c.key, Key::Tenant("evil".into())),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_blob_is_swept_while_a_record_this_build_cannot_read_stands() {
    let server = start("unreadable-sweep");
    let buckets = Buckets { blob_grace: Duration::ZERO, ..Buckets::default() };
    let client = NatsRegistry::connect(&server.url(), &buckets).await.expect("connects");
    let bytes = b"a component only a newer build's record names".to_vec();
    let blob = switchyard_registry_nats::blobs::sha256(&bytes);
    client.put_blob(&blob, &bytes).await.unwrap();
    let record = serde_json::json!({ "token_sha256": "nn", "policies": { "p": { "blobs_v2": [blob] } } });
    client.records().put("tenant.newer", record.to_string().into()).await.unwrap();

    let refused = client.sweep_blobs().await;
    match &refused {
        Err(RegistryError::Corrupt { key, reason }) => {
            assert_eq!(key, "tenant.newer");
            assert!(reason.contains("no blob is swept"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.read_blob(&blob).await.unwrap(), bytes, "kept");

    // Once the record is gone, the blob nothing names is swept as ever.
    client.records().delete("tenant.newer").await.unwrap();
    assert_eq!(client.sweep_blobs().await.unwrap(), std::slice::from_ref(&blob));
    assert!(matches!(client.read_blob(&blob).await, Err(RegistryError::NoBlob(_))));
}
