//! `switchyard serve` stays fair: whatever one tenant or one unauthenticated peer sends,
//! every other tenant's uploads and selections go on. Stalled uploads hold a bounded
//! share of memory, connections that send nothing cannot take every slot, a router's
//! slow bodies cannot take every selection slot, `/metrics` tells strangers nothing about
//! the tenants, and every refusal is the documented JSON error naming its limit. Each
//! test runs the real binary on a loopback port; every loop is bounded in count and
//! time, and traffic goes only to 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::service_hostile::memory_kb;
use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{ADMIN, Body, Client, Server, head, read_response, send_head, temp_dir};

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

/// A raw answer's body as the JSON error it must be.
fn error_body(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not a JSON error ({e}): {body:?}"))
}

/// `tenant`'s selection of the sample request, answered 200 by the builtin default.
fn selects(c: &Client, token: &str, tenant: &str, when: &str) {
    let (status, v) = c.select(token, tenant, None);
    assert_eq!((status, v["worker_id"].as_u64()), (200, Some(3)), "{tenant}'s selection {when}: {v}");
}

fn healthy(c: &Client, when: &str) {
    let (status, body) = c.call("GET", "/healthz", None, Body::None);
    assert_eq!((status, body), (200, Value::String("ok\n".into())), "/healthz {when}");
}

/// A router's token, made by the admin.
fn add_router(c: &Client, name: &str) -> String {
    let (status, v) = c.call("POST", "/v1/routers", Some(ADMIN), Body::Json(json!({ "name": name })));
    assert_eq!(status, 201, "{v}");
    v["token"].as_str().expect("a token").to_string()
}

#[test]
fn one_tenants_stalled_uploads_hold_bounded_memory_while_another_tenant_selects() {
    let dir = temp_dir("fair-stalled-uploads");
    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let mallory = c.add_tenant("mallory");
    let acme = c.add_tenant("acme");
    for _ in 0..3 {
        selects(&c, &acme, "acme", "before");
    }
    let rss = memory_kb(&server, "VmRSS");
    // 100 uploads of mallory's, each declaring 8 MiB (`max_body_bytes`), sending all of
    // it but the last byte and then nothing. One buffer, shared by every writer.
    const LENGTH: usize = 8 << 20;
    let body: Arc<[u8]> = vec![0u8; LENGTH - 1].into();
    let (answers, answered) = mpsc::channel();
    let addr = server.addr();
    let mut held = Vec::new();
    for i in 0..100 {
        let head = head("PUT", &format!("/v1/tenants/mallory/policies/p{i}"), Some(&mallory), LENGTH);
        let stream = send_head(&addr, &head, b"");
        let mut writer = stream.try_clone().unwrap();
        let body = Arc::clone(&body);
        // Stops at the socket's 10 s write timeout if the server stops reading.
        let feeder = std::thread::spawn(move || {
            let _ = writer.write_all(&body);
        });
        let reader = stream.try_clone().unwrap();
        let answers = answers.clone();
        std::thread::spawn(move || {
            let mut reader = reader;
            let _ = answers.send((i, read_response(&mut reader, Duration::from_secs(40))));
        });
        held.push((stream, feeder));
    }
    // All but the tenant's share are refused at once, their bodies never buffered.
    let mut refused = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused.len() < 98 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, answer) = answered.recv_timeout(left).expect("98 refusals within 30 s");
        refused.push((i, answer.unwrap_or_else(|e| panic!("upload {i}: {e}"))));
    }
    for (i, (status, body)) in &refused {
        let v = error_body(body);
        assert_eq!((*status, kind(&v)), (429, "tenant-busy"), "upload {i}: {v}");
        assert!(message(&v).contains("max_uploads_per_tenant = 2"), "upload {i}: {v}");
    }
    // Meanwhile another tenant's selections are answered (and its upload, below).
    let c = Client::new(&server);
    for _ in 0..3 {
        selects(&c, &acme, "acme", "while mallory's uploads stall");
    }
    healthy(&c, "while mallory's uploads stall");
    // The two admitted uploads wait out `body_read_timeout_ms` for their last byte.
    for _ in 0..2 {
        let (i, answer) = answered.recv_timeout(Duration::from_secs(40)).expect("the last two answers");
        let (status, body) = answer.unwrap_or_else(|e| panic!("upload {i}: {e}"));
        let v = error_body(&body);
        assert_eq!((status, kind(&v)), (408, "body-timeout"), "upload {i}: {v}");
        assert!(message(&v).contains("`body_read_timeout_ms`"), "upload {i}: {v}");
    }
    let peak = memory_kb(&server, "VmHWM");
    println!("RSS before {rss} kB, peak after 100 stalled 8 MiB uploads {peak} kB");
    assert!(peak.saturating_sub(rss) <= 128 << 10, "the peak RSS grew from {rss} to {peak} kB");
    let (status, v) = c.upload(&acme, "acme", "mine", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "another tenant's upload: {v}");
    for (stream, feeder) in held {
        drop(stream);
        let _ = feeder.join();
    }
}

