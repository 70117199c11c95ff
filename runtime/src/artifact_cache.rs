//! A cache of OUR OWN compiled output, so a policy uploaded again (or a restarted host)
//! skips Cranelift.
//!
//! An artifact is named by the sha256 of the tenant's component bytes, the engine's
//! compatibility hash (every setting that affects generated code, and the wasmtime
//! version) and wasmtime's major version, so an artifact is only ever loaded by an engine
//! that could have written it.
//! Only [`ArtifactCache::store_serialized`] writes artifacts, wasmtime's serialization of a
//! component compiled by this process (or a compile worker it started); a tenant's bytes
//! are never deserialized as an artifact: they only name it.
//!
//! Whatever is loaded from here runs as machine code, so nothing is trusted for being
//! there: each artifact is sealed when it is written by a MAC (BLAKE3 keyed with the
//! cache's [`ArtifactKey`]) over its file name and its bytes, recorded beside it
//! (`<artifact>.mac`), and checked before a load, on the very file then mapped as the
//! component's code (BLAKE3 because the check is on every cold load's path). The key is
//! kept outside this directory, readable by this user alone, so whoever can write here
//! cannot make a file pass: neither other code nor another component's genuine artifact
//! renamed to this one's name (the name holds the component's sha256 and the engine's
//! settings). An unkeyed digest beside an artifact (`.blake3`, `.sha256`) counts for
//! nothing. The file must also be a regular file (symlinks are never followed), owned by
//! this process's user and accessible to no one else. A file this process checked before is
//! not hashed again while it is provably unchanged (see `Identity`): an evicted version's
//! reload then takes markedly less time (BENCHMARKS.md, "Where the time goes": a component
//! loaded from the artifact cache). The artifacts this cache wrote can be checked that way
//! ahead of any load ([`ArtifactCache::check_written`], which the service's eviction pass
//! calls), so not even the first reload hashes on a selection's path. An artifact that
//! fails a check is not run: it is removed, counted ([`ArtifactCache::rejected`]), logged,
//! and the component is compiled again. Owner-only files and directories are
//! `switchyard-fs`'s, which the service's data directory uses too.
//!
//! A loaded artifact is mapped, not copied, so it must never be written in place: this
//! cache only ever renames a new file over an old one or unlinks it, and an operator
//! must do the same (deleting the directory's files is always safe). Each component
//! loaded from here holds its file open while it lives: one descriptor per loaded
//! component (`switchyard serve` raises its soft descriptor limit to the hard one).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use switchyard_fs::{create_private, is_temp_name, open_private, private_dir, read_private, write_private};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The wasmtime line the runtime is built against (part of the key, belt and braces: the
/// engine's compatibility hash covers the exact version too).
const WASMTIME_MAJOR: &str = "wasmtime-50";

/// The largest artifact read back: a 4 MiB component compiles to a few tens of MB.
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// How many checked files' identities are remembered; past it they are forgotten (and
/// hashed again on their next load): bounds the memory a process that loads ever more
/// artifacts spends on them (~100 bytes each).
const MAX_REMEMBERED: usize = 100_000;

/// A file's change must be this much older than the check for its identity to be
/// remembered: the kernel stamps a change with a coarse clock (one tick, ≤ 10 ms), so a
/// change made after the check stamps a later time than one this old. An artifact
/// written is left by [`ArtifactCache::check_written`] until it is this old.
pub const SETTLED: Duration = Duration::from_secs(1);

/// How many artifacts written and not yet checked are kept for
/// [`ArtifactCache::check_written`]; past it the oldest are forgotten (their first load
/// checks them instead).
const MAX_WRITTEN: usize = 4_096;

/// The environment variable that gives the artifact key (64 hex digits) instead of a key
/// file: see [`ArtifactKey::from_env_or_file`].
pub const ARTIFACT_KEY_ENV: &str = "SWITCHYARD_ARTIFACT_KEY";

/// The largest key file read: 64 hex digits and some whitespace.
const MAX_KEY_FILE_BYTES: u64 = 256;

