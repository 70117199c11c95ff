//! Bounded per-tenant state in `switchyard serve` (a real server on loopback): caps on
//! versions per policy and classes per tenant (409 naming the limit), a per-tenant write
//! rate (429), garbage collection of versions nothing routes to and that are not rollback
//! targets (manifest, loaded versions, components, blobs and artifacts), and a compile's
//! permit free at its deadline (its worker killed then).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{ADMIN, Body, Client, Server, temp_dir, variant, write_config};

/// A data dir and config under a fresh temp dir; the server runs on loopback.
fn start(name: &str, config: &str) -> (Server, std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_dir(name);
    let cfg = write_config(&dir, config);
    let data = dir.join("data");
    (Server::start(&data, Some(&cfg), Some(ADMIN)), data, cfg)
}

/// The error kind of an answer; "<no error>" for a success, so an assertion shows it.
fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or("<no error>")
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("<no error>")
}

fn rollback(c: &Client, token: &str, tenant: &str, name: &str) -> (u16, Value) {
    c.call("POST", &format!("/v1/tenants/{tenant}/policies/{name}/rollback"), Some(token), Body::None)
}

/// URL-encoded `{"prefill_load_scale": n}`: the same bytes, another version.
fn scale(n: u32) -> String {
    format!("%7B%22prefill_load_scale%22%3A{n}%7D")
}

/// `tenant`'s committed record, as the server wrote it (`tenants/<tenant>.json`).
fn tenant_record(data: &Path, tenant: &str) -> Value {
    let path = data.join("tenants").join(format!("{tenant}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The committed versions of `tenant`'s `policy`.
fn manifest_versions(data: &Path, tenant: &str, policy: &str) -> BTreeSet<String> {
    let record = tenant_record(data, tenant);
    record["policies"][policy]["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("{tenant}/{policy} in {record}"))
        .iter()
        .map(|v| v["version"].as_str().unwrap().to_string())
        .collect()
}

/// The policy record (`active`, `previous`) in `tenant`'s committed record.
fn manifest_policy(data: &Path, tenant: &str, policy: &str) -> Value {
    tenant_record(data, tenant)["policies"][policy].clone()
}

/// sha256s of the blobs in `<data>/blobs/`.
fn blobs(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".wasm").map(str::to_string))
        .collect()
}

/// Compiled artifacts in `<data>/compiled/` of the component whose sha256 is `blob`.
fn artifacts(data: &Path, blob: &str) -> usize {
    std::fs::read_dir(data.join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&format!("{blob}-")))
        .inspect(|name| {
            // Each artifact has its MAC beside it; both go together.
            let mac = data.join("compiled").join(format!("{name}.mac"));
            assert!(name.ends_with(".mac") || mac.exists(), "{name} without its MAC");
        })
        .filter(|name| name.ends_with(".cwasm"))
        .count()
}

#[test]
fn service_state_versions_per_policy_are_capped_and_the_rollback_history_makes_room() {
    let (server, data, _) = start("state-version-cap", "[service]\nmax_versions_per_policy = 3\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    // Three versions of one policy (same bytes, other parameters: compiled once), each
    // pinned by a class: every one must be kept.
    let mut versions = Vec::new();
    for n in 1..=3 {
        let v = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(n)));
        let pin = json!({ "policy": "mine", "version": v });
        assert_eq!(c.assign(&token, "acme", &format!("pin{n}"), pin).0, 200);
        versions.push(v);
    }
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(4)));
    assert_eq!((status, kind(&v)), (409, "too-many-versions"), "{v}");
    assert!(message(&v).contains("max_versions_per_policy") && message(&v).contains("3"), "{v}");
    assert_eq!(manifest_versions(&data, "acme", "mine"), versions.iter().cloned().collect(), "unchanged");
    assert_eq!(manifest_policy(&data, "acme", "mine")["active"], versions[2].as_str());
    // A version that is already kept is no new version: re-uploading it is fine.
    assert_eq!(c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(3))), versions[2]);

    // Unpin the newest: an upload now makes room by dropping the oldest rollback targets
    // (the history is [v1, v2]; v1 and v2 stay, pinned), and v3, neither pinned, active
    // nor a rollback target any more, is collected.
    assert_eq!(c.assign(&token, "acme", "pin3", json!({ "policy": "default" })).0, 200);
    let v4 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(4)));
    let expected: BTreeSet<String> = [&versions[0], &versions[1], &v4].into_iter().cloned().collect();
    assert_eq!(manifest_versions(&data, "acme", "mine"), expected);
    assert_eq!(c.metric("switchyard_versions{tenant=\"acme\"}"), 3.0);
    assert_eq!(c.metric("switchyard_versions_collected_total{tenant=\"acme\"}"), 1.0);
    // The pinned classes still answer with their versions.
    let (status, v) = c.select(&token, "acme", Some("pin1"));
    assert_eq!((status, v["version"].as_str()), (200, Some(versions[0].as_str())), "{v}");
}

