//! `switchyard serve`'s compiles stop at their deadline: each runs in a worker process
//! killed at `compile_timeout_ms`, so a component built to compile slowly frees its
//! permit and its CPU at the deadline, and another tenant's upload goes on. Real binary,
//! loopback only, every wait bounded.

use std::time::{Duration, Instant};

use serde_json::Value;

use switchyard_test_util::fixtures::{DEFAULT_POLICY, slow_component};
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

/// CPU time (user + system) the process `pid` itself has used.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: fields 14 and 15 are utime and stime.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

#[test]
fn a_compile_past_its_deadline_is_killed_and_another_tenants_upload_goes_on() {
    let dir = temp_dir("compile-deadline");
    let deadline = Duration::from_millis(1_500);
    let config = format!("[limits]\ncompile_timeout_ms = {}\n", deadline.as_millis());
    let mut server = Server::with_config(&dir, &config);
    let c = Client::new(&server);
    let (evil, good) = (c.add_tenant("evil"), c.add_tenant("good"));
    let slow = slow_component(12, 300);

    // The hostile tenant's two uploads at once: one compiles, the other waits for the
    // tenant's turn, not ahead of anyone else's upload.
    let url = server.url().to_string();
    let hostile: Vec<_> = (0..2)
        .map(|i| {
            let (url, evil, slow) = (url.clone(), evil.clone(), slow.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                let path = format!("/v1/tenants/evil/policies/slow{i}");
                let answer = Client::at(&url).call("PUT", &path, Some(&evil), Body::Bytes(&slow));
                (answer, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, v) = c.upload(&good, "good", "p", DEFAULT_POLICY, None);
    let took = started.elapsed();
    println!("the other tenant's upload: {status} in {took:?}");
    assert_eq!(status, 201, "{v}");
    // It waited at most for the one compile ahead of it to reach its deadline.
    assert!(took < deadline + Duration::from_secs(3), "the other tenant's upload took {took:?}");

    let mut answers: Vec<(u16, String)> = hostile
        .into_iter()
        .map(|thread| {
            let ((status, v), took) = thread.join().unwrap();
            println!("a hostile upload: {status} {v} in {took:?}");
            // Its wait for its turn and a permit, then its compile, each within the deadline.
            assert!(took < 2 * deadline + Duration::from_secs(3), "a hostile upload took {took:?}");
            (status, kind(&v).to_string())
        })
        .collect();
    answers.sort();
    // One compiled until its deadline; the other waited its turn behind it (and then
    // either compiled until its own deadline or found the permit taken by the other
    // tenant's upload for the rest of its wait).
    assert_eq!(answers[0], (400, "compile-timeout".to_string()), "{answers:?}");
    assert!(
        [(400, "compile-timeout".to_string()), (503, "compile-busy".to_string())].contains(&answers[1]),
        "{answers:?}"
    );
    // Killed at the deadline: the compiles used no CPU after it (in-process, Cranelift
    // would have gone on for seconds).
    let before = cpu_time(server.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time(server.pid()) - before;
    println!("the server's CPU time in the second after: {used:?}");
    assert!(
        used < Duration::from_millis(300),
        "the server used {used:?} of CPU after every compile was answered"
    );
    let killed = c.metric("switchyard_compile_workers_killed_total");
    assert!((1.0..=2.0).contains(&killed), "{killed} workers killed");
    // The permit is free: the tenant's next upload compiles at once.
    let (status, v) = c.upload(
        &good,
        "good",
        "q",
        switchyard_test_util::server::variant(DEFAULT_POLICY, 1).as_slice(),
        None,
    );
    assert_eq!(status, 201, "{v}");
    server.assert_alive();
}

#[test]
fn a_compile_over_its_memory_limit_is_refused_naming_it() {
    let dir = temp_dir("compile-memory");
    // Far under what Cranelift needs for the default policy.
    let mut server =
        Server::with_config(&dir, "[limits]\ncompile_memory_bytes = 4000000\ncompile_timeout_ms = 5000\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let (status, v) = c.upload(&token, "acme", "p", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (400, "compile-failed"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("`compile_memory_bytes`"), "{v}");
    server.assert_alive();
    // The server itself is not bounded by it: its selections go on.
    let (status, v) = c.select(&token, "acme", None);
    assert_eq!(status, 200, "{v}");
}

#[test]
fn an_upload_of_bytes_another_tenant_compiled_reports_its_own_time_only() {
    let dir = temp_dir("compile-dedupe");
    let mut server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let (first, second) = (c.add_tenant("first"), c.add_tenant("second"));
    let (status, a) = c.upload(&first, "first", "p", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "{a}");
    let (status, b) = c.upload(&second, "second", "p", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "{b}");
    assert_eq!(a["compile"], "compiled", "{a}");
    assert!(a["compile_ms"].as_f64().unwrap() > 0.0, "{a}");
    // Not the first tenant's compile: the second compiled nothing, and says so.
    assert_eq!((b["compile"].as_str(), b["compile_ms"].as_f64()), (Some("reused"), Some(0.0)), "{b}");
    server.assert_alive();
}

#[test]
fn a_replica_adopts_another_replicas_change_while_a_tenant_floods_it_with_slow_compiles() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use switchyard_test_util::fleet::{Fleet, acme_with_mine, wait_for_version};

    let fleet = Fleet::start_with("compile-fleet", Some("[limits]\ncompile_timeout_ms = 8000\n"));
    let [a, b, _] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency");
    wait_for_version(&b, &token, "latency", &v1, "B");

    // Another tenant keeps B's upload permit busy with compiles that run to the deadline.
    let evil = a.add_tenant("evil");
    let slow = Arc::new(slow_component(12, 300));
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..2)
        .map(|i| {
            let (url, evil, slow, stop) =
                (fleet.replicas[1].url().to_string(), evil.clone(), Arc::clone(&slow), Arc::clone(&stop));
            std::thread::spawn(move || {
                let (client, started) = (Client::at(&url), Instant::now());
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                    let path = format!("/v1/tenants/evil/policies/slow{i}");
                    let _ = client.send("PUT", &path, Some(&evil), Body::Bytes(&slow));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    // acme's new version through A: B adopts it (compiling it under its own permit)
    // long before the flood's compiles reach their deadline.
    let started = Instant::now();
    let v2 = a.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some("%7B%22prefill_load_scale%22%3A2%7D"));
    wait_for_version(&b, &token, "latency", &v2, "B");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    println!("B answered the new version {took:?} after the upload through A began");
    for thread in flood {
        thread.join().unwrap();
    }
    assert!(took < Duration::from_secs(5), "B adopted the change after {took:?}");
}
