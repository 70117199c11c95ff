//! A replica of a fleet (`serve --registry nats://…`) follows the shared registry: every
//! change another replica commits is adopted here, its new versions loaded before the
//! snapshot that routes to them is swapped in, so no selection waits on a compile. Each
//! replica also sweeps the blobs no tenant names any more. A change this build cannot
//! read is skipped, logged and counted, and what it holds is not written over from here.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchyard_registry_nats::{Change, Event, Key, RegistryError, Value};

use crate::rates::WriteKind;
use crate::state::Service;
use crate::store::{TenantRecord, Unreadable};

/// How long to wait before watching again after the watch ended or failed.
const REWATCH: Duration = Duration::from_millis(500);

/// Follows the registry until the process ends (a no-op on the data dir's store).
pub async fn follow(service: Arc<Service>) {
    let Some(nats) = service.loader.registry.nats() else { return };
    loop {
        match nats.registry().watch(nats.last_revision()).await {
            Ok(changes) => {
                let mut changes = std::pin::pin!(changes);
                while let Some(item) = changes.next().await {
                    match item {
                        Ok(Event::Change(change)) => apply(&service, change).await,
                        Ok(Event::Unreadable { key, revision, record }) => {
                            skip(&service, &key, revision, record).await
                        }
                        Err(e) => tracing::warn!(error = %e, "the registry's watch"),
                    }
                }
                tracing::warn!("the registry's watch ended; watching again");
            }
            Err(e) => tracing::warn!(error = %e, "watching the registry"),
        }
        tokio::time::sleep(REWATCH).await;
    }
}

/// Sweeps the registry's blobs no tenant names until the process ends, every half
/// blob grace (a no-op on the data dir's store, which deletes a blob when its last version
/// goes). Every replica sweeps; a blob two take at once is simply gone.
pub async fn sweep(service: Arc<Service>) {
    let Some(nats) = service.loader.registry.nats() else { return };
    let every =
        (nats.registry().blob_grace() / 2).clamp(Duration::from_millis(250), Duration::from_secs(300));
    loop {
        tokio::time::sleep(every).await;
        // Bounded: listing the blobs is a consumer, which waits as long as NATS is silent.
        let swept =
            tokio::time::timeout(every.max(Duration::from_secs(60)), nats.registry().sweep_blobs()).await;
        match swept.unwrap_or_else(|_| Err(RegistryError::Unavailable("the sweep timed out".into()))) {
            Ok(removed) => {
                for blob in removed {
                    tracing::info!(%blob, "a blob no tenant names any more, swept from the registry");
                }
            }
            Err(e) => tracing::warn!(error = %e, "sweeping the registry's blobs"),
        }
    }
}

/// Adopts one change, unless this replica made or saw it already.
async fn apply(service: &Service, change: Change) {
    // Loading a new version configures it once, in an instance of the engine's pool:
    // under the service's own compile permit, which the pool has a slot for (taken
    // before the writer lock, as an upload takes its own). Tenants' uploads never hold
    // it, and every compile under it ends by its deadline.
    let Ok(_permit) = service.system_compile_permits.acquire().await else { return };
    let blobs: Vec<String> = match &change.value {
        Some(Value::Tenant(record)) => record.versions().map(|(_, v)| v.blob.clone()).collect(),
        _ => Vec::new(),
    };
    if let Key::Tenant(tenant) = &change.key {
        service.load_components(tenant, &blobs);
    }
    let mut writer = service.writer.lock().await;
    let Some(nats) = service.loader.registry.nats() else { return };
    let key = change.key.to_string();
    if !nats.take(&key, change.revision, change.value.is_some()) {
        // Seen already (this replica's own commit, say): what was loaded for it is
        // either named already or not needed.
        for blob in &blobs {
            service.forget_component(&writer, blob);
        }
        return;
    }
    let mut manifest = writer.manifest.clone();
    match (&change.key, change.value) {
        (Key::Tenant(name), Some(Value::Tenant(record))) => {
            if let Some(kind) = manifest.tenants.get(name).map(|old| write_kind(old, &record)) {
                service.rates.count(name, kind);
            }
            manifest.tenants.insert(name.clone(), Arc::new(record));
        }
        (Key::Router(name), Some(Value::Router(hash))) => {
            manifest.routers.insert(name.clone(), hash);
        }
        (Key::Tenant(name), None) => {
            manifest.tenants.remove(name);
        }
        (Key::Router(name), None) => {
            manifest.routers.remove(name);
        }
        (key, Some(_)) => return tracing::warn!(key = %key, "a registry value of the wrong kind"),
    }
    // Readable again, or gone: a record skipped before under this key no longer stands.
    manifest.unreadable.remove(&key);
    service.adopt(&mut writer, manifest, change.key);
}

/// Takes note of a write of `key` this build cannot read (`record` says why; `None`: a
/// key of a kind it does not know was removed), unless this replica saw it already. The
/// record is skipped (logged and counted) and, until a readable change of the key, no
/// write from here replaces it; what this replica read of that tenant or router before,
/// if anything, goes on serving.
async fn skip(service: &Service, key: &str, revision: u64, record: Option<Unreadable>) {
    let mut writer = service.writer.lock().await;
    let Some(nats) = service.loader.registry.nats() else { return };
    if !nats.take(key, revision, record.is_some()) {
        return;
    }
    match record {
        Some(record) => {
            crate::registry::skipped(&service.metrics, key, &record);
            writer.manifest.unreadable.insert(key.to_string(), record);
        }
        None => {
            writer.manifest.unreadable.remove(key);
        }
    }
}

/// What another replica's write of a tenant's record was, for the tenant's write rates:
/// an upload if it added a version, else another write (an assignment or a rollback).
fn write_kind(old: &TenantRecord, new: &TenantRecord) -> WriteKind {
    let known: HashSet<(&str, &str)> = old.versions().map(|(name, v)| (name, v.version.as_str())).collect();
    let uploaded = new.versions().any(|(name, v)| !known.contains(&(name, v.version.as_str())));
    if uploaded { WriteKind::Upload } else { WriteKind::Assign }
}
