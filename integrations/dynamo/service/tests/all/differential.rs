//! `switchyard-dynamo` running the default policy's guest against Dynamo's stock service
//! (`dynamo-stock`: the same service with Dynamo's reference policy), fed the same event
//! stream and bookings, asked the same 10,000 selections: the same worker and rank for
//! every one.
//!
//! Where the costs tie, Dynamo breaks the tie at random and Switchyard with the request's
//! seed, as in the adapter's contract test: a selection counts as agreeing only if
//! Switchyard's pick is one Dynamo itself makes on that state; the stock service is asked
//! again (a `/select` books nothing) until it picks Switchyard's worker and rank, up to
//! [`TIE_TRIES`] times.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use switchyard_test_util::fixtures::Rng;
use switchyard_test_util::server::temp_dir;

use crate::common::{BLOCK, Dynamo, Engine, KvEvent};

/// Selections compared.
const SELECTIONS: usize = 10_000;
/// Event and booking rounds: the state changes this many times.
const PHASES: usize = 25;
/// Documents the engines cache prefixes of, each [`DOC_BLOCKS`] blocks.
const DOCS: usize = 6;
const DOC_BLOCKS: usize = 8;
/// Asks of the stock service for a tied pick: a tied set of t rows misses a member this
/// often with probability (1 − 1/t)^256 (under 1e-6 for t = 16).
const TIE_TRIES: usize = 256;

/// One row of both services: a worker and one of its dp ranks, with its engine.
struct Row {
    worker: u64,
    rank: u32,
    engine: Engine,
    /// Blocks of each document this rank holds (a prefix), by hash.
    held: Vec<Vec<u64>>,
}

fn doc_tokens(doc: usize) -> Vec<u32> {
    (0..(DOC_BLOCKS * BLOCK) as u32).map(|t| 10_000 * (doc as u32 + 1) + t).collect()
}

/// Block `b` of document `doc`'s hash as engines publish it: derived from the content (as
/// vLLM's chained hashes are), so every engine holding the block names it alike, which
/// Dynamo's index relies on.
fn block_hash(doc: usize, b: usize) -> u64 {
    (doc as u64 + 1) * 1_000 + b as u64
}

/// Registers the same workers on both services: ids 1..=12 with one rank, 13 and 14 with
/// two (each rank its own engine).
fn register(services: &[&Dynamo], context: &zmq::Context) -> Vec<Row> {
    let mut rows = Vec::new();
    for worker in 1..=14u64 {
        let ranks = if worker > 12 { 2 } else { 1 };
        let engines: Vec<Engine> = (0..ranks).map(|_| Engine::new(context)).collect();
        let mut body = json!({"worker_id": worker, "endpoint": format!("http://worker-{worker}"),
            "block_size": BLOCK, "total_kv_blocks": 1000});
        if ranks == 1 {
            body["kv_events_endpoint"] = json!(engines[0].endpoint);
        } else {
            body["data_parallel_size"] = json!(ranks);
            let endpoints: serde_json::Map<String, Value> =
                engines.iter().enumerate().map(|(r, e)| (r.to_string(), json!(e.endpoint))).collect();
            body["kv_events_endpoints"] = Value::Object(endpoints);
        }
        for service in services {
            let (status, v) = service.call("POST", "/workers", Some(&body));
            assert_eq!(status, 201, "{v}");
            assert_eq!(v["lifecycle"], "schedulable", "{v}");
        }
        for (rank, engine) in engines.into_iter().enumerate() {
            rows.push(Row { worker, rank: rank as u32, engine, held: vec![Vec::new(); DOCS] });
        }
    }
    rows
}

/// Device blocks of `doc`'s full prefix per (worker, rank), as `service` reports them.
fn overlaps(service: &Dynamo, doc: usize) -> BTreeMap<(u64, u32), u64> {
    let (status, v) = service.call("POST", "/overlap_scores", Some(&json!({"token_ids": doc_tokens(doc)})));
    assert_eq!(status, 200, "{v}");
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let key = (w["worker_id"].as_u64().unwrap(), w["dp_rank"].as_u64().unwrap() as u32);
            (key, w["device_blocks"].as_u64().unwrap())
        })
        .filter(|(_, blocks)| *blocks > 0)
        .collect()
}

