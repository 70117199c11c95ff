//! Where a store source reads the tenants' records and blobs: a Switchyard data directory
//! (a `stat` of a tenant's record file tells a change), or a fleet's NATS registry (loaded
//! once, then watched: every change is kept in memory and wakes the follower at once).
//! The follower sees one interface and does its follow/compile/swap the same on both.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use switchyard_registry_nats::{Buckets, Change, Event, Key, Loaded, NatsRegistry, RegistryError, Value};
use switchyard_store::{Holds, ManifestStamp, StoreReader, TenantRecord, Unreadable};

use crate::config::{ConfigError, StoreAt};

/// Raised when the follower has something to check now (a partition naming a tenant not
/// followed before, a change the registry's watch reported), so it does not wait a poll.
pub(crate) struct Wake {
    raised: Mutex<bool>,
    cond: Condvar,
}

impl Wake {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self { raised: Mutex::new(false), cond: Condvar::new() })
    }

    pub(crate) fn raise(&self) {
        *self.raised.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cond.notify_one();
    }

    /// Waits until raised, or for `timeout`, and lowers it.
    pub(crate) fn wait(&self, timeout: Duration) {
        let raised = self.raised.lock().unwrap_or_else(|p| p.into_inner());
        let (mut raised, _) = self
            .cond
            .wait_timeout_while(raised, timeout, |raised| !*raised)
            .unwrap_or_else(|p| p.into_inner());
        *raised = false;
    }
}

/// What moves when a tenant's record is replaced: compared before reading it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// The record file's, in a data directory.
    File(ManifestStamp),
    /// The key's revision, in a registry.
    Revision(u64),
}

/// A blob that was not read, and whether reading it again may succeed (the registry was
/// unreachable) rather than fail the same way (no such blob, too large).
pub(crate) struct BlobError {
    pub(crate) message: String,
    pub(crate) transient: bool,
}

impl BlobError {
    fn lasting(message: impl Into<String>) -> Self {
        Self { message: message.into(), transient: false }
    }
}

/// The place a store source reads.
pub(crate) enum Records {
    Dir(StoreReader),
    Nats(NatsRecords),
}

impl Records {
    /// Opens `at`: a directory that must exist, or a registry that must answer now (each
    /// refusal names its field). A registry's watch raises `wake` on every change.
    pub(crate) fn open(at: &StoreAt, wake: &Arc<Wake>) -> Result<Self, ConfigError> {
        match at {
            StoreAt::DataDir(dir) => StoreReader::new(dir)
                .map(Self::Dir)
                .map_err(|e| ConfigError::new("policy.store.data_dir", format!("{}: {e}", dir.display()))),
            StoreAt::Registry(url) => NatsRecords::connect(url, Arc::clone(wake))
                .map(Self::Nats)
                .map_err(|e| ConfigError::new("policy.store.registry", format!("{url}: {e}"))),
        }
    }

    /// The stamp of `tenant`'s record now (`None`: no such record). Read before the record,
    /// so a change between the two is seen on the next check.
    pub(crate) fn stamp(&self, tenant: &str) -> Option<Stamp> {
        match self {
            Self::Dir(reader) => reader.tenant_stamp(tenant).map(Stamp::File),
            Self::Nats(nats) => {
                nats.seen().tenants.get(tenant).map(|(revision, _)| Stamp::Revision(*revision))
            }
        }
    }

    /// `tenant`'s record (`None`: no such tenant); `Err` says why it cannot be read.
    pub(crate) fn load_tenant(&self, tenant: &str) -> Result<Option<Arc<TenantRecord>>, String> {
        match self {
            Self::Dir(reader) => Ok(reader.load_tenant(tenant)?.map(Arc::new)),
            Self::Nats(nats) => match nats.seen().tenants.get(tenant) {
                None => Ok(None),
                Some((_, record)) => record.clone().map(Some),
            },
        }
    }

    /// Every tenant whose record reads, by name.
    pub(crate) fn tenants(&self) -> Result<Vec<String>, ConfigError> {
        match self {
            Self::Dir(reader) => {
                let manifest = reader.load_manifest().map_err(|e| {
                    ConfigError::new("policy.store.data_dir", format!("{}: {e}", reader.dir().display()))
                })?;
                Ok(manifest.tenants.keys().cloned().collect())
            }
            Self::Nats(nats) => Ok(nats
                .seen()
                .tenants
                .iter()
                .filter(|(_, (_, record))| record.is_ok())
                .map(|(name, _)| name.clone())
                .collect()),
        }
    }

