//! What a router pays to call `switchyard serve` per request: `POST /v1/select` over
//! loopback HTTP at 1,024 and 10,000 workers, three ways: the whole request as JSON (every
//! worker and every input column), and from a table the server holds (put once, the load
//! columns in it) with only the request's own facts, 128 prefix hashes and its overlaps on
//! 32 workers, as JSON and as protobuf; the native default against the default policy's
//! guest, beside `GET /healthz` (the HTTP round trip alone), and the guest's protobuf row
//! again asking for a route receipt of the 8 cheapest candidates, and for classes with a
//! shadow (another copy of the guest) on 0 %, 10 % and 100 % of their selections (at 1,024
//! workers; what the shadows ran and dropped is printed under the table). The real server (this bench's
//! release build), one tenant; 4 keep-alive connections on one client thread's event loop
//! (as `wrk -t1 -c4` runs them), each closed-loop, each request's bytes built before the
//! clock starts (`raw_http::encoded_request`).
//!
//! Each variant runs `WIRE_ROUNDS` (default 5) rounds of `WIRE_ROUND_MS` (default 1,000)
//! ms, the variants interleaved round by round, so a slow stretch of the machine falls on
//! all of them; p50 and p99 are over every request of a variant, selections/s its requests
//! over its time.
//!
//! Run: `cargo bench --bench wire` (`WIRE_ONLY=TEXT`: only the rows whose name contains it).

mod raw_http;
mod stats;

use std::time::{Duration, Instant};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{Value, json};
use switchyard_test_util::DEFAULT_POLICY;
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

use crate::raw_http::{Connection, encoded_request, find, request};
use crate::stats::quantile;
use switchyard::selection::wire::{ReceiptAsk, RequestJson};

const CONNECTIONS: usize = 4;
const SIZES: [usize; 2] = [1024, 10_000];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A select request over `n` single-rank workers with every input column, as a router that
/// keeps no state on the server sends it (values drawn from `seed`).
fn select_json(n: usize, class: Option<&str>, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut column = |bound: u32| -> Vec<u32> { (0..n).map(|_| rng.next_u32() % bound).collect() };
    let (device, host, cached) = (column(64), column(16), column(1024));
    let (prefill, decode, requests) = (column(8192), column(1000), column(16));
    let workers: Vec<Value> = (0..n).map(|id| json!({ "id": id, "total_kv_blocks": 131_072 })).collect();
    json!({
        "tenant": "acme",
        "policy_class": class,
        "prompt_tokens": 2048,
        "block_size": 16,
        "expected_output_tokens": 256,
        "pool": "aggregated",
        "seed": seed,
        "temperature": 0.0,
        "workers": workers,
        "inputs": {
            "worker_id": (0..n).collect::<Vec<_>>(),
            "dp_rank": vec![0; n],
            "device_overlap_blocks": device,
            "host_overlap_blocks": host,
            "disk_overlap_blocks": vec![0; n],
            "cached_tokens": cached,
            "active_prefill_tokens": prefill,
            "decode_blocks": decode,
            "active_requests": requests,
        }
    })
    .to_string()
}

/// The load columns a router keeps in a held table, for `n` workers (drawn from `seed`).
fn table_json(n: usize, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut column = |bound: u32| -> Vec<u32> { (0..n).map(|_| rng.next_u32() % bound).collect() };
    let (prefill, decode, requests) = (column(8192), column(1000), column(16));
    let workers: Vec<Value> = (0..n).map(|id| json!({ "id": id, "total_kv_blocks": 131_072 })).collect();
    json!({
        "workers": workers,
        "inputs": {
            "worker_id": (0..n).collect::<Vec<_>>(),
            "active_prefill_tokens": prefill,
            "decode_blocks": decode,
            "active_requests": requests,
        }
    })
    .to_string()
}

/// Rows of the request's own overlaps a held-table request carries: a prompt's prefix is
/// cached on a few workers, not on all of them.
const OVERLAP_ROWS: usize = 32;

