//! A cache of OUR OWN compiled output, so a policy uploaded again (or a restarted host)
//! skips Cranelift.
//!
//! The key is the sha256 of the tenant's component bytes, the engine's compatibility hash
//! (every setting that affects generated code, and the wasmtime version) and wasmtime's
//! major version, so an artifact is only ever loaded by an engine that could have written it.
//! Only [`ArtifactCache::store`] writes artifacts, from a `Component` this process compiled;
//! a tenant's bytes are never deserialized as an artifact: they are only the key.
//!
//! Whatever is loaded from here runs as machine code, so nothing is trusted for being
//! there: each artifact's BLAKE3 digest is recorded beside it when it is written
//! (`<artifact>.blake3`; artifacts written before it have `<artifact>.sha256`, still
//! accepted) and checked, on exactly the bytes then deserialized, before every load
//! (BLAKE3: ~5× faster than sha256 here, and the check is on every cold load's path); the file must be a regular file (symlinks are never followed), owned by
//! this process's user and accessible to no one else. An artifact that fails a check is
//! not run: it is removed, counted ([`ArtifactCache::rejected`]), logged on stderr, and
//! the component is compiled again. The helpers for owner-only files and directories
//! are public: the service's data directory uses them too.

use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The wasmtime line the runtime is built against (part of the key, belt and braces: the
/// engine's compatibility hash covers the exact version too).
const WASMTIME_MAJOR: &str = "wasmtime-50";

/// The largest artifact read back: a 4 MiB component compiles to a few tens of MB.
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// A directory of compiled components this process owns.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Artifacts refused by a check, across clones.
    rejected: Arc<AtomicU64>,
}

impl ArtifactCache {
    /// Uses (and creates, owner-only) `dir`, which must be a directory (not a symlink)
    /// owned by this process's user: whatever is in it is loaded as machine code.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        private_dir(&dir)?;
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
        Ok(Self { dir, rejected: Arc::new(AtomicU64::new(0)) })
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Artifacts refused so far (digest mismatch, no recorded digest, a symlink, another
    /// owner, a permissive mode): each was recompiled instead of run.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
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

    /// Where the digest of the artifact at `artifact` is recorded (BLAKE3).
    pub fn digest_path(artifact: &Path) -> PathBuf {
        with_suffix(artifact, ".blake3")
    }

    /// Where an artifact written before BLAKE3 has its sha256 recorded.
    fn legacy_digest_path(artifact: &Path) -> PathBuf {
        with_suffix(artifact, ".sha256")
    }

    /// Every file a digest of the artifact at `artifact` may be recorded in (the BLAKE3
    /// one, and the sha256 one of artifacts written before it): what goes with it.
    pub fn digest_paths(artifact: &Path) -> [PathBuf; 2] {
        [Self::digest_path(artifact), Self::legacy_digest_path(artifact)]
    }

    /// The digest recorded for `path`'s artifact and the digest of `artifact` by the same
    /// algorithm, both hex; `Err`: why there is none to compare.
    fn digests(path: &Path, artifact: &[u8]) -> Result<(String, String), String> {
        let recorded = |digest_path: &Path| {
            read_private(digest_path, 256).map(|text| String::from_utf8_lossy(&text).trim().to_string())
        };
        match recorded(&Self::digest_path(path)) {
            Ok(recorded) => Ok((recorded, blake3::hash(artifact).to_hex().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match recorded(&Self::legacy_digest_path(path)) {
                    Ok(recorded) => Ok((recorded, hex::encode(Sha256::digest(artifact)))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err("no digest is recorded beside it".to_string())
                    }
                    Err(e) => Err(format!("its recorded sha256: {e}")),
                }
            }
            Err(e) => Err(format!("its recorded digest: {e}")),
        }
    }

    /// The cached compilation of the bytes whose sha256 is `sha256`, if there is a usable one. A missing entry is a
    /// miss; an entry that fails a check is rejected (removed, counted, logged) and is a
    /// miss too; never an error.
    pub fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path_for_digest(engine, sha256);
        let artifact = match read_private(&path, MAX_ARTIFACT_BYTES) {
            Ok(artifact) => artifact,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.reject(&path, &e.to_string());
                return None;
            }
        };
        let (recorded, actual) = match Self::digests(&path, &artifact) {
            Ok(digests) => digests,
            Err(why) => {
                self.reject(&path, &why);
                return None;
            }
        };
        if actual != recorded {
            self.reject(
                &path,
                &format!("its digest is {actual}, not the {recorded} recorded when it was written"),
            );
            return None;
        }
        // SAFETY: `deserialize` trusts its input to be wasmtime's own output. These bytes
        // are exactly those whose digest `store` recorded when it wrote
        // `Component::serialize` of a component this process compiled; they were read
        // from a regular file (not through a symlink) owned by this user and accessible to
        // no one else, in a directory with the same properties whose path comes from the
        // operator, not a tenant. Tenants' bytes only select the file name (through their
        // sha256). wasmtime additionally checks the header (version, engine settings) and
        // refuses a mismatch, which we treat as a miss.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(component) => Some(component),
            Err(_) => {
                remove_entry(&path);
                None
            }
        }
    }

    /// Saves `component` (compiled here from bytes whose sha256 is `sha256`), with the
    /// BLAKE3 digest of the artifact recorded beside it (first, so a crash between the two leaves a digest without an
    /// artifact: a miss). Each file is written owner-only under a temp name unique to
    /// this write, then renamed into place. Failure to cache is not an error for the
    /// caller: the component is already compiled.
    pub fn store(&self, engine: &Engine, sha256: &str, component: &Component) -> std::io::Result<()> {
        let serialized = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let path = self.path_for_digest(engine, sha256);
        let digest = blake3::hash(&serialized).to_hex();
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        write_private(&self.dir, &name(&Self::digest_path(&path)), format!("{digest}\n").as_bytes())?;
        write_private(&self.dir, &name(&path), &serialized)
    }

    fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(artifact = %path.display(), why, "rejected a compiled artifact; compiling again");
        remove_entry(path);
    }
}