    /// The bytes of blob `sha256`, refused if over `max` bytes (unread, in a directory).
    /// The caller checks them against their name.
    pub(crate) fn read_blob_at_most(&self, sha256: &str, max: u64) -> Result<Vec<u8>, BlobError> {
        match self {
            Self::Dir(reader) => {
                reader.read_blob_at_most(sha256, max).map_err(|e| BlobError::lasting(e.to_string()))
            }
            Self::Nats(nats) => nats.read_blob_at_most(sha256, max),
        }
    }

    /// Why the records cannot be followed now (the registry unreachable), if so: every
    /// tenant keeps its running version meanwhile.
    pub(crate) fn down(&self) -> Option<String> {
        match self {
            Self::Dir(_) => None,
            Self::Nats(nats) => nats.seen().down.clone(),
        }
    }

    /// Where the records are, for messages: the directory, or `the registry at URL`.
    pub(crate) fn place(&self) -> String {
        match self {
            Self::Dir(reader) => reader.dir().display().to_string(),
            Self::Nats(nats) => format!("the registry at {}", nats.url),
        }
    }
}

/// How often the registry's connection is looked at while the watch is quiet.
const CHECK_CONNECTION: Duration = Duration::from_millis(250);

/// How long to wait before watching again after the watch ended or failed.
const REWATCH: Duration = Duration::from_millis(500);

/// A fleet's registry, followed by a thread of its own that owns a current-thread tokio
/// runtime: it loads the registry once, then applies each change of the watch to what it
/// keeps in memory and wakes the follower. Blob reads go to that thread too, so nothing of
/// the registry's runs on the caller's thread, which may be inside an async runtime (a
/// Dynamo router's). The thread ends when this is dropped.
pub(crate) struct NatsRecords {
    url: String,
    seen: Arc<Mutex<Seen>>,
    blobs: tokio::sync::mpsc::UnboundedSender<BlobRequest>,
}

/// What the watch has reported.
#[derive(Default)]
struct Seen {
    /// Tenant → its key's revision and its record, or why this build cannot read it.
    tenants: BTreeMap<String, (u64, Result<Arc<TenantRecord>, String>)>,
    /// Why the registry is not followed now; `None` while it is.
    down: Option<String>,
}

struct BlobRequest {
    sha256: String,
    reply: std::sync::mpsc::Sender<Result<Vec<u8>, RegistryError>>,
}

impl NatsRecords {
    /// Connects to the registry at `url` and loads it, or says why not (an address that is
    /// not NATS's, a server that does not answer).
    fn connect(url: &str, wake: Arc<Wake>) -> Result<Self, String> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (blobs, requests) = tokio::sync::mpsc::unbounded_channel();
        let (ready, started) = std::sync::mpsc::channel();
        let (thread_url, thread_seen) = (url.to_string(), Arc::clone(&seen));
        std::thread::Builder::new()
            .name("switchyard-registry".into())
            .spawn(move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(run(thread_url, thread_seen, wake, requests, ready)),
                Err(e) => {
                    let _ = ready.send(Err(format!("cannot start a runtime for it: {e}")));
                }
            })
            .map_err(|e| format!("cannot start a thread for it: {e}"))?;
        match started.recv() {
            Ok(Ok(())) => Ok(Self { url: url.to_string(), seen, blobs }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("its thread ended before it loaded".into()),
        }
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        lock(&self.seen)
    }

    fn read_blob_at_most(&self, sha256: &str, max: u64) -> Result<Vec<u8>, BlobError> {
        let gone = || BlobError::lasting(format!("the thread following {} has ended", self.url));
        let (reply, answer) = std::sync::mpsc::channel();
        self.blobs.send(BlobRequest { sha256: sha256.to_string(), reply }).map_err(|_| gone())?;
        match answer.recv().map_err(|_| gone())? {
            Ok(bytes) if bytes.len() as u64 > max => {
                Err(BlobError::lasting(format!("{} bytes, over the limit of {max} bytes", bytes.len())))
            }
            Ok(bytes) => Ok(bytes),
            Err(e @ RegistryError::Unavailable(_)) => {
                Err(BlobError { message: format!("{}: {e}", self.url), transient: true })
            }
            Err(e) => Err(BlobError::lasting(e.to_string())),
        }
    }
}

fn lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|p| p.into_inner())
}

