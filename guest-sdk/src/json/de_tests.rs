//! Reading a parameters type and its errors against what it replaces: serde_json +
//! serde_path_to_error, as `parse_parameters` used them, on every kind of serde request.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::tests::Rng;
use crate::{PolicyError, check, parse_parameters};

/// What `parse_parameters` did before this module (the reference).
fn before<P: serde::de::DeserializeOwned>(json: &str) -> Result<P, PolicyError> {
    let json = json.trim();
    let json = if json.is_empty() || json == "null" { "{}" } else { json };
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| PolicyError::invalid_parameters(format!("parameters are not JSON: {e}")))?;
    if !value.is_object() {
        return Err(PolicyError::invalid_parameters("parameters must be a JSON object"));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at_root = e.path().iter().next().is_none();
        let path = e.path().to_string();
        let error = e.into_inner();
        if at_root { PolicyError::invalid_parameters(error.to_string()) } else { check::field(&path, error) }
    })
}

#[derive(Debug, PartialEq, Deserialize)]
enum Mode {
    Plain,
    Scaled(f64),
    Pair(u8, i16),
    Named { weight: f32 },
}

#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Row {
    weight: f64,
    count: u32,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
enum Key {
    Gold,
    #[serde(rename = "1")]
    One,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(untagged)]
enum Either {
    Number(u8),
    Text(String),
}

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Extra {
    extra: Option<u8>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Loose {
    blocks: u32,
    big: u64,
    signed: i64,
    small: i8,
    factor: f64,
    narrow: f32,
    on: bool,
    name: String,
    letter: Option<char>,
    maybe: Option<f64>,
    row: Row,
    rows: BTreeMap<String, Row>,
    by_number: BTreeMap<u32, f64>,
    by_signed: BTreeMap<i16, u8>,
    by_float: BTreeMap<String, f64>,
    by_flag: BTreeMap<bool, u8>,
    list: Vec<u16>,
    pair: (u8, String),
    modes: Vec<Mode>,
    unit: (),
    by_wide: BTreeMap<i128, u8>,
    by_uwide: BTreeMap<u128, u8>,
    by_key: BTreeMap<Key, u8>,
    either: Option<Either>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
struct Flat {
    blocks: u32,
    #[serde(flatten)]
    rest: Extra,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Strict {
    needed: u32,
    #[serde(default)]
    rows: Vec<Row>,
}

fn assert_same_outcome(json: &str) {
    let ours = parse_parameters::<Loose>(json);
    assert_eq!(format!("{ours:?}"), format!("{:?}", before::<Loose>(json)), "{json}");
    let ours = parse_parameters::<Strict>(json);
    assert_eq!(format!("{ours:?}"), format!("{:?}", before::<Strict>(json)), "{json}");
    let ours = parse_parameters::<Flat>(json);
    assert_eq!(format!("{ours:?}"), format!("{:?}", before::<Flat>(json)), "{json}");
}

#[test]
fn parameters_and_their_errors_are_what_they_were() {
    let values = [
        "1",
        "-1",
        "0",
        "-0",
        "1.5",
        "-2.5",
        "1e3",
        "255",
        "256",
        "-129",
        "4294967296",
        "18446744073709551616",
        "1e300",
        "3.4e39",
        "\"x\"",
        "\"\"",
        "\"ab\"",
        "\"é\"",
        "true",
        "null",
        "[]",
        "[1]",
        "[1, \"a\"]",
        "[1, 2, 3]",
        "{}",
        "{\"weight\": 2}",
        "{\"weight\": \"w\"}",
        "{\"count\": -1}",
        "{\"bogus\": 1}",
        "\"Plain\"",
        "{\"Scaled\": 2}",
        "{\"Scaled\": \"x\"}",
        "{\"Pair\": [1, 2]}",
        "{\"Pair\": [1]}",
        "{\"Named\": {\"weight\": 1}}",
        "{\"Nope\": 1}",
        "{\"Plain\": null}",
        "{\"Plain\": 1}",
        "{\"Scaled\": 1, \"Plain\": 1}",
        "\"Scaled\"",
        "{\"1\": 2}",
        "{\"x\": 1}",
        "{\"-1\": 2}",
        "{\"01\": 1}",
        "{\"1.5\": 1}",
        "{\"-0\": 1}",
        "{\"7x\": 1}",
        "{\"99999999999\": 1}",
        "{\"true\": 1}",
        "{\"yes\": 1}",
        "{\"\": 1}",
        "{\"-\": 1}",
        "{\"1e2\": 1}",
        "{\"-5\": 1}",
        "{\"Gold\": 1}",
        "{\"gold\": 1}",
        "{\"170141183460469231731687303715884105727\": 1}",
        "{\"170141183460469231731687303715884105728\": 1}",
        "{\"-170141183460469231731687303715884105728\": 1}",
        "{\"-170141183460469231731687303715884105729\": 1}",
        "{\"340282366920938463463374607431768211456\": 1}",
        "{\"-0\": 1, \"0\": 2}",
        "{\"5 \": 1}",
        "{\"007\": 1}",
        "{\"170141183460469231731687303715884105727\": \"x\"}",
        "{\"-170141183460469231731687303715884105728\": \"x\"}",
        "{\"340282366920938463463374607431768211455\": \"x\"}",
        "{\"10000000000000000000\": \"x\", \"-10000000000000000001\": 1}",
    ];
    let fields = [
        "blocks",
        "big",
        "signed",
        "small",
        "factor",
        "narrow",
        "on",
        "name",
        "letter",
        "maybe",
        "row",
        "rows",
        "by_number",
        "by_signed",
        "by_float",
        "by_flag",
        "list",
        "pair",
        "modes",
        "unit",
        "needed",
        "bogus",
        "by_wide",
        "by_uwide",
        "by_key",
        "either",
        "extra",
    ];
    for field in fields {
        for value in values {
            assert_same_outcome(&format!("{{\"{field}\": {value}}}"));
            assert_same_outcome(&format!("{{\"{field}\": [{value}]}}"));
            assert_same_outcome(&format!("{{\"{field}\": {{\"gold\": {value}}}}}"));
            assert_same_outcome(&format!(
                "{{\"needed\": 1, \"rows\": [{{}}, {value}], \"{field}\": {value}}}"
            ));
        }
    }
    let mut rng = Rng(3);
    for _ in 0..20_000 {
        let members: Vec<String> =
            (0..rng.below(4)).map(|_| format!("\"{}\": {}", rng.pick(&fields), rng.pick(&values))).collect();
        assert_same_outcome(&format!("{{{}}}", members.join(", ")));
    }
    for json in ["", " null ", "[]", "3", "{", "{\"a\":1}x", "\u{a0}{}\u{2028}"] {
        assert_same_outcome(json);
    }
}
