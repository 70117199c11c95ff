//! A fleet: three replicas of the real `switchyard serve --registry nats://…` on one real
//! nats-server. A change made through any replica answers on every other; concurrent
//! writes to one tenant lose no update.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_test_util::DEFAULT_POLICY;
use switchyard_test_util::fleet::{Fleet, acme_with_mine, kind, wait_for_version};
use switchyard_test_util::server::{Body, Client, variant};

#[test]
fn a_change_through_one_replica_answers_on_every_other() {
    let fleet = Fleet::start("fleet");
    let [a, b, c] = fleet.clients();

    // Upload and assign through A; B and C answer with the new version.
    let (token, v1) = acme_with_mine(&a, "latency");
    wait_for_version(&b, &token, "latency", &v1, "B");
    wait_for_version(&c, &token, "latency", &v1, "C");

    // An upload through B reaches A and C; a rollback through C reaches A and B.
    let v2 = b.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some("%7B%22prefill_load_scale%22%3A2%7D"));
    wait_for_version(&a, &token, "latency", &v2, "A");
    wait_for_version(&c, &token, "latency", &v2, "C");
    let (status, v) = c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&token), Body::None);
    assert_eq!(status, 200, "{v}");
    wait_for_version(&a, &token, "latency", &v1, "A");
    wait_for_version(&b, &token, "latency", &v1, "B");
}

/// Assigns `class` through `client`, retrying on 409 `conflict` (another replica wrote
/// the tenant first) until it is taken; the conflicts met.
fn assign_until_taken(client: &Client, token: &str, class: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut conflicts = 0;
    loop {
        let (status, v) = client.assign(token, "acme", class, json!({ "policy": "mine" }));
        match status {
            200 => return conflicts,
            409 if kind(&v) == "conflict" => conflicts += 1,
            _ => panic!("assigning {class}: {status} {v}"),
        }
        assert!(Instant::now() < deadline, "assigning {class}: still conflicting");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn concurrent_assigns_through_two_replicas_lose_no_update() {
    let fleet = Fleet::start("fleet-cas");
    let [a, b, c] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "base");
    wait_for_version(&b, &token, "base", &v1, "B");

    // Both replicas write the same tenant at once, round after round.
    let mut conflicts = 0;
    for round in 0..10 {
        let (ca, cb) = std::thread::scope(|s| {
            let ta = s.spawn(|| assign_until_taken(&a, &token, &format!("a{round}")));
            let tb = s.spawn(|| assign_until_taken(&b, &token, &format!("b{round}")));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        conflicts += ca + cb;
    }
    // Every assignment took: C routes all twenty.
    for round in 0..10 {
        for class in [format!("a{round}"), format!("b{round}")] {
            wait_for_version(&c, &token, &class, &v1, "C");
        }
    }
    eprintln!("20 concurrent assignments, {conflicts} conflicts retried");
}

#[test]
fn a_tenants_write_and_upload_rates_hold_across_the_fleet() {
    // Five writes a minute, two of them uploads: for the tenant, whichever replica takes
    // them. Each write goes through the next replica once the last has reached it.
    let fleet =
        Fleet::start_with("fleet-rates", Some("[service]\nwrites_per_minute = 5\nuploads_per_minute = 2\n"));
    let [a, b, c] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency"); // write 1 (an upload), write 2
    let params = Some("%7B%22prefill_load_scale%22%3A2%7D");
    wait_for_version(&b, &token, "latency", &v1, "B");
    let v2 = b.uploaded(&token, "acme", "mine", DEFAULT_POLICY, params); // 3, upload 2
    wait_for_version(&c, &token, "latency", &v2, "C");
    let (status, v) = c.upload(&token, "acme", "mine", &variant(DEFAULT_POLICY, 3), None);
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "a third upload through C: {v}");
    assert!(v["error"]["message"].as_str().unwrap_or_default().contains("uploads_per_minute"), "{v}");
    c.assigned(&token, "acme", "c3", json!({ "policy": "mine" })); // 4
    wait_for_version(&a, &token, "c3", &v2, "A");
    a.assigned(&token, "acme", "c4", json!({ "policy": "mine" })); // 5
    wait_for_version(&b, &token, "c4", &v2, "B");
    let (status, v) = b.assign(&token, "acme", "c5", json!({ "policy": "mine" }));
    assert_eq!((status, kind(&v)), (429, "rate-limited"), "a sixth write through B: {v}");
    assert!(v["error"]["message"].as_str().unwrap_or_default().contains("writes_per_minute"), "{v}");
}

/// `GET` of a class's rollout route on `client`, asserting 200.
fn rollout(client: &Client, token: &str, what: &str) -> serde_json::Value {
    let (status, v) =
        client.call("GET", &format!("/v1/tenants/acme/classes/latency/{what}"), Some(token), Body::None);
    assert_eq!(status, 200, "{v}");
    v
}

/// Waits until `done` holds of `client`'s answer to `what`.
fn wait_for(
    client: &Client,
    token: &str,
    what: &str,
    replica: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = rollout(client, token, what);
        if done(&v) {
            return;
        }
        assert!(Instant::now() < deadline, "{replica}'s {what} never came round: {v}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_class_rollout_set_through_one_replica_holds_on_every_other_and_a_rollback_reaches_them() {
    let fleet = Fleet::start("fleet-rollout");
    let [a, b, c] = fleet.clients();
    let (token, v1) = acme_with_mine(&a, "latency");
    wait_for_version(&b, &token, "latency", &v1, "B");
    wait_for_version(&c, &token, "latency", &v1, "C");
    let put = |client: &Client, what: &str, body: serde_json::Value| {
        let path = format!("/v1/tenants/acme/classes/latency/{what}");
        let (status, v) = client.call("PUT", &path, Some(&token), Body::Json(body));
        assert_eq!(status, 200, "{v}");
    };

    // A shadow set through A runs on B; the report is B's own.
    put(&a, "shadow", json!({ "policy": "lmetric", "rate": 1.0 }));
    wait_for(&b, &token, "shadow", "B", |v| v["shadow"]["policy"] == "lmetric");
    for _ in 0..5 {
        let (status, v) = b.select(&token, "acme", Some("latency"));
        assert_eq!(status, 200, "{v}");
    }
    wait_for(&b, &token, "shadow", "B", |v| {
        let dropped: u64 =
            v["dropped"].as_object().map_or(0, |d| d.values().filter_map(|n| n.as_u64()).sum());
        let compared = v["comparison"]["compared"].as_u64().unwrap_or(0);
        // The first sample finds the queue empty: at least it runs.
        v["sampled"] == 5 && compared >= 1 && compared + dropped == 5
    });
    assert_eq!(rollout(&a, &token, "shadow")["sampled"], 0, "A's report counts A's selections only");

    // A canary that faults, set through A, is rolled back by C's selections, and the
    // end reaches A and B.
    a.uploaded(&token, "acme", "broken", switchyard_test_util::hostile::PANIC, None);
    put(&a, "canary", json!({ "policy": "broken", "weight": 100 }));
    wait_for(&c, &token, "canary", "C", |v| v["canary"]["policy"] == "broken");
    for _ in 0..10 {
        let (status, v) = c.select(&token, "acme", Some("latency"));
        assert_eq!((status, v["policy"].as_str()), (200, Some("mine")), "{v}");
    }
    for (client, replica) in [(&a, "A"), (&b, "B"), (&c, "C")] {
        wait_for(client, &token, "canary", replica, |v| {
            v["canary"].is_null() && v["last_canary"]["outcome"] == "rolled-back"
        });
    }
}