/// `text` URL-encoded for a query: every byte but letters and digits as `%XX`.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") })
        .collect()
}

#[test]
fn service_state_the_same_parameters_are_one_version_however_spaced_or_ordered() {
    let (server, data, _) = start("state-canonical-params", "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let put = |params: &str| c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&url_encoded(params)));
    let first = put(r#"{"prefill_load_scale": 0.940e-22, "decode_active_request_weight":2}"#);
    let reordered = put(r#"{"decode_active_request_weight":2,"prefill_load_scale":0.940e-22}"#);
    let spaced = put("{\n  \"prefill_load_scale\" : 0.940e-22 ,\n  \"decode_active_request_weight\" : 2\n}");
    assert_eq!((&reordered, &spaced), (&first, &first), "key order and spacing make no new version");
    assert_eq!(manifest_versions(&data, "acme", "mine"), BTreeSet::from([first.clone()]));
    // The version is configured from, and lists, the canonical text: keys sorted, no
    // spacing, the number as written.
    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["policies"][0]["versions"][0]["params"],
        r#"{"decode_active_request_weight":2,"prefill_load_scale":0.940e-22}"#,
        "{v}"
    );
    // Other values are another version.
    let other = put(r#"{"prefill_load_scale": 0.5, "decode_active_request_weight": 2}"#);
    assert_ne!(other, first);
    assert_eq!(manifest_versions(&data, "acme", "mine"), BTreeSet::from([first, other]));
}

#[test]
fn service_state_classes_per_tenant_are_capped() {
    let (server, _, _) = start("state-class-cap", "[service]\nmax_classes_per_tenant = 2\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let default = || json!({ "policy": "default" });
    assert_eq!(c.assign(&token, "acme", "latency", default()).0, 200);
    assert_eq!(c.assign(&token, "acme", "batch", default()).0, 200);
    let (status, v) = c.assign(&token, "acme", "gold", default());
    assert_eq!((status, kind(&v)), (409, "too-many-classes"), "{v}");
    assert!(message(&v).contains("max_classes_per_tenant"), "{v}");
    // Re-assigning an existing class is no new class; another tenant has its own cap.
    assert_eq!(c.assign(&token, "acme", "batch", json!({ "policy": "chwbl" })).0, 200);
    let other = c.add_tenant("other");
    assert_eq!(c.assign(&other, "other", "gold", default()).0, 200);
    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    assert_eq!(status, 200);
    assert_eq!(v["classes"].as_object().unwrap().len(), 2, "{v}");
}

#[test]
fn service_state_writes_per_tenant_are_rate_limited() {
    let (server, _, _) = start("state-write-rate", "[service]\nwrites_per_minute = 4\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    // An upload and three assignments: four writes.
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    for class in ["a", "b", "c"] {
        assert_eq!(c.assign(&token, "acme", class, json!({ "policy": "mine" })).0, 200);
    }
    let (status, v) = c.assign(&token, "acme", "d", json!({ "policy": "mine" }));
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "{v}");
    assert!(message(&v).contains("writes_per_minute"), "{v}");
    let (status, v) = rollback(&c, &token, "acme", "mine");
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "a rollback is a write: {v}");
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(1)));
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "an upload is a write: {v}");
    assert!(message(&v).contains("writes_per_minute"), "{v}");
    // The refused writes changed nothing; another tenant has its own allowance.
    let (_, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    assert_eq!(v["classes"].as_object().unwrap().len(), 3, "{v}");
    let other = c.add_tenant("other");
    assert_eq!(c.assign(&other, "other", "a", json!({ "policy": "default" })).0, 200);
    // Selections are no writes.
    let (status, _) = c.select(&token, "acme", Some("a"));
    assert_eq!(status, 200);
}

#[test]
fn service_state_versions_nothing_routes_to_are_collected_with_their_blobs_and_a_restart_serves() {
    let (server, data, cfg) = start("state-gc", "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let other = c.add_tenant("other");
    let bytes: Vec<Vec<u8>> = (1..=3).map(|n| variant(DEFAULT_POLICY, n)).collect();
    // Without parameters a version is its blob's sha256: the file name in blobs/.
    let [a, b, c3] = [0, 1, 2].map(|i| {
        let (status, v) = c.upload(&token, "acme", "mine", &bytes[i], None);
        assert_eq!((status, &v["version"]), (201, &v["sha256"]), "{v}");
        v["version"].as_str().unwrap().to_string()
    });
    let set = |vs: &[&String]| vs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(manifest_versions(&data, "acme", "mine"), set(&[&a, &b, &c3]));
    assert_eq!(c.assign(&token, "acme", "follow", json!({ "policy": "mine" })).0, 200);
    assert_eq!(c.assign(&token, "acme", "pin", json!({ "policy": "mine", "version": a })).0, 200);

    // Roll back: b is active, a the rollback target (and pinned), c the roll-forward's:
    // all three kept, nothing collected.
    assert_eq!(rollback(&c, &token, "acme", "mine").0, 200);
    assert_eq!(manifest_versions(&data, "acme", "mine"), set(&[&a, &b, &c3]));
    assert_eq!(c.try_metric("switchyard_versions_collected_total{tenant=\"acme\"}"), None);
    // Upload a again: what lay ahead (c) is neither routed nor in a history any more:
    // gone from the manifest, its blob and artifact too.
    assert_eq!(c.uploaded(&token, "acme", "mine", &bytes[0], None), a);
    assert_eq!(manifest_versions(&data, "acme", "mine"), set(&[&a, &b]));
    assert_eq!(blobs(&data), set(&[&a, &b]));
    assert_eq!(artifacts(&data, &c3), 0, "the collected version's compiled artifact is deleted");
    assert_eq!(artifacts(&data, &a), 1);
    assert_eq!(c.metric("switchyard_versions_collected_total{tenant=\"acme\"}"), 1.0);
    assert_eq!(c.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 2.0);
    assert_eq!(c.metric("switchyard_components_loaded"), 2.0, "c's compiled component is evicted");

    // Another tenant uploads b's bytes: the blob is shared.
    assert_eq!(c.uploaded(&other, "other", "theirs", &bytes[1], None), b);
    // Back to b, back to a (active a; b now only ahead of it), and unpin a.
    assert_eq!(rollback(&c, &token, "acme", "mine").0, 200);
    assert_eq!(rollback(&c, &token, "acme", "mine").0, 200);
    assert_eq!(c.assign(&token, "acme", "pin", json!({ "policy": "default" })).0, 200);
    assert_eq!(manifest_versions(&data, "acme", "mine"), set(&[&a, &b]));
    // Re-upload c: active again, a the rollback target; acme's b, ahead of nothing now,
    // is collected, its blob stays (other's version names it).
    assert_eq!(c.uploaded(&token, "acme", "mine", &bytes[2], None), c3);
    assert_eq!(c.metric("switchyard_versions_collected_total{tenant=\"acme\"}"), 2.0);
    assert_eq!(manifest_versions(&data, "acme", "mine"), set(&[&a, &c3]));
    assert_eq!(manifest_policy(&data, "acme", "mine")["previous"], json!([a]));
    assert_eq!(blobs(&data), set(&[&a, &b, &c3]));
    assert_eq!(c.metric("switchyard_versions{tenant=\"acme\"}"), 2.0);
    assert_eq!(c.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 2.0);
    assert_eq!(c.metric("switchyard_components_loaded"), 3.0);
    let select = |c: &Client, class: &str| c.select(&token, "acme", Some(class));
    let (status, v) = select(&c, "follow");
    assert_eq!(
        (status, v["version"].as_str(), v["build"].as_str()),
        (200, Some(c3.as_str()), Some("guest")),
        "{v}"
    );

    // A restart loads what is left, and every class answers.
    drop(server);
    let server = Server::start(&data, Some(&cfg), Some(ADMIN));
    let c = Client::new(&server);
    assert_eq!(c.metric("switchyard_versions{tenant=\"acme\"}"), 2.0);
    // Loaded in the background after start-up.
    assert!(c.wait_for_metric("switchyard_versions_loaded{tenant=\"acme\"}", 2.0));
    let (status, v) = select(&c, "follow");
    assert_eq!(
        (status, v["version"].as_str(), &v["fallback"]),
        (200, Some(c3.as_str()), &Value::Null),
        "{v}"
    );
    let (status, v) = select(&c, "pin");
    assert_eq!((status, v["policy"].as_str(), v["build"].as_str()), (200, Some("default"), Some("native")));
    assert_eq!(rollback(&c, &token, "acme", "mine").0, 200);
    let (status, v) = select(&c, "follow");
    assert_eq!((status, v["version"].as_str()), (200, Some(a.as_str())), "{v}");
    let (status, v) = c.select(&other, "other", None);
    assert_eq!(status, 200, "{v}");
}

#[test]
fn service_state_a_timed_out_compile_frees_its_permit_at_the_deadline() {
    // One compile at a time, and 1 ms to compile: every real component times out. Its
    // worker is killed then, so the permit is free for the very next upload (in-process,
    // Cranelift would go on holding it, and that upload would be refused `compile-busy`).
    // Distinct bytes each time: nothing is reused.
    let (server, _, _) = start(
        "state-compile-permit",
        "[limits]\ncompile_timeout_ms = 1\n[service]\ncompile_concurrency = 1\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    for round in 0..3u32 {
        for tag in [100 + round, 200 + round] {
            let (status, v) = c.upload(&token, "acme", "slow", &variant(DEFAULT_POLICY, tag), None);
            assert_eq!((status, kind(&v)), (400, "compile-timeout"), "the permit was free: {v}");
            assert!(message(&v).contains("longer than 1 ms"), "{v}");
        }
    }
    assert_eq!(c.metric("switchyard_compile_workers_killed_total"), 6.0);
    assert_eq!(c.metric("switchyard_compiles_abandoned"), 0.0);
    assert_eq!(c.metric("switchyard_compile_busy_total"), 0.0);
    assert_eq!(c.call("GET", "/healthz", None, Body::None).0, 200);
}

/// What the previous build left: the whole registry in one format-1 `manifest.json`, made
/// from this build's per-tenant files (the records are the same JSON).
fn as_format_1(data: &Path) {
    let mut tenants = serde_json::Map::new();
    for entry in std::fs::read_dir(data.join("tenants")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        tenants.insert(name, serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap());
    }
    let routers: Value = serde_json::from_slice(&std::fs::read(data.join("routers.json")).unwrap()).unwrap();
    let whole = json!({"format": 1, "tenants": tenants, "routers": routers});
    std::fs::remove_dir_all(data.join("tenants")).unwrap();
    std::fs::remove_file(data.join("routers.json")).unwrap();
    std::fs::write(data.join("manifest.json"), whole.to_string()).unwrap();
}

#[test]
fn service_state_a_format_1_data_dir_is_migrated_and_serves_as_before() {
    let (mut server, data, cfg) = start("state-migrate", "");
    let c = Client::new(&server);
    let (acme, globex) = (c.add_tenant("acme"), c.add_tenant("globex"));
    let version = c.uploaded(&acme, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&acme, "acme", "gold", json!({ "policy": "mine" }));
    let (status, router) = c.call("POST", "/v1/routers", Some(ADMIN), Body::Json(json!({ "name": "edge" })));
    assert_eq!(status, 201, "{router}");
    let router = router["token"].as_str().unwrap().to_string();
    server.kill();
    as_format_1(&data);

    let server = Server::start(&data, Some(&cfg), Some(ADMIN));
    let c = Client::new(&server);
    // Every token, version and assignment is there, from the new layout.
    let (status, v) = c.select(&acme, "acme", Some("gold"));
    assert_eq!((status, v["version"].as_str()), (200, Some(version.as_str())), "{v}");
    assert_eq!(c.select(&router, "acme", Some("gold")).0, 200, "the router's token");
    assert_eq!(c.select(&globex, "globex", None).0, 200, "the other tenant's token");
    assert_eq!(manifest_versions(&data, "acme", "mine"), BTreeSet::from([version]));
    let marker: Value = serde_json::from_slice(&std::fs::read(data.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(marker["format"], 2, "{marker}");
    // A write changes one tenant's file, and leaves the other's alone.
    // (A rewrite is a rename: a new inode.)
    let inode = |tenant: &str| {
        let path = data.join("tenants").join(format!("{tenant}.json"));
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
    };
    let before = (inode("acme"), inode("globex"));
    c.assigned(&acme, "acme", "silver", json!({ "policy": "lmetric" }));
    assert_ne!(inode("acme"), before.0, "acme's record was rewritten");
    assert_eq!(inode("globex"), before.1, "globex's was not");
    assert_eq!(tenant_record(&data, "acme")["classes"]["silver"]["policy"], "lmetric");
}
