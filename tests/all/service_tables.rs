//! Worker tables held by `switchyard serve`: a selection from a held table picks what
//! the same facts sent whole pick; changes apply in order or not at all; one tenant's
//! tables are bounded and invisible to another; answers carry the pick alone unless
//! costs are asked for.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{Value, json};

use switchyard::selection::wire::{RequestJson, TableDelta, TableJson};
use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{Body, Client, Server, temp_dir};

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

const PROTOBUF: &str = "application/x-protobuf";

/// The load columns a router holds, and the cache columns a request brings.
const LOAD: [&str; 3] = ["active_prefill_tokens", "decode_blocks", "active_requests"];
const CACHE: [&str; 4] =
    ["device_overlap_blocks", "host_overlap_blocks", "disk_overlap_blocks", "cached_tokens"];

/// One (worker, rank) row: each column by name.
type Row = ((u64, u32), BTreeMap<&'static str, u32>);

/// The test's own copy of a table: what the service should hold.
#[derive(Default)]
struct Model {
    /// id → (dp_size, total_kv_blocks, taints).
    workers: BTreeMap<u64, (u32, u32, Vec<String>)>,
    /// (id, rank) → each column by name.
    rows: BTreeMap<(u64, u32), BTreeMap<&'static str, u32>>,
}

impl Model {
    fn worker_json(id: u64, (dp, blocks, taints): &(u32, u32, Vec<String>)) -> Value {
        json!({ "id": id, "dp_size": dp, "total_kv_blocks": blocks, "taints": taints })
    }

    fn workers_json(&self) -> Vec<Value> {
        self.workers.iter().map(|(&id, w)| Self::worker_json(id, w)).collect()
    }

    fn add(&mut self, id: u64, worker: (u32, u32, Vec<String>)) {
        for rank in 0..worker.0 {
            self.rows.insert((id, rank), BTreeMap::new());
        }
        self.workers.insert(id, worker);
    }

    fn remove(&mut self, id: u64) {
        self.workers.remove(&id);
        self.rows.retain(|&(w, _), _| w != id);
    }

    /// Rows as the `inputs` columns: `(id, rank)` listed, each column given.
    fn columns(rows: &[Row], names: &[&'static str]) -> Value {
        let mut inputs = serde_json::Map::new();
        inputs.insert("worker_id".into(), json!(rows.iter().map(|((id, _), _)| *id).collect::<Vec<_>>()));
        inputs.insert("dp_rank".into(), json!(rows.iter().map(|((_, r), _)| *r).collect::<Vec<_>>()));
        for &name in names {
            let column: Vec<u32> = rows.iter().map(|(_, c)| c.get(name).copied().unwrap_or(0)).collect();
            inputs.insert(name.into(), json!(column));
        }
        Value::Object(inputs)
    }
}

fn random_worker(rng: &mut ChaCha8Rng) -> (u32, u32, Vec<String>) {
    let dp = 1 + rng.next_u32() % 3;
    let blocks = if rng.next_u32().is_multiple_of(4) { 0 } else { 1024 + rng.next_u32() % 8192 };
    let taints = if rng.next_u32().is_multiple_of(2) { vec!["zone-a".to_string()] } else { vec![] };
    (dp, blocks, taints)
}

fn ok(c: &Client, method: &str, path: &str, token: &str, body: Value) -> Value {
    let (status, v) = c.call(method, path, Some(token), Body::Json(body));
    assert_eq!(status, 200, "{method} {path}: {v}");
    v
}

/// ≥ 10,000 selections: each step changes the held table by a random delta (load moves,
/// workers join and leave) and asks for a selection with random facts and random
/// per-request overlaps, once from the held table and once with the same facts whole, on
/// two tenants of the same policies (a guest's state is its tenant's), for the native
/// default and the default policy's guest. Every pick and every cost is the same. Held
/// requests and deltas alternate between JSON and protobuf.
#[test]
fn picks_from_a_held_table_equal_picks_from_the_same_facts_sent_whole() {
    let dir = temp_dir("tables-equal");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let (held, whole) = (c.add_tenant("held"), c.add_tenant("whole"));
    for (token, tenant) in [(&held, "held"), (&whole, "whole")] {
        c.uploaded(token, tenant, "mine", DEFAULT_POLICY, None);
        c.assigned(token, tenant, "guest", json!({ "policy": "mine" }));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(47);
    let mut model = Model::default();
    let mut next_id = 0u64;
    for _ in 0..24 {
        let worker = random_worker(&mut rng);
        model.add(next_id, worker);
        next_id += 1;
    }
    let path = "/v1/tenants/held/tables/pool";
    let put = ok(&c, "PUT", path, &held, json!({ "workers": model.workers_json() }));
    let mut version = put["version"].as_u64().expect("a version");

    let steps = 2_500;
    let mut selections = 0;
    for step in 0..steps {
        // A delta: sometimes a worker leaves and one joins; always some load changes.
        let mut delta = json!({ "base_version": version });
        if step % 7 == 3 && model.workers.len() > 4 {
            let ids: Vec<u64> = model.workers.keys().copied().collect();
            let gone = ids[rng.next_u32() as usize % ids.len()];
            model.remove(gone);
            delta["remove"] = json!([gone]);
        }
        if step % 5 == 1 {
            let worker = random_worker(&mut rng);
            delta["add"] = json!([Model::worker_json(next_id, &worker)]);
            model.add(next_id, worker);
            next_id += 1;
        }
        let keys: Vec<(u64, u32)> = model.rows.keys().copied().collect();
        let mut changed = BTreeMap::new();
        for _ in 0..1 + rng.next_u32() % 6 {
            let key = keys[rng.next_u32() as usize % keys.len()];
            let row = model.rows.get_mut(&key).expect("a row");
            for name in LOAD {
                row.insert(
                    name,
                    rng.next_u32() % [8192, 1000, 16][LOAD.iter().position(|&n| n == name).unwrap()],
                );
            }
            changed.insert(key, row.clone());
        }
        let changed: Vec<_> = changed.into_iter().collect();
        delta["inputs"] = Model::columns(&changed, &LOAD);
        // Every third delta travels as protobuf.
        let answer = if step % 3 == 2 {
            let delta: TableDelta = serde_json::from_value(delta).expect("a delta");
            let bytes = switchyard_proto::encode_delta(&delta);
            let (status, _, answer) =
                c.exchange("POST", &format!("{path}/deltas"), &held, (PROTOBUF, PROTOBUF), &bytes);
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
            serde_json::to_value(switchyard_proto::decode_table_version(&answer).expect("an answer")).unwrap()
        } else {
            ok(&c, "POST", &format!("{path}/deltas"), &held, delta)
        };
        assert!(answer["version"].as_u64() > Some(version), "{answer}");
        version = answer["version"].as_u64().expect("a version");

        // The request's own overlaps, on a few workers.
        let mut overlaps = BTreeMap::new();
        for _ in 0..rng.next_u32() % 5 {
            let key = keys[rng.next_u32() as usize % keys.len()];
            if !model.rows.contains_key(&key) {
                continue;
            }
            let device = rng.next_u32() % 64;
            let cached = device * 16 + rng.next_u32() % 16;
            let mut row = BTreeMap::new();
            row.insert("device_overlap_blocks", device);
            row.insert("host_overlap_blocks", rng.next_u32() % 8);
            row.insert("disk_overlap_blocks", 0);
            row.insert("cached_tokens", cached);
            overlaps.insert(key, row);
        }
        let overlaps: Vec<_> = overlaps.into_iter().collect();
        let facts = json!({
            "prompt_tokens": 256 + rng.next_u32() % 2048,
            "block_size": 16,
            "seed": rng.next_u64(),
            "temperature": if step % 3 == 0 { 0.5 } else { 0.0 },
            "preferred_taints": if step % 4 == 0 { json!({ "zone-a": 0.7 }) } else { json!({}) },
            "costs": true,
        });
        // Whole: every worker, every row, the overlaps merged in.
        let mut all_rows: Vec<_> = model.rows.clone().into_iter().collect();
        for (key, row) in &mut all_rows {
            if let Some((_, over)) = overlaps.iter().find(|(k, _)| k == key) {
                row.extend(over.iter().map(|(k, v)| (*k, *v)));
            }
        }
        let mut names = LOAD.to_vec();
        names.extend(CACHE);
        for class in [None, Some("guest")] {
            let mut held_request = facts.clone();
            held_request["tenant"] = json!("held");
            held_request["policy_class"] = json!(class);
            held_request["table"] = json!("pool");
            held_request["table_version"] = json!(version);
            held_request["inputs"] = Model::columns(&overlaps, &CACHE);
            let mut whole_request = facts.clone();
            whole_request["tenant"] = json!("whole");
            whole_request["policy_class"] = json!(class);
            whole_request["workers"] = json!(model.workers_json());
            whole_request["inputs"] = Model::columns(&all_rows, &names);
            // Every other held selection travels as protobuf, both ways.
            let a = if step % 2 == 1 {
                let request: RequestJson = serde_json::from_value(held_request).expect("a request");
                let bytes = switchyard_proto::encode_request(&request);
                let (status, media, answer) =
                    c.exchange("POST", "/v1/select", &held, (PROTOBUF, PROTOBUF), &bytes);
                assert_eq!((status, media.as_str()), (200, PROTOBUF), "{}", String::from_utf8_lossy(&answer));
                serde_json::to_value(switchyard_proto::decode_answer(&answer).expect("an answer")).unwrap()
            } else {
                ok(&c, "POST", "/v1/select", &held, held_request)
            };
            let b = ok(&c, "POST", "/v1/select", &whole, whole_request);
            assert_eq!(a["table_version"], json!(version), "{a}");
            assert_eq!(a["build"], if class.is_some() { "guest" } else { "native" }, "{a}");
            for field in ["worker_id", "dp_rank", "cost", "candidates", "costs", "build", "fallback"] {
                assert_eq!(
                    a[field], b[field],
                    "step {step}, class {class:?}, `{field}`:\nheld {a}\nwhole {b}"
                );
            }
            selections += 2;
        }
    }
    assert!(selections >= 10_000, "{selections} selections");
}

#[test]
fn deltas_out_of_order_or_to_an_unknown_version_are_refused_naming_the_version() {
    let dir = temp_dir("tables-order");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let path = "/v1/tenants/acme/tables/pool";
    let workers = json!([{ "id": 1 }, { "id": 2 }]);
    let v1 = ok(&c, "PUT", path, &token, json!({ "workers": workers }))["version"].as_u64().unwrap();
    let load = |n: u32| json!({ "worker_id": [1], "decode_blocks": [n] });
    let v2 = ok(
        &c,
        "POST",
        &format!("{path}/deltas"),
        &token,
        json!({ "base_version": v1, "inputs": load(5) }),
    )["version"]
        .as_u64()
        .unwrap();
    assert!(v2 > v1);

    // The same delta again (a retry, or one delivered twice): based on v1, refused.
    let (status, v) = c.call(
        "POST",
        &format!("{path}/deltas"),
        Some(&token),
        Body::Json(json!({ "base_version": v1, "inputs": load(9) })),
    );
    assert_eq!((status, kind(&v)), (409, "table-version"), "{v}");
    assert!(message(&v).contains(&format!("version {v1} of table `pool`, which is at version {v2}")), "{v}");
    // A version this table never had.
    let (status, v) = c.call(
        "POST",
        &format!("{path}/deltas"),
        Some(&token),
        Body::Json(json!({ "base_version": v2 + 1000, "inputs": load(9) })),
    );
    assert_eq!((status, kind(&v)), (409, "table-version"), "{v}");
    assert!(message(&v).contains(&format!("{} is no version this table has had", v2 + 1000)), "{v}");
    // Neither was applied.
    let state = ok(&c, "GET", path, &token, Value::Null);
    assert_eq!(state["version"], json!(v2));
    assert_eq!(state["inputs"]["decode_blocks"], json!([5, 0]), "{state}");

    // A selection naming an old version is refused, never answered from another state.
    let mut request: Value =
        serde_json::from_str(r#"{"tenant": "acme", "prompt_tokens": 64, "block_size": 16}"#).unwrap();
    request["table"] = json!("pool");
    request["table_version"] = json!(v1);
    let (status, v) = c.call("POST", "/v1/select", Some(&token), Body::Json(request.clone()));
    assert_eq!((status, kind(&v)), (409, "table-version"), "{v}");
    assert!(message(&v).contains(&format!("the request names version {v1}")), "{v}");
    request["table_version"] = json!(v2);
    let v = ok(&c, "POST", "/v1/select", &token, request.clone());
    assert_eq!(v["worker_id"], 2, "worker 1 has 5 decode blocks: {v}");

    // A delta that names a worker the table does not have changes nothing.
    let bad = json!({ "base_version": v2, "remove": [7] });
    let (status, v) = c.call("POST", &format!("{path}/deltas"), Some(&token), Body::Json(bad));
    assert_eq!((status, kind(&v)), (400, "invalid-input"), "{v}");
    assert!(message(&v).contains("worker 7 is not in the table"), "{v}");
    let bad = json!({ "base_version": v2, "inputs": { "worker_id": [3], "active_requests": [1] } });
    let (status, v) = c.call("POST", &format!("{path}/deltas"), Some(&token), Body::Json(bad));
    assert_eq!((status, kind(&v)), (400, "invalid-input"), "{v}");
    assert_eq!(ok(&c, "GET", path, &token, Value::Null)["version"], json!(v2));

    // Gone: a table deleted (or lost with a restart) is `unknown-table`.
    ok(&c, "DELETE", path, &token, Value::Null);
    request["table_version"] = Value::Null;
    let (status, v) = c.call("POST", "/v1/select", Some(&token), Body::Json(request));
    assert_eq!((status, kind(&v)), (404, "unknown-table"), "{v}");
    assert!(message(&v).contains("no table `pool`"), "{v}");
}

#[test]
fn one_tenants_tables_are_bounded_and_out_of_anothers_reach() {
    let dir = temp_dir("tables-bounds");
    let server = Server::with_config(&dir, "[service]\nmax_tables_per_tenant = 2\nmax_workers = 16\n");
    let c = Client::new(&server);
    let (a, b) = (c.add_tenant("a"), c.add_tenant("b"));
    let table = |n: u64| json!({ "workers": (0..n).map(|id| json!({ "id": id })).collect::<Vec<_>>() });
    ok(&c, "PUT", "/v1/tenants/a/tables/one", &a, table(4));
    ok(&c, "PUT", "/v1/tenants/a/tables/two", &a, table(4));
    let (status, v) = c.call("PUT", "/v1/tenants/a/tables/three", Some(&a), Body::Json(table(4)));
    assert_eq!((status, kind(&v)), (409, "too-many-tables"), "{v}");
    assert!(message(&v).contains("max_tables_per_tenant"), "{v}");
    // Putting one it has again replaces it.
    ok(&c, "PUT", "/v1/tenants/a/tables/two", &a, table(3));
    // A table is as bounded as a request.
    let (status, v) = c.call("PUT", "/v1/tenants/a/tables/one", Some(&a), Body::Json(table(17)));
    assert_eq!((status, kind(&v)), (400, "invalid-input"), "{v}");
    assert!(message(&v).contains("17 workers exceed max_workers 16"), "{v}");
    let v1 = ok(&c, "GET", "/v1/tenants/a/tables/one", &a, Value::Null)["version"].as_u64().unwrap();
    let grow =
        json!({ "base_version": v1, "add": (100..113).map(|id| json!({ "id": id })).collect::<Vec<_>>() });
    let (status, v) = c.call("POST", "/v1/tenants/a/tables/one/deltas", Some(&a), Body::Json(grow));
    assert_eq!((status, kind(&v)), (400, "invalid-input"), "{v}");
    assert!(message(&v).contains("17 workers exceed max_workers 16"), "{v}");

    // Tenant b reaches none of a's: not by reading, changing, deleting or selecting.
    for (method, path, body) in [
        ("GET", "/v1/tenants/a/tables/one", Value::Null),
        ("PUT", "/v1/tenants/a/tables/one", table(2)),
        ("POST", "/v1/tenants/a/tables/one/deltas", json!({ "base_version": v1 })),
        ("DELETE", "/v1/tenants/a/tables/one", Value::Null),
    ] {
        let (status, v) = c.call(method, path, Some(&b), Body::Json(body));
        assert_eq!((status, kind(&v)), (403, "forbidden"), "{method} {path}: {v}");
    }
    let steal = json!({ "tenant": "a", "table": "one", "prompt_tokens": 16, "block_size": 16 });
    let (status, v) = c.call("POST", "/v1/select", Some(&b), Body::Json(steal));
    assert_eq!((status, kind(&v)), (403, "forbidden"), "{v}");
    // b's own table of the same name is b's, and a's is unchanged.
    let (status, v) = c.call(
        "POST",
        "/v1/select",
        Some(&b),
        Body::Json(json!({ "tenant": "b", "table": "one", "prompt_tokens": 16, "block_size": 16 })),
    );
    assert_eq!((status, kind(&v)), (404, "unknown-table"), "{v}");
    assert_eq!(ok(&c, "GET", "/v1/tenants/a/tables/one", &a, Value::Null)["version"], json!(v1));
}

#[test]
fn answers_carry_the_pick_alone_unless_costs_are_asked_for() {
    let dir = temp_dir("tables-costs");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let (status, v) = c.select(&token, "acme", None);
    assert_eq!(status, 200, "{v}");
    assert!(v.get("costs").is_none(), "no costs unless asked: {v}");
    assert!(v["worker_id"].is_u64() && v["candidates"].as_u64() > Some(1), "{v}");
    let mut body = switchyard_test_util::server::select_body("acme", None);
    body["costs"] = json!(true);
    let v = ok(&c, "POST", "/v1/select", &token, body);
    let costs = v["costs"].as_array().unwrap_or_else(|| panic!("costs when asked: {v}"));
    assert_eq!(costs.len() as u64, v["candidates"].as_u64().unwrap(), "{v}");
}

#[test]
fn a_body_in_an_encoding_the_service_does_not_speak_is_refused_by_name() {
    let dir = temp_dir("tables-media");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let body = switchyard_test_util::server::select_body("acme", None).to_string();
    let head = format!(
        "POST /v1/select HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: text/csv\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = switchyard_test_util::server::send_head(&server.addr(), &head, body.as_bytes());
    let (status, text) =
        switchyard_test_util::server::read_response(&mut stream, std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(status, 415, "{text}");
    assert!(text.contains("unsupported-media-type") && text.contains("text/csv"), "{text}");
}

#[test]
fn the_cli_puts_changes_shows_selects_from_and_deletes_a_table() {
    let dir = temp_dir("tables-cli");
    let server = Server::with_config(&dir, "");
    let token = Client::new(&server).add_tenant("acme");
    let run = |args: &[&str]| -> Result<Value, String> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--tenant", "acme", "--server", &server.addr()])
            .env("SWITCHYARD_TOKEN", &token)
            .output()
            .unwrap();
        match out.status.success() {
            true => Ok(serde_json::from_slice(&out.stdout).unwrap()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    };
    let file = |name: &str, v: Value| {
        let path = dir.join(name);
        std::fs::write(&path, v.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let table = file("table.json", json!({ "workers": [{ "id": 1 }, { "id": 2 }] }));
    let put = run(&["table", "put", "pool", "--file", &table]).unwrap();
    let v1 = put["version"].as_u64().unwrap();
    assert_eq!((put["workers"].as_u64(), put["slots"].as_u64()), (Some(2), Some(2)), "{put}");
    let delta = file(
        "delta.json",
        json!({ "base_version": v1, "inputs": { "worker_id": [1], "decode_blocks": [40] } }),
    );
    let v2 = run(&["table", "change", "pool", "--file", &delta]).unwrap()["version"].as_u64().unwrap();
    // The same delta again names a version the table has left: the server's words.
    let again = run(&["table", "change", "pool", "--file", &delta]).unwrap_err();
    assert!(again.contains("table-version") && again.contains(&format!("at version {v2}")), "{again}");
    let shown = run(&["table", "show", "pool"]).unwrap();
    assert_eq!(shown["inputs"]["decode_blocks"], json!([40, 0]), "{shown}");
    let request = file("request.json", json!({ "prompt_tokens": 64, "block_size": 16 }));
    let picked = run(&["table", "select", "pool", "--input", &request, "--costs"]).unwrap();
    assert_eq!(
        (picked["worker_id"].as_u64(), picked["table_version"].as_u64()),
        (Some(2), Some(v2)),
        "{picked}"
    );
    assert_eq!(picked["costs"].as_array().map(Vec::len), Some(2), "{picked}");
    let stale =
        run(&["table", "select", "pool", "--input", &request, "--version", &v1.to_string()]).unwrap_err();
    assert!(stale.contains("table-version"), "{stale}");
    // A request file that lists workers is refused before anything is sent.
    let whole =
        file("whole.json", json!({ "prompt_tokens": 64, "block_size": 16, "workers": [{ "id": 1 }] }));
    let refused = run(&["table", "select", "pool", "--input", &whole]).unwrap_err();
    assert!(refused.contains("lists `workers`"), "{refused}");
    let broken = file("broken.json", json!({ "base_version": "one" }));
    let refused = run(&["table", "change", "pool", "--file", &broken]).unwrap_err();
    assert!(refused.contains("broken.json: delta JSON"), "{refused}");
    run(&["table", "delete", "pool"]).unwrap();
    let gone = run(&["table", "show", "pool"]).unwrap_err();
    assert!(gone.contains("unknown-table"), "{gone}");
}

#[test]
fn protobuf_bodies_answer_what_json_answers_and_broken_ones_are_refused_by_field() {
    let dir = temp_dir("tables-protobuf");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let table = TableJson {
        workers: serde_json::from_value(json!([{ "id": 1, "dp_size": 2 }, { "id": 2 }])).unwrap(),
        inputs: serde_json::from_value(json!({ "worker_id": [1], "decode_blocks": [30] })).unwrap(),
    };
    let (status, media, answer) = c.exchange(
        "PUT",
        "/v1/tenants/acme/tables/pool",
        &token,
        (PROTOBUF, "application/json"),
        &switchyard_proto::encode_table(&table),
    );
    assert_eq!((status, media.as_str()), (200, "application/json"), "{}", String::from_utf8_lossy(&answer));
    let put: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!((put["workers"].as_u64(), put["slots"].as_u64()), (Some(2), Some(3)), "{put}");
    let json_request = json!({
        "tenant": "acme", "table": "pool", "prompt_tokens": 512, "block_size": 16, "costs": true,
        "prefix_hashes": [1, 2, 3], "inputs": { "worker_id": [2], "cached_tokens": [256], "device_overlap_blocks": [16] }
    });
    let by_json = ok(&c, "POST", "/v1/select", &token, json_request.clone());
    let request: RequestJson = serde_json::from_value(json_request).unwrap();
    let (status, media, answer) = c.exchange(
        "POST",
        "/v1/select",
        &token,
        (PROTOBUF, PROTOBUF),
        &switchyard_proto::encode_request(&request),
    );
    assert_eq!((status, media.as_str()), (200, PROTOBUF));
    let by_protobuf = serde_json::to_value(switchyard_proto::decode_answer(&answer).unwrap()).unwrap();
    assert_eq!(by_protobuf, by_json);
    // Asked for JSON, a protobuf body's answer is JSON.
    let (_, media, answer) = c.exchange(
        "POST",
        "/v1/select",
        &token,
        (PROTOBUF, "application/json"),
        &switchyard_proto::encode_request(&request),
    );
    assert_eq!(media, "application/json");
    assert_eq!(serde_json::from_slice::<Value>(&answer).unwrap(), by_json);

    // Bytes that are no request, or a pool that is no pool: 400, JSON, naming the field.
    let (status, media, answer) =
        c.exchange("POST", "/v1/select", &token, (PROTOBUF, PROTOBUF), b"\xff\xff\xff\xff garbage");
    let error: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!((status, media.as_str(), kind(&error)), (400, "application/json", "invalid-input"), "{error}");
    assert!(message(&error).contains("request protobuf"), "{error}");
    // Field 5 (`pool`), varint 7.
    let mut bytes = switchyard_proto::encode_request(&request);
    bytes.extend_from_slice(&[5 << 3, 7]);
    let (status, _, answer) = c.exchange("POST", "/v1/select", &token, (PROTOBUF, PROTOBUF), &bytes);
    let error: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status, 400, "{error}");
    assert!(message(&error).contains("`pool`"), "{error}");
}

/// The tables' tenant is in the path: another tenant's put or delta is refused from its
/// headers, before its body (here one that never finishes arriving) is waited for.
#[test]
fn another_tenants_table_write_is_refused_before_its_body_is_read() {
    let dir = temp_dir("tables-unread");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let (_a, b) = (c.add_tenant("a"), c.add_tenant("b"));
    for (method, path) in [("PUT", "/v1/tenants/a/tables/pool"), ("POST", "/v1/tenants/a/tables/pool/deltas")]
    {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {b}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        );
        let mut stream = switchyard_test_util::server::send_head(&server.addr(), &head, b"{\"workers\": [");
        let answer =
            switchyard_test_util::server::read_response(&mut stream, std::time::Duration::from_secs(5));
        let (status, text) =
            answer.unwrap_or_else(|e| panic!("{method} {path}: no answer before the body: {e}"));
        assert_eq!(status, 403, "{method} {path}: {text}");
        assert!(text.contains("forbidden"), "{text}");
    }
}
