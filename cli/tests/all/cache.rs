//! The compiled-artifact cache and the compile bound, on a real policy: tampered,
//! symlinked or over-permissive artifacts are never loaded; concurrent stores do not
//! collide; the compile permit is held until Cranelift returns.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use switchyard::cache::is_temp_name;
use switchyard::{ArtifactCache, Limits, LoadErrorKind, PolicyComponent, PolicyEngine};
use wasmtime::component::Component;

use crate::support::DEFAULT_POLICY;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn engine(dir: &Path) -> (PolicyEngine, ArtifactCache) {
    let cache = ArtifactCache::open(dir).unwrap();
    (PolicyEngine::new(Limits::default()).unwrap().with_artifact_cache(cache.clone()), cache)
}

fn policy() -> &'static [u8] {
    DEFAULT_POLICY
}

#[test]
fn a_tampered_artifact_is_rejected_counted_and_recompiled_never_loaded() {
    let dir = temp("tamper");
    let (engine, cache) = engine(&dir);
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let path = cache.path_for(engine.engine(), policy());
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    overwrite_middle(&path);
    let reloaded = PolicyComponent::load(&engine, policy()).unwrap();
    assert!(!reloaded.from_cache(), "recompiled, not loaded");
    assert_eq!(cache.rejected(), 1);
    // Written again, whole: the next load is a hit.
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 1);
    // No recorded digest: not loaded either.
    std::fs::remove_file(ArtifactCache::digest_path(&path)).unwrap();
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 2);
}

/// A load of an artifact this process checked before, unchanged since, does not hash it
/// again (a quarter of an evicted version's reload); any change, even one in place that
/// keeps the size and sets the modification time back, is checked again and refused.
/// Only a file last changed over a second before its check is remembered.
#[test]
fn an_unchanged_artifact_is_hashed_once_and_a_changed_one_is_checked_again() {
    let dir = temp("checked-once");
    let (engine, cache) = engine(&dir);
    let cached = || PolicyComponent::load(&engine, policy()).unwrap().from_cache();
    assert!(!cached(), "compiled and stored");
    assert!(cached() && cached());
    assert_eq!(cache.digests_checked(), 2, "just written: checked on every load");
    std::thread::sleep(Duration::from_millis(1_100));
    assert!(cached());
    assert_eq!(cache.digests_checked(), 3);
    assert!(cached() && cached() && cached());
    assert_eq!(cache.digests_checked(), 3, "checked before and unchanged: not hashed again");

    let path = cache.path_for(engine.engine(), policy());
    let before = std::fs::metadata(&path).unwrap();
    overwrite_middle(&path);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    drop(file);
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (after.ino(), after.len(), after.modified().unwrap()),
        (before.ino(), before.len(), before.modified().unwrap())
    );
    assert!(!cached(), "checked again, refused and recompiled");
    assert_eq!((cache.digests_checked(), cache.rejected()), (4, 1));
}

/// An artifact `store` wrote is checked by `check_written` once it has settled (what the
/// service's eviction pass calls), so its next load computes no digest; before it has
/// settled it is left for a later call.
#[test]
fn a_written_artifact_is_checked_once_settled_and_its_load_then_hashes_nothing() {
    let dir = temp("check-written");
    let (engine, cache) = engine(&dir);
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "compiled and stored");
    assert_eq!(cache.check_written(), 0, "just written: not settled, left for later");
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(cache.check_written(), 1);
    assert_eq!(cache.check_written(), 0, "checked once");
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.digests_checked(), 0, "the load found it checked: no digest on its path");
    assert_eq!(cache.rejected(), 0);
}

/// An artifact changed in place after it was written and before `check_written` looked
/// at it is refused by that check (removed, counted): the load after it compiles again.
#[test]
fn an_artifact_changed_before_its_check_is_refused_by_the_check() {
    let dir = temp("check-written-tampered");
    let (engine, cache) = engine(&dir);
    PolicyComponent::load(&engine, policy()).unwrap();
    let path = cache.path_for(engine.engine(), policy());
    overwrite_middle(&path);
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(cache.check_written(), 1);
    assert_eq!(cache.rejected(), 1, "refused");
    assert!(!path.exists(), "and removed");
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "compiled again");
}

