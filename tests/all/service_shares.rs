//! `switchyard serve` under a hostile tenant, on loopback with
//! the real binary: one tenant's many versions and concurrent selections take at most
//! its share, so another tenant's policy never faults or gets quarantined for it; and a
//! stored version that no longer loads is served as unavailable while everything else
//! serves.

use std::thread;

use serde_json::{Value, json};

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{
    ADMIN, Body, Client, Server, select_body, serve_command, serve_refused, temp_dir, variant, write_config,
};

/// Attacker threads in one burst: 4 groups of 3. Threads and the victim's one connection
/// stay under `max_inflight_selections` (16), so the global cap answers nobody 503.
const FLOOD_GROUPS: usize = 4;
const FLOOD_GROUP_SIZE: usize = 3;
/// Workers in each of the attacker's requests.
const FLOOD_WORKERS: u64 = 2000;

/// A selection over `FLOOD_WORKERS` workers for mallory's `class`: long enough in the
/// server that the attacker's selections overlap (with the 9-candidate sample, 12 threads
/// seldom had 5 selections running at once).
fn flood_request(class: &str) -> Value {
    let mut body = select_body("mallory", Some(class));
    let workers: Vec<Value> = (0..FLOOD_WORKERS).map(|id| json!({ "id": id })).collect();
    body["workers"] = json!(workers);
    body.as_object_mut().expect("an object").remove("inputs");
    body
}

/// What answered a selection: `guest`, `fallback <kind>`, or the error's kind.
fn outcome(v: &Value) -> String {
    match (v["build"].as_str(), v["fallback"]["kind"].as_str(), v["error"]["kind"].as_str()) {
        (Some("guest"), None, _) => "guest".into(),
        (Some(build), Some(kind), _) => format!("{build}, fallback {kind}: {}", v["fallback"]["message"]),
        (_, _, Some(kind)) => kind.into(),
        _ => v.to_string(),
    }
}

