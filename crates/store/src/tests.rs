//! The data directory's tests.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use switchyard_fs::write_private;
use switchyard_selection::FailMode;

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
        .insert("acme".into(), Arc::new(TenantRecord { token_sha256: "ab".into(), ..Default::default() }));
    store.write_manifest(&manifest).unwrap();
    // What a kill between write and rename leaves behind.
    std::fs::write(dir.join("tenants/.acme.json.1.0.tmp"), b"{\"half").unwrap();
    drop(store);
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.load_manifest().unwrap(), manifest);
    assert!(!dir.join("tenants/.acme.json.1.0.tmp").exists());
    store.write_blob("00ff", b"bytes").unwrap();
    assert_eq!(store.read_blob("00ff").unwrap(), b"bytes");
}

#[test]
fn a_removed_blob_is_first_handed_over_and_removing_twice_is_fine() {
    let dir = temp("remove");
    let store = Store::open(&dir).unwrap();
    store.write_blob("00ff", b"bytes").unwrap();
    store.write_blob("11ee", b"other").unwrap();
    let mut handed = Vec::new();
    store
        .remove_blob_after("00ff", |bytes| {
            assert!(dir.join("blobs/00ff.wasm").exists(), "the blob is still there while `first` runs");
            handed.push(bytes.to_vec());
            Ok(())
        })
        .unwrap();
    assert_eq!(handed, [b"bytes".to_vec()], "what was made from the blob goes first, found by its bytes");
    assert!(store.read_blob("00ff").is_err());
    assert_eq!(store.read_blob("11ee").unwrap(), b"other", "other blobs stay");
    store.remove_blob_after("00ff", |_| panic!("an absent blob hands nothing over")).unwrap();
    store.remove_blob("00ff").unwrap();
    store.remove_blob("11ee").unwrap();
    assert!(store.blob_names().unwrap().is_empty());
}

#[test]
fn a_blob_whose_first_step_fails_stays() {
    let dir = temp("remove-failed");
    let store = Store::open(&dir).unwrap();
    store.write_blob("00ff", b"bytes").unwrap();
    let failed = store.remove_blob_after("00ff", |_| Err(std::io::Error::other("busy"))).unwrap_err();
    assert!(failed.to_string().contains("busy"), "{failed}");
    assert_eq!(store.read_blob("00ff").unwrap(), b"bytes", "kept, so a retry finds it");
}