/// Removes an artifact and its recorded digests (whatever they are: never followed).
fn remove_entry(path: &Path) {
    let _ = std::fs::remove_file(path);
    for digest in ArtifactCache::digest_paths(path) {
        let _ = std::fs::remove_file(digest);
    }
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` if needed and makes sure it is owner-only: a directory, not a symlink,
/// owned by this process's user, mode 0700 (set if it was wider).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(std::io::Error::other(format!("{} is a symbolic link; not followed", dir.display())));
    }
    if !meta.is_dir() {
        return Err(std::io::Error::other(format!("{} is not a directory", dir.display())));
    }
    check_owner(dir, &meta)?;
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn check_owner(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    let me = euid();
    if meta.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is owned by uid {}, not this process's uid {me}", path.display(), meta.uid()),
        ));
    }
    Ok(())
}

/// Opens `path` for reading if it is a regular file (a symlink is not followed), owned by
/// this process's user and accessible to no one else (mode 0600 or narrower). The
/// checks are made on the open file, so they hold for what is read.
pub fn open_private(path: &Path) -> std::io::Result<File> {
    let file =
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path).map_err(
            |e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    std::io::Error::other(format!("{} is a symbolic link; not followed", path.display()))
                } else {
                    e
                }
            },
        )?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    check_owner(path, &meta)?;
    if meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} has mode {:04o}; only its owner may have access",
                path.display(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(file)
}

/// Reads a file that [`open_private`] accepts, at most `max` bytes (a larger one is an
/// error, not read).
pub fn read_private(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_private(path)?;
    let len = file.metadata()?.len();
    if len > max {
        return Err(std::io::Error::other(format!("{} is {len} bytes, over {max}", path.display())));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether `name` is one of [`write_private`]'s temp names.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Writes `dir/name` owner-only (0600) so that it is either absent/old or complete: a
/// temp file whose name is unique to this write (process id and a counter, created
/// exclusively, never through a symlink), fsync, rename over the target, fsync of the
/// directory (which makes the rename itself durable).
pub fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
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
