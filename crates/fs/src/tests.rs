//! The owner-only helpers' tests.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use super::*;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-fs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o777
}

#[test]
fn a_private_dir_is_created_or_narrowed_to_0700_and_a_symlink_is_refused() {
    let dir = temp("dir");
    private_dir(&dir.join("made")).unwrap();
    assert_eq!(mode(&dir.join("made")), 0o700);
    std::fs::create_dir(dir.join("wide")).unwrap();
    std::fs::set_permissions(dir.join("wide"), std::fs::Permissions::from_mode(0o755)).unwrap();
    private_dir(&dir.join("wide")).unwrap();
    assert_eq!(mode(&dir.join("wide")), 0o700, "a wider mode is narrowed");
    std::os::unix::fs::symlink(dir.join("made"), dir.join("link")).unwrap();
    let refused = private_dir(&dir.join("link")).unwrap_err();
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    std::fs::write(dir.join("file"), b"").unwrap();
    assert!(private_dir(&dir.join("file")).is_err(), "a file is no directory");
}

#[test]
fn a_private_write_is_owner_only_whole_and_leaves_no_temp_file() {
    let dir = temp("write");
    private_dir(&dir).unwrap();
    write_private(&dir, "record.json", b"old").unwrap();
    write_private(&dir, "record.json", b"new").unwrap();
    assert_eq!(std::fs::read(dir.join("record.json")).unwrap(), b"new");
    assert_eq!(mode(&dir.join("record.json")), 0o600);
    assert_eq!(std::fs::symlink_metadata(dir.join("record.json")).unwrap().uid(), euid());
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, ["record.json"], "no temp file is left");
}

#[test]
fn a_private_read_refuses_a_symlink_a_permissive_mode_and_an_oversized_file() {
    let dir = temp("read");
    private_dir(&dir).unwrap();
    write_private(&dir, "secret", b"0123456789").unwrap();
    assert_eq!(read_private(&dir.join("secret"), 10).unwrap(), b"0123456789");
    let over = read_private(&dir.join("secret"), 9).unwrap_err();
    assert!(over.to_string().contains("over 9"), "{over}");

    std::os::unix::fs::symlink(dir.join("secret"), dir.join("link")).unwrap();
    let link = read_private(&dir.join("link"), 10).unwrap_err();
    assert!(link.to_string().contains("symbolic link"), "{link}");

    std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let wide = read_private(&dir.join("secret"), 10).unwrap_err();
    assert_eq!(wide.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(wide.to_string().contains("only its owner"), "{wide}");

    let not_file = open_private(&dir).unwrap_err();
    assert!(not_file.to_string().contains("not a regular file"), "{not_file}");
    let missing = read_private(&dir.join("absent"), 10).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_create_never_replaces_an_existing_file() {
    let dir = temp("create");
    private_dir(&dir).unwrap();
    create_private(&dir, OsStr::new("key"), b"first").unwrap();
    let second = create_private(&dir, OsStr::new("key"), b"second").unwrap_err();
    assert_eq!(second.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(read_private(&dir.join("key"), 16).unwrap(), b"first");
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, ["key"], "no temp file is left");
}

#[test]
fn temp_names_are_recognised_and_no_record_name_is_one() {
    let dir = temp("temp-name");
    private_dir(&dir).unwrap();
    let temp = write_temp(&dir, OsStr::new("acme.json"), b"x").unwrap();
    assert!(is_temp_name(&temp.file_name().unwrap().to_string_lossy()), "{}", temp.display());
    for name in ["acme.json", "manifest.json", "00ff.wasm", "lock"] {
        assert!(!is_temp_name(name), "{name}");
    }
}
