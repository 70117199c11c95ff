//! Upload parameters in canonical form, so the same parameters are the same version
//! however they are spaced or ordered.

use std::collections::BTreeMap;

use serde_json::Value;
use switchyard::selection::wire::ErrorKind;

use crate::error::ApiError;

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
pub fn canonical_params(text: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::bad_request(ErrorKind::InvalidParams, "`params` must be a JSON object");
    // Checked by serde_json first (syntax, and nesting within its depth limit of 128, which
    // bounds the recursion below): the walk then only ever sees well-formed JSON.
    if !matches!(serde_json::from_str::<Value>(text), Ok(Value::Object(_))) {
        return Err(invalid());
    }
    Canonical { text, pos: 0 }.value().ok_or_else(invalid)
}

/// A walk over well-formed JSON text that writes it in canonical form (see
/// [`canonical_params`]). Any method answers `None` on text that is not JSON.
struct Canonical<'a> {
    text: &'a str,
    pos: usize,
}

impl Canonical<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Consumes `byte` (after any whitespace), or answers `None`.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn value(&mut self) -> Option<String> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => serde_json::to_string(&self.string()?).ok(),
            _ => self.scalar(),
        }
    }

    fn object(&mut self) -> Option<String> {
        self.expect(b'{')?;
        // Keyed by the unescaped key, as serde_json's map is: the same order, and a
        // duplicate replaces the earlier value as it does there.
        let mut members = BTreeMap::new();
        self.skip_whitespace();
        if self.peek()? != b'}' {
            loop {
                self.skip_whitespace();
                let key = self.string()?;
                self.expect(b':')?;
                members.insert(key, self.value()?);
                self.skip_whitespace();
                if self.peek()? != b',' {
                    break;
                }
                self.pos += 1;
            }
        }
        self.expect(b'}')?;
        let mut out = String::from("{");
        for (i, (key, value)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).ok()?);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Some(out)
    }

    fn array(&mut self) -> Option<String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek()? != b']' {
            loop {
                items.push(self.value()?);
                self.skip_whitespace();
                if self.peek()? != b',' {
                    break;
                }
                self.pos += 1;
            }
        }
        self.expect(b']')?;
        Some(format!("[{}]", items.join(",")))
    }

    /// A string token, unescaped. Bytes of multi-byte characters are never `"` or `\`,
    /// so the token ends at a character boundary.
    fn string(&mut self) -> Option<String> {
        self.skip_whitespace();
        let start = self.pos;
        self.expect(b'"')?;
        loop {
            match self.peek()? {
                b'\\' => self.pos += 2,
                b'"' => break,
                _ => self.pos += 1,
            }
        }
        self.pos += 1;
        serde_json::from_str(self.text.get(start..self.pos)?).ok()
    }

    /// A number, `true`, `false` or `null`: its text as written.
    fn scalar(&mut self) -> Option<String> {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9' | b'a'..=b'z' | b'E' | b'+' | b'-' | b'.')) {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.text[start..self.pos].to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

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
}
