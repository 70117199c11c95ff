//! Round trips through the protobuf encoding into the JSON types, the contract checked
//! against those types, and hostile bytes.

use std::collections::BTreeSet;

use prost::Message;
use prost_types::FileDescriptorSet;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use switchyard_guest_sdk::Column;
use switchyard_selection::wire::{
    RequestJson, RequestLimits, SAMPLE_REQUEST, TableDelta, TableJson, TableVersion, TenantAnswer,
};

use super::*;

fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("valid JSON for the type")
}

/// JSON value → type → protobuf → type: equal, and the JSON of each the same.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug, E>(
    value: Value,
    encode: impl Fn(&T) -> Vec<u8>,
    decode: impl Fn(&[u8]) -> Result<T, E>,
) -> T
where
    E: std::fmt::Debug,
{
    let typed: T = from_json(value);
    let bytes = encode(&typed);
    let back = decode(&bytes).expect("decodes what was encoded");
    assert_eq!(back, typed);
    assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&typed).unwrap());
    // Deterministic: the same value, the same bytes.
    assert_eq!(encode(&back), bytes);
    back
}

fn request_round_trip(value: Value) -> RequestJson {
    round_trip(value, encode_request, decode_request)
}

/// Every column of `n` rows, each column's values distinct from the others'.
fn every_column(ids: &[u64]) -> Value {
    let mut inputs = json!({ "worker_id": ids });
    for column in Column::ALL {
        let rows: Vec<u32> = (0..ids.len() as u32).map(|i| (column as u32 + 1) * 1000 + i).collect();
        inputs[column.snake_name()] = json!(rows);
    }
    inputs
}

/// A request with every field of `RequestJson` given, none at its default.
fn full_request() -> Value {
    json!({
        "tenant": "acme",
        "prompt_tokens": 2048,
        "block_size": 16,
        "expected_output_tokens": 256,
        "pool": "decode",
        "seed": u64::MAX,
        "temperature": 0.25,
        "prefix_hashes": [11, 12, u64::MAX],
        "policy_class": "latency",
        "classifier_class": "batch",
        "pinned": { "worker_id": 7, "dp_rank": 1 },
        "allowed_workers": [7, 3],
        "preferred_taints": { "h100": 1.5, "zone-a": -0.5 },
        "workers": [
            { "id": 3, "dp_size": 0, "total_kv_blocks": 65536, "max_num_batched_tokens": 8192 },
            { "id": 7, "dp_size": 2, "total_kv_blocks": 131072, "taints": ["h100", "zone-a"] },
            { "id": 9, "dp_size": 1 }
        ],
        "table": "fleet",
        "table_version": 41,
        "session": "conversation-9",
        "inputs": every_column(&[3, 7, 7]),
        "costs": true,
        "receipt": { "top": 3 }
    })
}

#[test]
fn requests_round_trip_with_every_field_column_and_pool() {
    request_round_trip(serde_json::from_str(SAMPLE_REQUEST).unwrap());
    let full = request_round_trip(full_request());
    for column in Column::ALL {
        assert_eq!(full.inputs[column].len(), 3, "{column:?}");
    }
    assert_eq!(full.workers[0].dp_size, 0, "a 0 given stays 0");
    for pool in ["aggregated", "prefill", "decode"] {
        let mut r = full_request();
        r["pool"] = json!(pool);
        let back = request_round_trip(r);
        assert_eq!(serde_json::to_value(back.pool).unwrap(), json!(pool));
    }
    // The least a request can be: every optional field absent.
    let least = request_round_trip(json!({ "prompt_tokens": 0, "block_size": 1 }));
    assert_eq!(encode_request(&least), [0x18, 0x01], "only block_size costs bytes");
}

#[test]
fn absent_lists_stay_absent_and_empty_ones_empty() {
    for field in ["prefix_hashes", "allowed_workers"] {
        for (value, expected) in [(json!(null), None), (json!([]), Some(vec![])), (json!([0]), Some(vec![0]))]
        {
            let mut r = json!({ "prompt_tokens": 16, "block_size": 16 });
            r[field] = value;
            let back = request_round_trip(r);
            let got = if field == "prefix_hashes" { back.prefix_hashes } else { back.allowed_workers };
            assert_eq!(got, expected, "{field}");
        }
    }
    // Columns have no absent-vs-empty: an empty column is an absent one, in JSON too.
    let mut r = json!({ "prompt_tokens": 16, "block_size": 16, "inputs": { "worker_id": [1] } });
    for column in Column::ALL {
        r["inputs"][column.snake_name()] = json!([]);
    }
    let back = request_round_trip(r);
    assert!(Column::ALL.iter().all(|&c| back.inputs[c].is_empty()));
}

