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
//!
//! Readers: [`StoreReader`] reads the same directory without the lock, for a router's
//! adapter following the registry a running `serve` writes (`switchyard-dynamo`'s store
//! source). Because every file is replaced by rename, a reader sees a whole manifest, old
//! or new, and every blob it names.

#![forbid(unsafe_code)]

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

impl Assignment {
    /// The version this assignment routes to within `policy` (the policy it names): the
    /// pinned one, else the policy's active one.
    pub fn version_in<'a>(&'a self, policy: &'a PolicyRecord) -> &'a str {
        self.version.as_deref().unwrap_or(&policy.active)
    }
}

/// Where a tenant's class routes, as the manifest says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Routed<'a> {
    /// The class is unassigned: the builtin default, fail-open.
    Unassigned,
    /// A policy that is not the tenant's: a builtin's name (or nothing the service knows,
    /// which it does not route).
    Named {
        /// The policy name as assigned.
        policy: &'a str,
        /// What a fault does.
        on_fault: FailMode,
    },
    /// One of the tenant's uploaded versions.
    Version {
        /// The tenant's policy name.
        policy: &'a str,
        /// The version routed to (pinned or active).
        record: &'a VersionRecord,
        /// What a fault does.
        on_fault: FailMode,
    },
}

impl Manifest {
    /// Every version every tenant keeps: (tenant, policy name, version).
    pub fn versions(&self) -> impl Iterator<Item = (&str, &str, &VersionRecord)> {
        self.tenants
            .iter()
            .flat_map(|(tenant, record)| record.versions().map(move |(name, v)| (tenant.as_str(), name, v)))
    }
}

impl TenantRecord {
    /// Every version this tenant keeps: (policy name, version).
    pub fn versions(&self) -> impl Iterator<Item = (&str, &VersionRecord)> {
        self.policies
            .iter()
            .flat_map(|(name, policy)| policy.versions.iter().map(move |v| (name.as_str(), v)))
    }

    /// Where `class` routes. `Err` names what is missing when the class names one of the
    /// tenant's policies at a version the policy no longer keeps (the service never
    /// commits such a manifest).
    pub fn route(&self, class: &str) -> Result<Routed<'_>, String> {
        let Some(a) = self.classes.get(class) else { return Ok(Routed::Unassigned) };
        let Some(policy) = self.policies.get(&a.policy) else {
            return Ok(Routed::Named { policy: &a.policy, on_fault: a.on_fault });
        };
        let version = a.version_in(policy);
        let record = policy
            .version(version)
            .ok_or_else(|| format!("policy `{}` keeps no version {version}", a.policy))?;
        Ok(Routed::Version { policy: &a.policy, record, on_fault: a.on_fault })
    }
}

/// A data directory read without its lock: the committed manifest and the blobs, as a
/// running `serve` writes them. Owner-only reads, no symlink followed, as the store's own.
#[derive(Debug, Clone)]
pub struct StoreReader {
    dir: PathBuf,
}

/// What changes when the manifest is replaced (a rename gives it a new inode): compared
/// before re-reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestStamp {
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

impl StoreReader {
    /// A reader of `dir`; refused if it is not a directory.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        let meta = std::fs::metadata(dir)?;
        if !meta.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(Self { dir: dir.to_path_buf() })
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The committed manifest; empty when none was written yet.
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

    /// The manifest's stamp now (`None`: none written yet): a cheap check for a change.
    pub fn manifest_stamp(&self) -> Option<ManifestStamp> {
        let meta = std::fs::symlink_metadata(self.dir.join("manifest.json")).ok()?;
        Some(ManifestStamp {
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            len: meta.len(),
        })
    }

    /// The component bytes stored under `sha256` (through [`read_private`]: owner-only,
    /// no symlink, at most `MAX_BLOB_BYTES`). `sha256` must be a blob name the manifest
    /// gave (hex digits); anything else (a path) is refused.
    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        if sha256.is_empty() || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{sha256}` is not a blob name (hex digits)"),
            ));
        }
        read_private(&self.blob_path(sha256), MAX_BLOB_BYTES)
    }

    fn blob_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{sha256}.wasm"))
    }
}

/// The data directory, locked for this process.
pub struct Store {
    dir: PathBuf,
    reader: StoreReader,
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
        Ok(Self { dir: dir.to_path_buf(), reader: StoreReader { dir: dir.to_path_buf() }, _lock: lock })
    }

    /// The committed manifest; empty on first start.
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        self.reader.load_manifest()
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

    /// The component bytes stored under `sha256` (see [`StoreReader::read_blob`]).
    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        self.reader.read_blob(sha256)
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
        self.reader.blob_path(sha256)
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

    #[test]
    fn a_reader_follows_a_locked_store_and_resolves_its_routes() {
        let dir = temp("reader");
        let store = Store::open(&dir).unwrap();
        let reader = StoreReader::new(&dir).unwrap();
        assert_eq!(reader.manifest_stamp(), None, "nothing written yet");
        assert!(reader.load_manifest().unwrap().tenants.is_empty());
        let v = |version: &str| VersionRecord {
            version: version.into(),
            blob: "00ff".into(),
            params: "{}".into(),
            size: 5,
        };
        let mut tenant = TenantRecord::default();
        tenant.policies.insert(
            "mine".into(),
            PolicyRecord {
                versions: vec![v("v1"), v("v2")],
                active: "v2".into(),
                previous: vec!["v1".into()],
            },
        );
        let assign = |policy: &str, version: Option<&str>| Assignment {
            policy: policy.into(),
            version: version.map(Into::into),
            on_fault: FailMode::Closed,
        };
        tenant.classes.insert("follows".into(), assign("mine", None));
        tenant.classes.insert("pinned".into(), assign("mine", Some("v1")));
        tenant.classes.insert("builtin".into(), assign("lmetric", None));
        tenant.classes.insert("gone".into(), assign("mine", Some("v9")));
        let mut manifest = store.load_manifest().unwrap();
        manifest.tenants.insert("acme".into(), tenant);
        store.write_blob("00ff", b"bytes").unwrap();
        store.write_manifest(&manifest).unwrap();

        // The store still holds the lock; the reader needs none.
        let stamp = reader.manifest_stamp().expect("written");
        let read = reader.load_manifest().unwrap();
        assert_eq!(read, manifest);
        assert_eq!(reader.read_blob("00ff").unwrap(), b"bytes");
        let tenant = &read.tenants["acme"];
        let version = |class| match tenant.route(class).unwrap() {
            Routed::Version { record, on_fault, .. } => (record.version.clone(), on_fault),
            other => panic!("{other:?}"),
        };
        assert_eq!(version("follows"), ("v2".to_string(), FailMode::Closed));
        assert_eq!(version("pinned").0, "v1");
        assert_eq!(
            tenant.route("builtin").unwrap(),
            Routed::Named { policy: "lmetric", on_fault: FailMode::Closed }
        );
        assert_eq!(tenant.route("other").unwrap(), Routed::Unassigned);
        assert!(tenant.route("gone").unwrap_err().contains("no version v9"));

        // A commit replaces the file: the stamp moves.
        store.write_manifest(&read).unwrap();
        assert_ne!(reader.manifest_stamp(), Some(stamp));
        // A blob name from a tampered manifest never becomes a path.
        let refused = reader.read_blob("../manifest.json").unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
        assert!(StoreReader::new(&dir.join("manifest.json")).is_err(), "a file is not a data dir");
    }
}
