//! The compiled-artifact cache and the compile bound, on a real policy: tampered,
//! symlinked or over-permissive artifacts are never loaded, nor ones without a MAC under
//! the cache's key and name; the key's file is owner-only and outside the cache;
//! concurrent stores do not collide; the compile permit is held until Cranelift returns.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use switchyard::artifact_cache::ArtifactKey;
use switchyard::{ArtifactCache, Limits, LoadErrorKind, PolicyComponent, PolicyEngine};
use switchyard_fs::is_temp_name;
use wasmtime::component::Component;

use switchyard_test_util::fixtures::DEFAULT_POLICY;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn engine(dir: &Path) -> (PolicyEngine, ArtifactCache) {
    engine_with_key(dir, ArtifactKey::generate().unwrap())
}

fn engine_with_key(dir: &Path, key: ArtifactKey) -> (PolicyEngine, ArtifactCache) {
    let cache = ArtifactCache::open(dir, key).unwrap();
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
    // No recorded MAC: not loaded either.
    std::fs::remove_file(ArtifactCache::mac_path(&path)).unwrap();
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

/// Writes `text` owner-only as the file `path` (replacing it), as a cache's own files are.
fn write_owner_only(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .unwrap();
}

/// An unkeyed digest beside an artifact counts for nothing, whether or not it matches:
/// tampered code with a matching BLAKE3 or sha256 digest, and no MAC, is refused and
/// compiled again; so is a genuine artifact whose MAC is gone. What goes with a refused
/// artifact is removed with it.
#[test]
fn an_unkeyed_digest_never_passes_for_a_mac() {
    use sha2::{Digest, Sha256};
    let dir = temp("unkeyed");
    let (engine, cache) = engine(&dir);
    PolicyComponent::load(&engine, policy()).unwrap();
    let path = cache.path_for(engine.engine(), policy());
    let [mac, blake3, sha256] = ArtifactCache::digest_paths(&path);
    let loads = || PolicyComponent::load(&engine, policy()).unwrap().from_cache();
    assert!(mac.exists() && !blake3.exists() && !sha256.exists());

    // The genuine artifact, its MAC replaced by matching unkeyed digests.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&mac).unwrap();
    write_owner_only(&blake3, &format!("{}\n", blake3::hash(&bytes).to_hex()));
    write_owner_only(&sha256, &format!("{}\n", hex::encode(Sha256::digest(&bytes))));
    assert!(!loads(), "refused, compiled again");
    assert_eq!(cache.rejected(), 1);
    assert!(mac.exists() && !blake3.exists() && !sha256.exists(), "written again, with its MAC alone");
    assert!(loads());

    // Tampered code, with either matching unkeyed digest.
    for digest in [&blake3, &sha256] {
        overwrite_middle(&path);
        let tampered = std::fs::read(&path).unwrap();
        std::fs::remove_file(&mac).unwrap();
        let text = if digest == &blake3 {
            blake3::hash(&tampered).to_hex().to_string()
        } else {
            hex::encode(Sha256::digest(&tampered))
        };
        write_owner_only(digest, &format!("{text}\n"));
        assert!(!loads(), "{}: refused, compiled again", digest.display());
        assert_ne!(std::fs::read(&path).unwrap(), tampered, "written again");
    }
    assert_eq!(cache.rejected(), 3);
    assert!(loads());
    assert_eq!(cache.rejected(), 3);
}

/// A MAC made with another key does not pass: an artifact sealed by one cache's key is
/// refused by a cache with another key on the same directory (what a new key does to
/// every artifact), and passes with the same key.
#[test]
fn an_artifact_sealed_with_another_key_is_rejected_and_recompiled() {
    let dir = temp("other-key");
    let first = ArtifactKey::generate().unwrap();
    let (sealing, _) = engine_with_key(&dir, first.clone());
    assert!(!PolicyComponent::load(&sealing, policy()).unwrap().from_cache());
    let (same, cache) = engine_with_key(&dir, first);
    assert!(PolicyComponent::load(&same, policy()).unwrap().from_cache(), "the same key: loaded");
    assert_eq!(cache.rejected(), 0);

    let (other, cache) = engine(&dir);
    assert!(!PolicyComponent::load(&other, policy()).unwrap().from_cache(), "another key: compiled again");
    assert_eq!(cache.rejected(), 1);
    assert!(PolicyComponent::load(&other, policy()).unwrap().from_cache(), "and sealed with it");
    assert_eq!(cache.rejected(), 1);

    // A MAC made with another key, over the very name and bytes, is no better.
    let path = cache.path_for(other.engine(), policy());
    let name = path.file_name().unwrap().to_str().unwrap();
    let forged = ArtifactKey::generate().unwrap().mac(name, &std::fs::read(&path).unwrap());
    write_owner_only(&ArtifactCache::mac_path(&path), &format!("{forged}\n"));
    assert!(!PolicyComponent::load(&other, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 2);
}

/// The MAC covers the artifact's name, which holds its component's sha256: one
/// component's genuine artifact, with its genuine MAC, renamed to another component's
/// name is refused, and the other component is compiled from its own bytes.
#[test]
fn another_components_artifact_under_this_ones_name_is_rejected() {
    let dir = temp("swapped");
    let (engine, cache) = engine(&dir);
    let other = switchyard_test_util::NOOP;
    let theirs = PolicyComponent::load(&engine, other).unwrap();
    let ours = PolicyComponent::load(&engine, policy()).unwrap();
    let (their_path, our_path) =
        (cache.path_for(engine.engine(), other), cache.path_for(engine.engine(), policy()));
    let genuine = std::fs::read(&our_path).unwrap();
    std::fs::copy(&their_path, &our_path).unwrap();
    std::fs::copy(ArtifactCache::mac_path(&their_path), ArtifactCache::mac_path(&our_path)).unwrap();

    let loaded = PolicyComponent::load(&engine, policy()).unwrap();
    assert!(!loaded.from_cache(), "refused, compiled from its own bytes");
    assert_eq!(cache.rejected(), 1);
    let (table, request) = switchyard_test_util::fixtures::sample();
    let pick = |c: PolicyComponent| {
        let guest = switchyard::GuestScorer::new("default", c, "{}").unwrap();
        switchyard::Selector::new(Box::new(guest)).select(&table, &request).unwrap()
    };
    assert_eq!(pick(loaded), pick(ours));
    assert_eq!(std::fs::read(&our_path).unwrap(), genuine, "its own artifact written again");
    assert!(PolicyComponent::load(&engine, other).unwrap().from_cache(), "the other's is untouched");
    drop(theirs);
}

/// `store_serialized` stores bytes serialized elsewhere (a compile worker's) as `store`
/// stores a component: sealed, and loaded from then on.
#[test]
fn serialized_bytes_stored_are_sealed_and_loaded() {
    let dir = temp("serialized");
    let (engine, cache) = engine(&dir);
    let digest = PolicyComponent::load(&PolicyEngine::new(Limits::default()).unwrap(), policy())
        .unwrap()
        .digest()
        .to_string();
    let serialized = Component::new(engine.engine(), policy()).unwrap().serialize().unwrap();
    cache.store_serialized(engine.engine(), &digest, &serialized).unwrap();
    let path = cache.path_for(engine.engine(), policy());
    assert_eq!(std::fs::read(&path).unwrap(), serialized);
    assert!(ArtifactCache::mac_path(&path).exists());
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 0);
    assert!(cache.store_serialized(engine.engine(), &digest, &[]).is_err(), "nothing to store");
}

/// `remove_for` takes a component's artifact and everything recorded beside it, and
/// nothing else; the next load compiles again. Removing what is gone is fine.
#[test]
fn removing_a_components_artifact_takes_its_mac_and_digests_and_nothing_else() {
    let dir = temp("remove-for");
    let (engine, cache) = engine(&dir);
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    let path = cache.path_for(engine.engine(), policy());
    let beside = ArtifactCache::digest_paths(&path);
    for file in &beside[1..] {
        std::fs::write(file, b"an unkeyed digest").unwrap();
    }
    let other = cache.path_for(engine.engine(), b"other bytes");
    std::fs::write(&other, b"another component's artifact").unwrap();
    cache.remove_for(engine.engine(), policy()).unwrap();
    assert!(!path.exists(), "the artifact is gone");
    assert!(beside.iter().all(|file| !file.exists()), "and what was beside it: {beside:?}");
    assert!(other.exists(), "another component's artifact stays");
    cache.remove_for(engine.engine(), policy()).unwrap();
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "compiled again");
    assert_eq!(cache.rejected(), 0);
}

