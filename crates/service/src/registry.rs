//! Where the service keeps its registry: the data directory's store (the default), or a
//! fleet's registry on NATS JetStream shared by every replica (`serve --registry`).
//!
//! Both sit behind [`Registry`]; the rest of the service commits one changed record (a
//! tenant's, or a router's) of its manifest and reads and writes blobs without knowing
//! which it has. On NATS a commit writes that key as a compare-and-set on the revision
//! this replica last saw of it, so a replica that decided on a stale record gets a
//! conflict instead of overwriting another's change.
//!
//! A stored record this build cannot read (damaged, or a newer build's) is skipped, logged
//! and counted (`skipped`) rather than failing start-up, and no write replaces it
//! (`check_writable`): whoever wrote it keeps it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::StatusCode;
use switchyard::PolicyEngine;
use switchyard::selection::wire::ErrorKind;
use switchyard_registry_nats::{Buckets, Expected, Key, NatsRegistry, RegistryError};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::store::{Manifest, Store, Unreadable};

/// The first wait before connecting to an unreachable registry again; it doubles up to
/// [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(250);
const LAST_RETRY: Duration = Duration::from_secs(5);

pub use switchyard_registry_nats::DEFAULT_BLOB_GRACE;

/// A fleet's registry (`serve --registry`, `[registry]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryOptions {
    /// `nats://HOST:PORT` (several, comma-separated, for a NATS cluster).
    pub url: String,
    /// How long a blob no tenant names is kept before a replica's sweep removes it
    /// (`[registry] blob_grace_secs`, default 600): longer than any upload takes from
    /// storing its blob to committing.
    pub blob_grace: Duration,
}

/// The registry a service runs on.
pub enum Registry {
    /// The data directory: manifest and blobs on local disk.
    Files(Store),
    /// A fleet's registry on NATS.
    Nats(Box<Nats>),
}

/// A write to the registry (a commit, or a blob stored) that did not happen.
#[derive(Debug)]
pub enum WriteError {
    /// Another replica changed what this commit replaces (409 `conflict`).
    Conflict(String),
    /// NATS is unreachable (503 `registry-unavailable`).
    Unavailable(String),
    /// The data directory could not be written (500).
    Io(std::io::Error),
}

impl WriteError {
    /// The answer to the client whose write this was; `what` names the write
    /// ("writing the manifest").
    pub fn into_api(self, what: &str) -> ApiError {
        match self {
            Self::Io(e) => ApiError::internal(format!("{what}: {e}")),
            Self::Conflict(why) => ApiError::new(StatusCode::CONFLICT, ErrorKind::Conflict, why),
            Self::Unavailable(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::RegistryUnavailable,
                format!("the registry is unavailable, so writes are refused for now ({what}): {why}"),
            ),
        }
    }
}

/// The NATS registry, and the revision of each key this replica has seen.
pub struct Nats {
    registry: NatsRegistry,
    revisions: Mutex<BTreeMap<String, u64>>,
    last_revision: Mutex<u64>,
    runtime: tokio::runtime::Handle,
    /// The local data dir, locked: the admin token, the compiled cache and the copies of
    /// the blobs this replica has read are per replica.
    local: Store,
}