/// The secret that seals an [`ArtifactCache`]'s artifacts: a MAC under it (keyed BLAKE3)
/// over each artifact's name and bytes is recorded beside the artifact, and only an
/// artifact whose MAC checks is ever run. Whoever can read it can make the cache run any
/// code, so it is kept outside the cache directory ([`ArtifactCache::open`] refuses a key
/// file inside it), in a file only this user may access, or in the environment. A new key
/// (its file deleted, or another value in the environment) invalidates every artifact:
/// each is rejected and compiled again at its next load.
#[derive(Clone)]
pub struct ArtifactKey {
    bytes: [u8; blake3::KEY_LEN],
    /// The file it was read from or created in; `None`: from the environment, or made
    /// for this process alone.
    file: Option<PathBuf>,
}

impl std::fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bytes: a key in a log is a key given away.
        f.debug_struct("ArtifactKey").field("file", &self.file).finish_non_exhaustive()
    }
}

impl ArtifactKey {
    /// A fresh random key, kept nowhere: artifacts sealed with it pass only in this
    /// process (tests, benches, a one-off run).
    pub fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; blake3::KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
        Ok(Self { bytes, file: None })
    }

    /// The key in [`ARTIFACT_KEY_ENV`] (`SWITCHYARD_ARTIFACT_KEY`) if it is set and not
    /// empty, else [`ArtifactKey::from_file`]'s of `path` (not read then, nor created). A
    /// value that is not 64 hex digits is an error naming the variable.
    pub fn from_env_or_file(path: &Path) -> std::io::Result<Self> {
        match Self::from_env()? {
            Some(key) => Ok(key),
            None => Self::from_file(path),
        }
    }

    /// The key in [`ARTIFACT_KEY_ENV`], if it is set and not empty; an error naming the
    /// variable (never echoing its value) if that is not 64 hex digits.
    pub fn from_env() -> std::io::Result<Option<Self>> {
        let Some(value) = std::env::var_os(ARTIFACT_KEY_ENV).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        match value.to_str().and_then(parse_key) {
            Some(bytes) => Ok(Some(Self { bytes, file: None })),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{ARTIFACT_KEY_ENV} must be 64 hex digits (a 32-byte key, e.g. from `openssl rand -hex 32`); it is set to something else"
                ),
            )),
        }
    }

    /// The key in the file at `path` (64 hex digits), which must be a regular file (not a
    /// symlink) owned by this process's user and accessible to no one else; if there is
    /// none, a fresh random key written there first, owner-only (0600). Two processes
    /// creating it at once end up with the same key: the file is never replaced.
    pub fn from_file(path: &Path) -> std::io::Result<Self> {
        match Self::read(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            read => return read,
        }
        let (dir, name) = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => (if dir.as_os_str().is_empty() { Path::new(".") } else { dir }, name),
            _ => return Err(std::io::Error::other(format!("{} names no file", path.display()))),
        };
        let Self { bytes, .. } = Self::generate()?;
        let created = std::fs::create_dir_all(dir)
            .and_then(|()| create_private(dir, name, format!("{}\n", hex::encode(bytes)).as_bytes()));
        match created {
            Ok(()) => Ok(Self { bytes, file: Some(path.to_path_buf()) }),
            // Another process made it first: its key is the one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::read(path),
            Err(e) => Err(std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))),
        }
    }

    fn read(path: &Path) -> std::io::Result<Self> {
        let text = read_private(path, MAX_KEY_FILE_BYTES).map_err(|e| match e.raw_os_error() {
            // The OS's own errors do not name the file; `open_private`'s do.
            Some(_) => std::io::Error::new(e.kind(), format!("{}: {e}", path.display())),
            None => e,
        })?;
        let bytes = std::str::from_utf8(&text).ok().and_then(parse_key).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} does not hold a key (64 hex digits); delete it and a new one is made (every artifact is then compiled again)",
                    path.display()
                ),
            )
        })?;
        Ok(Self { bytes, file: Some(path.to_path_buf()) })
    }

    /// Where the key of a cache in `cache_dir` is kept when nothing else says:
    /// `<cache_dir>.key`, beside the directory and outside it. `None` for a path that
    /// ends in no name (`/`, `..`).
    pub fn path_beside(cache_dir: &Path) -> Option<PathBuf> {
        let name = cache_dir.file_name()?;
        let mut key = name.to_os_string();
        key.push(".key");
        Some(cache_dir.with_file_name(key))
    }

    /// The file this key was read from or created in, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The MAC, in hex, of an artifact whose file name is `name` and whose bytes are
    /// `artifact`: what its `.mac` file records.
    pub fn mac(&self, name: &str, artifact: &[u8]) -> String {
        self.seal(name.as_bytes(), artifact).to_hex().to_string()
    }

    /// Keyed BLAKE3 over the name's length, the name and the bytes (the length keeps
    /// each split of name and bytes apart).
    fn seal(&self, name: &[u8], artifact: &[u8]) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.bytes);
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name);
        hasher.update(artifact);
        hasher.finalize()
    }
}

