//! The SDK's own JSON reader for parameters: text → [`read::Value`] → the policy's
//! `Deserialize` type, with the path to a failing value.
//!
//! Why not serde_json + serde_path_to_error: with their float parsing and printing they are
//! a large share of a guest's code (docs/benchmarks-history.md, "the SDK's own parameter
//! reader"), and parameters are a small object read once per `configure`. This reads and
//! refuses exactly what they do, with the same messages (`tests.rs` checks it against
//! serde_json on many inputs).

mod de;
#[cfg(test)]
mod de_tests;
pub(crate) mod float;
mod key;
mod number;
mod pow10;
mod read;
#[cfg(test)]
mod tests;

use std::fmt::{self, Display};

use serde::de::{DeserializeOwned, Expected, Unexpected};

pub(crate) use read::{SyntaxError, Value, parse};

/// Where a value sits under the top of the parameters.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    /// An object member (or an enum's variant) by its key.
    Key(&'a Path<'a>, &'a str),
    /// An array element.
    Index(&'a Path<'a>, usize),
    /// A member whose key was not read as text.
    Unknown(&'a Path<'a>),
}

impl Display for Path<'_> {
    /// serde_path_to_error's form: keys joined by `.`, indices as `[i]` (`rows[2].weight`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut segments = Vec::new();
        let mut at = self;
        loop {
            match at {
                Path::Root => break,
                Path::Key(parent, _) | Path::Index(parent, _) | Path::Unknown(parent) => {
                    segments.push(at);
                    at = parent;
                }
            }
        }
        for (i, segment) in segments.iter().rev().enumerate() {
            let separator = if i == 0 { "" } else { "." };
            match segment {
                Path::Key(_, key) => write!(f, "{separator}{key}")?,
                Path::Index(_, index) => write!(f, "[{index}]")?,
                Path::Unknown(_) => write!(f, "{separator}?")?,
                Path::Root => {}
            }
        }
        Ok(())
    }
}

/// A deserialization error: serde_json's `Error` as far as its text goes (a message, and
/// a line and column when it came from the text; line 0: none).
#[derive(Debug)]
pub(crate) struct Error {
    message: String,
    line: usize,
    column: usize,
}

impl Error {
    fn custom_str(message: &str) -> Self {
        Self { message: message.into(), line: 0, column: 0 }
    }

    // Out of line: `custom` is instantiated for every message type.
    #[inline(never)]
    fn from_message(mut message: String) -> Self {
        let (line, column) = split_place(&mut message).unwrap_or((0, 0));
        Self { message, line, column }
    }

    fn syntax(e: SyntaxError) -> Self {
        Self { message: e.to_string(), line: 0, column: 0 }
    }

    /// serde_json's `fix_position`: an error without a place gets the reader's.
    fn placed_at(self, reader: &read::Reader<'_>) -> Self {
        if self.line != 0 {
            return self;
        }
        let place = reader.error("");
        let (line, column) = place.position();
        Self { message: self.message, line, column }
    }
}

impl Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if self.line != 0 {
            write!(f, " at line {} column {}", self.line, self.column)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl serde::de::Error for Error {
    /// As serde_json: a message ending in ` at line L column C` is taken as a place (and
    /// written back the same way, or dropped for line 0).
    fn custom<T: Display>(message: T) -> Self {
        Self::from_message(message.to_string())
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self::custom(format_args!("invalid type: {}, expected {}", Unexp(unexpected), expected))
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self::custom(format_args!("invalid value: {}, expected {}", Unexp(unexpected), expected))
    }
}

/// Removes a trailing ` at line L column C` (both decimal) and returns (L, C). Bytes, not
/// `str::rfind` and slicing: those link a substring search and slicing's panic messages.
fn split_place(message: &mut String) -> Option<(usize, usize)> {
    const AT_LINE: &[u8] = b" at line ";
    const COLUMN: &[u8] = b" column ";
    let bytes = message.as_bytes();
    let start = (0..bytes.len()).rev().find(|&i| bytes[i..].starts_with(AT_LINE))?;
    let rest = bytes.get(start + AT_LINE.len()..)?;
    let line_digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let (line_text, after) = rest.split_at_checked(line_digits)?;
    let column_text = after.strip_prefix(COLUMN)?;
    let line = parse_decimal(line_text)?;
    let column = parse_decimal(column_text)?;
    message.truncate(start);
    Some((line, column))
}

/// Decimal digits only (at least one) → usize, if it fits.
fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(usize::from(d - b'0'))
    })
}

