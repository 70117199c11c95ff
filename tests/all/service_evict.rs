//! Versions evicted after `evict_after_secs` unused, and loaded again: from the component
//! kept for them (`max_unused_components`), else from the compiled artifact alone, never
//! from a tampered one, and never compiled on a selection's path.

use std::os::unix::fs::OpenOptionsExt;

use serde_json::json;

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{ADMIN, Client, Server, serve_command, temp_dir, variant, write_config};

/// An evicted version loads again from its compiled artifact alone, found by its blob's
/// name: no blob read, no hash of the component (so a blob lost after the upload does not
/// make the version unavailable). An artifact tampered with is
/// still never loaded: the version is compiled again from its blob (in the background).
#[test]
fn an_evicted_version_loads_again_from_its_artifact_alone_never_from_a_tampered_one() {
    let (server, data) = evicting_server("service-evict-reload");
    let c = Client::new(&server);
    let (token, version) = mine_on_gold(&c);
    let selected_by_its_version = |what: &str| selected_by(&c, &token, &version, what);
    selected_by_its_version("first");
    let only = |sub: &str, ext: &str| {
        let files: Vec<_> = std::fs::read_dir(data.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        assert_eq!(files.len(), 1, "{sub}: {files:?}");
        files[0].clone()
    };
    let (blob, artifact) = (only("blobs", "wasm"), only("compiled", "cwasm"));
    let blob_bytes = std::fs::read(&blob).unwrap();

    let mut evictions = 1.0;
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", evictions), "evicted");
    std::fs::remove_file(&blob).unwrap();
    selected_by_its_version("blob gone, artifact kept");
    assert_eq!(c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}"), 1.0, "not compiled again");

    evictions += 1.0;
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", evictions), "evicted again");
    // Put back as the store writes it: owner-only.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&blob)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &blob_bytes))
        .unwrap();
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64].fill(0xCC);
    std::fs::write(&artifact, &bytes).unwrap();
    // Refused, so the component is compiled again from the blob, in the background.
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["fallback"]["kind"].as_str()), (200, Some("unavailable")), "{v}");
    wait_for_compiles(&c, 2.0);
    selected_by_its_version("artifact tampered with, compiled again");
}

/// The artifact an upload compiled is checked by the eviction pass once it has settled,
/// off any selection's path, so its version's first reload after an eviction computes no
/// digest (else it would hash the whole artifact while its selection waits).
#[test]
fn an_evicted_version_reloads_without_hashing_an_artifact_the_eviction_pass_checked() {
    let (server, _) = evicting_server("service-evict-checked");
    let c = Client::new(&server);
    let (token, version) = mine_on_gold(&c);
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", 1.0), "evicted");
    // A pass every second: the one after the artifact settled (a second after it was
    // written) has checked it.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    selected_by(&c, &token, &version, "reloaded");
    assert_eq!(
        c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}"),
        1.0,
        "loaded from the artifact"
    );
    assert_eq!(c.metric("switchyard_artifact_load_digests_total"), 0.0, "no digest on the reload's path");
}

/// Each component loaded from the compiled cache holds its mapped file open, so `serve`
/// raises its soft limit on descriptors to the hard one: under a soft limit of 64 a
/// server with 64 components loaded could no longer accept a connection.
#[test]
fn serve_raises_its_descriptor_limit_for_the_mapped_artifacts() {
    let dir = temp_dir("service-evict-nofile");
    let inner = serve_command(&dir.join("data"), None, Some(ADMIN));
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("ulimit -Sn 64 && exec \"$0\" \"$@\"")
        .arg(inner.get_program())
        .args(inner.get_args());
    command.env("SWITCHYARD_ADMIN_TOKEN", ADMIN);
    let server = Server::spawn(command, std::process::Stdio::null());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let open_files: Vec<&str> =
        limits.lines().find(|l| l.starts_with("Max open files")).unwrap().split_whitespace().collect();
    let (soft, hard) = (open_files[3], open_files[4]);
    assert_eq!(soft, hard, "{limits}");
    assert_ne!(soft, "64", "{limits}");
}

/// Waits (up to a minute: a debug build compiles slowly) until `count` compiles are done.
fn wait_for_compiles(c: &Client, count: f64) {
    let within = std::time::Duration::from_secs(60);
    let done = c.wait_for_metric_within("switchyard_compile_seconds_count{tenant=\"acme\"}", count, within);
    assert!(done, "never compiled in the background");
}

/// A server that evicts versions unused for a second and keeps no component for evicted
/// versions (each reload loads its artifact), and its data dir.
fn evicting_server(name: &str) -> (Server, std::path::PathBuf) {
    evicting_server_with(name, "max_unused_components = 0\n")
}

/// A server that evicts versions unused for a second, with `more` in its `[service]`
/// table, and its data dir.
fn evicting_server_with(name: &str, more: &str) -> (Server, std::path::PathBuf) {
    let dir = temp_dir(name);
    let config = write_config(&dir, &format!("[service]\nevict_after_secs = 1\n{more}"));
    let data = dir.join("data");
    (Server::start(&data, Some(&config), Some(ADMIN)), data)
}

/// Selects for `acme`'s class `gold` and asserts that `version`, the guest, answered.
fn selected_by(c: &Client, token: &str, version: &str, what: &str) {
    let (status, v) = c.select(token, "acme", Some("gold"));
    assert_eq!(
        (status, v["build"].as_str(), v["version"].as_str()),
        (200, Some("guest"), Some(version)),
        "{what}: {v}"
    );
}

/// Tenant `acme` with the default policy uploaded as `mine` and class `gold` assigned to
/// it: its token and the version.
fn mine_on_gold(c: &Client) -> (String, String) {
    let token = c.add_tenant("acme");
    let version = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "gold", json!({ "policy": "mine" }));
    (token, version)
}