/// 64 hex digits (surrounding whitespace ignored) as a key.
fn parse_key(text: &str) -> Option<[u8; blake3::KEY_LEN]> {
    let mut bytes = [0u8; blake3::KEY_LEN];
    hex::decode_to_slice(text.trim(), &mut bytes).ok()?;
    Some(bytes)
}

/// A directory of compiled components this process owns.
#[derive(Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    key: ArtifactKey,
    /// Artifacts refused by a check, across clones.
    rejected: Arc<AtomicU64>,
    /// Digests computed by loads (the others found their file checked before).
    digests_checked: Arc<AtomicU64>,
    /// Digests computed by [`ArtifactCache::check_written`] (ahead of any load).
    checked_ahead: Arc<AtomicU64>,
    /// The identity of each artifact whose digest a load checked and whose component
    /// deserialized, by path, across clones.
    checked: Arc<Mutex<HashMap<PathBuf, Identity>>>,
    /// Artifacts `store` wrote that no check has remembered yet, oldest first, across
    /// clones (see [`ArtifactCache::check_written`]).
    written: Arc<Mutex<VecDeque<PathBuf>>>,
}

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactCache")
            .field("dir", &self.dir)
            .field("rejected", &self.rejected())
            .field("digests_checked", &self.digests_checked())
            .field("remembered", &self.checked().len())
            .finish()
    }
}

/// What tells one state of a file from any later one: the same inode, size and
/// modification time, and the same status-change time (`ctime`), which the kernel sets
/// on every write of the data or the metadata and which no user can set back (unlike
/// `mtime`). A file whose identity is unchanged since its digest was checked holds the
/// bytes then checked. Only identities older than [`SETTLED`] at the check are kept, so
/// a change right after the check cannot carry the same `ctime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(file: &File) -> Option<Self> {
        let m = file.metadata().ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// Whether its last change is at least [`SETTLED`] before now.
    fn settled(&self) -> bool {
        let Ok(now) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) else { return false };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1)) else {
            return false;
        };
        Duration::new(secs, nanos).saturating_add(SETTLED) <= now
    }
}

