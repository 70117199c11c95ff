//! Quarantine in `switchyard serve`: a real server on loopback, the real hostile panic
//! guest. Consecutive faults of a version open its breaker; while open the guest is
//! skipped (fail-open: the native default answers with `fallback.kind = "quarantined"`;
//! fail-closed: 503 `quarantined`); after the backoff one probe; a failed probe doubles
//! the wait up to `backoff_max`, a successful one closes it; a fixed upload recovers and a
//! rollback returns to the old version's breaker. Metrics and the listing tell the truth.

use serde_json::{Value, json};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, hostile, native_default_pick, sample};
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

/// A server with `config` as its `switchyard.toml`.
fn server_with_config(name: &str, config: &str) -> Server {
    Server::with_config(&temp_dir(name), config)
}

/// A server whose `[guard]` table is `guard`.
fn server_with_guard(name: &str, guard: &str) -> Server {
    server_with_config(name, &format!("[guard]\n{guard}"))
}

fn faults(c: &Client, policy: &str, kind: &str) -> f64 {
    c.metric(&format!(
        "switchyard_policy_faults_total{{tenant=\"acme\",policy=\"{policy}\",kind=\"{kind}\"}}"
    ))
}

fn quarantined_gauge(c: &Client, policy: &str) -> f64 {
    c.metric(&format!("switchyard_policy_quarantined{{tenant=\"acme\",policy=\"{policy}\"}}"))
}

/// The breaker of `policy`'s `version` as `GET /v1/tenants/acme/policies` lists it.
fn breaker(c: &Client, token: &str, policy: &str, version: &str) -> Value {
    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", Some(token), Body::None);
    assert_eq!(status, 200, "{v}");
    let p = v["policies"].as_array().unwrap().iter().find(|p| p["name"] == policy).expect("listed");
    let v = p["versions"].as_array().unwrap().iter().find(|v| v["version"] == version).expect("listed");
    v["breaker"].clone()
}

/// A fail-open selection that the native default answered; the fallback's kind.
fn fallback_kind(answer: (u16, Value)) -> String {
    let (status, v) = answer;
    assert_eq!(status, 200, "{v}");
    let (table, request) = sample();
    let native = native_default_pick(&table, &request);
    assert_eq!((v["policy"].as_str(), v["build"].as_str()), (Some("default"), Some("native")), "{v}");
    assert_eq!(v["worker_id"].as_u64(), Some(native.worker_id), "the native default decided: {v}");
    v["fallback"]["kind"].as_str().unwrap_or_else(|| panic!("a fallback: {v}")).to_string()
}

