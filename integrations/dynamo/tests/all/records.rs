//! A data dir's records, written as `switchyard serve` writes them.

use switchyard::FailMode;
use switchyard_store::{Assignment, Manifest, PolicyRecord, Store, TenantRecord, VersionRecord};

/// `bytes` stored as a blob: its name (their sha256) and size.
pub fn blob(store: &Store, bytes: &[u8]) -> (String, usize) {
    use sha2::Digest;
    let name = hex::encode(sha2::Sha256::digest(bytes));
    store.write_blob(&name, bytes).unwrap();
    (name, bytes.len())
}

/// A manifest in which acme's class `latency` follows policy `mine`, whose active
/// version is `active`; `blobs` are (version, blob).
pub fn manifest(blobs: &[(&str, &(String, usize))], active: &str) -> Manifest {
    let versions = blobs
        .iter()
        .map(|(v, (blob, size))| VersionRecord {
            version: (*v).into(),
            blob: blob.clone(),
            params: "{}".into(),
            size: *size,
        })
        .collect();
    let mut tenant = TenantRecord::default();
    tenant.policies.insert(
        "mine".into(),
        PolicyRecord { versions, active: active.into(), previous: vec![], next: vec![] },
    );
    let assignment = Assignment {
        policy: "mine".into(),
        version: None,
        on_fault: FailMode::Closed,
        ..Assignment::default()
    };
    tenant.classes.insert("latency".into(), assignment);
    let mut manifest = Manifest::default();
    manifest.tenants.insert("acme".into(), std::sync::Arc::new(tenant));
    manifest
}
