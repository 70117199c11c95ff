//! The connection, loading, and compare-and-set writes of tenants and routers.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::{self, stream::StorageType};
use bytes::Bytes;
use futures_util::TryStreamExt;
use switchyard_store::{Holds, Manifest, TenantRecord, Unreadable, valid_name};

use crate::error::RegistryError;
use crate::keys::{Expected, Key};

/// The bucket names one registry uses, and how long a blob no tenant names is kept;
/// replicas of one fleet use the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// The key-value bucket of tenants and routers.
    pub records: String,
    /// The object store of component blobs.
    pub blobs: String,
    /// A blob no tenant names is removed once it was last written this long ago
    /// ([`NatsRegistry::sweep_blobs`]): longer than any upload takes from storing its
    /// blob to committing the version, with room for clock skew between replicas and NATS.
    pub blob_grace: Duration,
}

/// The default [`Buckets::blob_grace`]: 10 minutes.
pub const DEFAULT_BLOB_GRACE: Duration = Duration::from_secs(600);

impl Default for Buckets {
    fn default() -> Self {
        Self {
            records: "switchyard-registry".into(),
            blobs: "switchyard-blobs".into(),
            blob_grace: DEFAULT_BLOB_GRACE,
        }
    }
}

/// The registry as loaded: the manifest the service works on, and the revision of every
/// key in it, which its next write of that key expects. A key this build cannot read is
/// skipped into the manifest's `unreadable` (by the key), with its revision here too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    /// Tenants and routers, as the file store's manifest holds them.
    pub manifest: Manifest,
    /// Key (`tenant.acme`) → its revision.
    pub revisions: BTreeMap<String, u64>,
    /// The highest revision seen: a watch from the next one misses nothing.
    pub last_revision: u64,
}

/// A connection to one fleet's registry.
#[derive(Clone)]
pub struct NatsRegistry {
    client: async_nats::Client,
    pub(crate) kv: kv::Store,
    pub(crate) blobs: jetstream::object_store::ObjectStore,
    pub(crate) blob_grace: Duration,
}

