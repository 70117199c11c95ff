//! Calls on the service's API, generated: the documented routes with real and wrong
//! tokens, bodies of real components, requests, assignments and held tables (JSON or
//! protobuf), and raw requests of any method, path, headers and body.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Value, json};
use switchyard::selection::wire::{TableDelta, TableJson};
use switchyard_builtins::BUILTINS;
use switchyard_proto::{CONTENT_TYPE, encode_delta, encode_table};

use crate::params::params;
use crate::request::{Shape, request};

/// The admin token the target's services are opened with.
pub const ADMIN: &str = "sy_fuzz_admin";

/// One HTTP call, before the caller's token is chosen.
pub struct Call {
    /// The method.
    pub method: &'static str,
    /// The path and query.
    pub path: String,
    /// Which token goes in `Authorization` (see [`Token`]).
    pub token: Token,
    /// Extra headers, possibly odd.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Whose token a call carries.
#[derive(Clone, Copy, Debug, Arbitrary)]
pub enum Token {
    /// The admin's.
    Admin,
    /// The named tenant's (of those created so far, by index).
    Tenant(u8),
    /// A router's.
    Router,
    /// None at all.
    Missing,
    /// A well-formed but unknown one.
    Unknown,
}

/// A tenant name: from a few (so calls meet), or anything.
fn tenant(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=7)? {
        0..=2 => "acme".into(),
        3..=4 => "beta".into(),
        5 => "default".into(),
        _ => String::arbitrary(u)?,
    })
}

/// A policy or class name.
fn name(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=7)? {
        0..=2 => "mine".into(),
        3 => "other".into(),
        4 => BUILTINS[u.choose_index(BUILTINS.len())?].name.into(),
        5 => "latency".into(),
        _ => String::arbitrary(u)?,
    })
}

/// A held table's name: from a few, or anything.
fn table(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0..=3 => "fleet".into(),
        4 => "other".into(),
        _ => String::arbitrary(u)?,
    })
}

/// A table version: mostly the last one answered (a delta on another is refused with
/// `table-version`; versions start from the clock, so a guess never names one), or any.
fn table_version(u: &mut Unstructured<'_>, tables: &[u64]) -> arbitrary::Result<u64> {
    Ok(match tables.last() {
        Some(&v) if u.ratio(3, 4)? => v,
        _ if !tables.is_empty() && bool::arbitrary(u)? => tables[u.choose_index(tables.len())?],
        _ => u64::arbitrary(u)?,
    })
}

/// `value` as the body: JSON, or sometimes protobuf (what `protobuf` makes of it, when it
/// is a value of the wire type).
fn body(
    u: &mut Unstructured<'_>,
    c: &mut Call,
    value: Value,
    protobuf: impl FnOnce(Value) -> Option<Vec<u8>>,
) -> arbitrary::Result<()> {
    match u.ratio(1, 4)?.then(|| protobuf(value.clone())).flatten() {
        Some(bytes) => {
            c.headers.push(("content-type".into(), CONTENT_TYPE.into()));
            c.body = bytes;
        }
        None => c.body = value.to_string().into_bytes(),
    }
    Ok(())
}

/// Percent-encodes everything but unreserved characters, so any name makes a valid URI.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An upload's body: a builtin's component (whole, or cut short), or bytes.
fn component(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let builtin = BUILTINS[u.choose_index(BUILTINS.len())?].component;
    Ok(match u.int_in_range(0..=5)? {
        0 => Vec::<u8>::arbitrary(u)?,
        1 => builtin[..u.choose_index(builtin.len())?].to_vec(),
        _ => builtin.to_vec(),
    })
}

