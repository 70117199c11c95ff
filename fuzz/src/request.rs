//! Structure-aware requests: `arbitrary` builds a request shaped like
//! `switchyard::selection::wire::RequestJson`, serialised to JSON text. Mostly valid (ids
//! that name the table's workers, columns as long as the rows) so the fuzzer gets past
//! parsing into the worker table, columns, eligibility and scoring; sometimes broken on
//! purpose (a duplicate id, a short column, a wrong type) so the refusals are exercised too.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Value, json};

/// The input columns of `inputs`, by their JSON names, after `worker_id`.
pub const COLUMNS: [&str; 8] = [
    "dp_rank",
    "device_overlap_blocks",
    "host_overlap_blocks",
    "disk_overlap_blocks",
    "cached_tokens",
    "active_prefill_tokens",
    "decode_blocks",
    "active_requests",
];

/// How large a generated request may grow: the request target's are larger (they reach
/// the request limits), the differential target's smaller (each runs in a guest).
#[derive(Clone, Copy)]
pub struct Shape {
    /// Most workers in the table.
    pub max_workers: usize,
    /// Most ranks of a worker (most have 1–4; a few bytes may still ask for any `dp_size`).
    pub max_dp: u32,
    /// Most prefix hashes.
    pub max_hashes: usize,
}

/// A u32 the way a hostile caller picks one: small, at an edge, or anything.
pub fn number(u: &mut Unstructured<'_>) -> arbitrary::Result<u32> {
    Ok(match u.int_in_range(0..=7)? {
        0 => 0,
        1 => u32::MAX,
        2 => u.int_in_range(0..=16)?,
        3 => u.int_in_range(0..=100_000)?,
        _ => u.int_in_range(0..=4096)?,
    })
}

/// An f64 for a weight or a temperature: ordinary, extreme, or not finite (which JSON
/// cannot carry: serde_json writes `null` for it).
pub fn float(u: &mut Unstructured<'_>) -> arbitrary::Result<f64> {
    Ok(match u.int_in_range(0..=5)? {
        0 => 0.0,
        1 => f64::arbitrary(u)?,
        2 => -(u.int_in_range(0..=1000)? as f64) / 100.0,
        _ => u.int_in_range(0..=1000)? as f64 / 100.0,
    })
}

/// A short label (taint, class): from a few, so that taints and preferences meet.
pub fn label(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 => "h100".into(),
        1 => "a100".into(),
        2 => "latency".into(),
        3 => "batch".into(),
        4 => String::new(),
        _ => String::arbitrary(u)?,
    })
}

