//! Ten thousand tenant policies on one server: the real `switchyard serve`
//! (this bench's release build) on loopback, driven through its HTTP API.
//!
//! 1. `SCALE_TENANTS` tenants (default 10,000), each uploading one version of the default
//!    policy and assigning a class to it: the first `SCALE_DISTINCT` (default 1,000) each
//!    a distinct component (different bytes: a custom section appended, so each is
//!    compiled), the rest one of those with distinct parameters. From 2 client threads.
//! 2. Every version evicted (`evict_after_secs = EVICT_AFTER`, waited for), then
//!    `SCALE_SELECTIONS` selections (default 100,000) from 2 threads, each of a tenant
//!    drawn uniformly at random; a tenant's first is "cold" (its version evicted: loaded
//!    again, from its component if the server kept it (`max_unused_components`), else
//!    from the compiled cache, and configured), the others "warm" (loaded; an idle
//!    instance or a fresh one). Beside them, in the same run, one tenant alone (before
//!    the round, after it, and between its ten parts, both threads on it): the
//!    single-tenant warm figure the warm selections are compared with, and requests
//!    that do no work (`GET /healthz`): the HTTP round trip alone, on the same threads.
//!    Then every version evicted again and each tenant selected once: cold again, from
//!    artifacts the server checked before (no digest computed again); then each once more
//!    (warm), with the service's own selection time of those two rounds beside.
//! 3. The server restarted on that data dir: time to listening, to the first selection
//!    answered (of the tenant whose version loads last), and to every version loaded
//!    (versions load in the background after start-up).
//!
//! Prints RSS after the uploads, after the selections and of the restarted server,
//! onboarding rates early and late, latencies (client-side, over loopback HTTP; the timed
//! rounds send bytes built beforehand on one keep-alive connection per thread, `raw_http`,
//! so that the client's own work is a small part of them), the CPU
//! time a request costs the server and the bench's own client threads (which the
//! scheduler's waits do not move), compile time per upload (as the server reports it),
//! start-up.
//!
//! Run: `cargo bench --bench scale` (several minutes: most of it is
//! compiling the distinct components, one at a time as `compile_concurrency` allows);
//! `SCALE_TENANTS=1000 SCALE_DISTINCT=100 SCALE_SELECTIONS=10000` for a quick look;
//! `SCALE_CONFIG` adds to the server's config (e.g. `"[limits]\nmax_instances = 2200\n"`;
//! lines before any table header land in our `[service]` table, e.g.
//! `"max_unused_components = 0\n"` for cold selections that all load their component).

mod raw_http;
mod stats;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::json;
use switchyard_test_util::DEFAULT_POLICY;

use crate::raw_http::{Connection, find, request};
use crate::stats::quantile;
use switchyard_test_util::server::{
    ADMIN, Body, Client, Server, select_body, serve_command, temp_dir, variant, write_config,
};