#[test]
fn each_column_is_its_field_in_column_order() {
    for column in Column::ALL {
        let inputs = WorkerInputs::new(vec![1]).with(column, vec![7]);
        let table = TableJson { workers: vec![], inputs };
        // Table.inputs (field 2) holding worker_id (field 1) = [1] and the column = [7],
        // both packed; the column's field is its place in `Column::ALL` + 2.
        let field = column as u8 + 2;
        assert_eq!(encode_table(&table), [0x12, 6, 0x0a, 1, 1, field << 3 | 2, 1, 7], "{column:?}");
        assert_eq!(decode_table(&encode_table(&table)).unwrap(), table);
    }
}

#[test]
fn a_protobuf_request_and_the_same_json_request_are_the_same_request() {
    let json = full_request();
    let parsed: RequestJson = from_json(json.clone());
    // Built field by field from the JSON, not by `encode_request`.
    let ids = |v: &Value| pb::U64List { values: from_json::<Vec<u64>>(v.clone()) };
    let hashes = |v: &Value| pb::HashList { values: from_json::<Vec<u64>>(v.clone()) };
    let worker = |w: &Value| pb::Worker {
        id: w["id"].as_u64().unwrap(),
        dp_size: w["dp_size"].as_u64().map(|d| d as u32),
        total_kv_blocks: w["total_kv_blocks"].as_u64().unwrap_or(0) as u32,
        max_num_batched_tokens: w["max_num_batched_tokens"].as_u64().map(|t| t as u32),
        taints: w.get("taints").map(|t| from_json(t.clone())).unwrap_or_default(),
    };
    let column = |name: &str| from_json::<Vec<u32>>(json["inputs"][name].clone());
    let message = pb::SelectRequest {
        tenant: Some("acme".into()),
        prompt_tokens: 2048,
        block_size: 16,
        expected_output_tokens: Some(256),
        pool: pb::Pool::Decode as i32,
        seed: u64::MAX,
        temperature: Some(0.25),
        prefix_hashes: Some(hashes(&json["prefix_hashes"])),
        policy_class: Some("latency".into()),
        classifier_class: Some("batch".into()),
        pinned: Some(pb::WorkerRank { worker_id: 7, dp_rank: 1 }),
        allowed_workers: Some(ids(&json["allowed_workers"])),
        preferred_taints: from_json(json["preferred_taints"].clone()),
        workers: json["workers"].as_array().unwrap().iter().map(worker).collect(),
        table: Some("fleet".into()),
        table_version: Some(41),
        inputs: Some(pb::WorkerInputs {
            worker_id: from_json(json["inputs"]["worker_id"].clone()),
            dp_rank: column("dp_rank"),
            device_overlap_blocks: column("device_overlap_blocks"),
            host_overlap_blocks: column("host_overlap_blocks"),
            disk_overlap_blocks: column("disk_overlap_blocks"),
            cached_tokens: column("cached_tokens"),
            active_prefill_tokens: column("active_prefill_tokens"),
            decode_blocks: column("decode_blocks"),
            active_requests: column("active_requests"),
        }),
        costs: true,
        receipt: Some(pb::ReceiptAsk { top: Some(3) }),
        session: Some("conversation-9".into()),
    };
    assert_eq!(decode_request(&message.encode_to_vec()).unwrap(), parsed);

    // And a runnable one selects from the same table and request: the sample.
    let sample = RequestJson::parse(SAMPLE_REQUEST).unwrap();
    let decoded = decode_request(&encode_request(&sample)).unwrap();
    let (table_a, request_a) = sample.into_parts_within(&RequestLimits::default()).unwrap();
    let (table_b, request_b) = decoded.into_parts_within(&RequestLimits::default()).unwrap();
    assert_eq!(table_a.slots(), table_b.slots());
    assert_eq!(request_a.inputs(), request_b.inputs());
    assert_eq!(request_a.facts(), request_b.facts());
}

