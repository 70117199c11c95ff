//! The data directory on disk: reading it ([`StoreReader`]), and writing it under its lock
//! ([`Store`]), one record file per tenant.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchyard_fs::{euid, is_temp_name, private_dir, read_private, write_private};

use crate::records::{Holds, Manifest, TenantRecord, Unreadable, valid_name};

/// The layout this build writes: one file per tenant (see the crate's documentation).
const FORMAT: u32 = 2;
/// The layout before: the whole registry in `manifest.json`, migrated at open.
const FORMAT_WHOLE: u32 = 1;

/// The largest record file read back (a tenant's versions and their parameters).
const MAX_RECORD_BYTES: u64 = 256 << 20;
/// The largest blob read back: far over any component the engine accepts.
const MAX_BLOB_BYTES: u64 = 1 << 30;

/// `manifest.json` as read: in format 1 the whole registry, in format 2 only the format
/// (written with an empty `tenants`, which a format-1 build requires before it reads the
/// format and refuses it). Fields a newer build adds are no error; the format is what
/// says whether this build can read the directory.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ManifestFile {
    format: u32,
    tenants: BTreeMap<String, TenantRecord>,
    #[serde(default)]
    routers: BTreeMap<String, String>,
}

/// A data directory read without its lock: the committed records and the blobs, as a
/// running `serve` writes them. Owner-only reads, no symlink followed, as the store's own.
#[derive(Debug, Clone)]
pub struct StoreReader {
    dir: PathBuf,
}