#[test]
fn fail_open_quarantine_backs_off_probes_and_a_fixed_upload_recovers() {
    let server = server_with_guard(
        "service-quarantine-open",
        "quarantine_after = 3\nbackoff_initial = 4\nbackoff_max = 8\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    // The panic guest traps on every call.
    let broken = c.uploaded(&token, "acme", "flaky", hostile::PANIC, None);
    c.assigned(&token, "acme", "latency", json!({ "policy": "flaky", "on_fault": "open" }));
    assert_eq!(breaker(&c, &token, "flaky", &broken), json!({ "state": "closed", "consecutive_faults": 0 }));

    // Three faults in a row open the breaker.
    let kinds: Vec<String> =
        (0..3).map(|_| fallback_kind(c.select(&token, "acme", Some("latency")))).collect();
    assert_eq!(kinds, ["trap"; 3]);
    assert_eq!(breaker(&c, &token, "flaky", &broken), json!({ "state": "open", "remaining": 4, "trips": 1 }));
    assert_eq!(quarantined_gauge(&c, "flaky"), 1.0);
    assert_eq!((faults(&c, "flaky", "trap"), faults(&c, "flaky", "quarantined")), (3.0, 0.0));

    // `backoff_initial` selections skip the guest: no new trap, the quarantined counter grows.
    for _ in 0..4 {
        let (status, v) = c.select(&token, "acme", Some("latency"));
        assert!(v["fallback"]["message"].as_str().unwrap_or("").contains("quarantined"), "{v}");
        assert_eq!(fallback_kind((status, v)), "quarantined");
    }
    assert_eq!((faults(&c, "flaky", "trap"), faults(&c, "flaky", "quarantined")), (3.0, 4.0));
    assert_eq!(breaker(&c, &token, "flaky", &broken), json!({ "state": "half-open", "trips": 1 }));
    assert_eq!(quarantined_gauge(&c, "flaky"), 1.0, "still quarantined until a probe succeeds");

    // Then one probe: it traps, and the wait doubles (8), then stays capped at backoff_max.
    let kinds: Vec<String> =
        (0..19).map(|_| fallback_kind(c.select(&token, "acme", Some("latency")))).collect();
    let expected: Vec<&str> =
        [vec!["trap"], vec!["quarantined"; 8], vec!["trap"], vec!["quarantined"; 8], vec!["trap"]].concat();
    assert_eq!(kinds, expected);
    assert_eq!(breaker(&c, &token, "flaky", &broken), json!({ "state": "open", "remaining": 8, "trips": 4 }));
    assert_eq!((faults(&c, "flaky", "trap"), faults(&c, "flaky", "quarantined")), (6.0, 20.0));
    let fallbacks = c.metric("switchyard_fallbacks_total{tenant=\"acme\",policy=\"flaky\"}");
    assert_eq!(fallbacks, 26.0, "every selection was answered by the fallback");

    // A fixed version (a new upload under the same name) has a fresh breaker: the guest
    // answers at once and the policy is no longer quarantined.
    let fixed = c.uploaded(&token, "acme", "flaky", DEFAULT_POLICY, None);
    let (status, v) = c.select(&token, "acme", Some("latency"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["policy"].as_str(), v["build"].as_str(), v["version"].as_str(), &v["fallback"]),
        (Some("flaky"), Some("guest"), Some(fixed.as_str()), &Value::Null)
    );
    assert_eq!(quarantined_gauge(&c, "flaky"), 0.0);
    assert_eq!(breaker(&c, &token, "flaky", &fixed), json!({ "state": "closed", "consecutive_faults": 0 }));
    assert_eq!(breaker(&c, &token, "flaky", &broken)["state"], "open", "the old version keeps its own");
    assert_eq!(faults(&c, "flaky", "quarantined"), 20.0);

    // Rolling back returns to the broken version with its breaker as it was: still
    // quarantined, so the guest is not called.
    let (status, v) = c.call("POST", "/v1/tenants/acme/policies/flaky/rollback", Some(&token), Body::None);
    assert_eq!((status, v["version"].as_str()), (200, Some(broken.as_str())), "{v}");
    assert_eq!(fallback_kind(c.select(&token, "acme", Some("latency"))), "quarantined");
    assert_eq!((faults(&c, "flaky", "trap"), faults(&c, "flaky", "quarantined")), (6.0, 21.0));
    assert_eq!(quarantined_gauge(&c, "flaky"), 1.0);
}

#[test]
fn fail_closed_quarantine_is_a_503_and_a_successful_probe_closes_the_breaker() {
    let server = server_with_guard(
        "service-quarantine-closed",
        "quarantine_after = 1\nbackoff_initial = 2\nbackoff_max = 4\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let kind = |(status, v): (u16, Value)| -> (u16, String) {
        let kind = v["error"]["kind"].as_str().map(str::to_string);
        (status, kind.unwrap_or_else(|| format!("answered by {} ({})", v["policy"], v["build"])))
    };

    // Always faulting, fail-closed: 502 for the guest's trap, 503 while quarantined.
    c.uploaded(&token, "acme", "strict", hostile::PANIC, None);
    c.assigned(&token, "acme", "strict", json!({ "policy": "strict", "on_fault": "closed" }));
    let got: Vec<(u16, String)> = (0..10).map(|_| kind(c.select(&token, "acme", Some("strict")))).collect();
    let (trap, quarantined) = ((502, "trap".to_string()), (503, "quarantined".to_string()));
    let expected = [
        vec![trap.clone()],           // quarantine_after = 1 opens it
        vec![quarantined.clone(); 2], // backoff_initial
        vec![trap.clone()],           // the probe faults
        vec![quarantined.clone(); 4], // doubled, = backoff_max
        vec![trap.clone()],           // probe
        vec![quarantined.clone(); 1], // capped at 4
    ]
    .concat();
    assert_eq!(got, expected);
    assert_eq!((faults(&c, "strict", "trap"), faults(&c, "strict", "quarantined")), (3.0, 7.0));
    assert_eq!(quarantined_gauge(&c, "strict"), 1.0);

    // Panics on every 2nd call of an instance; a trap replaces the instance, so the probe
    // (the first call of a fresh instance) succeeds and closes the breaker.
    let every2 = c.uploaded(&token, "acme", "every2", hostile::PANIC, Some("%7B%22every%22%3A2%7D"));
    c.assigned(&token, "acme", "every2", json!({ "policy": "every2", "on_fault": "closed" }));
    let guest = "answered by \"every2\" (\"guest\")".to_string();
    let got: Vec<(u16, String)> = (0..4).map(|_| kind(c.select(&token, "acme", Some("every2")))).collect();
    assert_eq!(got, [(200, guest.clone()), trap.clone(), quarantined.clone(), quarantined.clone()]);
    assert_eq!(breaker(&c, &token, "every2", &every2), json!({ "state": "half-open", "trips": 1 }));
    assert_eq!(quarantined_gauge(&c, "every2"), 1.0);
    assert_eq!(kind(c.select(&token, "acme", Some("every2"))), (200, guest), "the probe succeeds");
    assert_eq!(breaker(&c, &token, "every2", &every2), json!({ "state": "closed", "consecutive_faults": 0 }));
    assert_eq!(quarantined_gauge(&c, "every2"), 0.0);
    // The next fault opens it afresh: the initial backoff again, not a doubled one.
    assert_eq!(kind(c.select(&token, "acme", Some("every2"))), trap);
    assert_eq!(
        breaker(&c, &token, "every2", &every2),
        json!({ "state": "open", "remaining": 2, "trips": 1 })
    );
    assert_eq!(faults(&c, "every2", "quarantined"), 2.0);
    assert_eq!(quarantined_gauge(&c, "strict"), 1.0, "each policy has its own");
}

#[test]
fn quarantine_is_shared_by_every_pooled_instance_and_thread() {
    // The iloop guest spins until its fuel runs out; 100M fuel takes tens of ms, so the
    // first selections of the four threads (released together) overlap in the guest,
    // each on a pooled instance of its own.
    let server = server_with_config(
        "service-quarantine-shared",
        "[limits]\nfuel_base = 100000000\n[guard]\nquarantine_after = 2\nbackoff_initial = 1000\nbackoff_max = 1000\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let version = c.uploaded(&token, "acme", "spin", hostile::ILOOP, None);
    c.assigned(&token, "acme", "latency", json!({ "policy": "spin", "on_fault": "open" }));
    const THREADS: usize = 4;
    const EACH: usize = 10;
    let start = std::sync::Barrier::new(THREADS);
    let kinds: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let c = Client::at(server.url());
                    start.wait();
                    (0..EACH)
                        .map(|_| fallback_kind(c.select(&token, "acme", Some("latency"))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a client thread")).collect()
    });
    let fuel = kinds.iter().filter(|k| *k == "fuel").count();
    let quarantined = kinds.iter().filter(|k| *k == "quarantined").count();
    assert_eq!(fuel + quarantined, THREADS * EACH, "{kinds:?}");
    assert_eq!(faults(&c, "spin", "fuel"), fuel as f64);
    assert_eq!(faults(&c, "spin", "quarantined"), quarantined as f64);
    // One breaker for every instance: two faults open it; only calls already running
    // then may still fault (at most one per other thread); every later selection is
    // skipped (no probe within 1000).
    assert!((2..=2 + THREADS - 1).contains(&fuel), "{fuel} faults: {kinds:?}");
    // Those late faults started before the breaker opened: they are stale, not failed
    // probes, so it opened exactly once and every skipped selection counted against
    // the one backoff, whatever the interleaving.
    let remaining = 1000 - quarantined as u64;
    assert_eq!(
        breaker(&c, &token, "spin", &version),
        json!({ "state": "open", "remaining": remaining, "trips": 1 })
    );
    assert_eq!(quarantined_gauge(&c, "spin"), 1.0);
}

#[test]
fn after_any_fault_the_service_drops_the_instance_like_the_cli_so_nan_at_call_six_faults_every_sixth() {
    // The same guest, the same 60 sequential selections as `switchyard select --repeat 60`
    // (sandbox_cli): the service must put a faulted instance back in no pool.
    let server = server_with_guard("service-nan-once", "quarantine_after = 3\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "nan", hostile::NAN_ONCE, Some("%7B%22at%22%3A6%7D"));
    c.assigned(&token, "acme", "gold", json!({ "policy": "nan", "on_fault": "open" }));
    let mut faulted = Vec::new();
    for i in 1..=60 {
        let (status, v) = c.select(&token, "acme", Some("gold"));
        assert_eq!(status, 200, "{v}");
        if !v["fallback"].is_null() {
            assert_eq!(v["fallback"]["kind"], "invalid-output", "{v}");
            faulted.push(i);
        }
    }
    assert_eq!(faulted, (1..=10).map(|k| 6 * k).collect::<Vec<_>>());
    assert_eq!(faults(&c, "nan", "invalid-output"), 10.0);
}

#[test]
fn a_commit_fault_in_the_service_is_contained_counted_and_the_pick_stands() {
    let server = server_with_guard("service-commit-spin", "quarantine_after = 100\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "spin", hostile::COMMIT_SPIN, None);
    c.assigned(&token, "acme", "open", json!({ "policy": "spin", "on_fault": "open" }));
    c.assigned(&token, "acme", "closed", json!({ "policy": "spin", "on_fault": "closed" }));
    let (status, v) = c.select(&token, "acme", Some("open"));
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["policy"].as_str(), v["build"].as_str()), (Some("spin"), Some("guest")), "{v}");
    assert_eq!(v["fallback"], Value::Null, "{v}");
    assert_eq!(v["commit_fault"]["kind"], "fuel", "{v}");
    let (status, v) = c.select(&token, "acme", Some("closed"));
    assert_eq!((status, v["error"]["kind"].as_str()), (502, Some("fuel")), "{v}");
    assert_eq!(faults(&c, "spin", "fuel"), 2.0);
}