#[test]
fn a_tenant_flooding_the_instance_pool_touches_nobody_else() {
    // A pool-flooding attack, scaled to a pool of 24: one tenant with many pinned versions
    // and concurrent selections on each (unshared, 33 × 8 against 256 slots would exhaust
    // the pool, and another tenant's selections fail `instantiate …`, counted as its
    // policy's faults). The attacker holds at most its share in flight (429 beyond), idle
    // instances are bounded in all, and the slots provably fit (see `serve_refuses_limits_…`
    // below).
    //
    // What this checks, and how: 12 pinned versions; a burst is 12 threads in 4 groups of
    // 3, the threads of a group selecting the same version together (4 selections on each
    // of its 3 versions in turn), over 2,000 workers so that selections overlap in the
    // server. So the tenant has more selections running than its share of 4 (429
    // `tenant-busy` beyond), and each version needs several instances at once, which it
    // would keep idle (up to `idle_instances_per_version`, 8) were idle instances not
    // bounded in all (6 here): 12 versions × 3 outgrow the 25 slots, and selections find no
    // instance (`overloaded`). At least 5 bursts, more (at most 20) until the attacker has
    // been refused 429 once; the victim selects throughout each burst. Then: the share was
    // reached (a 429); the victim was answered by its own guest every time; the attacker
    // got only its own guest's answers or 429 `tenant-busy`; neither tenant was ever short
    // of an instance (`switchyard_policy_overloaded`) or faulted.
    let dir = temp_dir("service-shares-flood");
    let server = Server::with_config(
        &dir,
        "[limits]\nmax_instances = 25\n[service]\nmax_inflight_selections = 16\nmax_in_flight_per_tenant = 4\nmax_idle_instances = 6\n",
    );
    let c = Client::new(&server);
    let attacker = c.add_tenant("mallory");
    let victim = c.add_tenant("acme");
    c.uploaded(&victim, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&victim, "acme", "gold", json!({ "policy": "mine", "on_fault": "closed" }));
    let versions = 12;
    for i in 0..versions {
        let params = format!("%7B%22overlap_score_credit%22%3A0.{i}5%7D");
        let version = c.uploaded(&attacker, "mallory", "p", DEFAULT_POLICY, Some(&params));
        c.assigned(&attacker, "mallory", &format!("c{i}"), json!({ "policy": "p", "version": version }));
    }
    let url = server.url().to_string();
    let mut flooded: Vec<(u16, String)> = Vec::new();
    let mut victim_answers: Vec<(u16, Value)> = Vec::new();
    let mut bursts = 0;
    while bursts < 5 || (bursts < 20 && !flooded.iter().any(|(status, _)| *status == 429)) {
        bursts += 1;
        let flood: Vec<_> = (0..FLOOD_GROUPS * FLOOD_GROUP_SIZE)
            .map(|t| {
                let (url, token) = (url.clone(), attacker.clone());
                let group = t / FLOOD_GROUP_SIZE;
                thread::spawn(move || {
                    let c = Client::at(&url);
                    let mut answers = Vec::new();
                    for class in (group..versions).step_by(FLOOD_GROUPS) {
                        let body = flood_request(&format!("c{class}"));
                        for _ in 0..4 {
                            let (status, v) =
                                c.call("POST", "/v1/select", Some(&token), Body::Json(body.clone()));
                            answers.push((status, outcome(&v)));
                        }
                    }
                    answers
                })
            })
            .collect();
        // The victim selects while the burst runs (at least once).
        loop {
            victim_answers.push(c.select(&victim, "acme", Some("gold")));
            if flood.iter().all(|t| t.is_finished()) {
                break;
            }
        }
        flooded.extend(flood.into_iter().flat_map(|t| t.join().unwrap()));
    }
    let statuses: Vec<u16> = flooded.iter().map(|(status, _)| *status).collect();
    println!(
        "{bursts} burst(s): attacker {} answered, {} refused 429; victim {} answered",
        statuses.iter().filter(|s| **s == 200).count(),
        statuses.iter().filter(|s| **s == 429).count(),
        victim_answers.len()
    );
    for (status, v) in &victim_answers {
        assert_eq!(*status, 200, "the victim is answered by its own policy: {v}");
        assert_eq!((v["build"].as_str(), v["fallback"].is_null()), (Some("guest"), true), "{v}");
    }
    // The attacker got answers or its own 429s, never a 5xx, and no policy faults.
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
    assert!(statuses.contains(&429), "12 threads on a share of 4, {bursts} bursts: never refused");
    assert!(statuses.contains(&200), "the attacker is served within its share");
    for (status, answer) in &flooded {
        match status {
            200 => assert_eq!(answer, "guest", "the attacker is answered by its own guest"),
            _ => assert_eq!(answer, "tenant-busy"),
        }
    }
    let faults = |tenant: &str, policy: &str| -> f64 {
        ["fuel", "deadline", "memory", "stack", "trap", "invalid-output", "policy-error", "quarantined"]
            .iter()
            .map(|k| {
                c.metric(&format!(
                    "switchyard_policy_faults_total{{tenant=\"{tenant}\",policy=\"{policy}\",kind=\"{k}\"}}"
                ))
            })
            .sum()
    };
    assert_eq!(faults("acme", "mine"), 0.0);
    assert_eq!(faults("mallory", "p"), 0.0);
    for (tenant, policy) in [("acme", "mine"), ("mallory", "p")] {
        let series = format!("switchyard_policy_overloaded_total{{tenant=\"{tenant}\",policy=\"{policy}\"}}");
        assert_eq!(c.metric(&series), 0.0, "{series}: the pool was never full");
    }
    // The victim's next upload is configured and served as usual.
    c.uploaded(&victim, "acme", "mine", DEFAULT_POLICY, Some("%7B%22overlap_score_credit%22%3A0.99%7D"));
    assert_eq!(c.select(&victim, "acme", Some("gold")).0, 200);
    let (status, _) = c.call("GET", "/healthz", None, Body::None);
    assert_eq!(status, 200);
}