#[test]
fn the_upload_buffer_is_a_server_wide_budget_and_an_upload_is_charged_before_its_body() {
    // Room for two 8 MiB bodies; one upload a minute per tenant.
    let dir = temp_dir("fair-upload-budget");
    let server = Server::with_config(
        &dir,
        "[service]\nmax_buffered_upload_bytes = 16777216\nuploads_per_minute = 1\nbody_read_timeout_ms = 60000\n",
    );
    let c = Client::new(&server);
    let tokens: Vec<String> = ["a", "b", "c"].iter().map(|t| c.add_tenant(t)).collect();
    let addr = server.addr();
    let stall = |tenant: &str, token: &str| {
        send_head(
            &addr,
            &head("PUT", &format!("/v1/tenants/{tenant}/policies/p"), Some(token), 8 << 20),
            b"\0",
        )
    };
    // a and b each reserve 8 MiB, declared, and send one byte.
    let stalled = vec![stall("a", &tokens[0]), stall("b", &tokens[1])];
    assert!(
        c.wait_for_metric("switchyard_upload_bytes_reserved", f64::from(16u32 << 20)),
        "two uploads reserved their declared bodies"
    );
    // c's upload does not fit: 503 naming the budget, unread, at once.
    let (status, v) = c.upload(&tokens[2], "c", "mine", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (503, "overloaded"), "{v}");
    assert!(message(&v).contains("`max_buffered_upload_bytes`"), "{v}");
    assert_eq!(c.metric("switchyard_overloaded_total{limit=\"max_buffered_upload_bytes\"}"), 1.0);
    // The stalled uploads give up: their bytes come back, and c's upload goes through.
    drop(stalled);
    assert!(c.wait_for_metric("switchyard_upload_bytes_reserved", 0.0), "the reservations are released");
    let (status, v) = c.upload(&tokens[2], "c", "mine", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "{v}");
    // a's upload whose body never came was charged before it was read: a's next one is
    // over `uploads_per_minute`.
    let (status, v) = c.upload(&tokens[0], "a", "mine", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "{v}");
    assert!(message(&v).contains("`uploads_per_minute`"), "{v}");
}

#[test]
fn connections_that_send_nothing_do_not_lock_out_a_tenant_or_healthz() {
    // The test opens more descriptors than a common soft limit of 1,024.
    let limit = switchyard::artifact_cache::raise_descriptor_limit().unwrap_or(0);
    assert!(limit >= 1_200, "this test needs 1,200 open files; the hard limit is {limit}");
    // Silent connections stay open as long as the test needs (`first_byte_timeout_ms`),
    // so it is the cap that must make room for the tenant.
    let dir = temp_dir("fair-idle-connections");
    let server = Server::with_config(&dir, "[service]\nfirst_byte_timeout_ms = 120000\n");
    let acme = Client::new(&server).add_tenant("acme");
    let addr = server.addr();
    // More connections than `max_connections` (1,024), each sending nothing.
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..1_030).map(|_| TcpStream::connect(&addr).expect("connecting")).collect();
    println!("1,030 connections opened in {:?}", started.elapsed());
    let c = Client::new(&server);
    selects(&c, &acme, "acme", "with 1,030 idle connections");
    healthy(&c, "with 1,030 idle connections");
    // Each connection past the cap, this client's included, closed one idle longest.
    let evicted = c.metric("switchyard_connections_evicted_total");
    println!("{evicted} idle connections closed to make room");
    assert!(evicted >= 7.0, "{evicted} closed to make room");
    drop(idle);
    selects(&c, &acme, "acme", "after");
    drop(server);

    // At the defaults, a connection that sends nothing is closed after
    // `first_byte_timeout_ms` (2 s), well before `header_read_timeout_ms` (10 s).
    let dir = temp_dir("fair-first-byte");
    let server = Server::start(&dir, None, Some(ADMIN));
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr()).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let read = silent.read(&mut [0u8; 1]);
    let took = started.elapsed();
    println!("a silent connection closed after {took:?}");
    assert!(matches!(read, Ok(0)), "the server closes a silent connection: {read:?} after {took:?}");
    assert!(took < Duration::from_secs(8), "closed after {took:?}");
    healthy(&Client::new(&server), "after");
}