/// The registry thread: connects and loads (telling `ready` how that went), then follows
/// the watch and answers blob reads until the [`NatsRecords`] is dropped.
async fn run(
    url: String,
    seen: Arc<Mutex<Seen>>,
    wake: Arc<Wake>,
    mut requests: tokio::sync::mpsc::UnboundedReceiver<BlobRequest>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let first = async {
        let registry = NatsRegistry::connect(&url, &Buckets::default()).await?;
        let loaded = registry.load().await?;
        Ok::<_, RegistryError>((registry, loaded))
    };
    let (registry, loaded) = match first.await {
        Ok(first) => first,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let last = loaded.last_revision;
    lock(&seen).load(loaded);
    if ready.send(Ok(())).is_err() {
        return;
    }
    let reads = registry.clone();
    let serve = async move {
        while let Some(request) = requests.recv().await {
            let registry = reads.clone();
            // Each read on its own: a slow one holds up neither the watch nor another read.
            tokio::spawn(async move {
                let _ = request.reply.send(registry.read_blob(&request.sha256).await);
            });
        }
    };
    tokio::select! {
        () = serve => {}
        () = follow(&registry, &url, last, &seen, &wake) => {}
    }
}

/// Applies every change after revision `last` as it comes, waking the follower; watches
/// again (from the last change applied, so none is missed) when the watch ends, and keeps
/// `down` saying why while the registry cannot be followed.
async fn follow(registry: &NatsRegistry, url: &str, mut last: u64, seen: &Mutex<Seen>, wake: &Wake) {
    let mut check = tokio::time::interval(CHECK_CONNECTION);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        match registry.watch(last).await {
            Ok(changes) => {
                let mut changes = std::pin::pin!(changes);
                loop {
                    tokio::select! {
                        item = changes.next() => match item {
                            Some(Ok(event)) => {
                                last = last.max(lock(seen).apply(event));
                                wake.raise();
                            }
                            Some(Err(e)) => tracing::warn!(
                                registry = url, error = %e, "switchyard: the registry's watch"
                            ),
                            None => break,
                        },
                        _ = check.tick() => {
                            let down = (!registry.connected()).then(|| {
                                format!("the registry at {url}: the connection is lost; reconnecting")
                            });
                            report(seen, wake, down);
                        }
                    }
                }
                report(seen, wake, Some(format!("the registry at {url}: its watch ended; watching again")));
            }
            Err(e) => report(seen, wake, Some(format!("the registry at {url}: {e}"))),
        }
        tokio::time::sleep(REWATCH).await;
    }
}

/// Records why the registry is not followed now (`None`: it is again), logging and
/// waking the follower when that changes, so each tenant's `last_error` says it.
fn report(seen: &Mutex<Seen>, wake: &Wake, down: Option<String>) {
    let mut seen = lock(seen);
    if seen.down == down {
        return;
    }
    match &down {
        Some(why) => tracing::warn!(error = %why, "switchyard: every tenant keeps its running version"),
        None => tracing::info!("switchyard: the registry is followed again"),
    }
    seen.down = down;
    drop(seen);
    wake.raise();
}

impl Seen {
    /// The registry as loaded.
    fn load(&mut self, loaded: Loaded) {
        let revision = |key: &Key| loaded.revisions.get(&key.to_string()).copied().unwrap_or(0);
        for (name, record) in loaded.manifest.tenants.iter() {
            let key = Key::Tenant(name.clone());
            self.tenants.insert(name.clone(), (revision(&key), Ok(Arc::clone(record))));
        }
        for (key, unreadable) in loaded.manifest.unreadable.iter() {
            if let Holds::Tenant(name) = &unreadable.holds {
                let at = loaded.revisions.get(key).copied().unwrap_or(0);
                self.tenants.insert(name.clone(), (at, Err(format!("`{key}`: {}", unreadable.reason))));
            }
        }
    }

    /// Applies one change of the watch; its revision.
    fn apply(&mut self, event: Event) -> u64 {
        let (name, revision, record) = match event {
            Event::Change(Change { key: Key::Tenant(name), revision, value }) => {
                let record = match value {
                    Some(Value::Tenant(record)) => Some(Ok(Arc::new(record))),
                    // A router's value under a tenant's key: not something this build writes.
                    Some(Value::Router(_)) => return revision,
                    None => None,
                };
                (name, revision, record)
            }
            Event::Unreadable {
                key,
                revision,
                record: Some(Unreadable { holds: Holds::Tenant(name), reason }),
            } => (name, revision, Some(Err(format!("`{key}`: {reason}")))),
            // Routers, and keys of kinds this build does not know: nothing a tenant runs.
            Event::Change(Change { revision, .. }) | Event::Unreadable { revision, .. } => return revision,
        };
        // Never back to an older revision than the one kept (a watch begun again replays
        // nothing before it, but a change is applied only forward regardless).
        if self.tenants.get(&name).is_some_and(|(kept, _)| *kept > revision) {
            return revision;
        }
        match record {
            Some(record) => {
                self.tenants.insert(name, (revision, record));
            }
            None => {
                self.tenants.remove(&name);
            }
        }
        revision
    }
}
