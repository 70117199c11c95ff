//! `switchyard serve`'s limits holding whatever the requests say (a real server on
//! loopback): idle-instance slots given back whichever way a version leaves its pool; a
//! tenant's in-flight share taken before any server-wide selection slot; uploads'
//! configure checks within the pool slots `compile_concurrency` sets aside;
//! `max_params_bytes`; an upload over its tenant's rate refused before its body is read.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{
    Body, Client, Server, head, read_response, select_body, send_head, temp_dir, variant,
};

/// A server on a fresh data dir with `config` as its `switchyard.toml`.
fn start(name: &str, config: &str) -> Server {
    Server::with_config(&temp_dir(name), config)
}

fn ok(what: &str, (status, v): (u16, Value), expected: u16) -> Value {
    assert_eq!(status, expected, "{what}: {v}");
    v
}

#[test]
fn service_limits_idle_slots_come_back_when_a_routed_version_is_collected() {
    // Two idle slots in all, one per version. Each round routes a new version, selects on
    // it (its instance kept idle), then rolls back: the replaced version, routed until
    // that commit, is collected. Its idle instance must give its slot back, or after two
    // rounds no version could keep an idle instance again.
    let server =
        start("service-limits-idle", "[service]\nmax_idle_instances = 2\nidle_instances_per_version = 1\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let select = || {
        let v = ok(
            "select",
            c.call("POST", "/v1/select", Some(&token), Body::Json(select_body("acme", Some("gold")))),
            200,
        );
        v["version"].as_str().map(str::to_string)
    };
    let first = ok("upload", c.upload(&token, "acme", "p", DEFAULT_POLICY, None), 201)["version"]
        .as_str()
        .unwrap()
        .to_string();
    let assign = json!({ "policy": "p" });
    ok("assign", c.call("PUT", "/v1/tenants/acme/classes/gold", Some(&token), Body::Json(assign)), 200);
    assert_eq!(select().as_deref(), Some(first.as_str()));
    assert_eq!(c.metric("switchyard_idle_instances"), 1.0, "the selection's instance is kept");
    for round in 0..4 {
        let v = ok("upload", c.upload(&token, "acme", "p", &variant(DEFAULT_POLICY, round), None), 201);
        let version = v["version"].as_str().unwrap().to_string();
        assert_eq!(select().as_deref(), Some(version.as_str()), "round {round}");
        let path = "/v1/tenants/acme/policies/p/rollback";
        let v = ok("rollback", c.call("POST", path, Some(&token), Body::None), 200);
        assert_eq!(v["replaced"].as_str(), Some(version.as_str()));
        assert_eq!(c.metric("switchyard_idle_instances"), 0.0, "round {round}: nothing idle is routed");
        assert_eq!(select().as_deref(), Some(first.as_str()), "round {round}");
        assert_eq!(c.metric("switchyard_idle_instances"), 1.0, "round {round}: the first version keeps one");
    }
    // Off every guest: its idle instance goes.
    let builtin = json!({ "policy": "default" });
    ok("assign", c.call("PUT", "/v1/tenants/acme/classes/gold", Some(&token), Body::Json(builtin)), 200);
    assert_eq!(c.metric("switchyard_idle_instances"), 0.0);
}

/// A request whose headers arrive and whose body (`length` bytes declared) stops after
/// its first byte.
fn stalled(server: &Server, method: &str, path: &str, token: &str, length: usize) -> TcpStream {
    send_head(&server.addr(), &head(method, path, Some(token), length), b"{")
}

#[test]
fn service_limits_a_tenant_stalling_bodies_gets_its_own_429_and_never_every_selection_slot() {
    // Four selection slots, two per tenant. One tenant opens four selections whose bodies
    // never finish: two hold its share, the other two are its own 429 at once, and
    // another tenant's selection still finds a slot.
    let server = start(
        "service-limits-share",
        "[service]\nmax_inflight_selections = 4\nmax_in_flight_per_tenant = 2\n",
    );
    let c = Client::new(&server);
    let mallory = c.add_tenant("mallory");
    let acme = c.add_tenant("acme");
    let mut streams: Vec<TcpStream> =
        (0..4).map(|_| stalled(&server, "POST", "/v1/select", &mallory, 1000)).collect();
    assert!(c.wait_for_metric("switchyard_selections_in_flight", 2.0), "mallory's share in flight");
    // Time for a third to be let in, were the share not held.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.metric("switchyard_selections_in_flight"), 2.0, "mallory holds its share, no more");
    let v = ok(
        "acme's selection",
        c.call("POST", "/v1/select", Some(&acme), Body::Json(select_body("acme", None))),
        200,
    );
    assert_eq!(v["worker_id"].as_u64(), Some(3), "{v}");
    let answers: Vec<_> = streams.iter_mut().map(|s| read_response(s, Duration::from_secs(2))).collect();
    let busy: Vec<&String> =
        answers.iter().flatten().filter(|(status, _)| *status == 429).map(|(_, b)| b).collect();
    assert_eq!(busy.len(), 2, "two of mallory's four are its own 429: {answers:?}");
    for body in busy {
        assert!(body.contains("tenant-busy") && body.contains("max_in_flight_per_tenant = 2"), "{body}");
    }
    assert!(answers.iter().filter(|a| a.is_err()).count() == 2, "the other two still wait: {answers:?}");
    assert_eq!(c.metric("switchyard_overloaded_total{limit=\"max_inflight_selections\"}"), 0.0);
}