#[test]
fn a_tenant_over_its_in_flight_share_gets_its_own_429() {
    let dir = temp_dir("service-shares-in-flight");
    let server = Server::with_config(&dir, "[service]\nmax_in_flight_per_tenant = 1\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "gold", json!({ "policy": "mine" }));
    let url = server.url().to_string();
    // Bursts of 8 threads on a share of one until two selections overlap: on a loaded
    // machine one burst can happen to run one selection at a time.
    let mut seen = Vec::new();
    for _ in 0..20 {
        let statuses: Vec<u16> = (0..8)
            .map(|_| {
                let (url, token) = (url.clone(), token.clone());
                thread::spawn(move || {
                    let c = Client::at(&url);
                    (0..20).map(|_| c.select(&token, "acme", Some("gold")).0).collect::<Vec<u16>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
        seen.extend(statuses);
        if seen.contains(&429) {
            break;
        }
    }
    assert!(seen.contains(&200));
    assert!(seen.contains(&429), "8 threads on a share of one: some wait their turn");
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!(status, 200, "the share is given back: {v}");
}

#[test]
fn a_stored_version_that_no_longer_loads_is_unavailable_and_everything_else_serves() {
    let dir = temp_dir("service-shares-startup");
    let data = dir.join("data");
    let broken_bytes = variant(DEFAULT_POLICY, 1);
    let (broken_version, blob) = {
        let server = Server::start(&data, None, Some(ADMIN));
        let c = Client::new(&server);
        let token = c.add_tenant("acme");
        let broken = c.uploaded(&token, "acme", "broken", &broken_bytes, None);
        c.uploaded(&token, "acme", "fine", DEFAULT_POLICY, None);
        c.assigned(&token, "acme", "open", json!({ "policy": "broken", "on_fault": "open" }));
        c.assigned(&token, "acme", "closed", json!({ "policy": "broken", "on_fault": "closed" }));
        c.assigned(&token, "acme", "fine", json!({ "policy": "fine" }));
        std::fs::write(dir.join("token"), &token).unwrap();
        let (_, listing) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
        let p = listing["policies"].as_array().unwrap().iter().find(|p| p["name"] == "broken").unwrap();
        (broken, p["versions"][0]["sha256"].as_str().unwrap().to_string())
    };
    // Its blob is lost: `serve` must still start, or every tenant would be down.
    std::fs::remove_file(data.join("blobs").join(format!("{blob}.wasm"))).unwrap();
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let server = Server::start(&data, None, Some(ADMIN));
    let c = Client::new(&server);
    let (status, v) = c.select(&token, "acme", Some("fine"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "the rest serves: {v}");
    let (status, v) = c.select(&token, "acme", Some("open"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["build"].as_str(), v["fallback"]["kind"].as_str()),
        (Some("native"), Some("unavailable")),
        "{v}"
    );
    let (status, v) = c.select(&token, "acme", Some("closed"));
    assert_eq!((status, v["error"]["kind"].as_str()), (503, Some("unavailable")), "{v}");
    assert_eq!(c.metric("switchyard_versions_unavailable"), 1.0);
    let (_, listing) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    let broken = listing["policies"].as_array().unwrap().iter().find(|p| p["name"] == "broken").unwrap();
    let reason = broken["versions"][0]["unavailable"].as_str().expect("listed with its reason");
    assert!(reason.contains("reading blob"), "{reason}");
    assert_eq!(broken["versions"][0]["version"], broken_version);
    // Uploading it again makes it available.
    c.uploaded(&token, "acme", "broken", &broken_bytes, None);
    let (status, v) = c.select(&token, "acme", Some("closed"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
    assert_eq!(c.metric("switchyard_versions_unavailable"), 0.0);
}

#[test]
fn uploads_assignments_rollbacks_breaker_trips_and_refusals_are_logged_with_tenant_policy_and_version() {
    let dir = temp_dir("service-logs");
    let log = dir.join("serve.log");
    let mut command = serve_command(&dir.join("data"), None, Some(ADMIN));
    command.env("RUST_LOG", "info").env("NO_COLOR", "1");
    let mut server = Server::spawn(command, std::fs::File::create(&log).unwrap());
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let v1 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    let v2 = c.uploaded(&token, "acme", "mine", switchyard_test_util::fixtures::hostile::PANIC, None);
    c.assigned(&token, "acme", "gold", json!({ "policy": "mine" }));
    for _ in 0..3 {
        assert_eq!(c.select(&token, "acme", Some("gold")).0, 200);
    }
    let (status, _) = c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&token), Body::None);
    assert_eq!(status, 200);
    assert_eq!(c.call("GET", "/v1/tenants/acme/policies", Some("wrong-token"), Body::None).0, 401);
    server.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    let has = |needles: &[&str]| text.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(has(&["uploaded", "tenant=\"acme\"", "policy=\"mine\"", &format!("version={v1}")]), "{text}");
    assert!(has(&["uploaded", &format!("version={v2}")]), "{text}");
    assert!(has(&["assigned", "tenant=\"acme\"", "class=\"gold\""]), "{text}");
    assert!(has(&["breaker opened", "tenant=acme", "policy=mine", &format!("version={v2}")]), "{text}");
    assert!(
        has(&["rolled back", "tenant=\"acme\"", &format!("version={v1}"), &format!("replaced={v2}")]),
        "{text}"
    );
    assert!(has(&["request refused", "status=401", "kind=unauthorized"]), "{text}");
}

#[test]
fn serve_refuses_limits_whose_instances_in_flight_and_idle_do_not_fit_the_pool() {
    // Selections in flight, idle instances, uploads' configure checks and the service's own
    // loads each hold a slot of the engine's pool; if they could outnumber it, the pool could run out under load.
    let dir = temp_dir("service-shares-fit");
    let config = write_config(
        &dir,
        "[limits]\nmax_instances = 100\n[service]\nmax_inflight_selections = 64\nmax_idle_instances = 64\n",
    );
    let (code, stderr) = serve_refused(serve_command(&dir.join("data"), Some(&config), Some(ADMIN)));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "max_inflight_selections (64) + max_idle_instances (64) + compile_concurrency (1) + shadow_threads (1) + 1 (the service's own loads) = 131 exceed [limits] max_instances (100)"
        ),
        "{stderr}"
    );
}

#[test]
fn blobs_no_version_names_are_swept_at_start_up() {
    let dir = temp_dir("service-shares-sweep");
    let data = dir.join("data");
    let token = {
        let server = Server::start(&data, None, Some(ADMIN));
        let c = Client::new(&server);
        let token = c.add_tenant("acme");
        c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
        c.assigned(&token, "acme", "gold", json!({ "policy": "mine" }));
        token
    };
    // What a crash between storing a blob and committing the manifest leaves behind.
    let orphan = data.join("blobs").join(format!("{}.wasm", "ab".repeat(32)));
    std::fs::write(&orphan, variant(DEFAULT_POLICY, 7)).unwrap();
    let kept: Vec<_> = std::fs::read_dir(data.join("blobs")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(kept.len(), 2);
    let server = Server::start(&data, None, Some(ADMIN));
    assert!(!orphan.exists(), "the orphan blob is swept");
    assert_eq!(std::fs::read_dir(data.join("blobs")).unwrap().count(), 1, "the named blob stays");
    let c = Client::new(&server);
    let (status, v) = c.select(&token, "acme", Some("gold"));
    assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
}

/// With `load_on_start = false` a restart loads nothing: each version loads on its first
/// selection (the answer is that version's), and one that no longer loads is reported
/// then, while the others keep serving.
#[test]
fn versions_load_on_their_first_selection_when_start_up_loads_none() {
    let dir = temp_dir("service-shares-lazy");
    let data = dir.join("data");
    let config = write_config(&dir, "[service]\nload_on_start = false\n");
    let broken_bytes = variant(DEFAULT_POLICY, 2);
    let (token, versions, broken_blob) = {
        let server = Server::start(&data, Some(&config), Some(ADMIN));
        let c = Client::new(&server);
        let token = c.add_tenant("acme");
        let mut versions = Vec::new();
        for (class, bytes) in [("a", variant(DEFAULT_POLICY, 0)), ("b", variant(DEFAULT_POLICY, 1))] {
            versions.push(c.uploaded(&token, "acme", class, &bytes, None));
            c.assigned(&token, "acme", class, json!({ "policy": class }));
        }
        let broken = c.uploaded(&token, "acme", "broken", &broken_bytes, None);
        c.assigned(&token, "acme", "broken", json!({ "policy": "broken", "on_fault": "closed" }));
        (token, versions, broken)
    };
    // The broken version's blob is its version (no parameters): lose it.
    std::fs::remove_file(data.join("blobs").join(format!("{broken_blob}.wasm"))).unwrap();

    let server = Server::start(&data, Some(&config), Some(ADMIN));
    let c = Client::new(&server);
    let loaded = || c.metric("switchyard_versions_loaded{tenant=\"acme\"}");
    assert_eq!(c.metric("switchyard_versions{tenant=\"acme\"}"), 3.0);
    assert_eq!(loaded(), 0.0, "start-up loaded nothing");
    assert_eq!(c.metric("switchyard_versions_unavailable"), 0.0, "not known until tried");
    let (status, v) = c.select(&token, "acme", Some("b"));
    assert_eq!(
        (status, v["build"].as_str(), v["version"].as_str()),
        (200, Some("guest"), Some(versions[1].as_str())),
        "{v}"
    );
    assert_eq!(loaded(), 1.0, "the selected version alone");
    let (status, v) = c.select(&token, "acme", Some("broken"));
    assert_eq!((status, v["error"]["kind"].as_str()), (503, Some("unavailable")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("reading blob"), "{v}");
    assert_eq!(c.metric("switchyard_versions_unavailable"), 1.0);
    let (status, v) = c.select(&token, "acme", Some("a"));
    assert_eq!((status, v["version"].as_str()), (200, Some(versions[0].as_str())), "{v}");
    assert_eq!(loaded(), 2.0);
    // Loaded from the compiled cache, not compiled again.
    assert_eq!(c.try_metric("switchyard_compile_seconds_count{tenant=\"acme\"}"), None);
    assert_eq!(c.metric("switchyard_components_from_cache_total"), 2.0);
}

/// With every idle slot taken, the instance idle longest gives its slot to the one just
/// used, whichever version each is of: a tenant selecting now keeps its instance warm
/// however many versions were selected before it, which never keep the slots for good.
#[test]
fn the_idle_slots_go_to_the_instances_used_most_recently() {
    let dir = temp_dir("service-shares-idle-lru");
    let config = write_config(&dir, "[service]\nmax_idle_instances = 1\n");
    let server = Server::start(&dir.join("data"), Some(&config), Some(ADMIN));
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    // One component, two versions (`{"prefill_load_scale": 1}` and `2`, URL-encoded).
    for (class, scale) in [("a", 1), ("b", 2)] {
        let params = format!("%7B%22prefill_load_scale%22%3A{scale}%7D");
        c.uploaded(&token, "acme", class, DEFAULT_POLICY, Some(&params));
        c.assigned(&token, "acme", class, json!({ "policy": class }));
    }
    let misses = || c.metric("switchyard_idle_misses_total");
    let select = |class: &str| {
        let (status, v) = c.select(&token, "acme", Some(class));
        assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
    };
    select("a");
    assert_eq!((misses(), c.metric("switchyard_idle_instances")), (1.0, 1.0), "a's instance kept");
    select("b");
    assert_eq!((misses(), c.metric("switchyard_idle_instances")), (2.0, 1.0), "b's kept in a's place");
    select("b");
    assert_eq!(misses(), 2.0, "b found its instance idle");
    select("a");
    assert_eq!(misses(), 3.0, "a's went to b");
}

/// Idle instances keep whatever memory their guests touched, so a count alone does not
/// bound them (ten thousand guests that each fill 64 MiB would keep 640 GB): while the
/// process's resident memory is over `idle_rss_limit_mb`, none is kept. Here the limit
/// is below any server's resident memory, so every selection makes a fresh instance and
/// nothing stays idle; without the limit, the same selections keep one and reuse it.
#[test]
fn no_instance_is_kept_idle_while_resident_memory_is_over_its_limit() {
    for (limit, kept, misses) in [("1", 0.0, 3.0), ("0", 1.0, 1.0)] {
        let dir = temp_dir(&format!("service-shares-idle-rss-{limit}"));
        let config = write_config(&dir, &format!("[service]\nidle_rss_limit_mb = {limit}\n"));
        let server = Server::start(&dir.join("data"), Some(&config), Some(ADMIN));
        let c = Client::new(&server);
        let token = c.add_tenant("acme");
        c.uploaded(&token, "acme", "p", DEFAULT_POLICY, None);
        c.assigned(&token, "acme", "gold", json!({ "policy": "p" }));
        for _ in 0..3 {
            let (status, v) = c.select(&token, "acme", Some("gold"));
            assert_eq!((status, v["build"].as_str()), (200, Some("guest")), "{v}");
        }
        let what = format!("idle_rss_limit_mb = {limit}");
        assert_eq!(c.metric("switchyard_idle_instances"), kept, "{what}");
        assert_eq!(c.metric("switchyard_idle_misses_total"), misses, "{what}");
    }
}