impl ArtifactCache {
    /// Uses (and creates, owner-only) `dir`, which must be a directory (not a symlink)
    /// owned by this process's user: whatever is in it is loaded as machine code once
    /// its MAC under `key` checks. A key kept in a file inside `dir` is refused: whoever
    /// could write the artifacts could then read it.
    pub fn open(dir: impl Into<PathBuf>, key: ArtifactKey) -> std::io::Result<Self> {
        let dir = dir.into();
        private_dir(&dir)?;
        if let Some(file) = key.file() {
            let (canonical_dir, canonical_key) = (std::fs::canonicalize(&dir)?, std::fs::canonicalize(file)?);
            if canonical_key.starts_with(&canonical_dir) {
                return Err(std::io::Error::other(format!(
                    "the artifact key {} is inside the cache directory {}: keep it outside",
                    file.display(),
                    dir.display()
                )));
            }
        }
        // A process killed mid-`store` leaves its temp file behind (never a damaged
        // artifact: those are only ever renamed into place whole). Clear them; at worst
        // another live process's write in flight fails, which only costs it the caching.
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let legacy = path.extension().is_some_and(|e| e.to_string_lossy().starts_with("tmp"));
            if legacy || is_temp_name(&name) {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(Self {
            dir,
            key,
            rejected: Arc::default(),
            digests_checked: Arc::default(),
            checked_ahead: Arc::default(),
            checked: Arc::default(),
            written: Arc::default(),
        })
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Artifacts refused so far (a MAC that does not check, no recorded MAC, a symlink,
    /// another owner, a permissive mode): each was recompiled instead of run.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// MACs computed by loads so far, across clones: a load of a file checked before and
    /// unchanged since computes none.
    pub fn digests_checked(&self) -> u64 {
        self.digests_checked.load(Ordering::Relaxed)
    }

    /// Artifacts whose MAC [`ArtifactCache::check_written`] has computed so far, across
    /// clones.
    pub fn checked_ahead(&self) -> u64 {
        self.checked_ahead.load(Ordering::Relaxed)
    }

    fn checked(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Identity>> {
        self.checked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn written(&self) -> std::sync::MutexGuard<'_, VecDeque<PathBuf>> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `identity` as the state of `path` whose MAC was just checked.
    fn remember(&self, path: PathBuf, identity: Identity) {
        let mut checked = self.checked();
        if checked.len() >= MAX_REMEMBERED {
            checked.clear();
        }
        checked.insert(path, identity);
    }

    /// Checks the artifacts [`ArtifactCache::store_serialized`] wrote whose last change has
    /// settled (over a second ago), as their first load would (the same MAC check, on the
    /// same kind of mapping), and remembers each that passes: its loads then skip the
    /// MAC, the first reload of an evicted version included, which would otherwise
    /// hash the whole artifact on a selection's path. One that fails is rejected like
    /// a load's. Those not settled yet stay for a later call. Returns how many were
    /// checked. Blocking (hashes each artifact once: a small part of what compiling it
    /// took); meant to be called now and then, off any request's path.
    pub fn check_written(&self) -> usize {
        let due: Vec<PathBuf> = std::mem::take(&mut *self.written()).into();
        let mut checked = 0;
        let mut later = Vec::new();
        for path in due {
            let Ok(file) = open_private(&path) else { continue };
            let Some(identity) = Identity::of(&file) else { continue };
            if self.checked().get(&path) == Some(&identity) {
                continue;
            }
            if !identity.settled() {
                later.push(path);
                continue;
            }
            checked += 1;
            if self.checked_mapping(&path, file, &self.checked_ahead).is_some() {
                self.remember(path, identity);
            }
        }
        let mut written = self.written();
        for path in later.into_iter().rev() {
            written.push_front(path);
        }
        while written.len() > MAX_WRITTEN {
            written.pop_front();
        }
        checked
    }

    /// Maps `file` (opened from `path`) and checks its MAC against the one recorded beside
    /// it, counting the MAC in `computed`: the mapping if they match; else the artifact is
    /// rejected (or, if it did not map, treated as [`ArtifactCache::unopened`], no MAC
    /// computed) and there is none.
    fn checked_mapping(&self, path: &Path, file: File, computed: &AtomicU64) -> Option<MappedFile> {
        let mapped = match MappedFile::new(file, MAX_ARTIFACT_BYTES) {
            Ok(mapped) => mapped,
            Err(e) => {
                self.unopened(path, e);
                return None;
            }
        };
        computed.fetch_add(1, Ordering::Relaxed);
        if let Err(why) = self.check_mac(path, mapped.bytes()) {
            self.reject(path, &why);
            return None;
        }
        Some(mapped)
    }

    /// The file an artifact for `bytes` compiled by `engine` lives in.
    pub fn path_for(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        self.path_for_digest(engine, &hex::encode(Sha256::digest(bytes)))
    }

    /// As [`ArtifactCache::path_for`], for component bytes whose sha256 (hex) is
    /// `sha256`: the caller hashed them once already.
    pub fn path_for_digest(&self, engine: &Engine, sha256: &str) -> PathBuf {
        let mut settings = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut settings);
        self.dir.join(format!("{sha256}-{:016x}-{WASMTIME_MAJOR}.cwasm", settings.finish()))
    }

    /// Where the MAC of the artifact at `artifact` is recorded.
    pub fn mac_path(artifact: &Path) -> PathBuf {
        with_suffix(artifact, ".mac")
    }

    /// Every file that goes with the artifact at `artifact`, to be removed with it: its
    /// MAC, and any unkeyed digest (`.blake3`, `.sha256`) an older build recorded, which
    /// no load accepts.
    pub fn digest_paths(artifact: &Path) -> [PathBuf; 3] {
        [Self::mac_path(artifact), with_suffix(artifact, ".blake3"), with_suffix(artifact, ".sha256")]
    }

    /// Removes the artifact `engine` compiled from the component `bytes`, if there is
    /// one, and every file that goes with it ([`ArtifactCache::digest_paths`]): for
    /// whoever deletes the component's bytes, after which nothing would find it. The
    /// artifact goes before its MAC: a failure in between leaves a MAC without an
    /// artifact (a miss), not an artifact without a MAC (a rejection). Files already
    /// gone are fine.
    pub fn remove_for(&self, engine: &Engine, bytes: &[u8]) -> std::io::Result<()> {
        let artifact = self.path_for(engine, bytes);
        self.forget(&artifact);
        remove_if_present(&artifact)?;
        for digest in Self::digest_paths(&artifact) {
            remove_if_present(&digest)?;
        }
        Ok(())
    }

    /// Whether the MAC recorded for `path`'s artifact is the MAC of `artifact` under
    /// this cache's key and `path`'s file name; `Err`: why not.
    fn check_mac(&self, path: &Path, artifact: &[u8]) -> Result<(), String> {
        let recorded = match read_private(&Self::mac_path(path), 256) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err("no MAC is recorded beside it".to_string());
            }
            Err(e) => return Err(format!("its recorded MAC: {e}")),
        };
        let recorded = std::str::from_utf8(&recorded)
            .ok()
            .and_then(|text| blake3::Hash::from_hex(text.trim()).ok())
            .ok_or_else(|| "its recorded MAC is not 64 hex digits".to_string())?;
        // `blake3::Hash`'s equality takes the same time wherever the two differ.
        if self.key.seal(file_name(path).as_bytes(), artifact) != recorded {
            return Err(
                "its MAC does not match: not written under this name with this cache's key".to_string()
            );
        }
        Ok(())
    }

    /// The cached compilation of the bytes whose sha256 is `sha256`, if there is a usable
    /// one. A missing entry is a miss; an entry that fails a check is rejected (removed,
    /// counted, logged) and is a miss too; never an error.
    ///
    /// Nothing is copied: the file is mapped, its MAC computed on the mapping, and
    /// wasmtime maps the same open file again (copy-on-write) as the component's code.
    /// The component keeps that file open while it lives. A file whose MAC this process
    /// checked before, unchanged since (`Identity`), is not hashed again.
    pub fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path_for_digest(engine, sha256);
        let file = match open_private(&path) {
            Ok(file) => file,
            Err(e) => return self.unopened(&path, e),
        };
        // Taken before the MAC (and judged settled then, below): a change while the MAC
        // is computed stamps a later `ctime`.
        let identity = Identity::of(&file);
        if let Some(identity) = identity
            && self.checked().get(&path) == Some(&identity)
        {
            // SAFETY: as below; the bytes are the ones whose MAC this process checked
            // before under this very name (`checked` is by path): the same inode, not
            // changed since (its `ctime` would differ, see `Identity`), opened again
            // through `/proc/self/fd` of this open file. Any failure falls through to
            // the full check.
            if let Ok(component) = unsafe { Component::deserialize_file(engine, proc_path(&file)) } {
                return Some(component);
            }
        }
        let remember = identity.filter(Identity::settled);
        let mapped = self.checked_mapping(&path, file, &self.digests_checked)?;
        // SAFETY: `deserialize_file` and `deserialize` trust their input to be wasmtime's
        // own output. These bytes carry a MAC, just checked on the mapping of this very
        // open file, under a key only this user can read (an owner-only file outside
        // this directory, or the environment) over this file name and these bytes; only
        // `store_serialized` makes such a MAC, for wasmtime's serialization of the
        // component whose sha256 (and engine settings) the name holds, compiled by this
        // process or a compile worker it started. So they are the bytes written under
        // this name: not others put in their place, nor another component's artifact
        // renamed to it. The file is a regular file (not reached through a symlink) owned
        // by this user and accessible to no one else, in a directory whose path comes
        // from the operator, not a tenant; tenants' bytes only select the file name
        // (through their sha256). `deserialize_file` opens the same file again through
        // `/proc/self/fd` (the same inode, whatever the name now points to) and maps it:
        // its bytes stay the ones checked because this cache never writes an artifact in
        // place (`store_serialized` writes a new file and renames it over; removal
        // unlinks), and only this user could. wasmtime additionally checks the header
        // (version, engine settings) and refuses a mismatch, which we treat as a miss.
        let component = unsafe {
            Component::deserialize_file(engine, proc_path(&mapped.file))
                .or_else(|_| Component::deserialize(engine, mapped.bytes()))
        };
        match component {
            Ok(component) => {
                if let Some(identity) = remember {
                    self.remember(path, identity);
                }
                Some(component)
            }
            Err(_) => {
                self.forget(&path);
                remove_entry(&path);
                None
            }
        }
    }

    /// A load whose file did not open or map: a miss, and a rejection unless it is
    /// simply not there or the process is out of descriptors or address space.
    fn unopened(&self, path: &Path, e: std::io::Error) -> Option<Component> {
        match e.kind() {
            std::io::ErrorKind::NotFound => {}
            _ if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)) => {
                tracing::warn!(artifact = %path.display(), error = %e, "could not map a compiled artifact; compiling again");
            }
            _ => self.reject(path, &e.to_string()),
        }
        None
    }

    fn forget(&self, path: &Path) {
        self.checked().remove(path);
    }

    /// Saves `component` (compiled here from bytes whose sha256 is `sha256`): its
    /// serialization, by [`ArtifactCache::store_serialized`]. Failure to cache is not an
    /// error for the caller: the component is already compiled.
    pub fn store(&self, engine: &Engine, sha256: &str, component: &Component) -> std::io::Result<()> {
        let serialized = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        self.store_serialized(engine, sha256, &serialized)
    }

    /// Saves `serialized`, which must be wasmtime's serialization (`Component::serialize`)
    /// of the component whose bytes' sha256 is `sha256`, compiled by this process or by a
    /// compile worker it started, with `engine`'s settings: the MAC written with it makes
    /// every later load run it as machine code. The MAC under this cache's key, over the
    /// artifact's file name and `serialized`, is written first, so a crash between the two
    /// leaves a MAC without an artifact (a miss) or one over other bytes (a rejection).
    /// Each file is written owner-only under a temp name unique to this write, then
    /// renamed into place.
    pub fn store_serialized(&self, engine: &Engine, sha256: &str, serialized: &[u8]) -> std::io::Result<()> {
        if serialized.is_empty() {
            return Err(std::io::Error::other("an empty artifact"));
        }
        let path = self.path_for_digest(engine, sha256);
        let name = file_name(&path);
        let mac = self.key.seal(name.as_bytes(), serialized).to_hex();
        write_private(
            &self.dir,
            &file_name(&Self::mac_path(&path)).to_string_lossy(),
            format!("{mac}\n").as_bytes(),
        )?;
        write_private(&self.dir, &name.to_string_lossy(), serialized)?;
        let mut written = self.written();
        if written.len() >= MAX_WRITTEN {
            written.pop_front();
        }
        written.push_back(path);
        Ok(())
    }

    fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.forget(path);
        tracing::warn!(artifact = %path.display(), why, "rejected a compiled artifact; compiling again");
        remove_entry(path);
    }
}

