//! The `switchyard-dynamo` binary end to end: Dynamo's own selection API over HTTP, 16
//! workers whose KV events are published over ZMQ in vLLM's wire format by engines the test
//! runs, two routing groups mapped to two tenants of a real `switchyard serve`, each group
//! picking by its own tenant's policy; an upload and a rollback through `serve`'s API move
//! one group only, with no failed selection.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_test_util::DEFAULT_POLICY;
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

use crate::common::{BLOCK, Dynamo, Engine, PROMPT_BLOCKS, prompt, switchyard_binary};

/// Group `g`'s workers: ids `base + i`, worker i holding the first i blocks of the prompt
/// and (for i ≥ 1) a booked request of one block with i prefill tokens still to run.
const GROUPS: [(&str, u64); 2] = [("group-a", 1), ("group-b", 11)];
const PER_GROUP: usize = 8;

/// The default policy's cost of each worker (Dynamo's cost function, which the default
/// policy implements): `scale × prefill blocks + decode blocks`, the prefill being the
/// prompt less `credit ×` its cached tokens, plus the tokens queued; from the facts the
/// service reports. The lowest cost's worker.
fn expected(facts: &[(u64, f64, f64, f64)], credit: f64) -> u64 {
    let prompt = (PROMPT_BLOCKS * BLOCK) as f64;
    let cost = |(_, cached_blocks, queued, decode): &(u64, f64, f64, f64)| {
        (prompt - credit * cached_blocks * BLOCK as f64 + queued) / BLOCK as f64 + decode
    };
    let best = facts.iter().min_by(|a, b| cost(a).total_cmp(&cost(b))).unwrap();
    let ties = facts.iter().filter(|f| cost(f) == cost(best)).count();
    assert_eq!(ties, 1, "the designed state has one cheapest worker: {facts:?}");
    best.0
}

/// (worker, cached blocks of the prompt, queued prefill tokens, decode blocks) per worker
/// of `group`, as the service reports them.
fn facts(dynamo: &Dynamo, group: &str) -> Vec<(u64, f64, f64, f64)> {
    let (status, overlaps) =
        dynamo.call("POST", "/overlap_scores", Some(&json!({"routing_group": group, "token_ids": prompt()})));
    assert_eq!(status, 200, "{overlaps}");
    let (status, loads) = dynamo.call("GET", &format!("/loads?routing_group={group}"), None);
    assert_eq!(status, 200, "{loads}");
    let loads = &loads[0]["loads"];
    let mut facts: Vec<_> = overlaps["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let id = w["worker_id"].as_u64().unwrap();
            let load = loads.as_array().unwrap().iter().find(|l| l["worker_id"] == id);
            let get = |k: &str| load.and_then(|l| l[k].as_f64()).unwrap_or(0.0);
            (
                id,
                w["device_blocks"].as_f64().unwrap(),
                get("potential_prefill_tokens"),
                get("potential_decode_blocks"),
            )
        })
        .collect();
    facts.sort_by_key(|f| f.0);
    facts
}

