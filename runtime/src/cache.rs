//! A cache of OUR OWN compiled output, so a policy uploaded again (or a restarted host)
//! skips Cranelift.
//!
//! The key is the sha256 of the tenant's component bytes, the engine's compatibility hash
//! (every setting that affects generated code, and the wasmtime version) and wasmtime's
//! major version, so an artifact is only ever loaded by an engine that could have written it.
//! Only [`ArtifactCache::store`] writes artifacts, from a `Component` this process compiled;
//! a tenant's bytes are never deserialized as an artifact: they are only the key.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The wasmtime line the runtime is built against (part of the key, belt and braces: the
/// engine's compatibility hash covers the exact version too).
const WASMTIME_MAJOR: &str = "wasmtime-50";

/// A directory of compiled components this process owns.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// Uses (and creates, owner-only) `dir`. The directory must not be writable by
    /// tenants or anyone else: whatever is in it is loaded as machine code.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        // A process killed mid-`store` leaves its temp file behind (never a damaged
        // artifact: those are only ever renamed into place whole). Clear them; at worst
        // another live process's write in flight fails, which only costs it the caching.
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e.to_string_lossy().starts_with("tmp")) {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file an artifact for `bytes` compiled by `engine` lives in.
    pub fn path_for(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut settings = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut settings);
        let content = hex::encode(Sha256::digest(bytes));
        self.dir.join(format!("{content}-{:016x}-{WASMTIME_MAJOR}.cwasm", settings.finish()))
    }

    /// The cached compilation of `bytes`, if there is a usable one. A stale or damaged
    /// entry is a miss (and is removed), never an error.
    pub fn load(&self, engine: &Engine, bytes: &[u8]) -> Option<Component> {
        let path = self.path_for(engine, bytes);
        if !path.is_file() {
            return None;
        }
        // SAFETY: `deserialize_file` trusts its input to be wasmtime's own output. The only
        // writer of this directory is `store` below, which writes `Component::serialize`
        // of a component this process compiled itself, atomically (temp file + rename);
        // the directory is created owner-only and its path comes from the operator, not a
        // tenant. Tenants' bytes only select the file name (through their sha256).
        // wasmtime additionally checks the header (version, engine settings) and refuses
        // a mismatch, which we treat as a miss.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Saves `component` (compiled here from `bytes`). Failure to cache is not an error
    /// for the caller: the component is already compiled.
    pub fn store(&self, engine: &Engine, bytes: &[u8], component: &Component) -> std::io::Result<()> {
        let serialized = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let path = self.path_for(engine, bytes);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&serialized)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    }
}