/// A generated request as JSON. `tenant` is set when given (the service's select).
pub fn request(u: &mut Unstructured<'_>, shape: Shape, tenant: Option<&str>) -> arbitrary::Result<Value> {
    let n = u.int_in_range(0..=shape.max_workers)?;
    let mut ids: Vec<u64> = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    for i in 0..n {
        // Unique ids, mostly; sometimes a repeat or any u64.
        let id = match u.int_in_range(0..=15)? {
            0 if i > 0 => ids[u.choose_index(i)?],
            1 => u64::arbitrary(u)?,
            _ => i as u64 * u.int_in_range(1..=3)?,
        };
        ids.push(id);
        let dp_size = match u.int_in_range(0..=31)? {
            0 => number(u)?,
            1 => 0,
            2 => u.int_in_range(1..=shape.max_dp)?,
            _ => u.int_in_range(1..=shape.max_dp.min(4))?,
        };
        let mut w = Map::new();
        w.insert("id".into(), json!(id));
        if dp_size != 1 || bool::arbitrary(u)? {
            w.insert("dp_size".into(), json!(dp_size));
        }
        if bool::arbitrary(u)? {
            w.insert("total_kv_blocks".into(), json!(number(u)?));
        }
        if bool::arbitrary(u)? {
            w.insert("max_num_batched_tokens".into(), json!(number(u)?));
        }
        if u.ratio(1, 4)? {
            let taints: Vec<String> =
                (0..u.int_in_range(0..=3)?).map(|_| label(u)).collect::<Result<_, _>>()?;
            w.insert("taints".into(), json!(taints));
        }
        workers.push((id, dp_size, Value::Object(w)));
    }
    let mut r = Map::new();
    if let Some(t) = tenant {
        r.insert("tenant".into(), json!(t));
    }
    let block_size = match u.int_in_range(0..=15)? {
        0 => number(u)?,
        1 => 0,
        _ => [1, 16, 32, 64][u.choose_index(4)?],
    };
    r.insert("prompt_tokens".into(), json!(number(u)?));
    r.insert("block_size".into(), json!(block_size));
    if bool::arbitrary(u)? {
        r.insert("expected_output_tokens".into(), json!(number(u)?));
    }
    if bool::arbitrary(u)? {
        r.insert("pool".into(), json!(["aggregated", "prefill", "decode"][u.choose_index(3)?]));
    }
    r.insert("seed".into(), json!(u64::arbitrary(u)?));
    if u.ratio(1, 3)? {
        r.insert("temperature".into(), json!(float(u)?));
    }
    if bool::arbitrary(u)? {
        let len = u.int_in_range(0..=shape.max_hashes)?;
        let start = u64::from(u.int_in_range(0..=7u8)?);
        let hashes: Vec<u64> = (0..len as u64).map(|i| start + i).collect();
        r.insert("prefix_hashes".into(), json!(hashes));
    }
    for key in ["policy_class", "classifier_class"] {
        if u.ratio(1, 3)? {
            r.insert(key.into(), json!(label(u)?));
        }
    }
    if u.ratio(1, 4)? && !workers.is_empty() {
        let (id, dp, _) = &workers[u.choose_index(workers.len())?];
        let rank = if bool::arbitrary(u)? { u.int_in_range(0..=dp.saturating_sub(1))? } else { number(u)? };
        r.insert("pinned".into(), json!({"worker_id": id, "dp_rank": rank}));
    }
    if u.ratio(1, 4)? {
        let allowed: Vec<u64> =
            ids.iter().copied().filter(|_| u.arbitrary::<bool>().unwrap_or(false)).collect();
        r.insert("allowed_workers".into(), json!(allowed));
    }
    if u.ratio(1, 4)? {
        let mut prefs = Map::new();
        for _ in 0..u.int_in_range(0..=3)? {
            prefs.insert(label(u)?, json!(float(u)?));
        }
        r.insert("preferred_taints".into(), Value::Object(prefs));
    }
    let slots: Vec<(u64, u32)> = workers
        .iter()
        .flat_map(|(id, dp, _)| (0..(*dp).clamp(1, shape.max_dp)).map(move |rank| (*id, rank)))
        .collect();
    r.insert("workers".into(), Value::Array(workers.into_iter().map(|(_, _, w)| w).collect()));
    if bool::arbitrary(u)? {
        r.insert("inputs".into(), inputs(u, &slots)?);
    }
    let mut value = Value::Object(r);
    if u.ratio(1, 16)? {
        break_one_field(u, &mut value)?;
    }
    Ok(value)
}

/// Rows for some of `slots` (a worker, a rank), with some columns.
fn inputs(u: &mut Unstructured<'_>, slots: &[(u64, u32)]) -> arbitrary::Result<Value> {
    let mut rows: Vec<(u64, u32)> = slots.iter().copied().filter(|_| u.ratio(3, 4).unwrap_or(true)).collect();
    if u.ratio(1, 16)? {
        rows.push((u64::arbitrary(u)?, number(u)?));
    }
    let mut m = Map::new();
    m.insert("worker_id".into(), json!(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
    for (i, column) in COLUMNS.iter().enumerate() {
        if !bool::arbitrary(u)? {
            continue;
        }
        let mut values: Vec<u32> = if i == 0 {
            rows.iter().map(|r| r.1).collect()
        } else {
            rows.iter().map(|_| number(u)).collect::<Result<_, _>>()?
        };
        if u.ratio(1, 32)? {
            values.pop();
        }
        m.insert((*column).into(), json!(values));
    }
    Ok(Value::Object(m))
}

/// Replaces one top-level field with a value of another type, or adds an unknown one.
fn break_one_field(u: &mut Unstructured<'_>, value: &mut Value) -> arbitrary::Result<()> {
    let Value::Object(map) = value else { return Ok(()) };
    let junk = match u.int_in_range(0..=4)? {
        0 => Value::Null,
        1 => json!(-1),
        2 => json!("x"),
        3 => json!(1.5),
        _ => json!([{}]),
    };
    let keys: Vec<String> = map.keys().cloned().collect();
    if keys.is_empty() || u.ratio(1, 4)? {
        map.insert("unknown_field".into(), junk);
    } else {
        map.insert(keys[u.choose_index(keys.len())?].clone(), junk);
    }
    Ok(())
}
