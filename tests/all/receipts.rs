//! Route receipts: a selection that asks says why its worker: the cheapest candidates
//! with the costs the picker used, what the host ruled out and why, what the policy's
//! filter removed, and a guest's fuel and the imports it read.

use serde_json::{Value, json};

use switchyard_test_util::IMPORTS;
use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{Body, Client, Server, select_body, temp_dir};

fn select(c: &Client, token: &str, body: Value) -> Value {
    let (status, v) = c.call("POST", "/v1/select", Some(token), Body::Json(body));
    assert_eq!(status, 200, "{v}");
    v
}

/// The `top` cheapest of an answer's `costs`, lowest first, ties in row order.
fn cheapest(costs: &Value, top: usize) -> Vec<Value> {
    let mut rows: Vec<Value> = costs.as_array().expect("costs").clone();
    rows.sort_by(|a, b| a["cost"].as_f64().unwrap().total_cmp(&b["cost"].as_f64().unwrap()));
    rows.truncate(top);
    rows
}

#[test]
fn a_receipt_lists_the_costs_the_picker_used_and_what_was_ruled_out() {
    let dir = temp_dir("receipts");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "guest", json!({ "policy": "mine" }));
    c.uploaded(&token, "acme", "reader", IMPORTS, None);
    c.assigned(&token, "acme", "reader", json!({ "policy": "reader" }));

    // The guest, workers 0 and 7 not allowed (the sample's nine slots, worker 6 has two).
    let mut body = select_body("acme", Some("guest"));
    body["allowed_workers"] = json!([1, 2, 3, 4, 5, 6]);
    body["costs"] = json!(true);
    body["receipt"] = json!({ "top": 3 });
    let v = select(&c, &token, body.clone());
    let receipt = &v["receipt"];
    assert_eq!(receipt["top"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(receipt["top"], json!(cheapest(&v["costs"], 3)), "the picker's costs: {v}");
    assert_eq!(receipt["top"][0]["worker_id"], v["worker_id"], "temperature 0: the cheapest is the pick");
    let counts = ["slots", "not_pinned", "not_allowed", "filtered_by_policy", "candidates"]
        .map(|k| receipt[k].clone());
    assert_eq!(counts, [json!(9), json!(0), json!(2), json!(0), json!(7)], "{receipt}");
    assert!(receipt["fuel"].as_u64() > Some(0), "a guest's fuel: {receipt}");
    assert_eq!(receipt["imports"], Value::Null, "the default policy reads no import: {receipt}");

    // The same request to `switchyard select`, on the same component: the same receipt,
    // fuel and all (fuel is deterministic).
    let file = dir.join("mine.wasm");
    std::fs::write(&file, DEFAULT_POLICY).unwrap();
    let request = dir.join("request.json");
    std::fs::write(&request, body.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["select", "--policy", file.to_str().unwrap(), "--input", request.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let local: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(local["receipt"], v["receipt"], "switchyard select: {local}");

    // Pinned: every other slot ruled out by the host.
    let mut pinned = select_body("acme", Some("guest"));
    pinned["pinned"] = json!({ "worker_id": 6, "dp_rank": 1 });
    pinned["receipt"] = json!({});
    let v = select(&c, &token, pinned);
    let counts = ["not_pinned", "not_allowed", "candidates"].map(|k| v["receipt"][k].clone());
    assert_eq!(counts, [json!(8), json!(0), json!(1)], "{v}");
    assert_eq!(v["receipt"]["top"], json!([{ "worker_id": 6, "dp_rank": 1, "cost": v["cost"] }]), "{v}");

    // A guest that reads every import says so; a native build has no fuel to report.
    let mut reader = select_body("acme", Some("reader"));
    reader["receipt"] = json!({ "top": 1 });
    let v = select(&c, &token, reader);
    assert_eq!(
        v["receipt"]["imports"],
        json!(["prefix-hashes", "policy-class", "candidate-capacities"]),
        "{v}"
    );
    let mut native = select_body("acme", None);
    native["receipt"] = json!({ "top": 2 });
    let v = select(&c, &token, native);
    assert_eq!((v["build"].as_str(), v["receipt"].get("fuel")), (Some("native"), None), "{v}");
    assert_eq!(v["receipt"]["top"].as_array().map(Vec::len), Some(2), "{v}");

    // Unasked, no receipt; a `top` past the bound is refused by name.
    assert!(select(&c, &token, select_body("acme", Some("guest"))).get("receipt").is_none());
    let mut greedy = select_body("acme", None);
    greedy["receipt"] = json!({ "top": 65 });
    let (status, v) = c.call("POST", "/v1/select", Some(&token), Body::Json(greedy));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("receipt.top 65 exceeds 64"), "{v}");
}
