//! The embedded store: a data directory with content-addressed component blobs and one
//! manifest. Every write is temp file → fsync → rename → fsync of the directory, so after
//! `kill -9` or a power cut a file is either the old one or the new one, never half.
//!
//! Layout: `manifest.json` (tenants, token hashes, policies, versions, assignments),
//! `blobs/<sha256>.wasm` (the uploaded bytes), `admin.token` (see `auth`), `lock`.
//! A blob is written before the manifest that names it, so a manifest never points at a
//! missing blob.
//!
//! Owner-only: the directory and `blobs/` are 0700 and owned by this process's user,
//! every file 0600 (modes left wider by an older version are narrowed at open); files
//! are opened without following symlinks. One server at a time: [`Store::open`] takes an
//! exclusive lock on `lock` for the store's lifetime, and a second server on the same
//! directory is refused.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use switchyard::cache::{private_dir, read_private, write_private};
use switchyard::{FailMode, PolicyEngine};

/// The manifest format this build writes and reads.
const FORMAT: u32 = 1;

/// Everything committed: the only state that survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The manifest format (1); another is refused at start-up.
    pub format: u32,
    /// Tenant name → its token hash, policies and classes.
    pub tenants: BTreeMap<String, TenantRecord>,
    /// Router name → sha256 of its token (routers may select for any tenant).
    #[serde(default)]
    pub routers: BTreeMap<String, String>,
}

/// One tenant: its token's hash, its policies and where its classes route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    /// sha256 of the tenant's token, hex. The token itself is never stored.
    pub token_sha256: String,
    /// Policy name → its versions.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyRecord>,
    /// Class name → where it routes (an unassigned class runs the builtin default).
    #[serde(default)]
    pub classes: BTreeMap<String, Assignment>,
}

/// One named policy of a tenant: every version uploaded, which is active, and the
/// versions active before it (most recent last) for rollback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    /// The versions kept (the active one, the rollback history, those classes pin), in
    /// the order they were first uploaded.
    pub versions: Vec<VersionRecord>,
    /// The version classes that follow the policy route to.
    pub active: String,
    /// The rollback history: versions active before, most recent last.
    #[serde(default)]
    pub previous: Vec<String>,
}

impl PolicyRecord {
    /// The record of `version`, if the policy keeps it.
    pub fn version(&self, version: &str) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.version == version)
    }
}

/// One uploaded version: the component (by its blob) and the parameters it runs with.
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
    /// A builtin's name or one of the tenant's policies.
    pub policy: String,
    /// The pinned version; `None` follows the policy's active version.
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    /// What a policy fault does to the class's selections.
    pub on_fault: FailMode,
}

/// The data directory, locked for this process.
pub struct Store {
    dir: PathBuf,
    /// Holds the exclusive lock on `lock` while the store lives.
    _lock: File,
}

/// The largest manifest read back (it holds token hashes and version records).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;
/// The largest blob read back: far over any component the engine accepts.
const MAX_BLOB_BYTES: u64 = 1 << 30;