impl Registry {
    /// Connects to the fleet's registry at `url`; `local` stays locked for this replica.
    /// While NATS cannot be reached it says so and retries (a replica started before its
    /// registry, or during an outage, comes up when NATS does); an address that is not
    /// NATS's is refused at once. Blocking: call off the async runtime's workers.
    pub fn connect_nats(options: &RegistryOptions, local: Store) -> Result<Self, String> {
        let runtime = tokio::runtime::Handle::current();
        let url = &options.url;
        let buckets = Buckets { blob_grace: options.blob_grace, ..Buckets::default() };
        let mut delay = FIRST_RETRY;
        let registry = loop {
            match runtime.block_on(NatsRegistry::connect(url, &buckets)) {
                Ok(registry) => break registry,
                Err(e @ RegistryError::Unavailable(_)) => {
                    tracing::warn!(%url, error = %e, retry_in = ?delay, "the registry is unavailable; retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(LAST_RETRY);
                }
                Err(e) => return Err(format!("the registry at {url}: {e}")),
            }
        };
        Ok(Self::Nats(Box::new(Nats {
            registry,
            revisions: Mutex::default(),
            last_revision: Mutex::new(0),
            runtime,
            local,
        })))
    }

    /// The committed manifest (on NATS: every tenant and router now).
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        match self {
            Self::Files(store) => store.load_manifest(),
            Self::Nats(nats) => {
                let loaded = nats.runtime.block_on(nats.registry.load()).map_err(|e| e.to_string())?;
                *nats.revisions.lock().unwrap_or_else(|p| p.into_inner()) = loaded.revisions;
                *nats.last_revision.lock().unwrap_or_else(|p| p.into_inner()) = loaded.last_revision;
                Ok(loaded.manifest)
            }
        }
    }

    /// Makes `next` durable where it differs from what this replica last committed or
    /// adopted: in the record `key` names, the only one a change touches.
    pub fn commit(&self, next: &Manifest, key: &Key) -> Result<(), WriteError> {
        match self {
            Self::Files(store) => match key {
                Key::Tenant(name) => store.write_tenant(name, next.tenants.get(name).map(|r| &**r)),
                Key::Router(_) => store.write_routers(&next.routers),
            }
            .map_err(WriteError::Io),
            Self::Nats(nats) => {
                nats.connected()?;
                nats.runtime.block_on(nats.commit(next, key))
            }
        }
    }

    /// Stores component bytes under their sha256 (a no-op if present).
    pub fn write_blob(&self, sha256: &str, bytes: &[u8]) -> Result<(), WriteError> {
        match self {
            Self::Files(store) => store.write_blob(sha256, bytes).map_err(WriteError::Io),
            Self::Nats(nats) => {
                nats.connected()?;
                nats.runtime
                    .block_on(nats.registry.put_blob(sha256, bytes))
                    .map_err(|e| WriteError::Unavailable(e.to_string()))?;
                nats.keep_local(sha256, bytes);
                Ok(())
            }
        }
    }

    /// The component bytes stored under `sha256`.
    ///
    /// On NATS a replica keeps a copy of each blob it reads in its own data dir, and
    /// reads that first: a version loaded again after an eviction, or first selected
    /// while NATS is down, loads without NATS. A read NATS did not answer is
    /// [`std::io::ErrorKind::TimedOut`] (see [`is_transient`]).
    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        match self {
            Self::Files(store) => store.read_blob(sha256),
            Self::Nats(nats) => {
                if let Ok(bytes) = nats.local.read_blob(sha256) {
                    return Ok(bytes);
                }
                // The registry checks the bytes against their name before we keep them.
                let bytes = nats.runtime.block_on(nats.registry.read_blob(sha256)).map_err(io)?;
                nats.keep_local(sha256, &bytes);
                Ok(bytes)
            }
        }
    }

    /// Deletes a blob no committed version names, and `engine`'s compiled artifact of it
    /// first (the artifact cache names artifacts by the component's bytes, so they are
    /// read before the blob goes; see `Store::remove_blob_after`). On NATS only this
    /// replica's local copy goes: the registry's stays until a sweep
    /// (`switchyard_test_util::fleet::sweep`), as another replica may be about to name it.
    pub fn remove_blob(&self, sha256: &str, engine: &PolicyEngine) -> std::io::Result<()> {
        let store = match self {
            Self::Files(store) => store,
            Self::Nats(nats) => &nats.local,
        };
        match engine.artifact_cache() {
            Some(cache) => store.remove_blob_after(sha256, |bytes| cache.remove_for(engine.engine(), bytes)),
            None => store.remove_blob(sha256),
        }
    }

    /// Every stored blob, for the start-up sweep (on NATS: this replica's local copies).
    pub fn blob_names(&self) -> std::io::Result<Vec<String>> {
        match self {
            Self::Files(store) => store.blob_names(),
            Self::Nats(nats) => nats.local.blob_names(),
        }
    }

    /// The NATS registry, when the service runs on one.
    pub fn nats(&self) -> Option<&Nats> {
        match self {
            Self::Nats(nats) => Some(nats),
            Self::Files(_) => None,
        }
    }
}