/// Every write a tenant makes here is one upload and one assignment; the service's
/// defaults are kept otherwise, so the figures are the defaults', but for eviction:
/// after `EVICT_AFTER` seconds unused rather than 600, so that the cold selections are
/// of evicted versions without a ten-minute wait (and a warm version, selected every few
/// seconds, is not evicted during the run).
const CONFIG: &str = "[service]\nevict_after_secs = 30\n";
const EVICT_AFTER: Duration = Duration::from_secs(30);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let tenants = env("SCALE_TENANTS", 10_000);
    let distinct = env("SCALE_DISTINCT", 1_000).min(tenants);
    let selections = env("SCALE_SELECTIONS", 100_000);
    let dir = temp_dir("bench-scale");
    // `SCALE_CONFIG`: more `switchyard.toml` for an experiment (its tables after ours).
    let config =
        write_config(&dir, &format!("{CONFIG}{}", std::env::var("SCALE_CONFIG").unwrap_or_default()));
    let data = dir.join("data");
    let server = Server::start(&data, Some(&config), Some(ADMIN));

    // 1. Tenants, uploads, assignments.
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let mut uploads: Vec<(usize, Onboarded, Duration)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let client = Client::new(&server);
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= tenants {
                            return done;
                        }
                        let onboarded = onboard(&client, i, distinct);
                        done.push((i, onboarded, started.elapsed()));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("an upload thread")).collect()
    });
    let upload_time = started.elapsed();
    let rss_uploads = rss(server.pid());
    uploads.sort_by_key(|(i, ..)| *i);
    let (first_rate, last_rate) =
        onboarding_rates(&uploads.iter().map(|u| u.2).collect::<Vec<_>>(), distinct);
    let compile_ms: Vec<f64> = uploads.iter().take(distinct).map(|(_, o, _)| o.compile_ms).collect();
    let first_answer = |range: std::ops::Range<usize>| -> Vec<f64> {
        uploads[range].iter().map(|(_, o, _)| o.to_first_answer_ms).collect()
    };
    let (first_compiled, first_params) = (first_answer(0..distinct), first_answer(distinct..tenants));
    // With `compiler = "tiered"`, the distinct uploads answered from Winch's code are
    // compiled again by Cranelift in the background: waited for (at most ten minutes),
    // so that what follows measures Cranelift's code, as with `cranelift`.
    let tiers_expected =
        uploads.iter().take(distinct).filter(|(_, o, _)| o.compiler == "winch").count() as f64;
    let tier_client = Client::new(&server);
    while tier_client.try_metric("switchyard_tier_ups_total").unwrap_or(0.0) < tiers_expected
        && started.elapsed() < upload_time + Duration::from_secs(600)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let tiered_after = started.elapsed() - upload_time;
    let tiered = tier_client.try_metric("switchyard_tier_ups_total").unwrap_or(0.0);
    // Cranelift's function cache over the uploads (absent when it is off).
    let functions = ["hits", "misses"]
        .map(|k| tier_client.try_metric(&format!("switchyard_function_cache_{k}_total")).unwrap_or(f64::NAN));
    let tokens: Vec<String> = uploads.into_iter().map(|(_, o, _)| o.token).collect();
    let selects: Vec<Vec<u8>> = tokens.iter().enumerate().map(|(i, t)| select_request(t, i)).collect();

    // 2. Every version evicted; then selections: the single tenant first, then every
    // tenant at random, then the single tenant again (its figure is the median of both).
    let client = Client::new(&server);
    wait_until_cold(&client);
    let evicted = tenants as f64 - versions_loaded(&client);
    let components_evicted = client.try_metric("switchyard_components_loaded").unwrap_or(f64::NAN);
    let rss_evicted = rss(server.pid());
    let loads_before = load_buckets(&client);
    let digests_before = load_digests(&client);
    let (single_before, mut single_cpu) =
        measured(server.pid(), || select_one(&server, &selects[0], 0, 2_000));
    let (mut round_trip, mut round_trip_cpu) = measured(server.pid(), || round_trips(&server, 2_000));
    let (round, random_cpu) = measured(server.pid(), || select_random(&server, &selects, 0, selections));
    let RandomRound { cold, warm, late: warm_late, single: single_between } = round;
    let inside_before = inside_buckets(&client);
    let (single_after, more_single_cpu) =
        measured(server.pid(), || select_one(&server, &selects[0], 0, 2_000));
    single_cpu.add(&more_single_cpu);
    let inside_single = delta(&inside_buckets(&client), &inside_before);
    let (more_round_trips, more_cpu) = measured(server.pid(), || round_trips(&server, 2_000));
    round_trip.extend(more_round_trips);
    round_trip_cpu.add(&more_cpu);
    let rss_selections = rss(server.pid());
    let loads = delta(&load_buckets(&client), &loads_before);
    let digests = load_digests(&client) - digests_before;
    let metrics_bytes = Client::new(&server).metrics().len();
    let single_outside = [single_before, single_after].concat();
    let single = [single_outside.as_slice(), &single_between].concat();

    // 2b. Every version evicted again, then each tenant selected once: cold again, but
    // now from artifacts this server checked before (their digests are not computed again).
    wait_until_cold(&client);
    let loads_before = load_buckets(&client);
    let digests_before = load_digests(&client);
    let inside_before = inside_buckets(&client);
    let (cold_again, cold_again_cpu) = measured(server.pid(), || select_each_once(&server, &selects));
    let loads_again = delta(&load_buckets(&client), &loads_before);
    let digests_again = load_digests(&client) - digests_before;
    let inside_cold = delta(&inside_buckets(&client), &inside_before);
    // And once more, each now loaded: the same round warm, for the service's own time.
    let inside_before = inside_buckets(&client);
    let misses_before = client.try_metric("switchyard_idle_misses_total").unwrap_or(0.0);
    let (warm_again, warm_again_cpu) = measured(server.pid(), || select_each_once(&server, &selects));
    let inside_warm = delta(&inside_buckets(&client), &inside_before);
    let warm_again_misses = client.try_metric("switchyard_idle_misses_total").unwrap_or(0.0) - misses_before;

    // 3. Restart on the data dir.
    drop(server);
    let restarted = restart(&data, &config, &tokens[tenants - 1], tenants - 1, tenants);

    println!("Scale: {tenants} tenants, {distinct} distinct components, {selections} selections");
    println!("(one `switchyard serve`, release build, service defaults; loopback HTTP, client-side times)\n");
    println!("| measure | value |");
    println!("| --- | ---: |");
    println!("| uploads + assignments, wall | {:.1} s |", upload_time.as_secs_f64());
    println!(
        "| tenants onboarded per minute, the tenth after the distinct uploads / the last tenth | {first_rate:.0} / {last_rate:.0} |"
    );
    println!("| compile per distinct upload, p50 / p99 | {} |", pair(&compile_ms, 1.0, "ms"));
    println!(
        "| functions the uploads' compiles found compiled before / compiled (Cranelift's function cache; the distinct components differ only in a custom section, so after the first they share every function) | {:.0} / {:.0} |",
        functions[0], functions[1]
    );
    println!(
        "| upload → its first selection answered (class assigned between; 2 uploaders, so a compile may wait for the other's permit), compiled / parameters only, p50 / p99 | {} / {} |",
        pair(&first_compiled, 1.0, "ms"),
        if first_params.is_empty() { "—".to_string() } else { pair(&first_params, 1.0, "ms") }
    );
    if tiers_expected > 0.0 {
        println!(
            "| `tiered`: uploads moved to Cranelift's code, and when the last was | {tiered:.0} of {tiers_expected:.0}, {:.1} s after the last upload |",
            tiered_after.as_secs_f64()
        );
    }
    println!("| RSS after the uploads | {rss_uploads} |");
    println!(
        "| versions cold (evicted), compiled components still held, then RSS | {evicted} of {tenants}, {components_evicted}, {rss_evicted} |"
    );
    println!("| RSS after the selections | {rss_selections} |");
    println!("| /metrics after the selections | {:.1} MB |", metrics_bytes as f64 / 1e6);
    println!(
        "| cold selection (a tenant's first), p50 / p99 ({}) | {} |",
        cold.len(),
        pair(&cold, 1e3, "µs")
    );
    println!(
        "| of which versions loaded in the server within 0.1 / 0.25 / 0.5 / 1 ms / longer; artifact digests computed on a load's path | {}; {digests} |",
        per_bucket(&loads)
    );
    println!(
        "| cold again (every version evicted a second time; artifacts checked before), p50 / p99 ({}) | {} |",
        cold_again.len(),
        pair(&cold_again, 1e3, "µs")
    );
    println!(
        "| of which versions loaded in the server within 0.1 / 0.25 / 0.5 / 1 ms / longer; artifact digests computed on a load's path | {}; {digests_again} |",
        per_bucket(&loads_again)
    );
    println!(
        "| then each tenant once more (loaded: warm), p50 / p99 ({}); of which found no idle instance | {}; {warm_again_misses} |",
        warm_again.len(),
        pair(&warm_again, 1e3, "µs")
    );
    println!(
        "| inside the service (`switchyard_selection_seconds`), share ≤ {} µs: cold again; warm again; the single tenant (its second round) | {}; {}; {} |",
        INSIDE_BOUNDS.iter().map(|b| format!("{:.0}", b * 1e6)).collect::<Vec<_>>().join(" / "),
        shares(&inside_cold),
        shares(&inside_warm),
        shares(&inside_single)
    );
    println!("| warm selection, p50 / p99 ({}) | {} |", warm.len(), pair(&warm, 1e3, "µs"));
    println!(
        "| of which in each thread's second half of the round (few cold ones beside them), p50 / p99 ({}) | {} |",
        warm_late.len(),
        pair(&warm_late, 1e3, "µs")
    );
    println!(
        "| single tenant warm, p50 / p99 ({}: before and after the random round, and between its parts) | {} |",
        single.len(),
        pair(&single, 1e3, "µs")
    );
    println!(
        "| of which before and after / between the parts, p50 ({} / {}) | {:.1} / {:.1} µs |",
        single_outside.len(),
        single_between.len(),
        quantile(&single_outside, 0.5) * 1e3,
        quantile(&single_between, 0.5) * 1e3
    );
    println!("| warm p50 / single-tenant p50 | {:.2} |", quantile(&warm, 0.5) / quantile(&single, 0.5));
    println!(
        "| the HTTP round trip alone (`GET /healthz`, same 2 threads), p50 / p99 ({}) | {} |",
        round_trip.len(),
        pair(&round_trip, 1e3, "µs")
    );
    println!(
        "| CPU per request, user + system, the server's / the bench's own (its 2 client threads), and the server's page faults: `/healthz`; cold again; warm again; the random round (every selection of it); the single tenant (before and after it) | {}; {}; {}; {}; {} |",
        round_trip_cpu.per_request(round_trip.len()),
        cold_again_cpu.per_request(cold_again.len()),
        warm_again_cpu.per_request(warm_again.len()),
        random_cpu.per_request(cold.len() + warm.len() + single_between.len()),
        single_cpu.per_request(single_outside.len())
    );
    println!("| restart: listening after | {:.2} s |", restarted.listening.as_secs_f64());
    println!(
        "| restart: first selection answered after (versions loaded then) | {:.2} s ({}) |",
        restarted.first_answer.as_secs_f64(),
        restarted.loaded_at_first_answer
    );
    println!("| restart: every version loaded after | {:.2} s |", restarted.all_loaded.as_secs_f64());
    println!("| RSS of the restarted server, then | {} |", restarted.rss);
}

