//! Blobs are named by their sha256, checked when stored and when read.

use switchyard_registry_nats::RegistryError;
use switchyard_registry_nats::blobs::sha256;

use crate::server::{registry, start};

#[tokio::test(flavor = "multi_thread")]
async fn a_blob_round_trips_and_a_wrong_name_is_refused() {
    let server = start("blobs");
    let registry = registry(&server).await;
    // A blob larger than one object-store chunk (128 KiB).
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let name = sha256(&bytes);
    registry.put_blob(&name, &bytes).await.expect("stored");
    registry.put_blob(&name, &bytes).await.expect("storing again is a no-op");
    assert_eq!(registry.read_blob(&name).await.expect("read"), bytes);

    let wrong = sha256(b"other bytes");
    let refused = registry.put_blob(&wrong, &bytes).await;
    assert!(matches!(refused, Err(RegistryError::Corrupt { .. })), "{refused:?}");
    let missing = registry.read_blob(&wrong).await;
    assert!(matches!(missing, Err(RegistryError::NoBlob(_))), "{missing:?}");

    registry.remove_blob(&name).await.expect("removed");
    registry.remove_blob(&name).await.expect("removing twice is fine");
    assert!(matches!(registry.read_blob(&name).await, Err(RegistryError::NoBlob(_))));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_removes_only_old_blobs_no_tenant_names() {
    use std::time::Duration;

    use switchyard_registry_nats::{Buckets, Expected, NatsRegistry};
    use switchyard_store::{PolicyRecord, TenantRecord, VersionRecord};

    let server = start("blobs-sweep");
    let grace = Duration::from_secs(1);
    let buckets = Buckets { blob_grace: grace, ..Buckets::default() };
    let registry = NatsRegistry::connect(&server.url(), &buckets).await.expect("connects");
    let blob = |tag: &str| {
        let bytes = format!("component {tag}").into_bytes();
        (sha256(&bytes), bytes)
    };
    let [(unnamed, unnamed_bytes), (named, named_bytes), (rewritten, rewritten_bytes), (young, young_bytes)] =
        ["unnamed", "named", "rewritten", "young"].map(blob);
    for (name, bytes) in [(&unnamed, &unnamed_bytes), (&named, &named_bytes), (&rewritten, &rewritten_bytes)]
    {
        registry.put_blob(name, bytes).await.expect("stored");
    }
    let version = VersionRecord { version: "v1".into(), blob: named.clone(), params: "{}".into(), size: 10 };
    let policy =
        PolicyRecord { versions: vec![version], active: "v1".into(), previous: Vec::new(), next: Vec::new() };
    let record = TenantRecord {
        token_sha256: "t".into(),
        policies: [("mine".to_string(), policy)].into(),
        ..Default::default()
    };
    registry.put_tenant("acme", &record, Expected::Absent).await.expect("a tenant naming one blob");

    // Past the grace: an upload storing `rewritten` again makes it young; `young` is new.
    tokio::time::sleep(grace + Duration::from_millis(200)).await;
    registry.put_blob(&rewritten, &rewritten_bytes).await.expect("stored again");
    registry.put_blob(&young, &young_bytes).await.expect("stored");

    let removed = registry.sweep_blobs().await.expect("swept");
    assert_eq!(removed, vec![unnamed.clone()]);
    assert!(matches!(registry.read_blob(&unnamed).await, Err(RegistryError::NoBlob(_))));
    for (name, bytes) in [(&named, &named_bytes), (&rewritten, &rewritten_bytes), (&young, &young_bytes)] {
        assert_eq!(&registry.read_blob(name).await.expect("kept"), bytes);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blob_whose_chunks_are_gone_is_an_error_not_a_hang() {
    // What a read sees when a sweep deletes the blob between reading its description and
    // its chunks: the description is there, the chunks never come.
    let server = start("blobs-gone");
    let registry = registry(&server).await;
    let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let name = sha256(&bytes);
    registry.put_blob(&name, &bytes).await.expect("stored");
    let client = async_nats::connect(server.url()).await.expect("connects");
    let js = async_nats::jetstream::new(client);
    let store = js.get_object_store("switchyard-blobs").await.expect("the blob store");
    let nuid = store.info(&name).await.expect("described").nuid;
    let stream = js.get_stream("OBJ_switchyard-blobs").await.expect("the blob stream");
    stream.purge().filter(format!("$O.switchyard-blobs.C.{nuid}")).await.expect("chunks purged");

    // Without a deadline of its own the read would hang for good.
    let read = tokio::time::timeout(std::time::Duration::from_secs(60), registry.read_blob(&name)).await;
    let read = read.expect("the read gave up by itself");
    assert!(matches!(read, Err(RegistryError::Unavailable(_))), "{read:?}");
}