#[test]
fn a_blob_that_is_a_symlink_is_not_read_through_when_removed() {
    let dir = temp("remove-symlink");
    let store = Store::open(&dir).unwrap();
    // Another blob, and a "blob" that is a link to that blob's bytes.
    store.write_blob("00ff", b"bytes").unwrap();
    std::os::unix::fs::symlink(dir.join("blobs/00ff.wasm"), dir.join("blobs/00bb.wasm")).unwrap();
    let refused = store.remove_blob_after("00bb", |_| panic!("the link's target was read")).unwrap_err();
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
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
fn a_record_file_this_build_cannot_read_is_skipped_named_and_never_written_over() {
    let dir = temp("unreadable");
    let store = Store::open(&dir).unwrap();
    let mut manifest = Manifest::default();
    manifest.tenants.insert("good".into(), Arc::new(tenant("gg")));
    manifest.routers.insert("edge".into(), "ee".into());
    store.write_manifest(&manifest).unwrap();
    let tenants = dir.join("tenants");
    write_private(&tenants, "acme.json", b"{\"token_sha256\": ").unwrap();
    write_private(
        &tenants,
        "bad-name.json",
        br#"{"token_sha256": "bb", "policies": {"No Name": {"versions": [], "active": "v"}}}"#,
    )
    .unwrap();
    // A file no tenant could have written is named, not taken for a tenant.
    write_private(&tenants, "Not A Tenant.json", b"{}").unwrap();

    let read = store.load_manifest().unwrap();
    assert_eq!(read.tenants.keys().collect::<Vec<_>>(), ["good"], "the readable tenant is served");
    assert_eq!(read.routers, manifest.routers);
    let skipped: Vec<(&str, &Holds)> =
        read.unreadable.iter().map(|(at, u)| (at.as_str(), &u.holds)).collect();
    assert_eq!(
        skipped,
        [
            ("tenants/Not A Tenant.json", &Holds::Unknown),
            ("tenants/acme.json", &Holds::Tenant("acme".into())),
            ("tenants/bad-name.json", &Holds::Tenant("bad-name".into())),
        ]
    );
    assert!(read.unreadable["tenants/acme.json"].reason.contains("EOF"), "{:?}", read.unreadable);
    assert!(
        read.unreadable["tenants/bad-name.json"].reason.contains("policy `No Name`"),
        "{:?}",
        read.unreadable
    );
    assert_eq!(read.unreadable_tenant("acme").map(|(at, _)| at), Some("tenants/acme.json"));
    assert_eq!(read.unreadable_tenant("good"), None);
    assert_eq!(read.unreadable_router("edge"), None);
    // Rewriting the whole manifest as read leaves the unreadable files as they were.
    store.write_manifest(&read).unwrap();
    assert_eq!(std::fs::read(tenants.join("acme.json")).unwrap(), b"{\"token_sha256\": ");
    assert!(tenants.join("Not A Tenant.json").exists() && tenants.join("bad-name.json").exists());
    // Nor is any blob deleted while they stand: a record this build cannot read may name it.
    store.write_blob("00ff", b"bytes").unwrap();
    let kept = store.remove_blob("00ff").unwrap_err();
    let also_kept = store.remove_blob_after("00ff", |_| panic!("nothing goes")).unwrap_err();
    assert_eq!(also_kept.to_string(), kept.to_string());
    assert!(kept.to_string().contains("tenants/Not A Tenant.json"), "{kept}");
    assert_eq!(store.read_blob("00ff").unwrap(), b"bytes");
    // One tenant's record, read alone, is still an error naming it.
    let reader = StoreReader::new(&dir).unwrap();
    assert!(reader.load_tenant("acme").unwrap_err().contains("acme.json"));

    // An unreadable routers.json: skipped, standing for every router, and kept.
    write_private(&dir, "routers.json", b"[\"a newer build's form\"]").unwrap();
    let read = store.load_manifest().unwrap();
    assert!(read.routers.is_empty());
    assert_eq!(read.unreadable["routers.json"].holds, Holds::Routers);
    assert_eq!(read.unreadable_router("any").map(|(at, _)| at), Some("routers.json"));
    store.write_manifest(&read).unwrap();
    assert_eq!(std::fs::read(dir.join("routers.json")).unwrap(), b"[\"a newer build's form\"]");

    // Once every record reads again, a blob no record names goes as ever.
    for file in ["tenants/acme.json", "tenants/bad-name.json", "tenants/Not A Tenant.json", "routers.json"] {
        std::fs::remove_file(dir.join(file)).unwrap();
    }
    assert!(store.load_manifest().unwrap().unreadable.is_empty());
    store.remove_blob("00ff").unwrap();
    assert!(store.read_blob("00ff").is_err());
}

#[test]
fn fields_a_newer_build_added_are_read_and_written_back() {
    let newer = serde_json::json!({
        "token_sha256": "aa",
        "quota": {"selections": 5},
        "policies": {"mine": {
            "versions": [
                {"version": "v1", "blob": "00ff", "params": "{}", "size": 5, "compiler": "next"},
                {"version": "v2", "blob": "00ff", "params": "{}", "size": 5},
            ],
            "active": "v2",
            "previous": ["v1"],
            "label": "blue",
        }},
        "classes": {"latency": {"policy": "mine", "version": null, "on_fault": "closed", "weight": 3}},
    });
    let mut record = TenantRecord::from_stored("acme", newer.to_string().as_bytes()).unwrap();
    assert!(!record.unknown.is_empty());
    assert_eq!(record.policies["mine"].active, "v2");
    assert_eq!(record.classes["latency"].on_fault, FailMode::Closed);
    assert_eq!(serde_json::to_value(&record).unwrap(), newer, "written back whole");

    // This build's own changes go in beside them; what it removes takes its fields along.
    record.classes.insert(
        "batch".into(),
        Assignment {
            policy: "mine".into(),
            version: None,
            on_fault: FailMode::Open,
            ..Assignment::default()
        },
    );
    let policy = record.policies.get_mut("mine").unwrap();
    policy.active = "v1".into();
    policy.previous.clear();
    policy.versions.retain(|v| v.version == "v1");
    let mut expected = newer.clone();
    expected["classes"]["batch"] = serde_json::json!({"policy": "mine", "version": null, "on_fault": "open"});
    expected["policies"]["mine"]["active"] = "v1".into();
    expected["policies"]["mine"]["previous"] = serde_json::json!([]);
    expected["policies"]["mine"]["versions"].as_array_mut().unwrap().pop();
    assert_eq!(serde_json::to_value(&record).unwrap(), expected);

    // Through the data dir's file, the same.
    let dir = temp("newer-fields");
    let store = Store::open(&dir).unwrap();
    store.write_tenant("acme", Some(&record)).unwrap();
    let read = store.load_manifest().unwrap();
    assert_eq!(*read.tenants["acme"], record);
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tenants/acme.json")).unwrap()).unwrap();
    assert_eq!(file, expected);
}

#[test]
fn a_record_with_a_name_the_service_cannot_have_is_refused_saying_which() {
    let refused = |name: &str, json: serde_json::Value| {
        TenantRecord::from_stored(name, json.to_string().as_bytes()).unwrap_err()
    };
    assert!(
        refused("Acme", serde_json::json!({"token_sha256": "aa"})).contains("`Acme` is not a tenant name")
    );
    let class = serde_json::json!({"token_sha256": "aa", "classes": {"a b": {"policy": "default"}}});
    assert!(refused("acme", class).contains("class `a b`"));
    let blob = serde_json::json!({"token_sha256": "aa", "policies": {"p": {"active": "v",
        "versions": [{"version": "v", "blob": "../x", "params": "{}", "size": 1}]}}});
    assert!(refused("acme", blob).contains("blob `../x`"));
    assert!(refused("acme", serde_json::json!({"policies": {}})).contains("token_sha256"));
}

#[test]
fn the_data_dir_is_owner_only_locked_and_never_read_through_a_symlink() {
    let dir = temp("private");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    // What an older version left: a world-readable directory and blob.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("blobs/00aa.wasm"), b"old").unwrap();
    std::fs::set_permissions(dir.join("blobs/00aa.wasm"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&dir).unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;
    assert_eq!((mode(&dir), mode(&dir.join("blobs"))), (0o700, 0o700));
    assert_eq!(mode(&dir.join("blobs/00aa.wasm")), 0o600);
    let mut manifest = Manifest::default();
    manifest.tenants.insert("acme".into(), Arc::default());
    store.write_manifest(&manifest).unwrap();
    store.write_blob("00ff", b"bytes").unwrap();
    assert_eq!((mode(&dir.join("manifest.json")), mode(&dir.join("blobs/00ff.wasm"))), (0o600, 0o600));
    assert_eq!((mode(&dir.join("tenants")), mode(&dir.join("tenants/acme.json"))), (0o700, 0o600));
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
    assert_eq!(reader.tenant_stamp("acme"), reader.tenant_stamp("other"), "no tenant written yet");
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
            next: vec![],
        },
    );
    let assign = |policy: &str, version: Option<&str>| Assignment {
        policy: policy.into(),
        version: version.map(Into::into),
        on_fault: FailMode::Closed,
        ..Assignment::default()
    };
    tenant.classes.insert("follows".into(), assign("mine", None));
    tenant.classes.insert("pinned".into(), assign("mine", Some("v1")));
    tenant.classes.insert("builtin".into(), assign("lmetric", None));
    tenant.classes.insert("gone".into(), assign("mine", Some("v9")));
    let mut manifest = store.load_manifest().unwrap();
    manifest.tenants.insert("acme".into(), Arc::new(tenant));
    store.write_blob("00ff", b"bytes").unwrap();
    store.write_manifest(&manifest).unwrap();

    // The store still holds the lock; the reader needs none.
    let stamp = reader.tenant_stamp("acme").expect("written");
    let read = reader.load_manifest().unwrap();
    assert_eq!(read, manifest);
    assert_eq!(reader.load_tenant("acme").unwrap().as_ref(), Some(&*manifest.tenants["acme"]));
    assert_eq!(reader.load_tenant("nobody").unwrap(), None);
    assert_eq!(reader.load_tenant("../manifest").unwrap(), None, "not a name: no path");
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
    store.write_tenant("acme", Some(&read.tenants["acme"])).unwrap();
    assert_ne!(reader.tenant_stamp("acme"), Some(stamp));
    // A blob name from a tampered manifest never becomes a path.
    let refused = reader.read_blob("../manifest.json").unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    assert!(StoreReader::new(&dir.join("manifest.json")).is_err(), "a file is not a data dir");
}

