//! Upload parameters in canonical form, so the same parameters are the same version
//! however they are spaced or ordered.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use switchyard::selection::wire::ErrorKind;

use crate::error::ApiError;

/// The deepest nesting of arrays and objects accepted: serde_json's own recursion limit
/// (it refuses a 128th level). Reading a [`RawValue`] skips its contents without that
/// limit, so the walk below counts levels itself.
const MAX_DEPTH: usize = 127;

/// The canonical text of upload parameters, which must be a JSON object: no whitespace,
/// every object's keys sorted (by their unescaped text, bytewise) with a duplicate key's
/// last value kept, strings re-escaped as serde_json writes them, and numbers, `true`,
/// `false` and `null` exactly as written.
///
/// Numbers are not re-printed from the values serde_json reads: its reading of a number's
/// text may be one rounding off the nearest float, so printing that float and reading it
/// back gives another float for some numbers (`0.940e-22` reads as 9.399999999999999e-23,
/// which prints as such and reads back as 9.4e-23). The stored text would then configure
/// the version with parameters a bit off those uploaded (and those `switchyard select
/// --params` would use). Written as uploaded, they read exactly as the upload's text
/// does: the canonical text parses to the same `Value`, which is what a policy reads its
/// parameters from (`parse_parameters`). So `1.0` and `1.00` stay distinct versions.
///
/// serde_json does the reading: each object as a sorted map of its members' raw text
/// (a later duplicate replaces the earlier, as in its `Value`), each array as a list of
/// raw items, each scalar as its raw text.
pub fn canonical_params(text: &str) -> Result<String, ApiError> {
    let invalid = |m: String| ApiError::bad_request(ErrorKind::InvalidParams, m);
    let object: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            // serde_json's message names the line and column.
            Category::Syntax | Category::Eof | Category::Io => {
                invalid(format!("`params` is not valid JSON: {e}"))
            }
            Category::Data => invalid(format!("`params` must be a JSON object, not {}", json_kind(text))),
        }
    })?;
    let mut out = String::with_capacity(text.len());
    write_object(&object, 1, &mut out).ok_or_else(|| {
        invalid(format!("`params` nest deeper than {MAX_DEPTH} levels of arrays and objects"))
    })?;
    Ok(out)
}

/// What the valid JSON `text` is, by its first character, as a refusal names it.
fn json_kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'{') => "an object of that form",
        _ => "a number",
    }
}

/// Writes the canonical form of the object `members` at nesting level `depth`; `None`
/// past [`MAX_DEPTH`] or on text serde_json refuses.
fn write_object(members: &BTreeMap<String, &RawValue>, depth: usize, out: &mut String) -> Option<()> {
    out.push('{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        write_value(value, depth, out)?;
    }
    out.push('}');
    Some(())
}

/// Writes the canonical form of `value`, inside a container at level `depth`.
fn write_value(value: &RawValue, depth: usize, out: &mut String) -> Option<()> {
    let text = value.get();
    match text.as_bytes().first()? {
        b'{' | b'[' if depth >= MAX_DEPTH => None,
        b'{' => write_object(&serde_json::from_str(text).ok()?, depth + 1, out),
        b'[' => {
            let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, depth + 1, out)?;
            }
            out.push(']');
            Some(())
        }
        b'"' => {
            let string: String = serde_json::from_str(text).ok()?;
            out.push_str(&serde_json::to_string(&string).ok()?);
            Some(())
        }
        // A number, `true`, `false` or `null`: as written.
        _ => {
            out.push_str(text);
            Some(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use serde_json::Value;

    fn canonical(text: &str) -> String {
        canonical_params(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    #[test]
    fn canonical_params_drop_spacing_and_sort_keys_at_every_depth() {
        let text = r#" { "b" : 2,
            "a": {"d": [1, 2 , {"z": 0, "y": [ ]}], "c": "x", "e": { }} } "#;
        let expected = r#"{"a":{"c":"x","d":[1,2,{"y":[],"z":0}],"e":{}},"b":2}"#;
        assert_eq!(canonical(text), expected);
        assert_eq!(canonical(r#"{"b":2,"a":{"e":{},"c":"x","d":[1,2,{"y":[],"z":0}]}}"#), expected);
        assert_eq!(canonical(expected), expected, "canonical text is its own canonical form");
        assert_eq!(canonical("{}"), "{}");
    }

    #[test]
    fn canonical_params_read_as_the_upload_does() {
        // A duplicate keeps its last value and keys sort unescaped, as serde_json's map
        // does; strings are re-escaped one way.
        assert_eq!(canonical(r#"{"a": 1, "a": 2}"#), r#"{"a":2}"#);
        assert_eq!(canonical(r#"{"b": 0, "\u0061": "\u00e9\/\n"}"#), r#"{"a":"é/\n","b":0}"#);
        assert_eq!(canonical(r#"{"t": true, "f": false, "n": null}"#), r#"{"f":false,"n":null,"t":true}"#);
        // Numbers as written: printing the float serde_json reads from `0.940e-22` and
        // reading that back gives another float, so a re-printed number could configure
        // the version with a value the upload's text does not read as.
        let drifts = |n: &str| {
            let read: Value = serde_json::from_str(n).unwrap();
            serde_json::from_str::<Value>(&read.to_string()).unwrap() != read
        };
        assert!(drifts("0.940e-22"), "the reason numbers are kept as written");
        let text = r#"{"x": 0.940e-22, "y": 1.0, "z": -0, "w": 1E+2, "v": 0.95382993000964592}"#;
        assert_eq!(canonical(text), r#"{"v":0.95382993000964592,"w":1E+2,"x":0.940e-22,"y":1.0,"z":-0}"#);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..2000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let text = format!(
                r#"{{"k": [{}e{}, {i}]}}"#,
                (x >> 11) as f64 / (1u64 << 53) as f64,
                (x % 61) as i64 - 30
            );
            let read = |t: &str| serde_json::from_str::<Value>(t).unwrap();
            assert_eq!(read(&canonical(&text)), read(&text), "{text}");
        }
    }

    #[test]
    fn canonical_params_are_an_object_or_refused() {
        for text in ["", "[1]", "3", r#""x""#, "null", "{", r#"{"a": 1} x"#, r#"{"a": 01}"#, "{'a': 1}"] {
            let e = canonical_params(text).unwrap_err();
            assert_eq!((e.status(), e.kind()), (StatusCode::BAD_REQUEST, ErrorKind::InvalidParams), "{text}");
        }
    }

    #[test]
    fn canonical_params_nest_as_deep_as_serde_json_reads_and_no_deeper() {
        // Reading a raw value skips its contents without serde_json's recursion limit:
        // the walk keeps the same bound, so no upload recurses deeper than a `Value` read.
        for depth in [1usize, 2, 126, 127, 128, 129, 10_000] {
            let text = format!(r#"{{"a":{}0{}}}"#, "[".repeat(depth - 1), "]".repeat(depth - 1));
            let read = serde_json::from_str::<Value>(&text).is_ok();
            assert_eq!(canonical_params(&text).is_ok(), read, "depth {depth}");
            assert_eq!(read, depth <= MAX_DEPTH, "depth {depth}");
            let objects = format!("{}0{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
            assert_eq!(canonical_params(&objects).is_ok(), depth <= MAX_DEPTH, "objects, depth {depth}");
        }
    }
}