#[test]
fn tables_and_deltas_round_trip() {
    round_trip::<TableJson, _>(json!({ "workers": [] }), encode_table, decode_table);
    let table = round_trip::<TableJson, _>(
        json!({
            "workers": [{ "id": 1, "dp_size": 2, "total_kv_blocks": 10 }, { "id": 2, "taints": ["a"] }],
            "inputs": every_column(&[1, 1, 2]),
        }),
        encode_table,
        decode_table,
    );
    assert_eq!(table.workers[1].dp_size, 1);
    round_trip::<TableDelta, _>(json!({ "base_version": 0 }), encode_delta, decode_delta);
    round_trip::<TableDelta, _>(
        json!({
            "base_version": u64::MAX,
            "remove": [4, 5],
            "add": [{ "id": 6, "dp_size": 4, "max_num_batched_tokens": 0 }],
            "inputs": every_column(&[6, 6]),
        }),
        encode_delta,
        decode_delta,
    );
    // Rows without workers (a delta changing only loads).
    round_trip::<TableDelta, _>(
        json!({ "base_version": 3, "inputs": { "worker_id": [1], "active_requests": [9] } }),
        encode_delta,
        decode_delta,
    );
    round_trip::<TableVersion, _>(
        json!({ "tenant": "acme", "table": "fleet", "version": 42, "workers": 1024, "slots": 2048 }),
        encode_table_version,
        decode_table_version,
    );
}

fn answer(fallback: Value, commit_fault: Value, class: Value) -> Value {
    json!({
        "tenant": "acme",
        "policy_class": "latency",
        "class": class,
        "worker_id": 7,
        "dp_rank": 1,
        "cost": -0.125,
        "policy": "mine",
        "build": "guest",
        "version": "v3",
        "fallback": fallback,
        "commit_fault": commit_fault,
        "candidates": 9,
    })
}

#[test]
fn answers_round_trip_with_every_fault_kind_and_class_route() {
    let assigned = json!({ "requested": "latency", "assigned": true, "reason": null });
    let kinds = FaultKind::POLICY.into_iter().chain([FaultKind::Overloaded, FaultKind::Unavailable]);
    for kind in kinds {
        let fault = json!({ "kind": kind, "message": format!("{kind} at call 3") });
        let back = round_trip::<TenantAnswer, _>(
            answer(fault.clone(), fault, assigned.clone()),
            encode_answer,
            decode_answer,
        );
        assert_eq!(back.answer.fallback.unwrap().kind, kind);
    }
    for (requested, reason) in [(json!(null), "no-class"), (json!("latencyy"), "unassigned-class")] {
        let class = json!({ "requested": requested, "assigned": false, "reason": reason });
        round_trip::<TenantAnswer, _>(answer(json!(null), json!(null), class), encode_answer, decode_answer);
    }
    // Costs and the table's version, which the answer has only when asked or used.
    let mut full = answer(json!(null), json!(null), assigned.clone());
    full["table_version"] = json!(5);
    full["version"] = json!(null);
    full["costs"] = json!([{ "worker_id": 7, "dp_rank": 0, "cost": 1.0 }, { "worker_id": 7, "dp_rank": 1, "cost": -0.125 }]);
    full["receipt"] = json!({
        "top": [{ "worker_id": 7, "dp_rank": 1, "cost": -0.125 }], "slots": 3, "not_pinned": 0, "not_allowed": 1,
        "filtered_by_policy": 0, "candidates": 2, "fuel": 1234, "imports": ["prefix-hashes", "worker-capacity"]
    });
    let back = round_trip::<TenantAnswer, _>(full, encode_answer, decode_answer);
    assert_eq!((back.table_version, back.answer.costs.len()), (Some(5), 2));
    assert_eq!(
        back.answer.receipt.map(|r| (r.not_allowed, r.fuel, r.imports.len())),
        Some((1, Some(1234), 2))
    );
    let plain = round_trip::<TenantAnswer, _>(
        answer(json!(null), json!(null), assigned),
        encode_answer,
        decode_answer,
    );
    assert!(serde_json::to_value(&plain).unwrap().get("costs").is_none());
}

