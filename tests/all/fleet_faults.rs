//! A fleet when things fail: NATS down and back mid-run, a replica killed with `kill -9`
//! during uploads, a replica started before its NATS. Real `switchyard serve` replicas
//! on a real nats-server, as in `fleet.rs`.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_registry_nats::RegistryError;
use switchyard_test_util::nats::{NatsServer, free_port};
use switchyard_test_util::{DEFAULT_POLICY, hostile};

use switchyard_test_util::fleet::{Fleet, acme_with_mine, kind, replica, replica_with, wait_for_version};
use switchyard_test_util::server::{Body, Client, Server, variant};

/// Sets the flag when dropped, so threads looping on it stop even when the test fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Selects acme's `class` through `client` until `stop`; every answer that was not a
/// 200 goes into `failures`.
fn select_until(
    client: &Client,
    token: &str,
    class: &str,
    stop: &AtomicBool,
    failures: &Mutex<Vec<String>>,
) -> usize {
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        match client.send(
            "POST",
            "/v1/select",
            Some(token),
            Body::Json(switchyard_test_util::server::select_body("acme", Some(class))),
        ) {
            Ok((200, _)) => answered += 1,
            Ok((status, v)) => failures.lock().unwrap().push(format!("{status} {v}")),
            Err(e) => failures.lock().unwrap().push(e),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    answered
}

/// Retries `write` while it is answered 503 `registry-unavailable` (the replica has not
/// reconnected yet), for at most 30 s; its answer.
fn once_reconnected(mut write: impl FnMut() -> (u16, Value)) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, v) = write();
        if (200..300).contains(&status) {
            return v;
        }
        assert_eq!((status, kind(&v)), (503, "registry-unavailable"), "{v}");
        assert!(Instant::now() < deadline, "writes never resumed: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn while_nats_is_down_selections_are_answered_and_writes_refused_then_all_resumes() {
    let mut fleet = Fleet::start("fleet-outage");
    let clients = fleet.clients();
    let [a, b, c] = &clients;
    let (token, v1) = acme_with_mine(a, "latency");
    wait_for_version(b, &token, "latency", &v1, "B");
    wait_for_version(c, &token, "latency", &v1, "C");

    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let selectors: Vec<_> = clients
            .iter()
            .map(|client| s.spawn(|| select_until(client, &token, "latency", &stop, &failures)))
            .collect();

        fleet.nats.kill();
        // Every write is refused, saying why; nothing is half-written.
        let (status, v) = b.assign(&token, "acme", "batch", json!({ "policy": "mine" }));
        assert_eq!((status, kind(&v)), (503, "registry-unavailable"), "{v}");
        let (status, v) = a.upload(&token, "acme", "mine", &variant(DEFAULT_POLICY, 1), None);
        assert_eq!((status, kind(&v)), (503, "registry-unavailable"), "{v}");
        std::thread::sleep(Duration::from_secs(1));

        fleet.nats.start_again();
        // Writes resume on every replica, and each one's change reaches the others.
        once_reconnected(|| b.assign(&token, "acme", "batch", json!({ "policy": "mine" })));
        wait_for_version(a, &token, "batch", &v1, "A");
        wait_for_version(c, &token, "batch", &v1, "C");
        let v2 = once_reconnected(|| c.upload(&token, "acme", "mine", &variant(DEFAULT_POLICY, 2), None));
        let v2 = v2["version"].as_str().expect("a version");
        wait_for_version(a, &token, "latency", v2, "A");
        wait_for_version(b, &token, "latency", v2, "B");
        once_reconnected(|| {
            a.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&token), Body::None)
        });
        wait_for_version(b, &token, "latency", &v1, "B");
        wait_for_version(c, &token, "latency", &v1, "C");

        stop.store(true, Ordering::Relaxed);
        for (selector, name) in selectors.into_iter().zip("ABC".chars()) {
            let answered = selector.join().expect("a selecting thread");
            assert!(answered > 0, "replica {name} answered no selection");
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "selections failed while NATS was down or back: {failures:?}");
}