/// Waits until both services' indexes hold what the rows published.
fn settle(services: &[&Dynamo], rows: &[Row]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for doc in 0..DOCS {
        let want: BTreeMap<(u64, u32), u64> = rows
            .iter()
            .filter(|r| !r.held[doc].is_empty())
            .map(|r| ((r.worker, r.rank), r.held[doc].len() as u64))
            .collect();
        for service in services {
            loop {
                let seen = overlaps(service, doc);
                if seen == want {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "doc {doc}: {seen:?}, want {want:?}");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// (worker, rank) of a `/select` answer.
fn pick(v: &Value) -> (u64, u32) {
    (v["worker_id"].as_u64().unwrap(), v["dp_rank"].as_u64().unwrap() as u32)
}

#[test]
fn the_default_guest_picks_what_dynamos_stock_service_picks_on_the_same_events() {
    let dir = temp_dir("dynamo-differential");
    let ours = Dynamo::default_guest(&dir);
    let stock = Dynamo::stock(&dir);
    let services = [&ours, &stock];
    let context = zmq::Context::new();
    let mut rows = register(&services, &context);

    // Each engine's one block of a document no selection asks for, published until both
    // services have it (a subscriber misses what was sent before it connected); every
    // later event arrives.
    let tokens: Vec<Vec<u32>> = (0..=DOCS).map(doc_tokens).collect();
    let hello = DOCS;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for row in &mut rows {
            row.engine.stored_blocks(None, &[block_hash(hello, 0)], &tokens[hello][..BLOCK]);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let want = rows.len();
        if services.iter().all(|s| overlaps(s, hello).len() == want) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the first events never arrived");
    }

    let mut rng = Rng::seeded(0xd1ff_5eed);
    let mut booked: Vec<String> = Vec::new();
    let (mut exact, mut tied) = (0usize, 0usize);
    let mut mismatches = Vec::new();
    for phase in 0..PHASES {
        // Events: each rank grows or trims its prefix of a document, twice, each change
        // applied by both services before the next is sent.
        for _ in 0..2 {
            for row in &mut rows {
                let doc = rng.below(DOCS as u64) as usize;
                let held = row.held[doc].len();
                let target = rng.below(DOC_BLOCKS as u64 + 1) as usize;
                if target > held {
                    let hashes: Vec<u64> = (held..target).map(|b| block_hash(doc, b)).collect();
                    let parent = row.held[doc].last().copied();
                    row.engine.stored_blocks(parent, &hashes, &tokens[doc][held * BLOCK..target * BLOCK]);
                    row.held[doc].extend(hashes);
                } else if target < held {
                    let gone = row.held[doc].split_off(target);
                    row.engine.publish(&[KvEvent::removed(&gone)]);
                }
            }
            settle(&services, &rows);
        }
        // Bookings, the same on both: a few new, a few freed.
        for _ in 0..6 {
            let row = &rows[rng.below(rows.len() as u64) as usize];
            let len = 4 + rng.below(40) as usize;
            let id = format!("p{phase}-{}", booked.len());
            let booking = json!({
                "selection_id": id, "worker_id": row.worker, "dp_rank": row.rank,
                "token_ids": (0..len as u32).map(|t| 900_000 + t).collect::<Vec<_>>(),
                "effective_prefill_tokens": rng.below(len as u64 + 1),
                "expected_output_tokens": rng.below(64),
            });
            for service in services {
                let (status, v) = service.call("POST", "/reservations", Some(&booking));
                assert_eq!(status, 201, "{v}");
            }
            booked.push(id);
        }
        for _ in 0..2 {
            if booked.is_empty() {
                break;
            }
            let id = booked.swap_remove(rng.below(booked.len() as u64) as usize);
            for service in services {
                let (status, v) = service.call("DELETE", &format!("/reservations/{id}"), None);
                assert_eq!(status, 200, "{v}");
            }
        }
        // Selections: a prefix of a document and a tail nobody holds.
        for i in 0..SELECTIONS / PHASES {
            let doc = rng.below(DOCS as u64) as usize;
            let prefix = 1 + rng.below(DOC_BLOCKS as u64) as usize;
            let mut prompt = tokens[doc][..prefix * BLOCK].to_vec();
            prompt.extend((0..rng.below(3 * BLOCK as u64) as u32).map(|t| 500_000 + t + 7 * i as u32));
            let body = json!({"token_ids": prompt});
            let (status, v) = ours.call("POST", "/select", Some(&body));
            assert_eq!(status, 200, "switchyard-dynamo: {v}");
            let mine = pick(&v);
            let (status, v) = stock.call("POST", "/select", Some(&body));
            assert_eq!(status, 200, "dynamo-stock: {v}");
            if pick(&v) == mine {
                exact += 1;
                continue;
            }
            let found = (0..TIE_TRIES).any(|_| {
                let (status, v) = stock.call("POST", "/select", Some(&body));
                status == 200 && pick(&v) == mine
            });
            if found {
                tied += 1;
            } else if mismatches.len() < 10 {
                mismatches.push(format!(
                    "phase {phase}, doc {doc}, {prefix} blocks: switchyard {mine:?}, Dynamo {v}"
                ));
            } else {
                mismatches.push(String::new());
            }
        }
    }
    println!("{SELECTIONS} selections: {exact} the same pick, {tied} one of Dynamo's tied picks");
    assert!(
        mismatches.is_empty(),
        "{} disagreements: {:#?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    // The state must discriminate: mostly one cheapest row, not ties everywhere.
    assert!(exact > SELECTIONS / 2, "only {exact} exact of {SELECTIONS}: the state barely discriminates");
}
