//! Component blobs in the object store, named by the sha256 of their bytes. A blob is
//! checked against its name when it is stored and again when it is read, so a replica
//! never compiles bytes other than those its manifest names. Blobs no tenant names any
//! more are swept after a grace period ([`NatsRegistry::sweep_blobs`]), as Git prunes
//! unreachable objects: old enough that no upload in flight can be about to name them.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::object_store::ObjectInfo;
use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use crate::error::RegistryError;
use crate::registry::NatsRegistry;

/// The largest blob read back: over any component the engine accepts.
const MAX_BLOB_BYTES: u64 = 64 << 20;

/// The longest a blob read may take: a 4 MiB component reads in well under a second on
/// any network a fleet runs on.
pub const BLOB_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The hex sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// How old `info`'s last write is (zero if NATS did not say).
fn age(info: &ObjectInfo) -> Duration {
    let Some(modified) = info.modified else { return Duration::ZERO };
    let age = time::OffsetDateTime::now_utc() - modified;
    age.try_into().unwrap_or(Duration::ZERO)
}

impl NatsRegistry {
    /// Stores `bytes` as the blob `name`, which must be their sha256. A no-op if present
    /// and written less than a quarter of the blob grace ago; an older one is written
    /// again, which makes it fresh, so a sweep (which takes only blobs no tenant names,
    /// older than the grace) cannot take it while the upload that wrote it commits.
    pub async fn put_blob(&self, name: &str, bytes: &[u8]) -> Result<(), RegistryError> {
        if sha256(bytes) != name {
            return Err(RegistryError::corrupt(name, "the bytes' sha256 is not the blob's name"));
        }
        if let Ok(info) = self.blobs.info(name).await
            && !info.deleted
            && age(&info) < self.blob_grace / 4
        {
            return Ok(());
        }
        let mut reader = bytes;
        self.blobs.put(name, &mut reader).await.map_err(RegistryError::unavailable)?;
        Ok(())
    }

    /// Removes every blob that no tenant names now (read fresh from the registry, not
    /// from a replica's view) and that was last written longer than the blob grace ago:
    /// left by versions trimmed or rolled away, uploads that never committed, replicas
    /// killed mid-upload. Their names. An upload rewrites an old blob before naming it
    /// (see [`NatsRegistry::put_blob`]), and each blob's age is read again just before it
    /// is removed, so a blob an upload is about to name is young and kept.
    pub async fn sweep_blobs(&self) -> Result<Vec<String>, RegistryError> {
        let manifest = self.load().await?.manifest;
        // A record this build cannot read may name any blob (a newer build's, say): none
        // is swept until it reads or is removed. A replica that reads it sweeps meanwhile.
        if let Some((key, record)) = manifest.unreadable.iter().next() {
            let reason = format!("{}; no blob is swept while it stands, as it may name any", record.reason);
            return Err(RegistryError::corrupt(key, reason));
        }
        let named: HashSet<&str> = manifest.versions().map(|(.., v)| v.blob.as_str()).collect();
        let candidates: Vec<String> = self
            .blobs
            .list()
            .await
            .map_err(RegistryError::unavailable)?
            .map_err(RegistryError::unavailable)
            .try_filter(|info| {
                let old =
                    !info.deleted && !named.contains(info.name.as_str()) && age(info) >= self.blob_grace;
                std::future::ready(old)
            })
            .map_ok(|info| info.name)
            .try_collect()
            .await?;
        let mut removed = Vec::new();
        for name in candidates {
            match self.blobs.info(&name).await {
                Ok(info) if age(&info) >= self.blob_grace => {
                    self.remove_blob(&name).await?;
                    removed.push(name);
                }
                _ => {}
            }
        }
        Ok(removed)
    }

    /// The blob `name`, checked against its sha256. Gives up after [`BLOB_READ_TIMEOUT`]:
    /// an object deleted while it is read (a sweep) leaves a reader waiting for chunks
    /// that never come.
    pub async fn read_blob(&self, name: &str) -> Result<Vec<u8>, RegistryError> {
        match tokio::time::timeout(BLOB_READ_TIMEOUT, self.read_blob_now(name)).await {
            Ok(read) => read,
            Err(_) => Err(RegistryError::Unavailable(format!(
                "reading blob {name} took over {} s (deleted while it was read?)",
                BLOB_READ_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn read_blob_now(&self, name: &str) -> Result<Vec<u8>, RegistryError> {
        let object = match self.blobs.get(name).await {
            Ok(object) => object,
            Err(e) if e.kind() == async_nats::jetstream::object_store::GetErrorKind::NotFound => {
                return Err(RegistryError::NoBlob(name.to_string()));
            }
            Err(e) => return Err(RegistryError::unavailable(e)),
        };
        let mut bytes = Vec::new();
        object.take(MAX_BLOB_BYTES + 1).read_to_end(&mut bytes).await.map_err(RegistryError::unavailable)?;
        if bytes.len() as u64 > MAX_BLOB_BYTES {
            return Err(RegistryError::corrupt(name, format!("over {MAX_BLOB_BYTES} bytes")));
        }
        if sha256(&bytes) != name {
            return Err(RegistryError::corrupt(name, "the stored bytes' sha256 is not the blob's name"));
        }
        Ok(bytes)
    }

    /// Deletes the blob `name`; an absent one is fine.
    pub async fn remove_blob(&self, name: &str) -> Result<(), RegistryError> {
        match self.blobs.delete(name).await {
            Ok(()) => Ok(()),
            Err(_) if self.blobs.info(name).await.is_err() => Ok(()),
            Err(e) => Err(RegistryError::unavailable(e)),
        }
    }
}
