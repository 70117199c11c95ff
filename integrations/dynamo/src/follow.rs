//! A store source: the version a tenant's class routes to in a Switchyard data directory,
//! followed while the router runs. A thread of its own checks the stamp of the tenant's
//! record file every `poll_ms` (one `stat`, however many tenants the directory holds); when the class routes elsewhere it reads, compiles and configures the new
//! version (off the selection path) and only then swaps it in, so no selection waits on a
//! compile or fails for an upload. A change it cannot take (a tenant removed, a component
//! that does not load) leaves the running version in place and is reported
//! ([`LivePolicy::last_error`], a `tracing` warning).

use std::sync::{Arc, Weak};

use sha2::Digest;

use switchyard::{FailMode, GuardConfig, PolicyEngine};
use switchyard_store::{ManifestStamp, Routed, StoreReader};

use crate::config::{ConfigError, StoreSource, SwitchyardConfig};
use crate::version::{LivePolicy, LoadedPolicy, Version};

/// Loads the class's version now (each failure a [`ConfigError`] on `policy.store`) and
/// starts following it.
pub(crate) fn start(
    config: &SwitchyardConfig,
    source: &StoreSource,
    engine: PolicyEngine,
) -> Result<Arc<LivePolicy>, ConfigError> {
    let reader = StoreReader::new(source.data_dir()).map_err(|e| {
        ConfigError::new("policy.store.data_dir", format!("{}: {e}", source.data_dir().display()))
    })?;
    let mut follower = Follower {
        reader,
        source: source.clone(),
        engine,
        guard: config.guard().clone(),
        temperature: config.temperature(),
        stamp: None,
        running: None,
    };
    let first = follower
        .next()
        .map_err(|e| ConfigError::new("policy.store", e))?
        .expect("the first check always loads a version");
    // Every group: a later version may read any of them, and Dynamo fixes what a picker
    // declares when it builds the policy.
    let inputs = dynamo_kv_router::plugins::worker_selection::WorkerInputs::CACHE
        | dynamo_kv_router::plugins::worker_selection::WorkerInputs::LOAD
        | dynamo_kv_router::plugins::worker_selection::WorkerInputs::PREFERRED_TAINT;
    let live = LivePolicy::new(first, inputs, config.temperature(), true);
    let weak = Arc::downgrade(&live);
    std::thread::Builder::new()
        .name(format!("switchyard-follow-{}", source.tenant()))
        .spawn(move || follower.run(weak))
        .map_err(|e| ConfigError::new("policy.store", format!("cannot start the follower thread: {e}")))?;
    Ok(live)
}

/// What the running version is, to tell a real change from a rewrite of the manifest
/// that leaves this class where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Running {
    component: Component,
    params: String,
    fail_mode: FailMode,
}

struct Follower {
    reader: StoreReader,
    source: StoreSource,
    engine: PolicyEngine,
    guard: GuardConfig,
    temperature: Option<f64>,
    /// The tenant's record file as last read.
    stamp: Option<ManifestStamp>,
    running: Option<Running>,
}