#[test]
fn service_limits_uploads_configure_within_the_pool_slots_compile_concurrency_counts() {
    // A pool of five: one selection, one idle instance, one configure check
    // (`compile_concurrency`), one for the shadow thread and one for the service's own loads. Eight tenants' uploads at once, of bytes compiled once and
    // then configured with other parameters each: every configure check holds a compile
    // permit, and its instance is gone before the upload waits for the writer lock, so the
    // pool never runs out and every upload is accepted.
    let server = start(
        "service-limits-configure",
        "[limits]\nmax_instances = 5\n[service]\nmax_inflight_selections = 1\nmax_idle_instances = 1\ncompile_concurrency = 1\n",
    );
    let c = Client::new(&server);
    let tokens: Vec<String> = (0..8).map(|i| c.add_tenant(&format!("t{i}"))).collect();
    let statuses: Vec<Vec<(u16, Value)>> = std::thread::scope(|scope| {
        let threads: Vec<_> = tokens
            .iter()
            .enumerate()
            .map(|(i, token)| {
                let url = server.url().to_string();
                scope.spawn(move || {
                    let c = Client::at(&url);
                    (0..5)
                        .map(|n| {
                            let path = format!(
                                "/v1/tenants/t{i}/policies/p?params=%7B%22prefill_load_scale%22%3A{n}%7D"
                            );
                            c.call("PUT", &path, Some(token), Body::Bytes(DEFAULT_POLICY))
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (status, v) in statuses.iter().flatten() {
        assert_eq!(*status, 201, "{v}");
    }
}

#[test]
fn service_limits_upload_params_over_max_params_bytes_are_refused_naming_the_limit() {
    // Valid parameters, padded with JSON whitespace (`+` in a query is a space) past the
    // default 16 KiB: their canonical text is small, but what the upload sent is over.
    let server = start("service-limits-params", "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let put = |padding: usize| {
        let params = format!("%7B%22prefill_load_scale%22%3A{}1%7D", "+".repeat(padding));
        c.call(
            "PUT",
            &format!("/v1/tenants/acme/policies/p?params={params}"),
            Some(&token),
            Body::Bytes(DEFAULT_POLICY),
        )
    };
    let v = ok("16 KiB of params", put((16 << 10) - 24), 201);
    assert!(v["version"].is_string(), "{v}");
    let v = ok("over 16 KiB of params", put((16 << 10) - 23), 400);
    assert_eq!(v["error"]["kind"], "invalid-params", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("16385 bytes") && message.contains("`max_params_bytes`"), "{v}");
}

#[test]
fn service_limits_an_upload_over_the_rate_is_refused_before_its_body_is_read() {
    // One upload a minute. The next one's body stops arriving: it is refused
    // `rate-limited` at once (its body drained briefly, never buffered), not after waiting
    // `body_read_timeout_ms` for 8 MiB that would only be hashed and thrown away.
    let server = start(
        "service-limits-upload-rate",
        "[service]\nuploads_per_minute = 1\nbody_read_timeout_ms = 5000\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    ok("the first upload", c.upload(&token, "acme", "p", DEFAULT_POLICY, None), 201);
    let started = Instant::now();
    let mut stream = stalled(&server, "PUT", "/v1/tenants/acme/policies/p", &token, 100_000);
    let (status, body) = read_response(&mut stream, Duration::from_secs(4)).expect("answered");
    assert_eq!(status, 429, "refused before the body timed out: {body}");
    assert!(body.contains("rate-limited") && body.contains("`uploads_per_minute`"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
}