/// An unexpected value, worded as serde_json worded it.
struct Unexp<'a>(Unexpected<'a>);

impl Display for Unexp<'_> {
    /// serde's wording for each kind of unexpected value, except JSON's `null` and a
    /// float written as serde_json wrote it (`super::float`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (text, value): (&str, Option<&dyn Display>) = match &self.0 {
            Unexpected::Unit => return f.write_str("null"),
            Unexpected::Float(v) => {
                f.write_str("floating point `")?;
                f.write_str(&float::json(*v))?;
                return f.write_str("`");
            }
            Unexpected::Str(s) => {
                f.write_str("string ")?;
                return f.write_str(&debug_str(s));
            }
            Unexpected::Bool(b) => ("boolean", Some(b)),
            Unexpected::Unsigned(n) => ("integer", Some(n)),
            Unexpected::Signed(n) => ("integer", Some(n)),
            Unexpected::Char(c) => ("character", Some(c)),
            Unexpected::Bytes(_) => ("byte array", None),
            Unexpected::Option => ("Option value", None),
            Unexpected::NewtypeStruct => ("newtype struct", None),
            Unexpected::Seq => ("sequence", None),
            Unexpected::Map => ("map", None),
            Unexpected::Enum => ("enum", None),
            Unexpected::UnitVariant => ("unit variant", None),
            Unexpected::NewtypeVariant => ("newtype variant", None),
            Unexpected::TupleVariant => ("tuple variant", None),
            Unexpected::StructVariant => ("struct variant", None),
            Unexpected::Other(other) => (*other, None),
        };
        f.write_str(text)?;
        match value {
            Some(value) => write!(f, " `{value}`"),
            None => Ok(()),
        }
    }
}

/// `s` as `{:?}` writes a `str` (quoted, escaped), through `char::escape_debug`: core's
/// `str` Debug links its slicing panics and `Range` Debug besides (~2 KB of a guest's code).
/// A `'` is the one character a `str` leaves alone and a `char` escapes.
fn debug_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '\'' {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
    out.push('"');
    out
}

fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[i..].iter().map(|&d| char::from(d)));
}

/// [`push_decimal`] for i128 / u128 map keys (`key.rs`) only: 128-bit division links a
/// routine of its own (~1 KB) that other guests need not carry.
fn push_decimal_wide(out: &mut String, n: u128) {
    match u64::try_from(n) {
        Ok(n) => push_decimal(out, n),
        Err(_) => {
            let (high, low) = (n / 10_000_000_000_000_000_000, n % 10_000_000_000_000_000_000);
            push_decimal_wide(out, high);
            let mut low_digits = String::new();
            push_decimal(&mut low_digits, low as u64);
            out.extend(std::iter::repeat_n('0', 19 - low_digits.len()));
            out.push_str(&low_digits);
        }
    }
}

fn write_decimal(f: &mut fmt::Formatter<'_>, n: u64) -> fmt::Result {
    let mut text = String::new();
    push_decimal(&mut text, n);
    f.write_str(&text)
}

/// Reads `T` from `value`: the error's message and, unless it is about the whole value,
/// the path to where it happened.
pub(crate) fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, (String, Error)> {
    let track = de::Track::default();
    let result = T::deserialize(de::ValueDe { value, path: &Path::Root, track: &track });
    result.map_err(|e| (track.into_inner().unwrap_or_default(), e))
}
