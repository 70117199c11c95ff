//! Following the registry: each change to a tenant or router after a revision.

use async_nats::jetstream::kv;
use futures_util::{Stream, StreamExt};
use switchyard_store::TenantRecord;

use crate::error::RegistryError;
use crate::keys::Key;
use crate::registry::NatsRegistry;

/// One change to the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// What changed.
    pub key: Key,
    /// Its revision after the change.
    pub revision: u64,
    /// The new value: a tenant's record, a router's token hash; `None` when removed.
    pub value: Option<Value>,
}

/// A key's new value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A tenant's record.
    Tenant(TenantRecord),
    /// A router's token hash.
    Router(String),
}

impl NatsRegistry {
    /// Every change after revision `after` (what [`NatsRegistry::load`] reported as its
    /// `last_revision`), as it happens. The stream ends if the connection to the server
    /// is lost for good; a key it cannot read is an error item, and the stream goes on.
    pub async fn watch(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Change, RegistryError>> + use<>, RegistryError> {
        let watch = self.kv.watch_all_from_revision(after + 1).await.map_err(RegistryError::unavailable)?;
        Ok(watch.filter_map(|entry| async move {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return Some(Err(RegistryError::unavailable(e))),
            };
            let Some(key) = Key::parse(&entry.key) else {
                return Some(Err(RegistryError::corrupt(&entry.key, "not a key this registry writes")));
            };
            let value = match (entry.operation, &key) {
                (kv::Operation::Delete | kv::Operation::Purge, _) => None,
                (kv::Operation::Put, Key::Tenant(_)) => match serde_json::from_slice(&entry.value) {
                    Ok(record) => Some(Value::Tenant(record)),
                    Err(e) => return Some(Err(RegistryError::corrupt(&entry.key, e.to_string()))),
                },
                (kv::Operation::Put, Key::Router(_)) => match String::from_utf8(entry.value.to_vec()) {
                    Ok(hash) => Some(Value::Router(hash)),
                    Err(e) => return Some(Err(RegistryError::corrupt(&entry.key, e.to_string()))),
                },
            };
            Some(Ok(Change { key, revision: entry.revision, value }))
        }))
    }
}