/// A selection never compiles: it holds no compile permit, so a component the artifact
/// cache lacks (wiped here, as a wasmtime upgrade would leave it) is compiled in the
/// background under one, and the selections meanwhile are answered without it
/// (fail-open: by the native default, saying why). Compiling inline, outside
/// `compile_concurrency`, would make ten thousand evicted versions after an upgrade ten
/// thousand compiles on the selection threads.
#[test]
fn a_selection_never_compiles_a_version_whose_artifact_is_gone_the_background_does() {
    let (server, data) = evicting_server("service-evict-no-inline-compile");
    let c = Client::new(&server);
    let (token, version) = mine_on_gold(&c);
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", 1.0), "evicted");
    for entry in std::fs::read_dir(data.join("compiled")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }

    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["build"].as_str()), (200, Some("native")), "{v}");
    assert_eq!(v["fallback"]["kind"].as_str(), Some("unavailable"), "{v}");
    let why = v["fallback"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("compiling in the background"), "{v}");
    // The background load compiles it once, and the version answers again.
    wait_for_compiles(&c, 2.0);
    selected_by(&c, &token, &version, "compiled in the background");
    assert_eq!(c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}"), 2.0, "compiled once");
}

/// A version unused for `evict_after_secs` is evicted (its configuration and instances
/// dropped) and loads again on its next selection, which its own version answers. Its
/// component is kept (`max_unused_components`, 1,024 by default), so that selection loads
/// none, neither from the artifact nor compiled; with `max_unused_components = 0` the
/// component goes with the version, and the selection maps it again from its artifact,
/// on the selection's path: what keeping the component spares.
#[test]
fn an_unused_version_is_evicted_and_its_next_selection_loads_it_again() {
    for (kept, more) in [(1.0, ""), (0.0, "max_unused_components = 0\n")] {
        let what = format!("components kept: {kept}");
        let (server, _) = evicting_server_with(&format!("service-evict-evict-{kept}"), more);
        let c = Client::new(&server);
        let (token, version) = mine_on_gold(&c);
        let selected_by_its_version = || selected_by(&c, &token, &version, &what);
        selected_by_its_version();
        assert_eq!(c.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 1.0, "{what}");
        assert_eq!(c.metric("switchyard_instances_live"), 1.0, "{what}: its idle instance");

        assert!(c.wait_for_metric("switchyard_versions_evicted_total", 1.0), "{what}: evicted once unused");
        assert!(
            c.wait_for_metric("switchyard_components_unused", kept),
            "{what}: held for the evicted version"
        );
        assert_eq!(c.metric("switchyard_components_loaded"), kept, "{what}");
        assert_eq!(c.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 0.0, "{what}");
        assert_eq!(c.metric("switchyard_instances_live"), 0.0, "{what}: its instances went");
        assert_eq!(c.metric("switchyard_idle_instances"), 0.0, "{what}");
        let loads = c.metric("switchyard_version_load_seconds_count");

        selected_by_its_version();
        assert_eq!(c.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 1.0, "{what}: loaded again");
        assert_eq!(c.metric("switchyard_version_load_seconds_count"), loads + 1.0, "{what}");
        let from_artifact = 1.0 - kept;
        assert_eq!(c.metric("switchyard_components_from_cache_total"), from_artifact, "{what}");
        assert_eq!(
            c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}"),
            1.0,
            "{what}: not compiled again"
        );
    }
}

/// Past `max_unused_components`, the components kept for evicted versions are those
/// selected most recently: of two, with room for one, the later one's stays (its next
/// selection loads no component) and the earlier one's goes (it loads from its artifact).
#[test]
fn past_max_unused_components_the_component_selected_longest_ago_goes() {
    let (server, _) = evicting_server_with("service-evict-bound", "max_unused_components = 1\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    for (policy, n) in [("early", 1), ("late", 2)] {
        c.uploaded(&token, "acme", policy, &variant(DEFAULT_POLICY, n), None);
        c.assigned(&token, "acme", policy, json!({ "policy": policy }));
    }
    let guest = |class: &str| {
        let (status, v) = c.select(&token, "acme", Some(class));
        assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{class}: {v}");
    };
    guest("early");
    // The service's clock counts whole seconds: `late` is selected at a later one.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    guest("late");
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", 2.0), "both evicted");
    assert!(c.wait_for_metric("switchyard_components_loaded", 1.0), "only one kept");
    assert_eq!(c.metric("switchyard_components_unused"), 1.0);

    // Either may have been evicted (and reloaded) before too: count from here.
    let loaded = c.metric("switchyard_components_from_cache_total");
    guest("late");
    assert_eq!(c.metric("switchyard_components_from_cache_total"), loaded, "late's was kept");
    guest("early");
    assert_eq!(c.metric("switchyard_components_from_cache_total"), loaded + 1.0, "early's was loaded again");
}

/// Over `idle_rss_limit_mb` (here below any server's resident memory) no component is kept
/// for evicted versions, however many `max_unused_components` allows: they are the memory
/// given back first.
#[test]
fn over_the_memory_bound_no_component_is_kept_for_evicted_versions() {
    let (server, _) = evicting_server_with("service-evict-rss", "idle_rss_limit_mb = 1\n");
    let c = Client::new(&server);
    let (token, _) = mine_on_gold(&c);
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
    assert!(c.wait_for_metric("switchyard_versions_evicted_total", 1.0), "evicted");
    assert!(c.wait_for_metric("switchyard_components_loaded", 0.0), "its component went");
    assert_eq!(c.metric("switchyard_components_unused"), 0.0);
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
    assert_eq!(c.metric("switchyard_components_from_cache_total"), 1.0, "loaded from its artifact");
}
