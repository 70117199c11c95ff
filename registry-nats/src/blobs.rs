//! Component blobs in the object store, named by the sha256 of their bytes. A blob is
//! checked against its name when it is stored and again when it is read, so a replica
//! never compiles bytes other than those its manifest names.

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use crate::error::RegistryError;
use crate::registry::NatsRegistry;

/// The largest blob read back: over any component the engine accepts.
const MAX_BLOB_BYTES: u64 = 64 << 20;

/// The hex sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl NatsRegistry {
    /// Stores `bytes` as the blob `name`, which must be their sha256 (a no-op if
    /// present).
    pub async fn put_blob(&self, name: &str, bytes: &[u8]) -> Result<(), RegistryError> {
        if sha256(bytes) != name {
            return Err(RegistryError::corrupt(name, "the bytes' sha256 is not the blob's name"));
        }
        if self.blobs.info(name).await.is_ok() {
            return Ok(());
        }
        let mut reader = bytes;
        self.blobs.put(name, &mut reader).await.map_err(RegistryError::unavailable)?;
        Ok(())
    }

    /// The blob `name`, checked against its sha256.
    pub async fn read_blob(&self, name: &str) -> Result<Vec<u8>, RegistryError> {
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