#[test]
fn a_routers_slow_bodies_leave_selection_slots_for_the_tenants() {
    let dir = temp_dir("fair-router");
    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let acme = c.add_tenant("acme");
    let edge = add_router(&c, "edge");
    // More selections than `max_inflight_selections` (64), each a chunked body that
    // stops after one chunk.
    let chunked = format!(
        "POST /v1/select HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {edge}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let addr = server.addr();
    let (answers, answered) = mpsc::channel();
    let streams: Vec<TcpStream> = (0..68)
        .map(|_| {
            let stream = send_head(&addr, &chunked, b"1\r\n{\r\n");
            let mut reader = stream.try_clone().unwrap();
            let answers = answers.clone();
            std::thread::spawn(move || {
                let _ = answers.send(read_response(&mut reader, Duration::from_secs(8)));
            });
            stream
        })
        .collect();
    // The router holds its share (half the slots), no more.
    let share = c.wait_for_metric("switchyard_selections_in_flight", 32.0);
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        selects(&c, &acme, "acme", "while the router's bodies stall");
    }
    assert!(share, "the router's share in flight");
    assert_eq!(c.metric("switchyard_selections_in_flight"), 32.0, "the router holds its share, no more");
    // The rest of the router's selections are its own 429, naming the limit.
    let mut busy = 0;
    while let Ok(answer) = answered.recv_timeout(Duration::from_secs(5)) {
        let Ok((status, body)) = answer else { continue };
        let v = error_body(&body);
        assert_eq!((status, kind(&v)), (429, "router-busy"), "{v}");
        assert!(message(&v).contains("max_in_flight_per_router = 32"), "{v}");
        busy += 1;
        if busy == 36 {
            break;
        }
    }
    assert_eq!(busy, 36, "all but the router's share refused");
    assert_eq!(c.metric("switchyard_overloaded_total{limit=\"max_inflight_selections\"}"), 0.0);
    // Closed for the readers' copies too.
    for stream in streams {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    assert!(c.wait_for_metric("switchyard_selections_in_flight", 0.0), "the slots are released");
}

#[test]
fn metrics_need_the_admin_token_unless_public_and_then_name_no_tenant() {
    let dir = temp_dir("fair-metrics");
    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let acme = c.add_tenant("acme");
    selects(&c, &acme, "acme", "before the scrape");
    let (status, v) = c.call("GET", "/metrics", None, Body::None);
    assert_eq!((status, kind(&v)), (401, "unauthorized"), "{v}");
    assert!(message(&v).contains("admin token") && message(&v).contains("public_metrics"), "{v}");
    let (status, v) = c.call("GET", "/metrics", Some(&acme), Body::None);
    assert_eq!((status, kind(&v)), (403, "forbidden"), "a tenant's token: {v}");
    let text = c.metrics();
    assert!(text.contains("tenant=\"acme\""), "the admin sees every tenant:\n{text}");
    drop(server);

    let dir = temp_dir("fair-public-metrics");
    let server = Server::with_config(&dir, "[service]\npublic_metrics = true\n");
    let c = Client::new(&server);
    let acme = c.add_tenant("acme");
    selects(&c, &acme, "acme", "before the scrape");
    let (status, text) = c.call("GET", "/metrics", None, Body::None);
    let text = text.as_str().unwrap_or_else(|| panic!("metrics are text: {text}")).to_string();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("switchyard_connections_open "), "the server-wide series:\n{text}");
    assert!(text.contains("switchyard_selections_in_flight "), "{text}");
    assert!(!text.contains("acme") && !text.contains("tenant=") && !text.contains("policy="), "{text}");
    assert!(c.metrics().contains("tenant=\"acme\""), "the admin still sees every tenant");
}

#[test]
fn an_unknown_method_and_oversized_headers_are_refused_as_documented() {
    let dir = temp_dir("fair-protocol");
    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);
    let (status, v) = c.call("GET", "/v1/select", None, Body::None);
    assert_eq!((status, kind(&v)), (405, "method-not-allowed"), "{v}");
    assert!(message(&v).contains("GET"), "{v}");
    let response =
        ureq::get(&format!("{}/v1/select", server.url())).config().http_status_as_error(false).build().call();
    let response = response.expect("an answer");
    assert_eq!(response.headers().get("allow").and_then(|a| a.to_str().ok()), Some("POST"));

    // The documented limit on a request's head is 64 KiB (`MAX_HEADER_BUFFER`).
    let request = |pad: usize| {
        format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(pad))
    };
    let addr = server.addr();
    let mut fits = send_head(&addr, &request(60 << 10), b"");
    let (status, body) = read_response(&mut fits, Duration::from_secs(10)).unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"), "60 KiB of headers");
    let mut over = TcpStream::connect(&addr).unwrap();
    over.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may close before it has read all of it.
    let _ = over.write_all(request(70 << 10).as_bytes());
    match read_response(&mut over, Duration::from_secs(10)) {
        Ok((status, body)) => assert_eq!(status, 431, "70 KiB of headers: {body}"),
        Err(e) => assert!(e.contains("reset"), "70 KiB of headers: neither 431 nor a reset: {e}"),
    }
    healthy(&c, "after the oversized headers");
}