/// Logs and counts a stored record this build cannot read, which is skipped: `at` is
/// where it is (a data dir's file, a fleet's key).
pub(crate) fn skipped(metrics: &Metrics, at: &str, record: &Unreadable) {
    tracing::warn!(
        record = %at,
        reason = %record.reason,
        "skipping a stored record this build cannot read: kept as it is, neither served nor written over"
    );
    metrics.record_skipped();
}

/// Refuses a write of `key` while the stored record it would replace is one this build
/// could not read (in `current`, the committed manifest): a newer build's record, say,
/// which this build's write would lose. 409 `exists` when this replica serves no record
/// of that name (the name is taken), `conflict` when it serves an older one it read
/// before (the record changed in a way this replica cannot follow; a replica that reads
/// it can take the write).
pub(crate) fn check_writable(current: &Manifest, key: &Key) -> Result<(), ApiError> {
    let (what, name, unreadable, served) = match key {
        Key::Tenant(name) => {
            ("tenant", name, current.unreadable_tenant(name), current.tenants.contains_key(name))
        }
        Key::Router(name) => {
            ("router", name, current.unreadable_router(name), current.routers.contains_key(name))
        }
    };
    let Some((at, record)) = unreadable else { return Ok(()) };
    let kind = if served { ErrorKind::Conflict } else { ErrorKind::Exists };
    Err(ApiError::new(
        StatusCode::CONFLICT,
        kind,
        format!(
            "{what} `{name}`: its stored record ({at}) is one this build cannot read ({}), so it is \
             not written over; write through a replica that reads it, or repair or remove the record",
            record.reason
        ),
    ))
}

fn io(e: RegistryError) -> std::io::Error {
    match e {
        RegistryError::Unavailable(_) => std::io::Error::new(std::io::ErrorKind::TimedOut, e.to_string()),
        e => std::io::Error::other(e.to_string()),
    }
}

/// Whether a blob read failed only because the registry did not answer (NATS down or
/// slow): worth trying again later, unlike a blob that is gone or corrupt.
pub fn is_transient(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut
}

impl Nats {
    /// The registry.
    pub fn registry(&self) -> &NatsRegistry {
        &self.registry
    }

    /// Refuses a write at once while the connection to NATS is down, instead of after
    /// the write's timeout.
    fn connected(&self) -> Result<(), WriteError> {
        if self.registry.connected() {
            Ok(())
        } else {
            Err(WriteError::Unavailable("not connected to NATS (reconnecting)".into()))
        }
    }

    /// Keeps this replica's copy of blob `sha256` (one it read or wrote): a failure only
    /// costs a read from NATS later, so it is logged, not returned.
    fn keep_local(&self, sha256: &str, bytes: &[u8]) {
        if let Err(e) = self.local.write_blob(sha256, bytes) {
            tracing::warn!(blob = %sha256, error = %e, "keeping a local copy of a blob");
        }
    }

