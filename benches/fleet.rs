//! How fast a change reaches a fleet: a real nats-server and three replicas
//! of the real `switchyard serve` (this bench's release build), on loopback. Each change
//! is made through one replica, in turn; the clock starts when that replica has answered
//! it (the change is durable in the registry) and stops, for each of the two others, at
//! the first selection that replica answers with the change.
//!
//! Three kinds of change, one after the other, `ROUNDS` times: an upload (a new version
//! the others load and configure: same component, new parameters, so compiled once per
//! replica), a class pinned to the previous version, and the pin removed.
//!
//! Run: `cargo bench --bench fleet`.

mod stats;

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_test_util::DEFAULT_POLICY;

use crate::stats::quantile;
use switchyard_test_util::fleet::{Fleet, wait_for_version};
use switchyard_test_util::server::Client;

/// Rounds of three changes: 3 × 80 = 240 changes, 480 propagations measured.
const ROUNDS: usize = 80;

/// Every replica's config: the tenant's write rates raised far above what the bench
/// makes (the defaults would refuse it after a minute's worth).
const CONFIG: &str = "[service]\nuploads_per_minute = 100000\nwrites_per_minute = 100000\n";

fn main() {
    let fleet = Fleet::start_with("bench-fleet", Some(CONFIG));
    let clients = fleet.clients();
    let token = clients[0].add_tenant("acme");
    let mut active = clients[0].uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    clients[0].assigned(&token, "acme", "latency", json!({ "policy": "mine" }));
    for (client, name) in clients.iter().zip(["A", "B", "C"]) {
        wait_for_version(client, &token, "latency", &active, name);
    }

    let mut uploads = Vec::new();
    let mut pins = Vec::new();
    let mut unpins = Vec::new();
    for round in 0..ROUNDS {
        let writer = round % 3;
        // A new version: the default policy with its prefill scale nudged.
        let scale = 1.0 + (round + 1) as f64 / 1000.0;
        let params = format!("%7B%22prefill_load_scale%22%3A{scale}%7D");
        let previous = active.clone();
        active = clients[writer].uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&params));
        uploads.extend(propagation(&clients, writer, &token, &active));

        let writer = (round + 1) % 3;
        let pin = json!({ "policy": "mine", "version": previous });
        clients[writer].assigned(&token, "acme", "latency", pin);
        pins.extend(propagation(&clients, writer, &token, &previous));

        let writer = (round + 2) % 3;
        clients[writer].assigned(&token, "acme", "latency", json!({ "policy": "mine" }));
        unpins.extend(propagation(&clients, writer, &token, &active));
    }

    println!("Fleet propagation: change acknowledged by one replica -> answered by each other");
    println!("(3 replicas, one nats-server, loopback; {} changes)\n", 3 * ROUNDS);
    println!("| change | propagations | p50 | p99 | max |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut all = Vec::new();
    for (kind, samples) in [("upload (new version)", uploads), ("pin a class", pins), ("unpin", unpins)] {
        row(kind, &samples);
        all.extend(samples);
    }
    row("all", &all);
}

/// The time from now (the change just acknowledged by replica `writer`) until each other
/// replica answers acme's `latency` class with `version`.
fn propagation(clients: &[Client; 3], writer: usize, token: &str, version: &str) -> Vec<Duration> {
    let acknowledged = Instant::now();
    std::thread::scope(|s| {
        let observers: Vec<_> = (0..3)
            .filter(|&i| i != writer)
            .map(|i| {
                let client = &clients[i];
                s.spawn(move || {
                    let deadline = acknowledged + Duration::from_secs(30);
                    loop {
                        let (status, v) = client.select(token, "acme", Some("latency"));
                        if status == 200 && v["version"] == version {
                            return acknowledged.elapsed();
                        }
                        assert!(Instant::now() < deadline, "replica {i} never answered {version}: {v}");
                    }
                })
            })
            .collect();
        observers.into_iter().map(|o| o.join().expect("an observer")).collect()
    })
}

fn row(kind: &str, samples: &[Duration]) {
    let ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let [p50, p99, max] = [0.5, 0.99, 1.0].map(|q| format!("{:.2} ms", quantile(&ms, q)));
    println!("| {kind} | {} | {p50} | {p99} | {max} |", ms.len());
}