/// Changes 64 bytes in the middle of the file at `path` in place (same inode, same size).
fn overwrite_middle(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64].fill(0xCC);
    std::fs::write(path, &bytes).unwrap();
}

/// Artifacts written before digests were BLAKE3 have a sha256 recorded beside them:
/// still checked (and loaded when it matches, refused when not), never recompiled only
/// for their age.
#[test]
fn an_artifact_with_the_older_sha256_digest_is_still_checked_and_loaded() {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::OpenOptionsExt;
    let dir = temp("legacy");
    let (engine, cache) = engine(&dir);
    PolicyComponent::load(&engine, policy()).unwrap();
    let path = cache.path_for(engine.engine(), policy());
    let [blake3, sha256] = ArtifactCache::digest_paths(&path);
    std::fs::remove_file(&blake3).unwrap();
    let write_sha256 = |digest: String| {
        let _ = std::fs::remove_file(&sha256);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&sha256)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{digest}\n").as_bytes()))
            .unwrap();
    };
    write_sha256(hex::encode(Sha256::digest(std::fs::read(&path).unwrap())));
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "loaded by its sha256");
    assert_eq!(cache.rejected(), 0);
    write_sha256(hex::encode(Sha256::digest(b"another artifact")));
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "refused, recompiled");
    assert_eq!(cache.rejected(), 1);
    assert!(!sha256.exists() && blake3.exists(), "written again with a BLAKE3 digest");
}

#[test]
fn symlinks_and_permissive_modes_are_rejected() {
    let dir = temp("links");
    let (engine, cache) = engine(&dir);
    PolicyComponent::load(&engine, policy()).unwrap();
    let path = cache.path_for(engine.engine(), policy());
    // The same (intact) bytes, reached through a symlink: refused.
    let elsewhere = dir.with_extension("elsewhere");
    std::fs::copy(&path, &elsewhere).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 1);
    assert!(!std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "replaced");
    // Readable by others: refused.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 2);
    // A cache directory that is a symlink is refused at open.
    let link = dir.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert!(ArtifactCache::open(&link).unwrap_err().to_string().contains("symbolic link"));
    let _ = std::fs::remove_file(elsewhere);
}

#[test]
fn concurrent_stores_of_the_same_bytes_use_their_own_temp_files() {
    let dir = temp("concurrent");
    let (engine, cache) = engine(&dir);
    let digest = PolicyComponent::load(&engine, policy()).unwrap().digest().to_string();
    let compiled = Component::new(engine.engine(), policy()).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| cache.store(engine.engine(), &digest, &compiled).unwrap());
        }
    });
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| is_temp_name(&e.file_name().to_string_lossy()))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 0);
}

#[test]
fn what_load_holding_holds_is_dropped_when_cranelift_returns_even_after_a_timeout() {
    let engine = PolicyEngine::new(Limits { compile_timeout_ms: 1, ..Limits::default() }).unwrap();
    let bytes = DEFAULT_POLICY;
    let (held, released) = mpsc::channel::<()>();
    let e = PolicyComponent::load_holding(&engine, bytes, held).err().expect("1 ms is too little");
    assert_eq!(e.kind, LoadErrorKind::CompileTimeout);
    // The compiler thread keeps `held` until Cranelift returns, then drops it.
    assert_eq!(released.recv_timeout(Duration::from_secs(120)), Err(mpsc::RecvTimeoutError::Disconnected));

    // Refused before compiling: dropped before `load_holding` returns.
    let (held, released) = mpsc::channel::<()>();
    let e = PolicyComponent::load_holding(&engine, b"not wasm", held).err().unwrap();
    assert_eq!(e.kind, LoadErrorKind::NotWasm);
    assert_eq!(released.try_recv(), Err(mpsc::TryRecvError::Disconnected));
}

