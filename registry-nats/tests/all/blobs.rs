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