/// The next call, given the versions uploaded so far (for assignments that pin one) and
/// the table versions answered so far (for deltas and selections that name one).
pub fn call(u: &mut Unstructured<'_>, versions: &[String], tables: &[u64]) -> arbitrary::Result<Call> {
    let token = Token::arbitrary(u)?;
    let mut c = Call { method: "GET", path: String::new(), token, headers: Vec::new(), body: Vec::new() };
    // One shape for requests, tables and deltas: the generator's ids (0, 1, 2, …) meet.
    let shape = Shape { max_workers: 16, max_dp: 4, max_hashes: 32 };
    let kind = u.int_in_range(0..=13)?;
    match kind {
        0 => {
            c.method = "POST";
            c.path = "/v1/tenants".into();
            c.body = json!({"name": tenant(u)?}).to_string().into_bytes();
        }
        1 => {
            c.method = "POST";
            c.path = "/v1/routers".into();
            c.body = json!({"name": name(u)?}).to_string().into_bytes();
        }
        2 | 3 => {
            c.method = "PUT";
            c.path = format!("/v1/tenants/{}/policies/{}", encode(&tenant(u)?), encode(&name(u)?));
            if bool::arbitrary(u)? {
                c.path.push_str(&format!("?params={}", encode(&params(u)?)));
            }
            c.body = component(u)?;
        }
        4 => {
            c.method = "PUT";
            c.path = format!("/v1/tenants/{}/classes/{}", encode(&tenant(u)?), encode(&name(u)?));
            let version = match u.int_in_range(0..=3)? {
                0 if !versions.is_empty() => json!(versions[u.choose_index(versions.len())?]),
                1 => json!(String::arbitrary(u)?),
                _ => serde_json::Value::Null,
            };
            let on_fault = ["open", "closed", "maybe"][u.choose_index(3)?];
            let mut body = json!({"policy": name(u)?, "on_fault": on_fault});
            if !version.is_null() {
                body["version"] = version;
            }
            c.body = body.to_string().into_bytes();
        }
        5 => {
            c.method = "POST";
            c.path = format!("/v1/tenants/{}/policies/{}/rollback", encode(&tenant(u)?), encode(&name(u)?));
        }
        6 => c.path = format!("/v1/tenants/{}/policies", encode(&tenant(u)?)),
        7 => {
            c.method = "POST";
            c.path = "/v1/select".into();
            let tenant = tenant(u)?;
            c.body = request(u, shape, Some(&tenant))?.to_string().into_bytes();
        }
        8 => c.path = ["/metrics", "/healthz"][u.choose_index(2)?].into(),
        9 => {
            c.method = "PUT";
            c.path = format!("/v1/tenants/{}/tables/{}", encode(&tenant(u)?), encode(&table(u)?));
            let r = request(u, shape, None)?;
            let put = json!({"workers": r["workers"], "inputs": r.get("inputs").unwrap_or(&json!({}))});
            body(u, &mut c, put, |v| serde_json::from_value::<TableJson>(v).ok().map(|t| encode_table(&t)))?;
        }
        10 => {
            c.method = "POST";
            c.path = format!("/v1/tenants/{}/tables/{}/deltas", encode(&tenant(u)?), encode(&table(u)?));
            let r = request(u, Shape { max_workers: 3, ..shape }, None)?;
            let remove: Vec<u64> =
                (0..u.int_in_range(0..=2)?).map(|_| u.int_in_range(0..=16)).collect::<Result<_, _>>()?;
            let delta = json!({
                "base_version": table_version(u, tables)?,
                "remove": remove,
                "add": r["workers"],
                "inputs": r.get("inputs").unwrap_or(&json!({})),
            });
            body(u, &mut c, delta, |v| {
                serde_json::from_value::<TableDelta>(v).ok().map(|d| encode_delta(&d))
            })?;
        }
        11 => {
            c.method = ["GET", "DELETE"][u.choose_index(2)?];
            c.path = format!("/v1/tenants/{}/tables/{}", encode(&tenant(u)?), encode(&table(u)?));
        }
        12 => {
            c.method = "POST";
            c.path = "/v1/select".into();
            let tenant = tenant(u)?;
            // Its workers' ids and rows are those the puts and deltas use.
            let mut r = request(u, shape, Some(&tenant))?;
            if let Value::Object(m) = &mut r {
                m.remove("workers");
                m.insert("table".into(), json!(table(u)?));
                if bool::arbitrary(u)? {
                    m.insert("table_version".into(), json!(table_version(u, tables)?));
                }
            }
            c.body = r.to_string().into_bytes();
        }
        _ => {
            c.method = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"][u.choose_index(7)?];
            c.path = String::arbitrary(u)?;
            for _ in 0..u.int_in_range(0..=3)? {
                c.headers.push((String::arbitrary(u)?, String::arbitrary(u)?));
            }
            c.body = Vec::<u8>::arbitrary(u)?;
        }
    }
    // A table call needs a tenant's, a router's or the admin's token, several in a row to
    // reach a delta on a put table: the admin's half the time.
    if (9..=12).contains(&kind) && bool::arbitrary(u)? {
        c.token = Token::Admin;
    }
    if u.ratio(1, 8)? {
        let header = ["content-type", "content-length", "transfer-encoding", "authorization"];
        c.headers.push((header[u.choose_index(header.len())?].into(), String::arbitrary(u)?));
    }
    Ok(c)
}
