//! The CLI's compiled-artifact cache (`--cache-dir`): where its key comes from.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use switchyard::artifact_cache::ARTIFACT_KEY_ENV;
use switchyard_test_util::server::temp_dir as temp;

/// `SWITCHYARD_ARTIFACT_KEY`, for the CLI's `--cache-dir`: a malformed value is a
/// `config` error naming the variable (never echoing the value); a valid one is the key,
/// and no key file is made. Without it, the key file is `<DIR>.key`, owner-only.
#[test]
fn the_artifact_key_from_the_environment_or_beside_the_cache_dir() {
    let dir = temp("key-env");
    let cache_dir = dir.join("compiled");
    let key_file = dir.join("compiled.key");
    let select = |key: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command.args(["select", "--policy", "default", "--guest", "--cache-dir"]).arg(&cache_dir);
        match key {
            Some(key) => command.env(ARTIFACT_KEY_ENV, key),
            None => command.env_remove(ARTIFACT_KEY_ENV),
        };
        command.output().unwrap()
    };
    let secretish = "0123456789abcdef-not-hex";
    let out = select(Some(secretish));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: config:")
            && stderr.contains(ARTIFACT_KEY_ENV)
            && stderr.contains("64 hex digits"),
        "{stderr}"
    );
    assert!(!stderr.contains(secretish), "{stderr}");

    let out = select(Some(&"ab".repeat(32)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!key_file.exists(), "the environment's key: no file made");
    assert_eq!(std::fs::read_dir(&cache_dir).unwrap().count(), 2, "an artifact and its MAC");

    let out = select(None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&key_file).unwrap().mode() & 0o777, 0o600);
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = select(None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: config:") && stderr.contains("mode 0640"), "{stderr}");
}