/// The key's file: created on first use with a fresh key, owner-only (0600), holding 64
/// hex digits; read back (the same key: what it sealed loads); the key never shows in
/// `Debug`.
#[test]
fn the_key_file_is_created_owner_only_and_read_back() {
    let dir = temp("key-file");
    let cache_dir = dir.join("compiled");
    let key_file = ArtifactKey::path_beside(&cache_dir).unwrap();
    assert_eq!(key_file, dir.join("compiled.key"), "beside the cache, outside it");
    assert_eq!(ArtifactKey::path_beside(&dir.join("compiled/")).unwrap(), key_file);
    assert_eq!(ArtifactKey::path_beside(Path::new("/")), None);
    let key = ArtifactKey::from_file(&key_file).unwrap();
    assert_eq!(std::fs::metadata(&key_file).unwrap().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&key_file).unwrap();
    assert!(text.trim().len() == 64 && text.trim().bytes().all(|b| b.is_ascii_hexdigit()), "{text:?}");
    assert!(!format!("{key:?}").contains(text.trim()), "{key:?}");
    assert_eq!(key.file(), Some(key_file.as_path()));

    let (engine, _) = engine_with_key(&cache_dir, key);
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert!(!cache_dir.join("compiled.key").exists() && std::fs::read_dir(&cache_dir).unwrap().count() == 2);
    let again = ArtifactKey::from_file(&key_file).unwrap();
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), text, "kept, not replaced");
    let (engine, cache) = engine_with_key(&cache_dir, again);
    assert!(PolicyComponent::load(&engine, policy()).unwrap().from_cache(), "the same key");
    assert_eq!(cache.rejected(), 0);

    // Deleted: a new key, and every artifact is compiled again.
    std::fs::remove_file(&key_file).unwrap();
    let (engine, cache) = engine_with_key(&cache_dir, ArtifactKey::from_file(&key_file).unwrap());
    assert_ne!(std::fs::read_to_string(&key_file).unwrap(), text);
    assert!(!PolicyComponent::load(&engine, policy()).unwrap().from_cache());
    assert_eq!(cache.rejected(), 1);
}