/// The longest loading the whole registry may take (every key read once).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// How long connecting and creating the buckets may take before the registry counts as
/// unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl NatsRegistry {
    /// Connects to `url` (`nats://127.0.0.1:4222`) and opens the buckets, creating them
    /// (file storage) on first use.
    /// A `url` that is not a NATS address is [`RegistryError::Address`]; a server that
    /// cannot be reached is [`RegistryError::Unavailable`], worth retrying.
    pub async fn connect(url: &str, buckets: &Buckets) -> Result<Self, RegistryError> {
        for server in url.split(',') {
            server
                .trim()
                .parse::<async_nats::ServerAddr>()
                .map_err(|e| RegistryError::Address(format!("`{server}`: {e}")))?;
        }
        let options = async_nats::ConnectOptions::new().connection_timeout(CONNECT_TIMEOUT);
        let client = options.connect(url).await.map_err(RegistryError::unavailable)?;
        let js = jetstream::new(client.clone());
        let kv = match js.get_key_value(&buckets.records).await {
            Ok(kv) => kv,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: buckets.records.clone(),
                    history: 1,
                    storage: StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(RegistryError::unavailable)?,
        };
        let blobs = match js.get_object_store(&buckets.blobs).await {
            Ok(store) => store,
            Err(_) => js
                .create_object_store(jetstream::object_store::Config {
                    bucket: buckets.blobs.clone(),
                    storage: StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(RegistryError::unavailable)?,
        };
        Ok(Self { client, kv, blobs, blob_grace: buckets.blob_grace })
    }

    /// The key-value bucket of tenants and routers itself, as `nats kv` sees it: for
    /// tools (and tests) that look at or repair what is stored, beside the records this
    /// crate writes. Writing it bypasses the compare-and-set the service relies on.
    pub fn records(&self) -> &kv::Store {
        &self.kv
    }

    /// How long a blob no tenant names is kept ([`Buckets::blob_grace`]).
    pub fn blob_grace(&self) -> Duration {
        self.blob_grace
    }

    /// Whether the connection to NATS is up now. While it is down (the client
    /// reconnecting) a write would only wait for its timeout: check this first to refuse
    /// it at once.
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Every tenant and router now, with their revisions. Gives up after
    /// `LOAD_TIMEOUT` (listing the keys is a consumer, which waits as long as NATS is
    /// silent). A key this build cannot read is skipped, not an error: one bad record
    /// (or a newer build's) must not keep a replica from starting.
    pub async fn load(&self) -> Result<Loaded, RegistryError> {
        match tokio::time::timeout(LOAD_TIMEOUT, self.load_now()).await {
            Ok(loaded) => loaded,
            Err(_) => Err(RegistryError::Unavailable(format!(
                "loading the registry took over {} s",
                LOAD_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn load_now(&self) -> Result<Loaded, RegistryError> {
        let keys: Vec<String> = self
            .kv
            .keys()
            .await
            .map_err(RegistryError::unavailable)?
            .try_collect()
            .await
            .map_err(RegistryError::unavailable)?;
        let mut loaded = Loaded::default();
        for key in keys {
            let Some(entry) = self.kv.entry(key.as_str()).await.map_err(RegistryError::unavailable)? else {
                continue;
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            loaded.last_revision = loaded.last_revision.max(entry.revision);
            match read_value(&key, &entry.value) {
                Ok(Record::Tenant(name, record)) => {
                    loaded.manifest.tenants.insert(name, std::sync::Arc::new(record));
                }
                Ok(Record::Router(name, hash)) => {
                    loaded.manifest.routers.insert(name, hash);
                }
                Err(unreadable) => {
                    loaded.manifest.unreadable.insert(key.clone(), unreadable);
                }
            }
            loaded.revisions.insert(key, entry.revision);
        }
        Ok(loaded)
    }

    /// Writes tenant `name`'s record if its key is still as `expected`; its new revision.
    pub async fn put_tenant(
        &self,
        name: &str,
        record: &TenantRecord,
        expected: Expected,
    ) -> Result<u64, RegistryError> {
        let value = serde_json::to_vec(record).map_err(|e| RegistryError::corrupt(name, e.to_string()))?;
        self.compare_and_set(&Key::Tenant(name.into()).to_string(), value.into(), expected).await
    }

    /// Writes router `name`'s token hash if its key is still as `expected`.
    pub async fn put_router(
        &self,
        name: &str,
        token_sha256: &str,
        expected: Expected,
    ) -> Result<u64, RegistryError> {
        let key = Key::Router(name.into()).to_string();
        self.compare_and_set(&key, Bytes::copy_from_slice(token_sha256.as_bytes()), expected).await
    }

    /// Removes `key` (a [`Key`]'s text) if it is still at `revision`.
    pub async fn remove(&self, key: &Key, revision: u64) -> Result<(), RegistryError> {
        let key = key.to_string();
        match self.kv.delete_expect_revision(key.as_str(), Some(revision)).await {
            Ok(()) => Ok(()),
            // The delete's error does not say why: a key no longer at `revision` is a
            // conflict, anything else the server's condition.
            Err(e) => match self.kv.entry(key.as_str()).await {
                Ok(Some(entry)) if entry.revision != revision => {
                    Err(RegistryError::Conflict { key, expected: Expected::Revision(revision) })
                }
                Ok(None) => Err(RegistryError::Conflict { key, expected: Expected::Revision(revision) }),
                _ => Err(RegistryError::unavailable(e)),
            },
        }
    }

    async fn compare_and_set(
        &self,
        key: &str,
        value: Bytes,
        expected: Expected,
    ) -> Result<u64, RegistryError> {
        let conflict = || RegistryError::Conflict { key: key.to_string(), expected };
        match expected {
            Expected::Absent => self.kv.create(key, value).await.map_err(|e| match e.kind() {
                CreateErrorKind::AlreadyExists => conflict(),
                _ => RegistryError::unavailable(e),
            }),
            Expected::Revision(revision) => {
                self.kv.update(key, value, revision).await.map_err(|e| match e.kind() {
                    UpdateErrorKind::WrongLastRevision => conflict(),
                    _ => RegistryError::unavailable(e),
                })
            }
        }
    }
}

/// A record read from its key and value.
pub(crate) enum Record {
    /// `tenant.<name>`.
    Tenant(String, TenantRecord),
    /// `router.<name>`: its token hash.
    Router(String, String),
}

/// The record `key` holds as `value`, checked; `Err` says why this build cannot read it.
pub(crate) fn read_value(key: &str, value: &[u8]) -> Result<Record, Unreadable> {
    match Key::parse(key) {
        Some(Key::Tenant(name)) => match TenantRecord::from_stored(&name, value) {
            Ok(record) => Ok(Record::Tenant(name, record)),
            Err(reason) => Err(Unreadable { holds: Holds::Tenant(name), reason }),
        },
        Some(Key::Router(name)) => {
            let hash = match std::str::from_utf8(value) {
                Ok(_) if !valid_name(&name) => Err(format!("`{name}` is not a router name")),
                Ok(hash) => Ok(hash.to_string()),
                Err(e) => Err(format!("not a token hash: {e}")),
            };
            hash.map(|hash| Record::Router(name.clone(), hash))
                .map_err(|reason| Unreadable { holds: Holds::Router(name), reason })
        }
        None => Err(Unreadable {
            holds: Holds::Unknown,
            reason: "not a kind of key this build writes (tenant.NAME, router.NAME)".into(),
        }),
    }
}