/// An artifact is mapped as the component's code, not copied: the process maps the
/// cache's file while a component loaded from it lives. One replaced meanwhile (renamed
/// over, as `store` does) leaves the loaded component running the bytes it was checked on.
#[test]
fn a_cached_artifact_is_mapped_not_copied_while_its_component_lives() {
    let dir = temp("mapped");
    let (engine, cache) = engine(&dir);
    let path = cache.path_for(engine.engine(), policy());
    let mapped = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|line| line.ends_with(path.to_str().unwrap()))
    };
    let compiled = PolicyComponent::load(&engine, policy()).unwrap();
    assert!(!compiled.from_cache() && !mapped(), "compiled here: nothing mapped");
    let loaded = PolicyComponent::load(&engine, policy()).unwrap();
    assert!(loaded.from_cache());
    assert!(mapped(), "{} is not mapped", path.display());
    // Written again: a new file renamed over the one mapped.
    let digest = loaded.digest().to_string();
    let again = Component::new(engine.engine(), policy()).unwrap();
    cache.store(engine.engine(), &digest, &again).unwrap();
    let (table, request) = crate::support::sample();
    let pick = |c: PolicyComponent| {
        let guest = switchyard::GuestScorer::new("default", c, "{}").unwrap();
        switchyard::Selector::new(Box::new(guest)).select(&table, &request).unwrap()
    };
    assert_eq!(pick(loaded), pick(compiled));
}

/// A background compile (a tier-up) is bounded by the CPU time of the thread compiling
/// (not by the wall clock, which a busy host stretches at the lowest priority): it still
/// times out, holding what it holds until Cranelift returns; one with room compiles.
#[test]
fn a_background_compile_is_bounded_by_its_cpu_time() {
    let tiered = |ms| {
        PolicyEngine::new(Limits {
            compiler: switchyard::Compiler::Tiered,
            compile_timeout_ms: ms,
            ..Limits::default()
        })
        .unwrap()
    };
    let (held, released) = mpsc::channel::<()>();
    let e = PolicyComponent::load_in_background(&tiered(1), DEFAULT_POLICY, held)
        .err()
        .expect("1 ms is too little");
    assert_eq!(e.kind, LoadErrorKind::CompileTimeout);
    assert_eq!(released.recv_timeout(Duration::from_secs(120)), Err(mpsc::RecvTimeoutError::Disconnected));
    let component = PolicyComponent::load_in_background(&tiered(60_000), DEFAULT_POLICY, ()).unwrap();
    assert_eq!(component.compiled_by(), switchyard::Compiler::Cranelift);
}

/// A compile that takes its functions from Cranelift's function cache writes the very
/// artifact a compile of every function writes, byte for byte: nothing a cached function
/// might lack (trap tables, address maps, relocations) can reach a load.
#[test]
fn functions_from_the_function_cache_make_the_same_artifact_byte_for_byte() {
    let artifact = |name: &str, function_cache_bytes: u64| {
        let dir = temp(name);
        let cache = ArtifactCache::open(&dir).unwrap();
        let engine = PolicyEngine::new(Limits { function_cache_bytes, ..Limits::default() })
            .unwrap()
            .with_artifact_cache(cache);
        // Other bytes, the same code first: with the cache on, the second compile finds
        // its functions compiled.
        PolicyComponent::load(&engine, &switchyard_test_guests::variant(policy(), 1)).unwrap();
        let before = engine.function_cache_stats().unwrap_or_default();
        let component = PolicyComponent::load(&engine, policy()).unwrap();
        let after = engine.function_cache_stats().unwrap_or_default();
        let path = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with(component.digest()) && name.ends_with(".cwasm")
            })
            .expect("the artifact written");
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (bytes, after.hits - before.hits)
    };
    let (compiled, _) = artifact("every-function-compiled", 0);
    let (from_cache, found) = artifact("functions-from-the-cache", 64 << 20);
    assert!(found >= 100, "the second compile took its functions from the cache: {found}");
    assert!(compiled == from_cache, "artifacts differ: {} and {} bytes", compiled.len(), from_cache.len());
}
