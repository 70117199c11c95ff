//! Parameters for a builtin: mostly `{}` or an object of its real keys with arbitrary
//! values (so configure's checks and every branch of the cost are reached), sometimes
//! any text (so the parameter reader's refusals are compared too).

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Value, json};

/// Every builtin's parameter names (policies/*/src/lib.rs), shared: a key of one
/// policy is an unknown field to another, which must be refused alike by both builds.
const KEYS: &[&str] = &[
    "overlap_score_credit",
    "overlap_score_credit_decay",
    "prefill_load_scale",
    "decode_active_request_weight",
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "overlap_score_weight",
    "prefix_blocks",
    "replication",
    "load_factor",
    "max_usage",
    "prefix_cache_weight",
    "kv_cache_utilization_weight",
    "queue_weight",
    "max_in_flight_requests",
    "cache_threshold",
    "balance_abs_threshold",
    "balance_rel_threshold",
    "max_tree_size",
];

/// A value for a parameter: a small number (integer or not), an edge, or another type.
fn value(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    Ok(match u.int_in_range(0..=9)? {
        0 => json!(u32::arbitrary(u)?),
        1 => json!(-1),
        2 => json!(f64::arbitrary(u)?),
        3 => Value::Null,
        4 => json!("x"),
        5 => json!(u.int_in_range(0..=64u32)?),
        _ => json!(u.int_in_range(0..=4000u32)? as f64 / 1000.0),
    })
}

/// Parameters as text.
pub fn params(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=7)? {
        0 | 1 | 2 => "{}".into(),
        3 => String::arbitrary(u)?,
        _ => {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(1..=4)? {
                m.insert(KEYS[u.choose_index(KEYS.len())?].into(), value(u)?);
            }
            Value::Object(m).to_string()
        }
    })
}
