//! `POST /select` over loopback HTTP at 1,024 workers, one run, release builds:
//!
//! 1. **Stock vs Switchyard**: Dynamo's stock selection service (`dynamo-stock`, its
//!    reference policy) and `switchyard-dynamo` running the default policy's guest, fed
//!    the same workers, KV events and bookings, asked the same requests; rounds
//!    interleaved (stock, ours, ours, stock, …), each a batch of selections on one
//!    keep-alive connection.
//! 2. **A hostile neighbour**: `switchyard-dynamo` following a real `switchyard serve`'s
//!    data dir, group-b (1,024 workers) run by one tenant's default policy, group-a (16
//!    workers) by another tenant's policy that spins on every selection (fail-closed);
//!    group-b's latency with group-a quiet against group-a asked back to back by another
//!    connection, rounds interleaved.
//!
//! Prints p50 and p99 per request and selections/s (one connection, requests back to
//! back). Command: `cargo bench -p switchyard-dynamo-service --bench http`.

// The tests' services and engines: one implementation of each.
#[path = "../tests/all/common.rs"]
#[allow(dead_code, reason = "the bench uses part of the tests' helpers")]
mod common;
#[path = "../../../../benches/raw_http.rs"]
mod raw_http;
#[path = "../../../../benches/stats.rs"]
mod stats;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_test_util::server::temp_dir;

use common::{BLOCK, Dynamo, Engine, KvEvent};
use raw_http::{Connection, request};

const WORKERS: u64 = 1024;
/// Documents the workers cache prefixes of; each request is one document, whole.
const DOCS: usize = 8;
/// Blocks of a document (a 512-token prompt).
const DOC_BLOCKS: usize = 128;
const ROUNDS: usize = 31;
/// Selections of a round.
const BATCH: usize = 100;

fn doc_tokens(doc: usize) -> Vec<u32> {
    (0..(DOC_BLOCKS * BLOCK) as u32).map(|t| 100_000 * (doc as u32 + 1) + t).collect()
}

/// Content-derived, as vLLM's chained hashes are: every engine names a block alike.
fn block_hash(doc: usize, b: usize) -> u64 {
    (doc as u64 + 1) * 1_000_000 + b as u64
}

/// Blocks of its document worker `id` holds: spread over 0..=DOC_BLOCKS.
fn held(id: u64) -> usize {
    ((id * 37) % (DOC_BLOCKS as u64 + 1)) as usize
}

/// Workers `base..base + n` of `group` on every service, each with an engine that has
/// published its prefix of document `id % DOCS`, and every third one a booking; returns
/// once every service's index holds all of it.
fn populate(
    services: &[&Dynamo],
    group: &str,
    base: u64,
    n: u64,
    engines: &mut Vec<Engine>,
    contexts: &[zmq::Context],
) {
    for id in base..base + n {
        let i = (id - base) as usize;
        if engines.len() <= i {
            engines.push(Engine::new(&contexts[i / 512]));
        }
        for service in services {
            service.register(group, id, &engines[i], 1000);
        }
    }
    // Published until every service has it (a subscriber misses what was sent before it
    // connected; a block stored again is still one block).
    let tokens: Vec<Vec<u32>> = (0..DOCS).map(doc_tokens).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for id in base..base + n {
            let (doc, blocks) = ((id as usize) % DOCS, held(id));
            if blocks > 0 {
                let hashes: Vec<u64> = (0..blocks).map(|b| block_hash(doc, b)).collect();
                let event = KvEvent::stored(None, &hashes, &tokens[doc][..blocks * BLOCK]);
                engines[(id - base) as usize].publish(&[event]);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
        let want = (base..base + n).filter(|id| held(*id) > 0).count();
        let seen = |s: &Dynamo| -> usize {
            (0..DOCS)
                .map(|doc| {
                    let body = json!({"routing_group": group, "token_ids": tokens[doc]});
                    let (_, v) = s.call("POST", "/overlap_scores", Some(&body));
                    v["workers"].as_array().map_or(0, |w| {
                        w.iter()
                            .filter(|w| {
                                let id = w["worker_id"].as_u64().unwrap_or(0);
                                w["device_blocks"].as_u64() == Some(held(id) as u64)
                                    && id as usize % DOCS == doc
                                    && held(id) > 0
                            })
                            .count()
                    })
                })
                .sum()
        };
        if services.iter().all(|s| seen(s) == want) {
            break;
        }
        assert!(Instant::now() < deadline, "the events never all arrived");
    }
    for id in (base..base + n).filter(|id| id % 3 == 0) {
        for service in services {
            service.book(group, id, Some((id % 8) as usize));
        }
    }
}

/// The request bodies a round cycles through: each document whole, in `group`.
fn requests(group: &str) -> Vec<Vec<u8>> {
    (0..DOCS)
        .map(|doc| {
            let body = json!({"routing_group": group, "token_ids": doc_tokens(doc)}).to_string();
            request("POST", "/select", None, Some(&body))
        })
        .collect()
}

/// Latencies (µs) of `BATCH` selections on `connection`, and their total time.
fn batch(connection: &mut Connection, bodies: &[Vec<u8>], samples: &mut Vec<f64>) -> Duration {
    let start = Instant::now();
    for i in 0..BATCH {
        let t = Instant::now();
        let (status, body) = connection.exchange(&bodies[i % bodies.len()]);
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(body));
    }
    start.elapsed()
}