impl Store {
    /// Opens (creating) the data directory owner-only, takes its lock (refused while
    /// another process holds it), narrows file modes to 0600 and removes temp files a
    /// crash left behind.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        private_dir(dir)?;
        let lock = lock(dir)?;
        private_dir(&dir.join("blobs"))?;
        for sub in [dir.to_path_buf(), dir.join("blobs")] {
            for entry in std::fs::read_dir(&sub)? {
                let entry = entry?;
                let path = entry.path();
                // Every temp name `write_private` makes (`.NAME.PID.N.tmp`) ends so.
                if path.extension().is_some_and(|e| e == "tmp") {
                    let _ = std::fs::remove_file(path);
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path)?;
                if meta.is_file() && meta.uid() == switchyard::cache::euid() && meta.mode() & 0o077 != 0 {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                }
            }
        }
        Ok(Self { dir: dir.to_path_buf(), _lock: lock })
    }

    /// The committed manifest; empty on first start.
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        let path = self.dir.join("manifest.json");
        let text = match read_private(&path, MAX_MANIFEST_BYTES) {
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
        write_private(&self.dir, "manifest.json", &bytes)
    }

    /// Stores component bytes under their sha256 (a no-op if present).
    pub fn write_blob(&self, sha256: &str, bytes: &[u8]) -> std::io::Result<()> {
        let name = format!("{sha256}.wasm");
        let present =
            std::fs::symlink_metadata(self.dir.join("blobs").join(&name)).is_ok_and(|m| m.is_file());
        if present {
            return Ok(());
        }
        write_private(&self.dir.join("blobs"), &name, bytes)
    }

    /// The component bytes stored under `sha256` (through [`read_private`]: owner-only,
    /// no symlink).
    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        read_private(&self.blob_path(sha256), MAX_BLOB_BYTES)
    }

    /// The sha256 of every stored blob.
    pub fn blob_names(&self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(self.dir.join("blobs"))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(sha256) = name.strip_suffix(".wasm") {
                names.push(sha256.to_string());
            }
        }
        Ok(names)
    }

    fn blob_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{sha256}.wasm"))
    }

    /// Deletes the blob `sha256` and our compiled artifact of it in `engine`'s cache (the
    /// cache keys artifacts by the component's bytes, so they are read first). Already
    /// absent files are fine. Only for a blob no committed version names, under the
    /// writer lock: an upload makes sure its blob exists under that lock before it commits,
    /// so it never commits a manifest naming a blob deleted here. The artifact goes first:
    /// a crash in between leaves a blob (harmless), never an artifact nothing finds. The
    /// blob is read as [`Store::read_blob`] reads it (never through a symlink, owner-only,
    /// at most `MAX_BLOB_BYTES`); one it refuses is an error, and stays.
    pub fn remove_blob(&self, sha256: &str, engine: &PolicyEngine) -> std::io::Result<()> {
        let path = self.blob_path(sha256);
        if let Some(cache) = engine.artifact_cache() {
            match self.read_blob(sha256) {
                Ok(bytes) => {
                    let artifact = cache.path_for(engine.engine(), &bytes);
                    remove_if_present(&artifact)?;
                    remove_if_present(&switchyard::ArtifactCache::digest_path(&artifact))?;
                }
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

/// Takes the exclusive lock on `dir/lock`, without waiting: a second server on the same
/// directory gets a clear error instead of two writers of one manifest.
fn lock(dir: &Path) -> std::io::Result<File> {
    let path = dir.join("lock");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "{} is in use by another switchyard serve (it holds the lock on {}); stop it or use another --data-dir",
                dir.display(),
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
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
        drop(store);
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
    fn a_blob_that_is_a_symlink_is_not_read_through_when_removed() {
        let dir = temp("remove-symlink");
        let store = Store::open(&dir).unwrap();
        let cache = switchyard::ArtifactCache::open(dir.join("compiled")).unwrap();
        let engine =
            PolicyEngine::new(switchyard::Limits::default()).unwrap().with_artifact_cache(cache.clone());
        // Another blob's artifact, and a "blob" that is a link to that blob's bytes.
        store.write_blob("00ff", b"bytes").unwrap();
        let artifact = cache.path_for(engine.engine(), b"bytes");
        std::fs::write(&artifact, b"compiled").unwrap();
        std::os::unix::fs::symlink(dir.join("blobs/00ff.wasm"), dir.join("blobs/00bb.wasm")).unwrap();
        let refused = store.remove_blob("00bb", &engine).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        assert!(artifact.exists(), "the artifact of the bytes the link points at stays");
        assert_eq!(store.read_blob("00ff").unwrap(), b"bytes");
    }

    #[test]
    fn a_corrupt_or_foreign_manifest_is_an_error_not_an_empty_store() {
        let dir = temp("corrupt");
        let store = Store::open(&dir).unwrap();
        write_private(&dir, "manifest.json", b"{\"format\": 1, \"tenants\": ").unwrap();
        assert!(store.load_manifest().unwrap_err().contains("manifest.json"));
        write_private(&dir, "manifest.json", b"{\"format\": 9, \"tenants\": {}}").unwrap();
        assert!(store.load_manifest().unwrap_err().contains("format 9"));
    }

    #[test]
    fn the_data_dir_is_owner_only_locked_and_never_read_through_a_symlink() {
        let dir = temp("private");
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        // What an older version left: a world-readable directory and blob.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("blobs/00aa.wasm"), b"old").unwrap();
        std::fs::set_permissions(dir.join("blobs/00aa.wasm"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let store = Store::open(&dir).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&dir.join("blobs"))), (0o700, 0o700));
        assert_eq!(mode(&dir.join("blobs/00aa.wasm")), 0o600);
        store.write_manifest(&Manifest { format: FORMAT, ..Manifest::default() }).unwrap();
        store.write_blob("00ff", b"bytes").unwrap();
        assert_eq!((mode(&dir.join("manifest.json")), mode(&dir.join("blobs/00ff.wasm"))), (0o600, 0o600));
        // A second store on the same directory is refused while the first lives.
        let second = Store::open(&dir).err().expect("locked");
        assert!(second.to_string().contains("in use by another switchyard serve"), "{second}");
        // A blob that is a symlink is not followed.
        std::os::unix::fs::symlink(dir.join("blobs/00ff.wasm"), dir.join("blobs/00bb.wasm")).unwrap();
        assert!(store.read_blob("00bb").unwrap_err().to_string().contains("symbolic link"));
        drop(store);
        assert!(Store::open(&dir).is_ok(), "the lock goes with the store");
    }
}