#[test]
fn values_the_json_types_cannot_hold_are_errors_naming_the_field() {
    let request = pb::SelectRequest { pool: 7, block_size: 16, ..Default::default() };
    assert_eq!(
        decode_request(&request.encode_to_vec()).unwrap_err().to_string(),
        "request protobuf: field `pool`: 7 is not a pool (aggregated = 0, prefill = 1, decode = 2)"
    );
    let request = pb::SelectRequest { pool: -1, ..Default::default() };
    assert!(decode_request(&request.encode_to_vec()).unwrap_err().to_string().contains("-1 is not a pool"));

    let good: TenantAnswer =
        from_json(answer(json!(null), json!(null), json!({ "assigned": true, "reason": null })));
    let mut m = answer_to(&good);
    m.commit_fault = Some(pb::Fault { kind: "no-eligible-worker".into(), message: String::new() });
    let message = decode_answer(&m.encode_to_vec()).unwrap_err().to_string();
    assert!(
        message
            .starts_with("answer protobuf: field `commit_fault.kind`: unknown variant `no-eligible-worker`"),
        "{message}"
    );
    let mut m = answer_to(&good);
    m.class.as_mut().unwrap().reason = 9;
    let message = decode_answer(&m.encode_to_vec()).unwrap_err().to_string();
    assert!(message.starts_with("answer protobuf: field `class.reason`: 9 is not a reason"), "{message}");
    let mut m = answer_to(&good);
    m.class = None;
    let message = decode_answer(&m.encode_to_vec()).unwrap_err().to_string();
    assert!(message.starts_with("answer protobuf: field `class`: missing"), "{message}");

    // A wire-type mismatch, a truncated message, invalid UTF-8: prost's errors, prefixed.
    let message = decode_request(&[0x18]).unwrap_err().to_string();
    assert!(message.starts_with("request protobuf: "), "{message}");
    let bytes = encode_table(&TableJson { workers: vec![], inputs: WorkerInputs::new(vec![1, 2, 3]) });
    let message = decode_table(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
    assert!(message.starts_with("table protobuf: "), "{message}");
    let message = decode_delta(&[0x1a, 5, 0x0a, 0]).unwrap_err().to_string();
    assert!(message.starts_with("delta protobuf: "), "{message}");
    let message = decode_table_version(&[0x0a, 1, 0xff]).unwrap_err().to_string();
    assert!(message.starts_with("table version protobuf: "), "{message}");
}

#[test]
fn garbage_is_an_error_or_a_value_never_a_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(47);
    let seeds = [
        encode_request(&from_json(full_request())),
        encode_request(&RequestJson::parse(SAMPLE_REQUEST).unwrap()),
        encode_table(&from_json(json!({ "workers": [{ "id": 1 }], "inputs": every_column(&[1]) }))),
    ];
    let mut errors = 0;
    for round in 0..20_000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            let mut b = vec![0; (rng.next_u32() % 64) as usize];
            rng.fill_bytes(&mut b);
            b
        } else {
            // A valid message with a few bytes flipped, cut or not.
            let mut b = seeds[round % seeds.len()].clone();
            for _ in 0..1 + rng.next_u32() % 4 {
                let i = rng.next_u32() as usize % b.len();
                b[i] = rng.next_u32() as u8;
            }
            b.truncate(rng.next_u32() as usize % (b.len() + 1));
            b
        };
        if let Ok(request) = decode_request(&bytes) {
            let again = decode_request(&encode_request(&request)).unwrap();
            assert_eq!(format!("{again:?}"), format!("{request:?}"));
            let _ = request.into_parts_within(&RequestLimits::default());
        } else {
            errors += 1;
        }
        let _ = decode_table(&bytes);
        let _ = decode_delta(&bytes);
        let _ = decode_answer(&bytes);
        let _ = decode_table_version(&bytes);
    }
    assert!(errors > 1000, "most garbage is refused: {errors}");
}

/// The descriptor set build.rs compiled from the `.proto`.
fn descriptors() -> FileDescriptorSet {
    FileDescriptorSet::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/select.descriptor.bin"))[..])
        .unwrap()
}

