//! The reader against what it replaces, serde_json (text → value, float printing), on
//! edge cases and on many generated inputs (`de_tests.rs`: value → type, error path). Any
//! difference fails with the input that shows it.

use super::float;
use super::read::{Value, parse};

/// splitmix64: deterministic inputs without a dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(super) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// serde_json's value in this module's terms (numbers compared by their bits).
fn from_serde(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::U64(u),
            (None, Some(i)) => Value::I64(i),
            _ => Value::F64(n.as_f64().unwrap()),
        },
        serde_json::Value::String(s) => Value::String(s),
        serde_json::Value::Array(items) => Value::Array(items.into_iter().map(from_serde).collect()),
        serde_json::Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, from_serde(v))).collect())
        }
    }
}

/// Bit-exact equality (`PartialEq` on f64 would equate 0.0 and -0.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((ka, a), (kb, b))| ka == kb && same(a, b))
        }
        _ => a == b,
    }
}

fn assert_reads_as_serde_json(text: &str) {
    let theirs = serde_json::from_str::<serde_json::Value>(text).map(from_serde).map_err(|e| e.to_string());
    let ours = parse(text).map_err(|e| e.to_string());
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert!(same(a, b), "{text:?}: {a:?} vs serde_json {b:?}"),
        _ => assert_eq!(ours, theirs, "{text:?}"),
    }
}

#[test]
fn numbers_read_to_serde_jsons_bits() {
    let fixed = [
        "0",
        "-0",
        "-0.0",
        "0.0",
        "1",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "18446744073709551616.5",
        "-9223372036854775808",
        "-9223372036854775809",
        "1e308",
        "1.8e308",
        "1e309",
        "-1e309",
        "1e-400",
        "0e999999999999",
        "1e999999999999",
        "-1e-999999999999",
        "5e-324",
        "2.4703282292062327e-324",
        "0.1",
        "0.3",
        "1.7976931348623157e308",
        "123456789012345678901234567890",
        "0.000000000000000000000000000000000001",
        "1E5",
        "1e+5",
        "1e-5",
        "1.",
        "1.e5",
        ".5",
        "01",
        "-",
        "-a",
        "1e",
        "1e+",
        "1ea",
        "00",
        "1.5e2x",
        "9007199254740993",
        "2.2250738585072011e-308",
        "1e-320",
        "12345678901234567890123e-30",
        "4.9406564584124654e-324",
        "1.00000000000000011102230246251565404",
    ];
    for n in fixed {
        assert_reads_as_serde_json(n);
        assert_reads_as_serde_json(&format!("{{\"x\": {n}}}"));
    }
    let mut rng = Rng(1);
    for _ in 0..60_000 {
        let digits = |rng: &mut Rng, max: u64| {
            (0..rng.below(max) + 1).map(|_| char::from(b'0' + rng.below(10) as u8)).collect::<String>()
        };
        let mut n = String::new();
        if rng.below(2) == 0 {
            n.push('-');
        }
        n += &digits(&mut rng, 25);
        if rng.below(2) == 0 {
            n.push('.');
            n += &digits(&mut rng, 25);
        }
        if rng.below(2) == 0 {
            n += rng.pick(&["e", "E", "e+", "e-"]);
            n += &digits(&mut rng, 3);
        }
        assert_reads_as_serde_json(&n);
    }
    // Every f64 written the shortest way and with all 17 digits reads back to itself there.
    for _ in 0..30_000 {
        let v = f64::from_bits(rng.next());
        if v.is_finite() {
            assert_reads_as_serde_json(&format!("{v:e}"));
            assert_reads_as_serde_json(&format!("{v:.16e}"));
        }
    }
}