/// A row: p50, p99 and selections/s of `samples` over `time`.
fn row(name: &str, samples: &[f64], time: Duration) -> String {
    format!(
        "| {name} | {:.0} µs | {:.0} µs | {:.0} |",
        stats::quantile(samples, 0.5),
        stats::quantile(samples, 0.99),
        samples.len() as f64 / time.as_secs_f64()
    )
}

fn addr(service: &Dynamo) -> String {
    service.base.trim_start_matches("http://").to_string()
}

fn main() {
    let dir = temp_dir("bench-dynamo-http");
    // An engine per worker, 512 to a context (libzmq's default bound is 1,024 sockets a
    // context, which the crate cannot raise).
    let contexts: Vec<zmq::Context> = (0..4).map(|_| zmq::Context::new()).collect();
    let context = contexts.as_slice();
    let mut engines = Vec::new();

    // 1. Stock vs Switchyard.
    let ours = Dynamo::default_guest(&dir);
    let stock = Dynamo::stock(&dir);
    populate(&[&stock, &ours], "default", 1, WORKERS, &mut engines, context);
    let bodies = requests("default");
    let (mut conn_stock, mut conn_ours) = (Connection::open(&addr(&stock)), Connection::open(&addr(&ours)));
    // Warm-up, and the same pick or a tied one is checked by the differential test.
    let (mut s, mut o) = (Vec::new(), Vec::new());
    batch(&mut conn_stock, &bodies, &mut s);
    batch(&mut conn_ours, &bodies, &mut o);
    let (mut s, mut o) = (Vec::new(), Vec::new());
    let (mut ts, mut to) = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            ts += batch(&mut conn_stock, &bodies, &mut s);
            to += batch(&mut conn_ours, &bodies, &mut o);
        } else {
            to += batch(&mut conn_ours, &bodies, &mut o);
            ts += batch(&mut conn_stock, &bodies, &mut s);
        }
    }
    println!("\n### `POST /select` over HTTP, {WORKERS} workers, a {}-token prompt\n", DOC_BLOCKS * BLOCK);
    println!("| service | p50 | p99 | selections/s (one connection) |\n| --- | ---: | ---: | ---: |");
    println!("{}", row("Dynamo's stock service (`dynamo-stock`, its reference policy)", &s, ts));
    println!("{}", row("`switchyard-dynamo`, the default policy's guest", &o, to));
    println!(
        "\nours/stock: p50 {:.3}, p99 {:.3}, time per selection {:.3}",
        stats::quantile(&o, 0.5) / stats::quantile(&s, 0.5),
        stats::quantile(&o, 0.99) / stats::quantile(&s, 0.99),
        to.as_secs_f64() / ts.as_secs_f64(),
    );
    drop((conn_stock, conn_ours, stock, ours));

    // 2. A hostile neighbour.
    let (_server, ours) = Dynamo::hostile_neighbours(&dir);
    populate(&[&ours], "group-b", 1, WORKERS, &mut engines, context);
    let mut hostile_engines = Vec::new();
    populate(&[&ours], "group-a", 100_001, 16, &mut hostile_engines, context);
    let bodies = requests("group-b");
    let mut conn = Connection::open(&addr(&ours));
    batch(&mut conn, &bodies, &mut Vec::new());
    let hammering = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let hammer = {
        let (hammering, stop, refused) = (Arc::clone(&hammering), Arc::clone(&stop), Arc::clone(&refused));
        let mut conn = Connection::open(&addr(&ours));
        let body = json!({"routing_group": "group-a", "token_ids": doc_tokens(0)}).to_string();
        let body = request("POST", "/select", None, Some(&body));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !hammering.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                let (status, _) = conn.exchange(&body);
                if status != 200 {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let (mut quiet, mut loud) = (Vec::new(), Vec::new());
    let (mut tq, mut tl) = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS {
        for hostile in if round % 2 == 0 { [false, true] } else { [true, false] } {
            hammering.store(hostile, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
            if hostile {
                tl += batch(&mut conn, &bodies, &mut loud);
            } else {
                tq += batch(&mut conn, &bodies, &mut quiet);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    hammering.store(false, Ordering::Relaxed);
    hammer.join().unwrap();
    println!("\n### group-b ({WORKERS} workers) beside a hostile group-a (its policy spins; fail-closed)\n");
    println!("| group-a | p50 | p99 | selections/s (one connection) |\n| --- | ---: | ---: | ---: |");
    println!("{}", row("quiet", &quiet, tq));
    println!("{}", row("asked back to back, every selection spinning", &loud, tl));
    println!(
        "\nhostile/quiet: p50 {:.3}, p99 {:.3}; group-a selections refused while asked: {}",
        stats::quantile(&loud, 0.5) / stats::quantile(&quiet, 0.5),
        stats::quantile(&loud, 0.99) / stats::quantile(&quiet, 0.99),
        refused.load(Ordering::Relaxed)
    );
}