/// A select request from the held table `table`: the request's facts, its prefix hashes
/// and its overlaps on `OVERLAP_ROWS` workers of `n`.
fn held_json(n: usize, table: &str, class: Option<&str>, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ids: Vec<u64> = (0..OVERLAP_ROWS).map(|_| rng.next_u64() % n as u64).collect();
    ids.sort_unstable();
    ids.dedup();
    let device: Vec<u32> = ids.iter().map(|_| rng.next_u32() % 64).collect();
    let cached: Vec<u32> = device.iter().map(|d| d * 16).collect();
    json!({
        "tenant": "acme",
        "policy_class": class,
        "table": table,
        "prompt_tokens": 2048,
        "block_size": 16,
        "expected_output_tokens": 256,
        "seed": seed,
        "temperature": 0.0,
        "prefix_hashes": (0..128).map(|_| rng.next_u64()).collect::<Vec<_>>(),
        "inputs": { "worker_id": ids, "device_overlap_blocks": device, "cached_tokens": cached },
    })
    .to_string()
}

/// One variant: the request's bytes, and what its rounds measured.
struct Variant {
    name: String,
    request: Vec<u8>,
    body_bytes: usize,
    answer_bytes: usize,
    latencies: Vec<f64>,
    elapsed: Duration,
}

/// `CONNECTIONS` closed-loop clients sending `request` for `length`, all on this one
/// thread's event loop (as `wrk -t1 -c4` runs them, so the client takes one core at
/// most, not a thread per connection): each request's time.
fn round(addr: &str, request: &[u8], length: Duration) -> Vec<f64> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + length;
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (addr, request) = (addr.to_string(), request.to_vec());
                tokio::spawn(async move {
                    let mut stream = tokio::net::TcpStream::connect(&addr).await.expect("connecting");
                    stream.set_nodelay(true).expect("TCP_NODELAY");
                    let mut buffer = Vec::with_capacity(16 << 10);
                    let mut times = Vec::new();
                    while tokio::time::Instant::now() < deadline {
                        let start = Instant::now();
                        let status = exchange(&mut stream, &request, &mut buffer).await;
                        times.push(start.elapsed().as_secs_f64());
                        assert!(status == 200, "status {status}");
                    }
                    times
                })
            })
            .collect();
        let mut times = Vec::new();
        for client in clients {
            times.extend(client.await.expect("a client task"));
        }
        times
    })
}

/// Sends `request` and reads its answer by its `Content-Length`: the status.
async fn exchange(stream: &mut tokio::net::TcpStream, request: &[u8], buffer: &mut Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request).await.expect("sending a request");
    buffer.clear();
    let mut chunk = [0u8; 16 << 10];
    let mut fill = async |buffer: &mut Vec<u8>| {
        let n = stream.read(&mut chunk).await.expect("reading an answer");
        assert!(n > 0, "the server closed the connection mid-answer");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head_end = loop {
        fill(buffer).await;
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = std::str::from_utf8(&buffer[..head_end]).expect("an answer's head is text");
    let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
        })
        .expect("a Content-Length");
    while buffer.len() < head_end + length {
        fill(buffer).await;
    }
    status
}