#[test]
fn each_routing_group_picks_by_its_own_tenants_policy_and_an_upload_moves_one_group() {
    let dir = temp_dir("dynamo-service");
    switchyard_binary();
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    // acme: the default policy as uploaded (overlap credited); globex: the same component
    // with the cache not credited, so it weighs load alone.
    let no_credit = Some("%7B%22overlap_score_credit%22%3A0%7D");
    let acme = c.add_tenant("acme");
    c.uploaded(&acme, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&acme, "acme", "latency", json!({ "policy": "mine", "on_fault": "closed" }));
    let globex = c.add_tenant("globex");
    c.uploaded(&globex, "globex", "theirs", DEFAULT_POLICY, no_credit);
    c.assigned(&globex, "globex", "latency", json!({ "policy": "theirs", "on_fault": "closed" }));

    let dynamo = Dynamo::following(&dir, "group-a = \"acme\"\ngroup-b = \"globex\"\n");

    // 16 workers, each with an engine publishing its KV events.
    let context = zmq::Context::new();
    let mut engines = Vec::new();
    for (group, base) in GROUPS {
        for i in 0..PER_GROUP {
            let engine = Engine::new(&context);
            let id = base + i as u64;
            dynamo.register(group, id, &engine, 1000);
            engines.push((group, id, i, engine));
        }
    }
    // Worker i stores the prompt's first i blocks; published until the service has them
    // all (a subscriber misses what was sent before it connected).
    let tokens = prompt();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (_, id, i, engine) in &mut engines {
            if *i > 0 {
                engine.stored(&tokens, *i, *id * 1_000);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let seen = GROUPS.iter().all(|(group, base)| {
            facts(&dynamo, group).iter().all(|(id, cached, _, _)| *cached == (id - base) as f64)
        });
        if seen {
            break;
        }
        assert!(Instant::now() < deadline, "the events never arrived: {:?}", facts(&dynamo, "group-a"));
    }
    // Bookings: worker i (i ≥ 1) runs a two-block request with i prefill tokens to go.
    for (group, id, i, _) in &engines {
        if *i == 0 {
            continue;
        }
        dynamo.book(group, *id, Some(*i));
    }
    let (a_facts, b_facts) = (facts(&dynamo, "group-a"), facts(&dynamo, "group-b"));
    println!("group-a facts (worker, cached blocks, queued prefill tokens, decode blocks): {a_facts:?}");
    let (a_cached, a_load, b_load) =
        (expected(&a_facts, 1.0), expected(&a_facts, 0.0), expected(&b_facts, 0.0));
    assert_ne!(a_cached, a_load, "the two policies pick apart on this state");

    // Selections on both groups throughout, as gateways would send them.
    let stop = Arc::new(AtomicBool::new(false));
    let dynamo = Arc::new(dynamo);
    let select = |group: &'static str| {
        let (dynamo, stop) = (Arc::clone(&dynamo), Arc::clone(&stop));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&answers);
        let thread = std::thread::spawn(move || {
            let mut failed = Vec::new();
            let body = json!({"routing_group": group, "token_ids": prompt()});
            while !stop.load(Ordering::Relaxed) {
                match dynamo.try_call("POST", "/select", Some(&body)) {
                    Ok((200, v)) => {
                        assert_eq!(v["dp_rank"], 0, "{v}");
                        out.lock().unwrap().push(v["worker_id"].as_u64().unwrap());
                    }
                    other => failed.push(format!("{other:?}")),
                }
            }
            failed
        });
        (answers, thread)
    };
    let (a, a_thread) = select("group-a");
    let (b, b_thread) = select("group-b");
    let wait_for = |answers: &Mutex<Vec<u64>>, worker: u64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while answers.lock().unwrap().last() != Some(&worker) {
            assert!(
                Instant::now() < deadline,
                "{what}: never worker {worker}: {:?}",
                answers.lock().unwrap().last()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(&a, a_cached, "acme's policy on group-a");
    wait_for(&b, b_load, "globex's policy on group-b");

    // acme uploads a version that does not credit the cache: group-a moves; its rollback
    // moves it back; group-b never moves.
    c.uploaded(&acme, "acme", "mine", DEFAULT_POLICY, no_credit);
    wait_for(&a, a_load, "acme's v2 on group-a");
    let (status, v) = c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&acme), Body::None);
    assert_eq!(status, 200, "{v}");
    wait_for(&a, a_cached, "acme's v1 again after the rollback");
    let settled = b.lock().unwrap().len();
    while b.lock().unwrap().len() < settled + 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for (group, thread) in [("group-a", a_thread), ("group-b", b_thread)] {
        let failed = thread.join().unwrap();
        assert!(failed.is_empty(), "{group}: failed selections: {failed:?}");
    }
    let mut runs = a.lock().unwrap().clone();
    runs.dedup();
    assert_eq!(runs, [a_cached, a_load, a_cached], "group-a: v1, v2, v1, each answer one version's");
    assert!(b.lock().unwrap().iter().all(|w| *w == b_load), "group-b never moved");
}