/// A file opened by [`open_private`], mapped read-only (shared: the page cache's pages,
/// not a copy) for as long as this lives.
struct MappedFile {
    file: File,
    ptr: std::ptr::NonNull<libc::c_void>,
    len: usize,
}

impl MappedFile {
    /// Maps `file` whole, if it is not empty and at most `max` bytes (else an error, and
    /// nothing is mapped).
    fn new(file: File, max: u64) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let len = file.metadata()?.len();
        if len == 0 || len > max {
            return Err(std::io::Error::other(format!("it is {len} bytes, not 1 to {max}")));
        }
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        // SAFETY: a fresh read-only mapping of an open file descriptor at a place the
        // kernel chooses: it aliases no Rust object. `MAP_POPULATE` maps every page now
        // (the digest reads them all).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Self { file, ptr, len })
    }

    /// The file's bytes.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a readable mapping of `len` bytes that lives as long as `self`.
        // The file is never written in place while mapped (see `ArtifactCache::load`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>(), self.len) }
    }
}

/// A path that opens this very file (the same inode) whatever its name points to now.
fn proc_path(file: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping `new` made, unmapped only here; `bytes`'
        // borrows of it ended with `self`'s.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// Removes an artifact and its recorded digests (whatever they are: never followed).
fn remove_entry(path: &Path) {
    let _ = std::fs::remove_file(path);
    for digest in ArtifactCache::digest_paths(path) {
        let _ = std::fs::remove_file(digest);
    }
}

/// Removes `path`; a file that is already gone is not an error.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// `path`'s file name (empty if it has none).
fn file_name(path: &Path) -> &OsStr {
    path.file_name().unwrap_or_default()
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Raises this process's soft limit on open file descriptors to its hard limit, as Go's
/// runtime does at start-up, and returns the limit now in force (`None`: it could not be
/// read). Every component loaded from the cache holds its mapped file open, and 1,024 (a
/// common soft default) would leave a server with that many components loaded unable to
/// accept a connection. A refusal leaves the limit as it was.
pub fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid `rlimit` for getrlimit to write; setrlimit only reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, ..limit };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}