fn main() {
    let rounds = env("WIRE_ROUNDS", 5);
    let length = Duration::from_millis(env("WIRE_ROUND_MS", 1000));
    let dir = temp_dir("bench-wire");
    let server = Server::with_config(&dir, "");
    let client = Client::new(&server);
    let token = client.add_tenant("acme");
    client.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    client.assigned(&token, "acme", "guest", json!({ "policy": "mine" }));
    client.uploaded(&token, "acme", "next", DEFAULT_POLICY, None);
    for (class, rate) in [("shadow-0", 0.0), ("shadow-10", 0.1), ("shadow-100", 1.0)] {
        client.assigned(&token, "acme", class, json!({ "policy": "mine" }));
        let path = format!("/v1/tenants/acme/classes/{class}/shadow");
        let (status, v) =
            client.call("PUT", &path, Some(&token), Body::Json(json!({ "policy": "next", "rate": rate })));
        assert_eq!(status, 200, "{v}");
    }

    let addr = server.addr();
    let mut variants = vec![Variant {
        name: "`GET /healthz`".into(),
        request: request("GET", "/healthz", None, None),
        body_bytes: 0,
        answer_bytes: 0,
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
    }];
    for n in SIZES {
        let table = format!("pool-{n}");
        let (status, put) = client.call(
            "PUT",
            &format!("/v1/tenants/acme/tables/{table}"),
            Some(&token),
            Body::Json(serde_json::from_str(&table_json(n, 11)).expect("the table's JSON")),
        );
        assert_eq!(status, 200, "{put}");
        // No class: the tenant's default route, the builtin default, native.
        for (shape, label, class) in [
            ("whole JSON", "native default", None),
            ("whole JSON", "guest", Some("guest")),
            ("held table, JSON", "native default", None),
            ("held table, JSON", "guest", Some("guest")),
            ("held table, protobuf", "native default", None),
            ("held table, protobuf", "guest", Some("guest")),
            ("held table, protobuf, receipt", "guest", Some("guest")),
            ("held table, protobuf, shadow 0 %", "guest", Some("shadow-0")),
            ("held table, protobuf, shadow 10 %", "guest", Some("shadow-10")),
            ("held table, protobuf, shadow 100 %", "guest", Some("shadow-100")),
        ] {
            if shape.contains("shadow") && n != SIZES[0] {
                continue;
            }
            let body = match shape {
                "whole JSON" => select_json(n, class, 7).into_bytes(),
                "held table, JSON" => held_json(n, &table, class, 7).into_bytes(),
                _ => {
                    let mut json: RequestJson =
                        serde_json::from_str(&held_json(n, &table, class, 7)).expect("a request");
                    // The receipt row: the same request asking for the 8 cheapest candidates.
                    json.receipt = shape.ends_with("receipt").then_some(ReceiptAsk { top: 8 });
                    switchyard_proto::encode_request(&json)
                }
            };
            let media =
                if shape.contains("protobuf") { switchyard_proto::CONTENT_TYPE } else { "application/json" };
            let request = encoded_request("POST", "/v1/select", Some(&token), Some((media, &body)));
            let mut connection = Connection::open(&addr);
            let (status, answer) = connection.exchange(&request);
            let answer = answer.to_vec();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
            // The answer is in the body's encoding.
            let build = match media {
                "application/json" => {
                    serde_json::from_slice::<Value>(&answer).expect("a JSON answer")["build"].clone()
                }
                _ => Value::from(
                    switchyard_proto::decode_answer(&answer).expect("a protobuf answer").answer.build,
                ),
            };
            assert_eq!(build, if class.is_some() { "guest" } else { "native" });
            variants.push(Variant {
                name: format!("{n} workers, {shape}, {label}"),
                request,
                body_bytes: body.len(),
                answer_bytes: answer.len(),
                latencies: Vec::new(),
                elapsed: Duration::ZERO,
            });
        }
    }
    // `WIRE_ONLY=held` times only the variants whose name contains it (for a profile).
    if let Ok(only) = std::env::var("WIRE_ONLY") {
        variants.retain(|v| v.name.contains(&only));
    }
    for _ in 0..rounds {
        for variant in &mut variants {
            let start = Instant::now();
            variant.latencies.extend(round(&addr, &variant.request, length));
            variant.elapsed += start.elapsed();
        }
    }

    println!("\n### `POST /v1/select` over loopback HTTP, {CONNECTIONS} connections on one client thread\n");
    println!("| request | body in | answer | p50 | p99 | selections/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for v in &variants {
        let (p50, p99) = (quantile(&v.latencies, 0.5), quantile(&v.latencies, 0.99));
        println!(
            "| {} | {} | {} | {:.0} µs | {:.0} µs | {:.0} |",
            v.name,
            kb(v.body_bytes),
            kb(v.answer_bytes),
            p50 * 1e6,
            p99 * 1e6,
            v.latencies.len() as f64 / v.elapsed.as_secs_f64()
        );
    }
    // Shadows run after the answer, at the lowest CPU priority: what they ran, and what
    // their queue dropped while the live selections kept the cores busy.
    for class in ["shadow-10", "shadow-100"] {
        let path = format!("/v1/tenants/acme/classes/{class}/shadow");
        let (_, report) = client.call("GET", &path, Some(&token), Body::None);
        println!(
            "\n`{class}`: {} sampled, {} compared, dropped {}",
            report["sampled"], report["comparison"]["compared"], report["dropped"]
        );
    }
}

fn kb(bytes: usize) -> String {
    if bytes == 0 { "–".into() } else { format!("{:.1} KB", bytes as f64 / 1e3) }
}
