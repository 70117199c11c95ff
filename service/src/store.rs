//! The embedded store: a data directory with content-addressed component blobs and one
//! manifest. Every write is temp file → fsync → rename → fsync of the directory, so after
//! `kill -9` or a power cut a file is either the old one or the new one, never half.
//!
//! Layout: `manifest.json` (tenants, token hashes, policies, versions, assignments),
//! `blobs/<sha256>.wasm` (the uploaded bytes), `admin.token` (mode 0600, see `auth`).
//! A blob is written before the manifest that names it, so a manifest never points at a
//! missing blob.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use switchyard::{FailMode, PolicyEngine};

/// The manifest format this build writes and reads.
const FORMAT: u32 = 1;

/// Everything committed: the only state that survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub tenants: BTreeMap<String, TenantRecord>,
    /// Router name → sha256 of its token (routers may select for any tenant).
    #[serde(default)]
    pub routers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    /// sha256 of the tenant's token, hex. The token itself is never stored.
    pub token_sha256: String,
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyRecord>,
    #[serde(default)]
    pub classes: BTreeMap<String, Assignment>,
}

/// One named policy of a tenant: every version uploaded, which is active, and the
/// versions active before it (most recent last) for rollback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    pub versions: Vec<VersionRecord>,
    pub active: String,
    #[serde(default)]
    pub previous: Vec<String>,
}

impl PolicyRecord {
    pub fn version(&self, version: &str) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.version == version)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionRecord {
    /// sha256 of the bytes, or of bytes + parameters (see `version_of`).
    pub version: String,
    /// sha256 of the component bytes: the blob's file name.
    pub blob: String,
    /// The parameters JSON it is configured with.
    pub params: String,
    /// Component size, bytes.
    pub size: usize,
}

/// A class's policy: a builtin name or one of the tenant's; `version` pins one, absent
/// follows the policy's active version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub policy: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    /// What a policy fault does to the class's selections.
    pub on_fault: FailMode,
}

/// The data directory.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating) the data directory and removes temp files a crash left behind.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        for sub in [dir.to_path_buf(), dir.join("blobs")] {
            for entry in std::fs::read_dir(&sub)? {
                let path = entry?.path();
                if path.extension().is_some_and(|e| e == "tmp") {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        Ok(Self { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The committed manifest; empty on first start.
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        let path = self.dir.join("manifest.json");
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Manifest { format: FORMAT, ..Manifest::default() });
            }
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let manifest: Manifest =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if manifest.format != FORMAT {
            return Err(format!("{}: format {} is not {FORMAT}", path.display(), manifest.format));
        }
        Ok(manifest)
    }

    /// Commits `manifest`: after this returns, a restart sees it.
    pub fn write_manifest(&self, manifest: &Manifest) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
        atomic_write(&self.dir, "manifest.json", &bytes)
    }

    /// Stores component bytes under their sha256 (a no-op if present).
    pub fn write_blob(&self, sha256: &str, bytes: &[u8]) -> std::io::Result<()> {
        let name = format!("{sha256}.wasm");
        if self.dir.join("blobs").join(&name).is_file() {
            return Ok(());
        }
        atomic_write(&self.dir.join("blobs"), &name, bytes)
    }

    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.blob_path(sha256))
    }

    fn blob_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{sha256}.wasm"))
    }

    /// Deletes the blob `sha256` and our compiled artifact of it in `engine`'s cache (the
    /// cache keys artifacts by the component's bytes, so they are read first). Already
    /// absent files are fine. Only for a blob no committed version names, under the
    /// writer lock: an upload makes sure its blob exists under that lock before it commits,
    /// so it never commits a manifest naming a blob deleted here. The artifact goes first:
    /// a crash in between leaves a blob (harmless), never an artifact nothing finds.
    pub fn remove_blob(&self, sha256: &str, engine: &PolicyEngine) -> std::io::Result<()> {
        let path = self.blob_path(sha256);
        if let Some(cache) = engine.artifact_cache() {
            match std::fs::read(&path) {
                Ok(bytes) => remove_if_present(&cache.path_for(engine.engine(), &bytes))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        remove_if_present(&path)
    }
}

/// Removes `path`; a file that is already gone is not an error.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Writes `dir/name` so that it is either absent/old or complete: a uniquely named temp
/// file, fsync, rename over the target, fsync of the directory (which makes the rename
/// itself durable).
pub fn atomic_write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, dir.join(name))?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("switchyard-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn manifest_round_trips_and_a_crash_leftover_is_removed() {
        let dir = temp("round-trip");
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.load_manifest().unwrap().tenants.len(), 0, "empty on first start");
        let mut manifest = store.load_manifest().unwrap();
        manifest
            .tenants
            .insert("acme".into(), TenantRecord { token_sha256: "ab".into(), ..Default::default() });
        store.write_manifest(&manifest).unwrap();
        // What a kill between write and rename leaves behind.
        std::fs::write(dir.join(".manifest.json.1.0.tmp"), b"{\"half").unwrap();
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.load_manifest().unwrap(), manifest);
        assert!(!dir.join(".manifest.json.1.0.tmp").exists());
        store.write_blob("00ff", b"bytes").unwrap();
        assert_eq!(store.read_blob("00ff").unwrap(), b"bytes");
    }

    #[test]
    fn a_removed_blob_takes_its_artifact_with_it_and_removing_twice_is_fine() {
        let dir = temp("remove");
        let store = Store::open(&dir).unwrap();
        let cache = switchyard::ArtifactCache::open(dir.join("compiled")).unwrap();
        let engine =
            PolicyEngine::new(switchyard::Limits::default()).unwrap().with_artifact_cache(cache.clone());
        store.write_blob("00ff", b"bytes").unwrap();
        store.write_blob("11ee", b"other").unwrap();
        let artifact = cache.path_for(engine.engine(), b"bytes");
        std::fs::write(&artifact, b"compiled").unwrap();
        store.remove_blob("00ff", &engine).unwrap();
        assert!(!artifact.exists(), "the artifact of the removed blob is gone");
        assert!(store.read_blob("00ff").is_err());
        assert_eq!(store.read_blob("11ee").unwrap(), b"other", "other blobs stay");
        store.remove_blob("00ff", &engine).unwrap();
    }

    #[test]
    fn a_corrupt_or_foreign_manifest_is_an_error_not_an_empty_store() {
        let dir = temp("corrupt");
        let store = Store::open(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), b"{\"format\": 1, \"tenants\": ").unwrap();
        assert!(store.load_manifest().unwrap_err().contains("manifest.json"));
        std::fs::write(dir.join("manifest.json"), b"{\"format\": 9, \"tenants\": {}}").unwrap();
        assert!(store.load_manifest().unwrap_err().contains("format 9"));
    }
}