/// Waits until no version is loaded (every one evicted), at most four eviction periods.
/// (With `compiler = "tiered"` a tier-up makes versions cold too: so counted by what is
/// loaded, not by evictions.)
fn wait_until_cold(client: &Client) {
    let evicting = Instant::now();
    while versions_loaded(client) > 0.0 && evicting.elapsed() < EVICT_AFTER * 4 {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Versions loaded now, across tenants (`switchyard_versions_loaded`).
fn versions_loaded(client: &Client) -> f64 {
    client
        .metrics()
        .lines()
        .filter(|l| l.starts_with("switchyard_versions_loaded{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The server's version loads so far (component and configure, as
/// `switchyard_version_load_seconds` counts them), cumulative: within 0.1, 0.25, 0.5 and
/// 1 ms, and all.
fn load_buckets(client: &Client) -> [f64; 5] {
    let series = "switchyard_version_load_seconds_bucket{le=";
    let bucket = |le: &str| client.try_metric(&format!("{series}\"{le}\"}}")).unwrap_or(0.0);
    [bucket("0.0001"), bucket("0.00025"), bucket("0.0005"), bucket("0.001"), bucket("+Inf")]
}

/// Artifact digests the server's loads have computed so far (those it had not checked
/// ahead).
fn load_digests(client: &Client) -> f64 {
    client.try_metric("switchyard_artifact_load_digests_total").unwrap_or(f64::NAN)
}

/// Bucket bounds of the service's selection latency read back (a subset of its own).
const INSIDE_BOUNDS: [f64; 5] = [2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4];

/// Selections the service timed at or under each of [`INSIDE_BOUNDS`], in all, and the
/// seconds they took (the last two entries), summed over every tenant's series of
/// `switchyard_selection_seconds`.
fn inside_buckets(client: &Client) -> Vec<f64> {
    let text = client.metrics();
    let mut sums = vec![0.0; INSIDE_BOUNDS.len() + 2];
    for line in text.lines() {
        if let Some(seconds) = line.strip_prefix("switchyard_selection_seconds_sum{") {
            let seconds = seconds.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok());
            sums[INSIDE_BOUNDS.len() + 1] += seconds.unwrap_or(0.0);
            continue;
        }
        if !line.starts_with("switchyard_selection_seconds_bucket{") {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let Some((_, le)) = series.rsplit_once("le=\"") else { continue };
        let le = le.trim_end_matches("\"}");
        if le == "+Inf" {
            sums[INSIDE_BOUNDS.len()] += value;
        } else if let Some(i) = INSIDE_BOUNDS.iter().position(|b| le.parse::<f64>().ok() == Some(*b)) {
            sums[i] += value;
        }
    }
    sums
}

/// Cumulative buckets as the count in each: "a / b / c …".
fn per_bucket(cumulative: &[f64]) -> String {
    let mut below = 0.0;
    let counts: Vec<String> = cumulative
        .iter()
        .map(|&n| {
            let count = n - below;
            below = n;
            format!("{count:.0}")
        })
        .collect();
    counts.join(" / ")
}

fn delta(after: &[f64], before: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Each bound's cumulative bucket as a share of all, in percent, and the mean (of
/// [`inside_buckets`] over a round).
fn shares(inside: &[f64]) -> String {
    let (bounded, rest) = inside.split_at(INSIDE_BOUNDS.len());
    let (all, seconds) = (rest[0].max(1.0), rest[1]);
    let shares: Vec<String> = bounded.iter().map(|n| format!("{:.0} %", n / all * 100.0)).collect();
    format!("{}, mean {:.1} µs", shares.join(" / "), seconds / all * 1e6)
}

/// Tenant `i`: created, one upload (a distinct component for `i < distinct`, else
/// component `i % distinct` with its own parameters), its class assigned. (token,
/// compile ms the server reported).
fn onboard(client: &Client, i: usize, distinct: usize) -> Onboarded {
    let tenant = format!("t{i}");
    let token = client.add_tenant(&tenant);
    let bytes = variant(DEFAULT_POLICY, (i % distinct) as u32);
    let params =
        (i >= distinct).then(|| format!("%7B%22prefill_load_scale%22%3A{}%7D", 1.0 + i as f64 / 1e5));
    let started = Instant::now();
    let (status, v) = client.upload(&token, &tenant, "mine", &bytes, params.as_deref());
    assert_eq!(status, 201, "tenant {tenant}: {v}");
    let compile_ms = v["compile_ms"].as_f64().unwrap_or(0.0);
    let compiler = v["compiler"].as_str().unwrap_or_default().to_string();
    client.assigned(&token, &tenant, "latency", json!({ "policy": "mine" }));
    let (status, answer) = client.select(&token, &tenant, Some("latency"));
    assert!(status == 200 && answer["version"] == v["version"], "tenant {tenant}: {status} {answer}");
    Onboarded { token, compile_ms, compiler, to_first_answer_ms: started.elapsed().as_secs_f64() * 1e3 }
}

/// What onboarding a tenant reported.
struct Onboarded {
    token: String,
    /// As the upload's answer says.
    compile_ms: f64,
    /// Whose code the upload's answer says it runs: `cranelift` or `winch`.
    compiler: String,
    /// From sending the upload to its first selection answered (the class assigned in
    /// between), over HTTP.
    to_first_answer_ms: f64,
}

/// The bytes of tenant `t{i}`'s selection (the sample request, class `latency`), built
/// once, before any round is timed.
fn select_request(token: &str, i: usize) -> Vec<u8> {
    let body = select_body(&format!("t{i}"), Some("latency")).to_string();
    request("POST", "/v1/select", Some(token), Some(&body))
}

/// One selection (`select`, tenant `t{i}`'s request), timed (seconds); asserts the
/// guest answered it.
fn timed_select(connection: &mut Connection, select: &[u8], i: usize) -> f64 {
    let started = Instant::now();
    let (status, body) = connection.exchange(select);
    let took = started.elapsed().as_secs_f64();
    let by_guest = find(body, br#""build":"guest""#).is_some();
    assert!(status == 200 && by_guest, "tenant t{i}: {status} {}", String::from_utf8_lossy(body));
    took
}

/// `n` selections of tenant `i` alone, from 2 threads; their times (ms).
fn select_one(server: &Server, select: &[u8], i: usize, n: usize) -> Vec<f64> {
    from_two_threads(server, n, |connection| timed_select(connection, select, i))
}

/// `n` requests that do no work (`GET /healthz`), from 2 threads; their times (ms): the
/// HTTP round trip alone, beside which the selections' times are read.
fn round_trips(server: &Server, n: usize) -> Vec<f64> {
    let healthz = request("GET", "/healthz", None, None);
    from_two_threads(server, n, |connection| {
        let started = Instant::now();
        let (status, _) = connection.exchange(&healthz);
        let took = started.elapsed().as_secs_f64();
        assert_eq!(status, 200, "/healthz");
        took
    })
}

/// `n` requests made by `request` (which times one, in seconds) from 2 threads, each with
/// its own connection; their times (ms).
fn from_two_threads(server: &Server, n: usize, timed: impl Fn(&mut Connection) -> f64 + Sync) -> Vec<f64> {
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut connection = Connection::open(&server.addr());
                    (0..n / 2).map(|_| timed(&mut connection) * 1e3).collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().expect("a requesting thread")).collect()
    })
}

/// The random round's parts; between two parts both threads select the single tenant
/// alone, [`SINGLE_BETWEEN`] times in all.
const PARTS: usize = 10;
/// Selections of the single tenant between two parts of the random round (both threads).
const SINGLE_BETWEEN: usize = 200;

/// The times (ms) of the random round ([`select_random`]).
#[derive(Default)]
struct RandomRound {
    /// Each tenant's first selection.
    cold: Vec<f64>,
    /// The others.
    warm: Vec<f64>,
    /// The warm ones of each thread's second half. Most cold selections come early (by
    /// half way each tenant has been drawn ~n / 2 / tenants times), so these say how much
    /// the cold loads beside them slow the others.
    late: Vec<f64>,
    /// The single tenant alone, between the parts: sampled side by side with the warm
    /// ones, through whatever the machine did meanwhile, not only before and after.
    single: Vec<f64>,
}

/// `n` selections of uniformly random tenants from 2 threads, in [`PARTS`] parts with
/// [`SINGLE_BETWEEN`] selections of tenant `single` alone between two parts (both
/// threads on it, between barriers, so that no other tenant's selection runs beside
/// them).
fn select_random(server: &Server, selects: &[Vec<u8>], single: usize, n: usize) -> RandomRound {
    let seen: Vec<AtomicUsize> = (0..selects.len()).map(|_| AtomicUsize::new(0)).collect();
    let barrier = std::sync::Barrier::new(2);
    let mut round = RandomRound::default();
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..2u64)
            .map(|seed| {
                let (seen, barrier) = (&seen, &barrier);
                s.spawn(move || {
                    let mut connection = Connection::open(&server.addr());
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    let mut mine = RandomRound::default();
                    for k in 0..n / 2 {
                        if k > 0 && k % (n / 2 / PARTS).max(1) == 0 {
                            barrier.wait();
                            for _ in 0..SINGLE_BETWEEN / 2 {
                                mine.single
                                    .push(timed_select(&mut connection, &selects[single], single) * 1e3);
                            }
                            barrier.wait();
                        }
                        let i = (rng.next_u64() % selects.len() as u64) as usize;
                        let first = seen[i].fetch_add(1, Ordering::Relaxed) == 0;
                        let ms = timed_select(&mut connection, &selects[i], i) * 1e3;
                        if first {
                            mine.cold.push(ms);
                        } else {
                            mine.warm.push(ms);
                            if k >= n / 4 {
                                mine.late.push(ms);
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        for t in threads {
            let RandomRound { cold, warm, late, single } = t.join().expect("a selecting thread");
            round.cold.extend(cold);
            round.warm.extend(warm);
            round.late.extend(late);
            round.single.extend(single);
        }
    });
    round
}

/// Every tenant selected once, in a random order, from 2 threads (or
/// `SCALE_AGAIN_THREADS`): their times (ms).
fn select_each_once(server: &Server, selects: &[Vec<u8>]) -> Vec<f64> {
    // `SCALE_AGAIN_THREADS=1`: these two rounds from one client thread (the server's CPU
    // then shared with one client, not two).
    let threads = env("SCALE_AGAIN_THREADS", 2).max(1);
    let mut order: Vec<usize> = (0..selects.len()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut connection = Connection::open(&server.addr());
                    let mut times = Vec::new();
                    while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        times.push(timed_select(&mut connection, &selects[i], i) * 1e3);
                    }
                    times
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().expect("a selecting thread")).collect()
    })
}

/// What a restart took.
struct Restarted {
    listening: Duration,
    /// Tenant `t{i}`'s first selection answered by its own version.
    first_answer: Duration,
    /// Versions loaded when that answer came (`switchyard_versions_loaded`, summed).
    loaded_at_first_answer: u64,
    /// All `versions` loaded.
    all_loaded: Duration,
    rss: Rss,
}

/// Starts `serve` again on `data`, which holds `versions` versions, and times it.
fn restart(
    data: &std::path::Path,
    config: &std::path::Path,
    token: &str,
    i: usize,
    versions: usize,
) -> Restarted {
    let started = Instant::now();
    let mut child = serve_command(data, Some(config), Some(ADMIN))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting serve again");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("reading stdout");
    let listening = started.elapsed();
    let url = line.trim().strip_prefix("listening on ").expect("listening").to_string();
    let client = Client::at(&url);
    loop {
        let (status, v) = client.select(token, &format!("t{i}"), Some("latency"));
        if status == 200 && v["build"] == "guest" {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let first_answer = started.elapsed();
    let loaded = || {
        let (_, text) = client.call("GET", "/metrics", Some(ADMIN), Body::None);
        let text = text.as_str().unwrap_or_default().to_string();
        let series = text.lines().filter(|l| l.starts_with("switchyard_versions_loaded{"));
        series.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>() as u64
    };
    let loaded_at_first_answer = loaded();
    let deadline = Instant::now() + Duration::from_secs(300);
    while loaded() < versions as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let all_loaded = started.elapsed();
    let rss = rss(child.id());
    let _ = child.kill();
    let _ = child.wait();
    Restarted { listening, first_answer, loaded_at_first_answer, all_loaded, rss }
}

/// Tenants onboarded per minute over the tenth of them right after the distinct uploads
/// (whose compiles would hide the writes' cost) and over the last tenth, from when each
/// finished (in tenant order): how a write's cost grows with the tenants there are.
/// (Two uploaders finish out of tenant order: with few tenants a span can be negative,
/// read as none.)
fn onboarding_rates(finished: &[Duration], distinct: usize) -> (f64, f64) {
    let n = finished.len();
    let tenth = (n / 10).max(1);
    let rate = |from: usize, to: usize| {
        let start = if from == 0 { Duration::ZERO } else { finished[from - 1] };
        (to - from) as f64 / finished[to - 1].saturating_sub(start).as_secs_f64().max(1e-9) * 60.0
    };
    let early = distinct.min(n - tenth.min(n));
    (rate(early, early + tenth.min(n - early)), rate(n - tenth, n))
}

/// CPU time used (seconds): the server's in user and system mode, and this bench
/// process's own (its client threads), from `/proc/<pid>/stat`: every thread's,
/// those that have exited included, in ticks of 10 ms (`USER_HZ`, 100 on Linux).
/// Beside the latencies, a figure the scheduler does not move: what a request costs,
/// not how long it waited for a core.
struct Cpu {
    server_user: f64,
    server_system: f64,
    bench_user: f64,
    bench_system: f64,
    /// The server's minor page faults (`minflt`, field 10): a fault a selection takes
    /// (memory first touched, or given back and touched again) costs ~1 µs or more.
    server_faults: f64,
}

impl Cpu {
    fn now(server: u32) -> Self {
        // One read of each file: its fields are of one moment.
        let [server_faults, server_user, server_system] =
            stat_fields(&format!("/proc/{server}/stat"), [10, 14, 15]);
        let [bench_user, bench_system] = stat_fields("/proc/self/stat", [14, 15]);
        Cpu {
            server_user: server_user / USER_HZ,
            server_system: server_system / USER_HZ,
            bench_user: bench_user / USER_HZ,
            bench_system: bench_system / USER_HZ,
            server_faults,
        }
    }

    /// What was used between `before` and `self`.
    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            server_user: self.server_user - before.server_user,
            server_system: self.server_system - before.server_system,
            bench_user: self.bench_user - before.bench_user,
            bench_system: self.bench_system - before.bench_system,
            server_faults: self.server_faults - before.server_faults,
        }
    }

    fn add(&mut self, more: &Cpu) {
        self.server_user += more.server_user;
        self.server_system += more.server_system;
        self.bench_user += more.bench_user;
        self.bench_system += more.bench_system;
        self.server_faults += more.server_faults;
    }

    /// "user + system (server) / user + system (bench) µs, page faults (server)" per
    /// request of `n`.
    fn per_request(&self, n: usize) -> String {
        let per = |s: f64| s * 1e6 / n.max(1) as f64;
        format!(
            "{:.0} + {:.0} / {:.0} + {:.0} µs, {:.2} faults",
            per(self.server_user),
            per(self.server_system),
            per(self.bench_user),
            per(self.bench_system),
            self.server_faults / n.max(1) as f64
        )
    }
}

/// `round`'s result, and the CPU the server (`server`, its pid) and this process used
/// while it ran.
fn measured<T>(server: u32, round: impl FnOnce() -> T) -> (T, Cpu) {
    let before = Cpu::now(server);
    let result = round();
    (result, Cpu::now(server).since(&before))
}

/// Clock ticks a second in `/proc/<pid>/stat`'s `utime` and `stime` (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// Fields `N` (numbered from 1, as in proc(5)) of one read of a `/proc/<pid>/stat`, read
/// after the parenthesised command name, which may hold spaces. Panics if one cannot be
/// read: a figure of zero would be printed as a measurement.
fn stat_fields<const N: usize>(stat: &str, fields: [usize; N]) -> [f64; N] {
    let text = std::fs::read_to_string(stat).unwrap_or_else(|e| panic!("{stat}: {e}"));
    let after_name: Vec<&str> =
        text.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    // After the name the first field is the state, field 3.
    fields.map(|n| {
        let value = after_name.get(n - 3).and_then(|v| v.parse().ok());
        value.unwrap_or_else(|| panic!("{stat}: no field {n} in `{text}`"))
    })
}

/// The resident memory of the process `pid`.
fn rss(pid: u32) -> Rss {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Rss { total: kib("VmRSS:") / 1024, file: kib("RssFile:") / 1024 }
}

/// A process's resident memory, MiB: in all, and the part backed by files (mapped
/// artifacts' code, the binary), which the kernel may reclaim without swap.
#[derive(Debug, Clone, Copy)]
struct Rss {
    total: u64,
    file: u64,
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} MiB ({} of it file-backed)", self.total, self.file)
    }
}

/// "p50 / p99 unit" of `samples` scaled by `scale`.
fn pair(samples: &[f64], scale: f64, unit: &str) -> String {
    format!("{:.1} / {:.1} {unit}", quantile(samples, 0.5) * scale, quantile(samples, 0.99) * scale)
}
