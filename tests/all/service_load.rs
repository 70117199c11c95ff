//! The service under change: hot swap under continuous selection load, and `kill -9`
//! during uploads. Loopback only; bounded in time and count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{ADMIN, Body, Client, Server, select_body, temp_dir, variant};

/// A change of what class `load` runs: sent at, answered at, and the version it routes.
struct Change {
    sent: Instant,
    done: Instant,
    version: String,
}

/// One answered selection: sent, answered, the version it names.
struct Answer {
    sent: Instant,
    done: Instant,
    version: String,
}

/// Seconds the load runs (`SWITCHYARD_LOAD_SECS`, default 30).
fn load_duration() -> Duration {
    let secs = std::env::var("SWITCHYARD_LOAD_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    Duration::from_secs(secs)
}

/// At least this many changes, however long they take (each is an fsync'd manifest).
const MIN_CHANGES: usize = 300;
/// Distinct component builds cycled through (each compiled once, during the load).
const VARIANTS: u32 = 4;

#[test]
fn hot_swap_under_load_fails_no_selection_and_answers_only_active_versions() {
    let dir = temp_dir("service-load");
    // Hundreds of uploads and writes a minute: lift the per-tenant rate limits for this test.
    let server =
        Server::with_config(&dir, "[service]\nuploads_per_minute = 100000\nwrites_per_minute = 100000\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let (_, router) = c.call("POST", "/v1/routers", Some(ADMIN), Body::Json(json!({ "name": "edge" })));
    let router = router["token"].as_str().unwrap().to_string();

    let variants: Vec<Vec<u8>> = (0..VARIANTS).map(|i| variant(DEFAULT_POLICY, i)).collect();
    let sent = Instant::now();
    let (status, v) = c.upload(&token, "acme", "p", &variants[0], None);
    assert_eq!(status, 201, "{v}");
    let assign = |body: Value| {
        let (status, v) = c.call("PUT", "/v1/tenants/acme/classes/load", Some(&token), Body::Json(body));
        assert_eq!(status, 200, "{v}");
        v["version"].as_str().expect("a version").to_string()
    };
    let version = assign(json!({ "policy": "p" }));
    let mut changes = vec![Change { sent, done: Instant::now(), version }];

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = [router.clone(), token.clone()]
        .into_iter()
        .map(|tok| {
            let (stop, url) = (stop.clone(), server.url().to_string());
            std::thread::spawn(move || {
                let c = Client::at(&url);
                let body = select_body("acme", Some("load"));
                let (mut answers, mut failures) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let result = c.send("POST", "/v1/select", Some(&tok), Body::Json(body.clone()));
                    let done = Instant::now();
                    match result {
                        Ok((200, v)) if v["fallback"].is_null() && v["version"].is_string() => {
                            assert_eq!(v["worker_id"], 3, "the default policy's pick");
                            answers.push(Answer {
                                sent,
                                done,
                                version: v["version"].as_str().unwrap().into(),
                            });
                        }
                        other => failures.push(format!("{other:?}")),
                    }
                }
                (answers, failures)
            })
        })
        .collect();

    // Changes: upload a build (the class follows it), pin another version, unpin, and
    // now and then roll back.
    let started = Instant::now();
    let mut uploaded: Vec<String> = vec![changes[0].version.clone()];
    let mut step = 0usize;
    while started.elapsed() < load_duration() || changes.len() < MIN_CHANGES {
        assert!(
            started.elapsed() < load_duration() * 10,
            "changes too slow: {} in {:?}",
            changes.len(),
            started.elapsed()
        );
        let sent = Instant::now();
        let version = match step % 4 {
            0 => {
                let bytes = &variants[(step / 4 + 1) % variants.len()];
                let (status, v) = c.upload(&token, "acme", "p", bytes, None);
                assert_eq!(status, 201, "{v}");
                let version = v["version"].as_str().unwrap().to_string();
                if !uploaded.contains(&version) {
                    uploaded.push(version.clone());
                }
                version
            }
            1 => assign(json!({ "policy": "p", "version": uploaded[step % uploaded.len()] })),
            2 => assign(json!({ "policy": "p" })),
            _ if step % 8 == 3 => {
                let (status, v) =
                    c.call("POST", "/v1/tenants/acme/policies/p/rollback", Some(&token), Body::None);
                assert_eq!(status, 200, "{v}");
                // The version rolled back from may be collected (nothing pins it now):
                // pin only versions still kept.
                uploaded.retain(|u| *u != v["replaced"]);
                v["version"].as_str().unwrap().to_string()
            }
            _ => assign(json!({ "policy": "p" })),
        };
        changes.push(Change { sent, done: Instant::now(), version });
        step += 1;
    }
    stop.store(true, Ordering::Relaxed);

    let mut total = 0;
    for (i, client) in clients.into_iter().enumerate() {
        let (answers, failures) = client.join().expect("client thread");
        assert!(
            failures.is_empty(),
            "client {i}: {} failed selections, first: {}",
            failures.len(),
            failures[0]
        );
        assert!(!answers.is_empty(), "client {i} selected");
        for a in &answers {
            // Version j is routed from some instant in [sent_j, done_j] until some instant
            // in [sent_j+1, done_j+1]: it may answer a request that overlaps that span.
            let ok = changes.iter().enumerate().any(|(j, ch)| {
                let until = changes.get(j + 1).map_or(a.done, |next| next.done);
                ch.version == a.version && ch.sent <= a.done && until >= a.sent
            });
            assert!(ok, "client {i} got version {} which was not routed during its request", a.version);
        }
        total += answers.len();
    }
    let distinct: std::collections::HashSet<_> = changes.iter().map(|c| &c.version).collect();
    assert!(distinct.len() >= VARIANTS as usize, "the class moved between versions");
    eprintln!(
        "load: {total} selections, {} changes ({} distinct versions) in {:?}, 0 failed",
        changes.len(),
        distinct.len(),
        started.elapsed()
    );
}

#[test]
fn every_acknowledged_upload_survives_kill_9() {
    let dir = temp_dir("service-crash");
    let mut server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let (status, v) = c.upload(&token, "acme", "p", &variant(DEFAULT_POLICY, 1000), None);
    assert_eq!(status, 201, "{v}");
    let assigned =
        c.call("PUT", "/v1/tenants/acme/classes/c", Some(&token), Body::Json(json!({ "policy": "p" })));
    assert_eq!(assigned.0, 200);
    let acknowledged = Arc::new(Mutex::new(vec![v["version"].as_str().unwrap().to_string()]));

    // Upload distinct builds back to back until the server dies under us.
    let uploader = {
        let (acked, url, token) = (acknowledged.clone(), server.url().to_string(), token.clone());
        std::thread::spawn(move || {
            let c = Client::at(&url);
            for i in 0..40 {
                match c.send(
                    "PUT",
                    "/v1/tenants/acme/policies/p",
                    Some(&token),
                    Body::Bytes(&variant(DEFAULT_POLICY, i)),
                ) {
                    Ok((201, v)) => acked.lock().unwrap().push(v["version"].as_str().unwrap().to_string()),
                    Ok((status, v)) => panic!("upload {i}: {status} {v}"),
                    Err(_) => return, // killed
                }
            }
        })
    };
    while acknowledged.lock().unwrap().len() < 4 && !uploader.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    uploader.join().expect("uploader");
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 4 && acknowledged.len() < 41,
        "killed during uploads: {}",
        acknowledged.len()
    );

    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    assert_eq!(status, 200, "the tenant and its token survived: {v}");
    let versions: Vec<&str> = v["policies"][0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["version"].as_str().unwrap())
        .collect();
    for version in &acknowledged {
        assert!(versions.contains(&version.as_str()), "acknowledged {version} is missing after kill -9");
    }
    // At most one more (committed, killed before its 201 was sent).
    assert!(
        versions.len() <= acknowledged.len() + 1,
        "{} stored, {} acknowledged",
        versions.len(),
        acknowledged.len()
    );
    let active = v["policies"][0]["active"].as_str().unwrap();
    let last = acknowledged.last().unwrap().as_str();
    assert!(
        active == last || !acknowledged.contains(&active.to_string()),
        "active {active} is the last upload"
    );
    // The class still routes to the active version, recompiled after the restart.
    let (status, answer) =
        c.call("POST", "/v1/select", Some(&token), Body::Json(select_body("acme", Some("c"))));
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["version"].as_str(), &answer["fallback"]), (Some(active), &Value::Null));
    // Every stored version came back from our artifact cache (loaded in the background
    // after start-up), none through Cranelift.
    assert!(
        c.wait_for_metric("switchyard_versions_loaded{tenant=\"acme\"}", versions.len() as f64),
        "every version loads after the restart"
    );
    assert_eq!(c.metric("switchyard_components_from_cache_total"), versions.len() as f64);
    assert_eq!(c.try_metric("switchyard_compile_seconds_count{tenant=\"acme\"}"), None, "nothing recompiled");
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("blobs"))
        .unwrap()
        .chain(std::fs::read_dir(&dir).unwrap())
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files are cleaned up on start: {leftovers:?}");
}