/// The versions of acme's policy `mine` as `client`'s replica lists them; panics if one
/// is listed that this replica could not load (a partial version).
fn listed_versions(client: &Client, token: &str, replica: &str) -> Vec<String> {
    let (status, v) = client.call("GET", "/v1/tenants/acme/policies", Some(token), Body::None);
    assert_eq!(status, 200, "{v}");
    let mine = v["policies"].as_array().expect("policies").iter().find(|p| p["name"] == "mine");
    let Some(mine) = mine else { return Vec::new() };
    let versions = mine["versions"].as_array().expect("versions");
    for version in versions {
        assert!(
            version["unavailable"].is_null() && !version["breaker"].is_null(),
            "replica {replica} lists a version it cannot serve: {version}"
        );
    }
    versions.iter().map(|v| v["version"].as_str().expect("a version").to_string()).collect()
}

#[test]
fn a_replica_killed_during_uploads_leaves_no_partial_version_on_the_others() {
    let mut fleet = Fleet::start("fleet-kill");
    let [a, b, c] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency");
    wait_for_version(&b, &token, "latency", &v1, "B");

    // A takes uploads of new components (a new blob each) until it is killed; B lists
    // the versions throughout.
    let acknowledged = Mutex::new(vec![v1]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            for tag in 1.. {
                let path = "/v1/tenants/acme/policies/mine";
                let bytes = variant(DEFAULT_POLICY, tag);
                match a.send("PUT", path, Some(&token), Body::Bytes(&bytes)) {
                    Ok((201, v)) => {
                        acknowledged.lock().unwrap().push(v["version"].as_str().unwrap().to_string())
                    }
                    Ok((status, v)) => panic!("an upload before the kill: {status} {v}"),
                    Err(_) => return, // A is gone.
                }
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                listed_versions(&b, &token, "B");
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while acknowledged.lock().unwrap().len() < 4 {
            assert!(Instant::now() < deadline, "A took too few uploads");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Mid-upload, most likely: one is sent as soon as the last is answered.
        fleet.replicas[0].kill();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
    });

    // B and C: every upload A acknowledged is there, and everything listed serves.
    let acknowledged = acknowledged.into_inner().unwrap();
    let last = acknowledged.last().expect("an upload");
    for (client, name) in [(&b, "B"), (&c, "C")] {
        wait_for_version(client, &token, "latency", last, name);
        let listed = listed_versions(client, &token, name);
        for version in &acknowledged[acknowledged.len().saturating_sub(8)..] {
            assert!(
                listed.contains(version),
                "replica {name} lost acknowledged version {version}: {listed:?}"
            );
        }
        for version in &listed {
            let body = json!({ "policy": "mine", "version": version });
            client.assigned(&token, "acme", "pinned", body);
            wait_for_version(client, &token, "pinned", version, name);
        }
    }

    // A comes back on its data dir and serves what the fleet has now.
    let listed = listed_versions(&b, &token, "B");
    fleet.replicas[0] = replica(&fleet.dir, "a", &fleet.nats.url());
    let a = Client::new(&fleet.replicas[0]);
    wait_for_version(&a, &token, "pinned", listed.last().expect("a version"), "A");
    assert_eq!(listed_versions(&a, &token, "A"), listed);
}

#[test]
fn a_replica_started_before_its_nats_says_so_and_comes_up_with_it() {
    let dir = switchyard_test_util::server::temp_dir("fleet-late");
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    // The registry from the config file this time, not the flag.
    let config = switchyard_test_util::server::write_config(&dir, &format!("[registry]\nurl = \"{url}\"\n"));
    let command = switchyard_test_util::server::serve_command(
        &dir.join("a"),
        Some(&config),
        Some(switchyard_test_util::server::ADMIN),
    );
    let log = dir.join("a.log");
    let starting = {
        let log = std::fs::File::create(&log).expect("creating a log file");
        std::thread::spawn(move || Server::spawn(command, log))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("the registry is unavailable; retrying")
    {
        assert!(!starting.is_finished(), "the replica did not wait for its registry");
        assert!(Instant::now() < deadline, "the replica never said its registry is unavailable");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _nats = NatsServer::start_on(Path::new(env!("CARGO_TARGET_TMPDIR")), "fleet-late", port);
    let server = starting.join().expect("the replica came up once NATS did");
    let client = Client::new(&server);
    let (token, v1) = acme_with_mine(&client, "latency");
    wait_for_version(&client, &token, "latency", &v1, "A");
}

#[test]
fn a_registry_address_that_is_not_nats_is_refused_at_once() {
    let dir = switchyard_test_util::server::temp_dir("fleet-bad-url");
    let mut command = switchyard_test_util::server::serve_command(
        &dir.join("a"),
        None,
        Some(switchyard_test_util::server::ADMIN),
    );
    command.args(["--registry", "nats://127.0.0.1:notaport"]);
    let (code, stderr) = switchyard_test_util::server::serve_refused(command);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("not a NATS server address"), "{stderr}");
}

#[test]
fn a_change_adopted_while_a_tenant_fills_the_pool_takes_the_services_own_slot() {
    // B's pool has four slots: one for a selection in flight, one for an upload's
    // configure check, one for the shadow thread, one for the service's own loads. A
    // hostile tenant fills the first two for 4 s with guests that spin (select and configure) while another replica's
    // change reaches B, which loads it in the third.
    let dir = switchyard_test_util::server::temp_dir("fleet-full");
    let nats = NatsServer::start(Path::new(env!("CARGO_TARGET_TMPDIR")), "fleet-full");
    let config = switchyard_test_util::server::write_config(
        &dir,
        "[limits]\nbudget = \"epoch\"\ncall_deadline_ms = 4000\nmax_instances = 4\n\
         [service]\nmax_inflight_selections = 1\nmax_idle_instances = 0\ncompile_concurrency = 1\n",
    );
    let a_server = replica(&dir, "a", &nats.url());
    let b_server = replica_with(&dir, "b", &nats.url(), Some(&config));
    let (a, b) = (Client::new(&a_server), Client::new(&b_server));
    let mallory = b.add_tenant("mallory");
    let spin = b.uploaded(&mallory, "mallory", "spin", hostile::ILOOP, None);
    b.call(
        "PUT",
        "/v1/tenants/mallory/classes/slow",
        Some(&mallory),
        Body::Json(json!({ "policy": "spin" })),
    );
    let token = a.add_tenant("acme");

    std::thread::scope(|s| {
        s.spawn(|| {
            let body = switchyard_test_util::server::select_body("mallory", Some("slow"));
            let (status, v) = b.call("POST", "/v1/select", Some(&mallory), Body::Json(body));
            assert_eq!(status, 200, "the spinning selection falls back: {v} ({spin})");
        });
        s.spawn(|| b.upload(&mallory, "mallory", "spin2", hostile::CONFIGURE_SPIN, None));
        std::thread::sleep(Duration::from_millis(500));
        // Meanwhile acme uploads and assigns through A.
        let v1 = a.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
        a.assigned(&token, "acme", "latency", json!({ "policy": "mine" }));
        // B loads it once a slot is free, and serves it.
        wait_for_version(&b, &token, "latency", &v1, "B");
    });
    assert!(listed_versions(&b, &token, "B").len() == 1);
}

#[test]
fn blobs_no_tenant_names_are_swept_from_the_registry_after_the_grace() {
    // Two versions kept per policy, blobs unnamed for a second swept.
    let config = "[registry]\nblob_grace_secs = 1\n[service]\nmax_versions_per_policy = 2\n";
    let fleet = Fleet::start_with("fleet-sweep", Some(config));
    let [a, b, _] = fleet.clients();
    let token = a.add_tenant("acme");
    let blobs: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|tag| {
            let bytes = variant(DEFAULT_POLICY, tag);
            let (status, v) = a.upload(&token, "acme", "mine", &bytes, None);
            assert_eq!(status, 201, "{v}");
            (v["sha256"].as_str().expect("a sha256").to_string(), bytes)
        })
        .collect();
    a.assigned(&token, "acme", "latency", json!({ "policy": "mine" }));
    // The third upload trimmed the first version: its blob goes, the others stay and serve.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let registry = runtime
        .block_on(switchyard_registry_nats::NatsRegistry::connect(&fleet.nats.url(), &Default::default()))
        .expect("connects");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Until the blob is gone (a read during the sweep's delete may fail otherwise).
    while !matches!(runtime.block_on(registry.read_blob(&blobs[0].0)), Err(RegistryError::NoBlob(_))) {
        assert!(Instant::now() < deadline, "the trimmed version's blob was never swept");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2)); // more sweeps, past the others' grace
    for (blob, bytes) in &blobs[1..] {
        assert_eq!(&runtime.block_on(registry.read_blob(blob)).expect("a named blob stays"), bytes);
    }
    // An upload of the swept bytes again stores them again, and every replica serves it.
    let (status, v) = b.upload(&token, "acme", "mine", &blobs[0].1, None);
    assert_eq!(status, 201, "{v}");
    let again = v["version"].as_str().expect("a version");
    for (client, name) in fleet.clients().iter().zip(["A", "B", "C"]) {
        wait_for_version(client, &token, "latency", again, name);
    }
    assert_eq!(&runtime.block_on(registry.read_blob(&blobs[0].0)).expect("stored again"), &blobs[0].1);
}

/// Versions load lazily (on a first selection, or again after an eviction), and a fleet
/// replica keeps a copy of every blob it reads: a version evicted on B loads again while
/// NATS is down, and answers (no component kept for it: `max_unused_components = 0`).
/// (Read from NATS alone, it failed over to the native default.)
#[test]
fn an_evicted_version_loads_again_while_nats_is_down() {
    let mut fleet = Fleet::start_with(
        "fleet-evict",
        Some("[service]\nevict_after_secs = 1\nmax_unused_components = 0\n"),
    );
    let [a, b, _] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency");
    wait_for_version(&b, &token, "latency", &v1, "B");
    assert!(b.wait_for_metric("switchyard_versions_evicted_total", 1.0), "B evicts the unused version");
    assert_eq!(b.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 0.0);

    fleet.nats.kill();
    let (status, v) = b.select(&token, "acme", Some("latency"));
    assert_eq!(
        (status, v["build"].as_str(), v["version"].as_str(), &v["fallback"]),
        (200, Some("guest"), Some(v1.as_str()), &Value::Null),
        "{v}"
    );
    assert_eq!(b.metric("switchyard_versions_loaded{tenant=\"acme\"}"), 1.0);
    fleet.nats.start_again();
}

/// A version loading while NATS does not answer (its blob never read on this replica)
/// holds up nothing else: listings and scrapes of that replica answer at once, and the
/// version, cold still, loads on its first selection once NATS is back. (The load held
/// the lock a listing reads a version's state under, for as long as the blob read took.)
#[test]
fn a_load_waiting_on_nats_holds_up_no_listing_and_is_tried_again() {
    let mut fleet = Fleet::start("fleet-slow-load");
    let [a, ..] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency");
    // D joins now and loads nothing until it is selected: it has no copy of the blob.
    let config = switchyard_test_util::server::write_config(&fleet.dir, "[service]\nload_on_start = false\n");
    let d_server = replica_with(&fleet.dir, "d", &fleet.nats.url(), Some(&config));
    let d = Client::new(&d_server);
    let listed = || listed_versions(&d, &token, "D");
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed() != std::slice::from_ref(&v1) {
        assert!(Instant::now() < deadline, "D never listed {v1}");
        std::thread::sleep(Duration::from_millis(20));
    }

    fleet.nats.kill();
    std::thread::scope(|s| {
        let loading = s.spawn(|| {
            let started = Instant::now();
            (d.select(&token, "acme", Some("latency")), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        for _ in 0..3 {
            assert_eq!(listed(), std::slice::from_ref(&v1));
            d.metrics();
        }
        let listings = started.elapsed();
        let ((status, v), took) = loading.join().expect("the selecting thread");
        assert!(took > Duration::from_secs(1), "the load did wait on NATS ({took:?}), or this tests nothing");
        assert!(listings < took / 2, "listings waited {listings:?} on a load of {took:?}");
        // Fail-open: the native default answered, saying why.
        assert_eq!((status, v["fallback"]["kind"].as_str()), (200, Some("unavailable")), "{v}");
    });

    fleet.nats.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, v) = d.select(&token, "acme", Some("latency"));
        if status == 200 && v["version"] == v1.as_str() {
            break;
        }
        assert!(Instant::now() < deadline, "the version never loaded once NATS was back: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