#[test]
fn text_is_accepted_and_refused_as_by_serde_json() {
    let fixed = [
        "",
        " ",
        "{",
        "}",
        "[",
        "]",
        "{}",
        "[]",
        "{\"a\":1,}",
        "[1,]",
        "[1 2]",
        "{\"a\" 1}",
        "{\"a\":}",
        "{1:2}",
        "{\"a\":1 \"b\":2}",
        "{\"a\":1,\"a\":2}",
        "nul",
        "nulL",
        "tru",
        "true false",
        "\"abc",
        "\"a\\",
        "\"\\q\"",
        "\"\\u12\"",
        "\"\\u12G4\"",
        "\"\\ud800\"",
        "\"\\ud800\\n\"",
        "\"\\ud800\\u0041\"",
        "\"\\udc00\"",
        "\"\\ud83d\\ude00\"",
        "\"\\u00e9\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"a\u{1}\"",
        "\"é ✓ 😀\"",
        "\n\n  {\n \"a\": x}",
        "[\n1,\n2,\n]",
        "{\"a\":[{\"b\":null}]}",
        "\"\\ud800",
        "\"\\ud800\\",
        "\"\\ud800\\u",
        "[1,,2]",
        "{,}",
        "{\"a\":1,,}",
        "[\"a\"\n,\"b\"}",
        "  [  ]  x",
    ];
    for text in fixed {
        assert_reads_as_serde_json(text);
    }
    assert_reads_as_serde_json(&"[".repeat(127));
    assert_reads_as_serde_json(&format!("{}{}", "[".repeat(127), "]".repeat(127)));
    assert_reads_as_serde_json(&format!("{}{}", "[".repeat(128), "]".repeat(128)));
    assert_reads_as_serde_json(&format!("{}1{}", "{\"a\":".repeat(130), "}".repeat(130)));
    // Random token soup, mostly almost-JSON, so every refusal path and position is met.
    let tokens = [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        "\t",
        "\"a\"",
        "\"b\\n\"",
        "\"\\u00e9\"",
        "\"\\ud83d\\ude00\"",
        "\"x",
        "\\",
        "1",
        "-2",
        "3.5",
        "1e3",
        "0",
        "00",
        "-",
        ".",
        "null",
        "true",
        "false",
        "nul",
        "x",
        "\"é\"",
        "\u{1}",
        "\"\\ud800\"",
    ];
    let mut rng = Rng(2);
    for _ in 0..50_000 {
        let text: String = (0..rng.below(12)).map(|_| rng.pick(&tokens)).collect();
        assert_reads_as_serde_json(&text);
    }
}

#[test]
fn large_objects_sort_and_keep_the_last_duplicate_as_serde_json() {
    let mut rng = Rng(5);
    for _ in 0..2_000 {
        let keys = rng.below(300) + 1;
        let members: Vec<String> =
            (0..rng.below(200)).map(|i| format!("\"k{}\": {i}", rng.below(keys))).collect();
        assert_reads_as_serde_json(&format!("{{{}}}", members.join(",")));
    }
}

#[test]
fn floats_print_as_core_and_serde_json_printed_them() {
    let mut values = vec![
        0.0,
        -0.0,
        1.0,
        1.5,
        0.1,
        0.3,
        1e15,
        1e16,
        1e-5,
        1e-6,
        1.5e-7,
        1e21,
        1e22,
        1e100,
        5e-324,
        1e-320,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::EPSILON,
        1.2345678901234568e17,
        2.0f64.powi(50) + 0.25,
        2.0f64.powi(50) + 0.75,
        9007199254740993.0,
        2.0f64.powi(60),
        0.1 + 0.2,
        100.0,
        12.5,
        -3.75,
        f64::INFINITY,
        -f64::INFINITY,
        f64::NAN,
    ];
    let mut rng = Rng(4);
    values.extend((0..40_000).map(|_| f64::from_bits(rng.next())));
    // Integers and halves near powers of two, where the interval is lopsided or ties occur.
    for e in 0..64 {
        let p = 2.0f64.powi(e);
        values.extend([p, p - 0.5, p + 0.25, p - 0.25, p + 0.5, 1.0 / p, 3.0 * p]);
    }
    for v in values {
        assert_eq!(float::display(v), v.to_string(), "{v:e}");
        if v.is_finite() {
            let message = serde_json::from_value::<u32>(serde_json::json!(v)).unwrap_err().to_string();
            let expected = message.strip_prefix("invalid type: floating point `").unwrap();
            assert_eq!(format!("{}`, expected u32", float::json(v)), expected, "{v:e}");
        }
    }
}

#[test]
fn strings_are_quoted_as_debug_quotes_them() {
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        for s in [format!("{c}"), format!("a{c}\u{301}")] {
            assert_eq!(super::debug_str(&s), format!("{s:?}"), "U+{:04X}", u32::from(c));
        }
    }
}