#[test]
fn each_bad_field_of_the_config_is_refused_by_name_and_check_loads_every_tenant() {
    let dir = temp_dir("dynamo-service-config");
    std::fs::create_dir_all(&dir).unwrap();
    let store = "[switchyard.policy.store]\ndata_dir = \"/nonexistent\"\ntenant_from = \"routing_group\"\nclass = \"c\"\n";
    let cases = [
        ("port", format!("port = 0\n{store}"), "port: must be 1 to 65535"),
        ("unknown", format!("port = 1\nprot = 2\n{store}"), "unknown field `prot`"),
        ("missing", "port = 1\n".to_string(), "missing field `switchyard`"),
        (
            "threads",
            format!("port = 1\nindexer_threads = 0\n{store}"),
            "indexer_threads: must be 1 to 64, got 0",
        ),
        ("pool", format!("port = 1\nworker_type = \"encode\"\n{store}"), "unknown variant `encode`"),
        ("data-dir", format!("port = 1\n{store}"), "switchyard.policy.store.data_dir: /nonexistent"),
        (
            "registry",
            "port = 1\n[switchyard.policy.store]\nregistry = \"nats://127.0.0.1:1\"\ntenant_from = \"routing_group\"\nclass = \"c\"\n".to_string(),
            "switchyard.policy.store.registry: nats://127.0.0.1:1: the registry is unavailable",
        ),
        (
            "tenant",
            "port = 1\n[switchyard.policy.store]\ndata_dir = \"/tmp\"\nclass = \"c\"\n".to_string(),
            "switchyard.policy.store: missing `tenant` (one tenant) or `tenant_from`",
        ),
        (
            "temperature",
            format!("port = 1\n[switchyard]\ntemperature = -1.0\n{store}"),
            "switchyard.temperature: must be finite and ≥ 0, got -1",
        ),
    ];
    for (name, text, expected) in cases {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_switchyard-dynamo"))
            .args(["--check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: expected `{expected}` in: {stderr}");
    }
    // A good one loads every tenant of the data dir and says so.
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    switchyard_binary();
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    let config = dir.join("good.toml");
    std::fs::write(
        &config,
        format!("port = 1\n[switchyard.policy.store]\ndata_dir = {:?}\ntenant_from = \"routing_group\"\nclass = \"c\"\n", data),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard-dynamo"))
        .args(["--check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let help = Command::new(env!("CARGO_BIN_EXE_switchyard-dynamo")).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--config <FILE>"));
}

#[test]
fn the_catalogs_capacities_reach_the_policys_capacity_imports() {
    let dir = temp_dir("dynamo-service-capacity");
    switchyard_binary();
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    // The builtin capacity-aware policy: usage = decode blocks / total_kv_blocks, lowest
    // wins; with no capacity known every worker costs the same.
    let initech = c.add_tenant("initech");
    c.assigned(&initech, "initech", "latency", json!({ "policy": "capacity-aware", "on_fault": "closed" }));
    let dynamo = Dynamo::following(&dir, "group-c = \"initech\"\n");
    let context = zmq::Context::new();
    let mut engines = Vec::new();
    for (id, total) in [(21u64, 100u64), (22, 400), (23, 200), (24, 300)] {
        let engine = Engine::new(&context);
        dynamo.register("group-c", id, &engine, total);
        // The same two-block request booked on each: worker 22 has the most room.
        dynamo.book("group-c", id, None);
        engines.push(engine);
    }
    // Prompts of every length from 1 to 12 tokens (each a different seed): the one worker
    // with the most room every time. Without capacities all four tie, and the seed spreads
    // the picks.
    for len in 1..=12u32 {
        let body = json!({"routing_group": "group-c", "token_ids": (0..len).collect::<Vec<_>>()});
        let (status, v) = dynamo.call("POST", "/select", Some(&body));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["worker_id"], 22, "prompt of {len}: {v}");
    }
}