fn tenant(token: &str) -> TenantRecord {
    TenantRecord { token_sha256: token.into(), ..TenantRecord::default() }
}

#[test]
fn a_commit_writes_one_tenants_file_and_leaves_the_others_alone() {
    let dir = temp("one-file");
    let store = Store::open(&dir).unwrap();
    let mut manifest = Manifest::default();
    for name in ["a", "b", "c"] {
        manifest.tenants.insert(name.into(), Arc::new(tenant(name)));
    }
    store.write_manifest(&manifest).unwrap();
    let ino = |name: &str| std::fs::metadata(dir.join(format!("tenants/{name}.json"))).unwrap().ino();
    let before = (ino("a"), ino("c"));
    store.write_tenant("b", Some(&tenant("b2"))).unwrap();
    assert_eq!((ino("a"), ino("c")), before, "the other tenants' files are not rewritten");
    store.write_tenant("c", None).unwrap();
    store.write_routers(&[("edge".to_string(), "ee".to_string())].into_iter().collect()).unwrap();
    let read = store.load_manifest().unwrap();
    let tokens: Vec<&str> = read.tenants.values().map(|t| t.token_sha256.as_str()).collect();
    assert_eq!(tokens, ["a", "b2"]);
    assert_eq!(read.routers["edge"], "ee");
    assert!(store.write_tenant("../x", Some(&tenant("x"))).is_err(), "a name is never a path");
}