impl Follower {
    /// The version to swap in, if the class routes somewhere new since the last check.
    fn next(&mut self) -> Result<Option<Arc<LoadedPolicy>>, String> {
        let (tenant, class) = (self.source.tenant(), self.source.class());
        let stamp = self.reader.tenant_stamp(tenant);
        if self.running.is_some() && stamp == self.stamp {
            return Ok(None);
        }
        let record = self.reader.load_tenant(tenant)?;
        // Read once: a failure below is not retried until the record changes again.
        self.stamp = stamp;
        let record =
            record.ok_or_else(|| format!("tenant `{tenant}` is not in {}", self.reader.dir().display()))?;
        let route = record.route(class).map_err(|e| format!("tenant `{tenant}` class `{class}`: {e}"))?;
        let (running, name) = match route {
            Routed::Unassigned => {
                let default = switchyard_builtins::find("default").expect("the default builtin exists");
                (builtin(default, FailMode::Open), format!("{tenant}/{class}: default"))
            }
            Routed::Named { policy, on_fault } => {
                let b = switchyard_builtins::find(policy).ok_or_else(|| {
                    format!("tenant `{tenant}` class `{class}` routes to `{policy}`, neither a builtin nor one of its policies")
                })?;
                (builtin(b, on_fault), format!("{tenant}/{class}: {policy}"))
            }
            Routed::Version { policy, record, on_fault } => {
                let component = Component::Blob { sha256: record.blob.clone(), size: record.size };
                let running = Running { component, params: record.params.clone(), fail_mode: on_fault };
                let short = record.version.get(..12).unwrap_or(&record.version);
                (running, format!("{tenant}/{policy}@{short}"))
            }
        };
        if self.running.as_ref() == Some(&running) {
            return Ok(None);
        }
        let bytes = match &running.component {
            Component::Builtin(bytes, _) => bytes.to_vec(),
            Component::Blob { sha256, size } => {
                self.blob(sha256, *size).map_err(|e| format!("{name}: blob: {e}"))?
            }
        };
        let version = Version { name: name.clone(), params: &running.params, fail_mode: running.fail_mode };
        let policy = LoadedPolicy::build(&self.engine, &bytes, version, &self.guard, self.temperature)
            .map_err(|(_, e)| format!("{name}: {e}"))?;
        self.running = Some(running);
        Ok(Some(policy))
    }

    /// The bytes of blob `sha256`, the record saying they are `size` long: refused unread
    /// when the file or the record is over `max_component_bytes` (nothing larger would
    /// compile), and refused unless the bytes are that long and hash to their name (a
    /// blob is named by its sha256: whatever else is there was not uploaded as it).
    fn blob(&self, sha256: &str, size: usize) -> Result<Vec<u8>, String> {
        let most = self.engine.limits().max_component_bytes;
        if size > most {
            return Err(format!("the record says {size} bytes; the limit is {most} bytes"));
        }
        let bytes = self.reader.read_blob_at_most(sha256, most as u64).map_err(|e| e.to_string())?;
        if bytes.len() != size {
            return Err(format!("{} bytes, but the record says {size}", bytes.len()));
        }
        let actual = hex::encode(sha2::Sha256::digest(&bytes));
        if !actual.eq_ignore_ascii_case(sha256) {
            return Err(format!("its bytes hash to {actual}, not to their name"));
        }
        Ok(bytes)
    }

    /// Checks every `poll` until the policy is dropped.
    fn run(mut self, live: Weak<LivePolicy>) {
        loop {
            std::thread::sleep(self.source.poll());
            let Some(live) = live.upgrade() else { return };
            match self.next() {
                Ok(Some(next)) => {
                    tracing::info!(version = next.name(), "switchyard: the followed class moved");
                    live.swap(next);
                    live.set_error(None);
                }
                Ok(None) => {}
                Err(e) => {
                    // Once per distinct reason: a lasting one (an unreadable manifest is
                    // retried every poll) is not logged every poll.
                    if live.last_error().as_deref() != Some(e.as_str()) {
                        tracing::warn!(error = %e, "switchyard: a change in the store was not taken");
                    }
                    live.set_error(Some(e));
                }
            }
        }
    }
}

/// Where a version's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Component {
    /// A builtin's guest build, by name.
    Builtin(&'static [u8], String),
    /// A blob in the store, by sha256, and its size as its record says.
    Blob {
        /// Its name: the sha256 of its bytes.
        sha256: String,
        /// Its size, bytes.
        size: usize,
    },
}

/// A builtin's guest build, run with its default parameters.
fn builtin(b: &'static switchyard_builtins::Builtin, fail_mode: FailMode) -> Running {
    Running { component: Component::Builtin(b.component, b.name.into()), params: "{}".into(), fail_mode }
}
