//! Following the registry: each change to a tenant or router after a revision.

use async_nats::jetstream::kv;
use futures_util::{Stream, StreamExt};
use switchyard_store::{TenantRecord, Unreadable};

use crate::error::RegistryError;
use crate::keys::Key;
use crate::registry::{NatsRegistry, Record, read_value};

/// What the watch reports of one write to the registry.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A tenant or router changed (or was removed).
    Change(Change),
    /// A key changed whose value this build cannot read, or a key of a kind it does not
    /// know was written or removed: to skip, and never to write over.
    Unreadable {
        /// The key, as stored (`tenant.acme`, `widget.x`).
        key: String,
        /// Its revision after the change.
        revision: u64,
        /// Why it cannot be read; `None` when the key was removed.
        record: Option<Unreadable>,
    },
}

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
    /// is lost for good; an error item is the server's, and the stream goes on. A key
    /// this build cannot read is an [`Event::Unreadable`], not an error.
    pub async fn watch(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Event, RegistryError>> + use<>, RegistryError> {
        let watch = self.kv.watch_all_from_revision(after + 1).await.map_err(RegistryError::unavailable)?;
        Ok(watch.map(|entry| {
            let entry = entry.map_err(RegistryError::unavailable)?;
            let revision = entry.revision;
            let removed = matches!(entry.operation, kv::Operation::Delete | kv::Operation::Purge);
            Ok(match (removed, Key::parse(&entry.key)) {
                (true, Some(key)) => Event::Change(Change { key, revision, value: None }),
                (true, None) => Event::Unreadable { key: entry.key, revision, record: None },
                (false, _) => match read_value(&entry.key, &entry.value) {
                    Ok(Record::Tenant(name, record)) => Event::Change(Change {
                        key: Key::Tenant(name),
                        revision,
                        value: Some(Value::Tenant(record)),
                    }),
                    Ok(Record::Router(name, hash)) => Event::Change(Change {
                        key: Key::Router(name),
                        revision,
                        value: Some(Value::Router(hash)),
                    }),
                    Err(unreadable) => {
                        Event::Unreadable { key: entry.key, revision, record: Some(unreadable) }
                    }
                },
            })
        }))
    }
}