#[test]
fn a_format_1_directory_is_migrated_and_an_older_build_then_refuses_it() {
    let dir = temp("migrate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let whole = serde_json::json!({
        "format": 1,
        "tenants": {"acme": {"token_sha256": "aa"}, "beta": {"token_sha256": "bb"}},
        "routers": {"edge": "ee"},
    });
    write_private(&dir, "manifest.json", whole.to_string().as_bytes()).unwrap();
    // A reader of a format-1 directory sees it whole.
    let reader = StoreReader::new(&dir).unwrap();
    assert_eq!(reader.load_tenant("acme").unwrap().unwrap().token_sha256, "aa");
    let stamp = reader.tenant_stamp("acme");
    assert!(stamp.is_some(), "the manifest's stamp");

    let store = Store::open(&dir).unwrap();
    let read = store.load_manifest().unwrap();
    assert_eq!(read.tenants.keys().collect::<Vec<_>>(), ["acme", "beta"]);
    assert_eq!((read.tenants["beta"].token_sha256.as_str(), read.routers["edge"].as_str()), ("bb", "ee"));
    assert!(dir.join("tenants/acme.json").exists() && dir.join("routers.json").exists());
    assert_ne!(reader.tenant_stamp("acme"), stamp, "a follower sees the tenant's own file now");
    // What a format-1 build reads first is the marker: it parses as its manifest and says
    // which format it is, so that build refuses the directory instead of starting empty.
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(marker, serde_json::json!({"format": 2, "tenants": {}, "routers": {}}));
    drop(store);
    let again = Store::open(&dir).unwrap().load_manifest().unwrap();
    assert_eq!(again, read, "opened again: nothing migrated twice or lost");
}

#[test]
fn a_migration_cut_short_is_done_again_from_the_old_manifest() {
    let dir = temp("migrate-crash");
    std::fs::create_dir_all(dir.join("tenants")).unwrap();
    for d in [&dir, &dir.join("tenants")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let whole = serde_json::json!({"format": 1, "tenants": {"acme": {"token_sha256": "aa"}}});
    write_private(&dir, "manifest.json", whole.to_string().as_bytes()).unwrap();
    // A kill after one record of an older migration was written, before the marker.
    write_private(&dir.join("tenants"), "acme.json", br#"{"token_sha256": "stale"}"#).unwrap();
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.load_manifest().unwrap().tenants["acme"].token_sha256, "aa");
}

#[test]
fn a_record_round_trips_through_its_file_unchanged() {
    let dir = temp("record");
    let store = Store::open(&dir).unwrap();
    let mut record = tenant("aa");
    record.classes.insert(
        "gold".into(),
        Assignment {
            policy: "lmetric".into(),
            version: None,
            on_fault: FailMode::Closed,
            ..Assignment::default()
        },
    );
    store.write_tenant("acme", Some(&record)).unwrap();
    let read = StoreReader::new(&dir).unwrap().load_tenant("acme").unwrap();
    assert_eq!(read, Some(record));
}
