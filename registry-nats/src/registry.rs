//! The connection, loading, and compare-and-set writes of tenants and routers.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::{self, stream::StorageType};
use bytes::Bytes;
use futures_util::TryStreamExt;
use switchyard_store::{Manifest, TenantRecord};

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
/// key in it, which its next write of that key expects.
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
    /// [`LOAD_TIMEOUT`] (listing the keys is a consumer, which waits as long as NATS is
    /// silent).
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
            match Key::parse(&key) {
                Some(Key::Tenant(name)) => {
                    let record = serde_json::from_slice(&entry.value)
                        .map_err(|e| RegistryError::corrupt(&key, e.to_string()))?;
                    loaded.manifest.tenants.insert(name, std::sync::Arc::new(record));
                }
                Some(Key::Router(name)) => {
                    let hash = String::from_utf8(entry.value.to_vec())
                        .map_err(|e| RegistryError::corrupt(&key, e.to_string()))?;
                    loaded.manifest.routers.insert(name, hash);
                }
                None => return Err(RegistryError::corrupt(&key, "not a key this registry writes")),
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