fn fields(message: &str) -> Vec<(String, i32)> {
    let set = descriptors();
    let m = set.file[0].message_type.iter().find(|m| m.name() == message).expect(message);
    m.field.iter().map(|f| (f.name().to_string(), f.number())).collect()
}

fn names(message: &str) -> BTreeSet<String> {
    fields(message).into_iter().map(|(name, _)| name).collect()
}

fn keys(value: impl Serialize) -> BTreeSet<String> {
    serde_json::to_value(value).unwrap().as_object().unwrap().keys().cloned().collect()
}

#[test]
fn the_contract_has_the_json_fields_and_the_columns_in_order() {
    let set = descriptors();
    assert_eq!(set.file[0].package(), "switchyard.v1");
    let mut expected = vec![("worker_id".to_string(), 1)];
    expected.extend(Column::ALL.into_iter().zip(2..).map(|(c, n)| (c.snake_name(), n)));
    assert_eq!(fields("WorkerInputs"), expected);

    // Every message has exactly its JSON type's fields (each JSON value has all of them).
    let request: RequestJson = from_json(full_request());
    assert_eq!(names("SelectRequest"), keys(&request));
    assert_eq!(names("Worker"), keys(&request.workers[0]));
    assert_eq!(names("WorkerRank"), keys(request.pinned.unwrap()));
    let table: TableJson = from_json(json!({ "workers": [], "inputs": every_column(&[1]) }));
    assert_eq!(names("Table"), keys(&table));
    let delta: TableDelta = from_json(
        json!({ "base_version": 1, "remove": [1], "add": [{ "id": 1 }], "inputs": every_column(&[1]) }),
    );
    assert_eq!(names("TableDelta"), keys(&delta));
    let version: TableVersion =
        from_json(json!({ "tenant": "a", "table": "t", "version": 1, "workers": 1, "slots": 1 }));
    assert_eq!(names("TableVersion"), keys(&version));
    let mut full =
        answer(json!({ "kind": "fuel", "message": "m" }), json!(null), json!({ "assigned": true }));
    full["table_version"] = json!(1);
    full["costs"] = json!([{ "worker_id": 1, "dp_rank": 0, "cost": 0.5 }]);
    full["receipt"] = json!({
        "top": [], "slots": 1, "not_pinned": 0, "not_allowed": 0, "filtered_by_policy": 0, "candidates": 1,
        "fuel": 1, "imports": ["policy-class"]
    });
    let answer: TenantAnswer = from_json(full);
    assert_eq!(names("SelectAnswer"), keys(&answer));
    assert_eq!(names("Receipt"), keys(answer.answer.receipt.as_ref().unwrap()));
    assert_eq!(names("ReceiptAsk"), keys(request.receipt.unwrap()));
    assert_eq!(names("ClassRoute"), keys(&answer.class));
    assert_eq!(names("Fault"), keys(answer.answer.fallback.as_ref().unwrap()));
    assert_eq!(names("CandidateCost"), keys(answer.answer.costs[0]));
}

#[test]
fn sizes_beside_json() {
    let sample = RequestJson::parse(SAMPLE_REQUEST).unwrap();
    let n = 1024u64;
    let ids: Vec<u64> = (0..n).collect();
    let workers: Vec<Value> = ids.iter().map(|id| json!({ "id": id, "total_kv_blocks": 131_072 })).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut inputs = json!({ "worker_id": ids });
    for (column, bound) in Column::ALL.into_iter().zip([1, 64, 16, 1, 1024, 8192, 1000, 16]) {
        inputs[column.snake_name()] = json!((0..n).map(|_| rng.next_u32() % bound).collect::<Vec<_>>());
    }
    let whole: RequestJson = from_json(json!({
        "tenant": "acme", "prompt_tokens": 2048, "block_size": 16, "workers": workers, "inputs": inputs
    }));
    for (name, request) in [("sample request (8 workers)", sample), ("1,024-worker request", whole)] {
        let (json, proto) = (serde_json::to_vec(&request).unwrap().len(), encode_request(&request).len());
        println!(
            "{name}: JSON {json} bytes, protobuf {proto} bytes ({:.0}%)",
            100.0 * proto as f64 / json as f64
        );
        assert!(proto < json, "{name}");
    }
}