    /// The highest revision this replica has loaded or applied.
    pub fn last_revision(&self) -> u64 {
        *self.last_revision.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a change of `key` (its text, `tenant.acme`) to `revision` as seen (`present`:
    /// written, else removed); `false` if this replica has seen it (or a newer one)
    /// already, e.g. its own commit.
    pub fn take(&self, key: &str, revision: u64, present: bool) -> bool {
        let mut last = self.last_revision.lock().unwrap_or_else(|p| p.into_inner());
        *last = (*last).max(revision);
        let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
        if revisions.get(key).is_some_and(|&seen| seen >= revision) {
            return false;
        }
        match present {
            true => revisions.insert(key.to_string(), revision),
            false => revisions.remove(key),
        };
        true
    }

    async fn commit(&self, next: &Manifest, key: &Key) -> Result<(), WriteError> {
        let text = key.to_string();
        let seen = self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(&text).copied();
        let expected = seen.map_or(Expected::Absent, Expected::Revision);
        let written = match key {
            Key::Tenant(name) => match next.tenants.get(name) {
                Some(record) => self.registry.put_tenant(name, record, expected).await.map(Some),
                None => self.remove(key, seen).await,
            },
            Key::Router(name) => match next.routers.get(name) {
                Some(hash) => self.registry.put_router(name, hash, expected).await.map(Some),
                None => self.remove(key, seen).await,
            },
        };
        let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
        match written {
            Ok(Some(revision)) => {
                revisions.insert(text, revision);
                let mut last = self.last_revision.lock().unwrap_or_else(|p| p.into_inner());
                *last = (*last).max(revision);
                Ok(())
            }
            Ok(None) => {
                revisions.remove(&text);
                Ok(())
            }
            Err(RegistryError::Conflict { .. }) => Err(WriteError::Conflict(format!(
                "`{text}` was changed by another replica since this one read it; retry"
            ))),
            Err(e) => Err(WriteError::Unavailable(e.to_string())),
        }
    }

    /// Removes `key` at the revision this replica saw (nothing to do if it saw none).
    async fn remove(&self, key: &Key, seen: Option<u64>) -> Result<Option<u64>, RegistryError> {
        match seen {
            Some(revision) => self.registry.remove(key, revision).await.map(|()| None),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use switchyard::artifact_cache::ArtifactKey;
    use switchyard::{ArtifactCache, Limits};

    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("switchyard-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The data dir's registry in `dir`, and an engine caching artifacts in `<dir>/compiled`
    /// with a key of its own.
    fn files(dir: &Path) -> (Registry, PolicyEngine, ArtifactCache) {
        let registry = Registry::Files(Store::open(dir).unwrap());
        let cache = ArtifactCache::open(dir.join("compiled"), ArtifactKey::generate().unwrap()).unwrap();
        let engine = PolicyEngine::new(Limits::default()).unwrap().with_artifact_cache(cache.clone());
        (registry, engine, cache)
    }

    #[test]
    fn a_removed_blob_takes_its_artifact_with_it_and_removing_twice_is_fine() {
        let dir = temp("remove");
        let (registry, engine, cache) = files(&dir);
        registry.write_blob("00ff", b"bytes").unwrap();
        registry.write_blob("11ee", b"other").unwrap();
        let artifact = cache.path_for(engine.engine(), b"bytes");
        std::fs::write(&artifact, b"compiled").unwrap();
        let beside = ArtifactCache::digest_paths(&artifact);
        for file in &beside {
            std::fs::write(file, b"a MAC, or an unkeyed digest").unwrap();
        }
        registry.remove_blob("00ff", &engine).unwrap();
        assert!(!artifact.exists(), "the artifact of the removed blob is gone");
        assert!(beside.iter().all(|file| !file.exists()), "and what was beside it: {beside:?}");
        assert!(registry.read_blob("00ff").is_err());
        assert_eq!(registry.read_blob("11ee").unwrap(), b"other", "other blobs stay");
        registry.remove_blob("00ff", &engine).unwrap();
    }

    #[test]
    fn a_blob_that_is_a_symlink_is_not_read_through_when_removed() {
        let dir = temp("remove-symlink");
        let (registry, engine, cache) = files(&dir);
        // Another blob's artifact, and a "blob" that is a link to that blob's bytes.
        registry.write_blob("00ff", b"bytes").unwrap();
        let artifact = cache.path_for(engine.engine(), b"bytes");
        std::fs::write(&artifact, b"compiled").unwrap();
        std::os::unix::fs::symlink(dir.join("blobs/00ff.wasm"), dir.join("blobs/00bb.wasm")).unwrap();
        let refused = registry.remove_blob("00bb", &engine).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        assert!(artifact.exists(), "the artifact of the bytes the link points at stays");
        assert_eq!(registry.read_blob("00ff").unwrap(), b"bytes");
    }
}