/// A key file anyone else may read, a symlink, one that holds no key, or one inside the
/// cache directory is refused with an error that says so.
#[test]
fn a_key_file_others_can_read_or_inside_the_cache_is_refused() {
    let dir = temp("key-refused");
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("compiled.key");
    ArtifactKey::from_file(&key_file).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = ArtifactKey::from_file(&key_file).unwrap_err().to_string();
    assert!(e.contains("compiled.key") && e.contains("mode 0644") && e.contains("only its owner"), "{e}");
    assert_eq!(std::fs::metadata(&key_file).unwrap().mode() & 0o777, 0o644, "left as it is, not replaced");

    let link = dir.join("link.key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&key_file, &link).unwrap();
    let e = ArtifactKey::from_file(&link).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");

    let garbled = dir.join("garbled.key");
    write_owner_only(&garbled, "not a key\n");
    let e = ArtifactKey::from_file(&garbled).unwrap_err().to_string();
    assert!(e.contains("garbled.key") && e.contains("64 hex digits"), "{e}");

    let cache_dir = dir.join("compiled");
    let inside = ArtifactKey::from_file(&cache_dir.join("artifact.key")).unwrap();
    let e = ArtifactCache::open(&cache_dir, inside).unwrap_err().to_string();
    assert!(e.contains("inside the cache directory"), "{e}");
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
    let key = ArtifactKey::generate().unwrap();
    assert!(ArtifactCache::open(&link, key).unwrap_err().to_string().contains("symbolic link"));
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
    let (table, request) = switchyard_test_util::fixtures::sample();
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
        let cache = ArtifactCache::open(&dir, ArtifactKey::generate().unwrap()).unwrap();
        let engine = PolicyEngine::new(Limits { function_cache_bytes, ..Limits::default() })
            .unwrap()
            .with_artifact_cache(cache);
        // Other bytes, the same code first: with the cache on, the second compile finds
        // its functions compiled.
        PolicyComponent::load(&engine, &switchyard_test_util::variant(policy(), 1)).unwrap();
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