/// What changes when a record file is replaced (a rename gives it a new inode): compared
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

    /// `manifest.json`; `None` when none was written yet.
    fn manifest_file(&self) -> Result<Option<ManifestFile>, String> {
        let path = self.dir.join("manifest.json");
        let text = match read_private(&path, MAX_RECORD_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let file: ManifestFile =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        match file.format {
            FORMAT | FORMAT_WHOLE => Ok(Some(file)),
            other => Err(format!(
                "{}: format {other} is neither {FORMAT} nor {FORMAT_WHOLE} (a newer switchyard wrote it?)",
                path.display()
            )),
        }
    }

    /// Everything committed; empty when nothing was written yet. Reads every tenant's
    /// file: for start-up, not for following one tenant ([`StoreReader::load_tenant`]).
    ///
    /// A record file this build cannot read (damaged, a newer build's, a name no tenant
    /// has) is skipped into [`Manifest::unreadable`], by its path in the directory
    /// (`tenants/acme.json`, `routers.json`), rather than failing the whole load: one bad
    /// file must not keep every other tenant from being served. `Err` only for what makes
    /// the directory itself unreadable (`manifest.json`, listing `tenants/`).
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        if let Some(file) = self.manifest_file()?.filter(|file| file.format == FORMAT_WHOLE) {
            return Ok(whole(file));
        }
        let mut manifest = Manifest::default();
        for file in self.tenant_files()? {
            let at = format!("tenants/{file}");
            let Some(name) = tenant_name(&file) else {
                let reason =
                    "not a tenant's record (tenants/NAME.json, NAME of a-z, 0-9, `-`, `_`)".to_string();
                manifest.unreadable.insert(at, Unreadable { holds: Holds::Unknown, reason });
                continue;
            };
            match self.read_tenant(name) {
                Ok(Some(record)) => {
                    manifest.tenants.insert(name.to_string(), Arc::new(record));
                }
                // Removed since it was listed: that tenant is gone.
                Ok(None) => {}
                Err(reason) => {
                    manifest.unreadable.insert(at, Unreadable { holds: Holds::Tenant(name.into()), reason });
                }
            }
        }
        match self.read_routers() {
            Ok(routers) => manifest.routers = routers.into_iter().collect(),
            Err(reason) => {
                manifest
                    .unreadable
                    .insert("routers.json".into(), Unreadable { holds: Holds::Routers, reason });
            }
        }
        Ok(manifest)
    }

    /// The committed record of tenant `name` (`None`: no such tenant). Reads one file.
    pub fn load_tenant(&self, name: &str) -> Result<Option<TenantRecord>, String> {
        match self.manifest_file()? {
            Some(mut file) if file.format == FORMAT_WHOLE => Ok(file.tenants.remove(name)),
            _ if !valid_name(name) => Ok(None),
            _ => self.read_tenant(name),
        }
    }

    /// The stamp of the file tenant `name`'s record is in now (`None`: none written yet):
    /// a cheap check for a change to that tenant.
    pub fn tenant_stamp(&self, name: &str) -> Option<ManifestStamp> {
        let own = valid_name(name).then(|| stamp(&self.tenant_path(name))).flatten();
        // A format-1 directory keeps every tenant in the manifest (and its migration
        // rewrites that file, so the stamp moves then too).
        own.or_else(|| stamp(&self.dir.join("manifest.json")))
    }

    /// The names of the files in `tenants/` (each a tenant's record, or a file no tenant
    /// has a name for: see [`tenant_name`]), sorted; a crash's temp files left out.
    fn tenant_files(&self) -> Result<Vec<String>, String> {
        let dir = self.dir.join("tenants");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("listing {}: {e}", dir.display())),
        };
        let mut files = Vec::new();
        for entry in entries {
            let file = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?.file_name();
            let file = file.to_string_lossy();
            if !is_temp_name(&file) {
                files.push(file.into_owned());
            }
        }
        files.sort();
        Ok(files)
    }

    fn read_tenant(&self, name: &str) -> Result<Option<TenantRecord>, String> {
        let path = self.tenant_path(name);
        match read_private(&path, MAX_RECORD_BYTES) {
            Ok(text) => TenantRecord::from_stored(name, &text)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    fn read_routers(&self) -> Result<BTreeMap<String, String>, String> {
        let path = self.dir.join("routers.json");
        match read_private(&path, MAX_RECORD_BYTES) {
            Ok(text) => serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    fn tenant_path(&self, name: &str) -> PathBuf {
        self.dir.join("tenants").join(format!("{name}.json"))
    }

    /// The component bytes stored under `sha256` (through [`read_private`]: owner-only,
    /// no symlink, at most `MAX_BLOB_BYTES`). `sha256` must be a blob name a record
    /// gave (hex digits); anything else (a path) is refused.
    pub fn read_blob(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        self.read_blob_at_most(sha256, MAX_BLOB_BYTES)
    }

    /// [`StoreReader::read_blob`], refused unread if the file is over `max` bytes: for a
    /// reader that compiles what it reads, and need not read more than it would compile.
    pub fn read_blob_at_most(&self, sha256: &str, max: u64) -> std::io::Result<Vec<u8>> {
        if sha256.is_empty() || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{sha256}` is not a blob name (hex digits)"),
            ));
        }
        read_private(&self.blob_path(sha256), max.min(MAX_BLOB_BYTES))
    }

    fn blob_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{sha256}.wasm"))
    }
}

/// The tenant whose record file `tenants/<file>` is; `None` for a file no tenant has
/// that name for.
fn tenant_name(file: &str) -> Option<&str> {
    file.strip_suffix(".json").filter(|name| valid_name(name))
}

/// A format-1 manifest's registry.
fn whole(file: ManifestFile) -> Manifest {
    Manifest {
        tenants: file.tenants.into_iter().map(|(name, record)| (name, Arc::new(record))).collect(),
        routers: file.routers.into_iter().collect(),
        unreadable: imbl::OrdMap::new(),
    }
}

fn stamp(path: &Path) -> Option<ManifestStamp> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(ManifestStamp {
        ino: meta.ino(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        len: meta.len(),
    })
}

/// The data directory, locked for this process.
pub struct Store {
    dir: PathBuf,
    reader: StoreReader,
    /// Holds the exclusive lock on `lock` while the store lives.
    _lock: File,
    /// A record file the last [`Store::load_manifest`] could not read, if any: it may
    /// name any blob, so none is deleted while it stands.
    unreadable: std::sync::Mutex<Option<String>>,
}

impl Store {
    /// Opens (creating) the data directory owner-only, takes its lock (refused while
    /// another process holds it), narrows file modes to 0600, removes temp files a crash
    /// left behind, and migrates a format-1 directory (the whole registry in
    /// `manifest.json`) to one file per tenant. The migration writes every record, then
    /// replaces `manifest.json` with the format-2 marker: a crash before that leaves the
    /// old manifest in charge, and the next open migrates again.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        private_dir(dir)?;
        let lock = lock(dir)?;
        private_dir(&dir.join("blobs"))?;
        private_dir(&dir.join("tenants"))?;
        for sub in [dir.to_path_buf(), dir.join("blobs"), dir.join("tenants")] {
            for entry in std::fs::read_dir(&sub)? {
                let entry = entry?;
                let path = entry.path();
                if is_temp_name(&entry.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_file(path);
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path)?;
                if meta.is_file() && meta.uid() == euid() && meta.mode() & 0o077 != 0 {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                }
            }
        }
        let store = Self {
            dir: dir.to_path_buf(),
            reader: StoreReader { dir: dir.to_path_buf() },
            _lock: lock,
            unreadable: std::sync::Mutex::new(None),
        };
        match store.reader.manifest_file().map_err(std::io::Error::other)? {
            Some(file) if file.format == FORMAT => {}
            Some(file) => store.write_manifest(&whole(file))?,
            None => store.write_marker()?,
        }
        Ok(store)
    }

    /// The committed registry; empty on first start. While it lists a record this build
    /// cannot read, [`Store::remove_blob`] deletes nothing.
    pub fn load_manifest(&self) -> Result<Manifest, String> {
        let manifest = self.reader.load_manifest()?;
        *self.unreadable.lock().unwrap_or_else(|p| p.into_inner()) =
            manifest.unreadable.keys().next().cloned();
        Ok(manifest)
    }

    /// Commits tenant `name`'s record (`None` removes the tenant): after this returns, a
    /// restart sees it. One file, whatever the number of tenants.
    pub fn write_tenant(&self, name: &str, record: Option<&TenantRecord>) -> std::io::Result<()> {
        if !valid_name(name) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{name}` is not a tenant name (a-z, 0-9, `-`, `_`; 1–64)"),
            ));
        }
        let dir = self.dir.join("tenants");
        let file = format!("{name}.json");
        match record {
            Some(record) => {
                let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
                write_private(&dir, &file, &bytes)
            }
            None => {
                remove_if_present(&dir.join(&file))?;
                File::open(&dir)?.sync_all()
            }
        }
    }

    /// Commits the routers (name → token hash).
    pub fn write_routers(&self, routers: &imbl::OrdMap<String, String>) -> std::io::Result<()> {
        let routers: BTreeMap<&String, &String> = routers.iter().collect();
        let bytes = serde_json::to_vec_pretty(&routers).map_err(std::io::Error::other)?;
        write_private(&self.dir, "routers.json", &bytes)
    }

    /// Writes the whole `manifest`: every tenant's record and the routers, then removes
    /// the record of every tenant it does not name, then the format marker. Not atomic
    /// across tenants (each file is): for the migration and for tests. The service
    /// commits one tenant, or the routers, at a time. A record the manifest lists as
    /// unreadable ([`Manifest::unreadable`]) is left as it is, as is a file no tenant has
    /// the name of.
    pub fn write_manifest(&self, manifest: &Manifest) -> std::io::Result<()> {
        for (name, record) in &manifest.tenants {
            self.write_tenant(name, Some(record))?;
        }
        if !manifest.unreadable.values().any(|u| u.holds == Holds::Routers) {
            self.write_routers(&manifest.routers)?;
        }
        for file in self.reader.tenant_files().map_err(std::io::Error::other)? {
            let Some(name) = tenant_name(&file) else { continue };
            if !manifest.tenants.contains_key(name) && manifest.unreadable_tenant(name).is_none() {
                self.write_tenant(name, None)?;
            }
        }
        self.write_marker()
    }

    /// `manifest.json` as format 2's marker.
    fn write_marker(&self) -> std::io::Result<()> {
        let marker = ManifestFile { format: FORMAT, ..ManifestFile::default() };
        let bytes = serde_json::to_vec_pretty(&marker).map_err(std::io::Error::other)?;
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

    /// Deletes the blob `sha256`; already absent is fine. Only for a blob no committed
    /// version names, under the writer lock: an upload makes sure its blob exists under
    /// that lock before it commits, so it never commits a record naming a blob deleted
    /// here.
    ///
    /// Refused, and the blob kept, while the last [`Store::load_manifest`] found a record
    /// file it could not read: a newer build's record may name this blob.
    pub fn remove_blob(&self, sha256: &str) -> std::io::Result<()> {
        self.check_removable(sha256)?;
        remove_if_present(&self.reader.blob_path(sha256))
    }

    /// [`Store::remove_blob`], calling `first` with the blob's bytes before the blob goes:
    /// for what was made from them and is found by them (the service removes the
    /// runtime's compiled artifact there, which is named by the bytes' hash). A crash in
    /// between leaves a blob (harmless), never something made from it that nothing finds.
    /// The blob is read as [`Store::read_blob`] reads it (never through a symlink,
    /// owner-only, at most `MAX_BLOB_BYTES`); one it refuses is an error, and stays, as
    /// does whatever `first` would have removed. An absent blob calls nothing. Refused,
    /// both kept, as [`Store::remove_blob`] is.
    pub fn remove_blob_after(
        &self,
        sha256: &str,
        first: impl FnOnce(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.check_removable(sha256)?;
        match self.read_blob(sha256) {
            Ok(bytes) => first(&bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        remove_if_present(&self.reader.blob_path(sha256))
    }

    /// An error while the last [`Store::load_manifest`] found a record file this build
    /// cannot read.
    fn check_removable(&self, sha256: &str) -> std::io::Result<()> {
        match &*self.unreadable.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(at) => Err(std::io::Error::other(format!(
                "blob {sha256} kept: {at} is a record this build cannot read, which may name it"
            ))),
            None => Ok(()),
        }
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
/// directory gets a clear error instead of two writers of one registry.
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
