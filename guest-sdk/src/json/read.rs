//! JSON text → [`Value`] (numbers in `number.rs`), accepting and refusing exactly what `serde_json::from_str::<Value>`
//! (default features) did, with the same message and position for each refusal: tenants
//! saw those messages, so they are kept (`tests.rs` compares both on many inputs).
//!
//! The shape follows serde_json's reader on purpose: an error found on a byte already read
//! is placed at that byte (`error`), one found by looking ahead at the next byte
//! (`peek_error`), and numbers keep serde_json's u64 / i64 / f64 split and its arithmetic.

use std::fmt;

/// A parsed JSON value. An object's members are sorted by key and a duplicate key keeps
/// its last value, as in serde_json's `Value` (a `BTreeMap` without `preserve_order`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    /// A non-negative integer that fits a u64.
    U64(u64),
    /// A negative integer that fits an i64.
    I64(i64),
    /// Anything else: a fraction, an exponent, `-0`, or an integer out of both ranges.
    F64(f64),
    String(String),
    Array(Vec<Value>),
    /// Sorted by key, keys unique.
    Object(Vec<(String, Value)>),
}

/// A syntax error: serde_json's message, line and column (1-based line; the column counts
/// bytes, as serde_json's does).
#[derive(Debug, PartialEq)]
pub(crate) struct SyntaxError {
    message: &'static str,
    line: usize,
    column: usize,
}

impl SyntaxError {
    /// (line, column).
    pub(super) fn position(&self) -> (usize, usize) {
        (self.line, self.column)
    }
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)?;
        f.write_str(" at line ")?;
        super::write_decimal(f, self.line as u64)?;
        f.write_str(" column ")?;
        super::write_decimal(f, self.column as u64)
    }
}

// serde_json's wording, kept verbatim.
const EOF_LIST: &str = "EOF while parsing a list";
const EOF_OBJECT: &str = "EOF while parsing an object";
const EOF_STRING: &str = "EOF while parsing a string";
pub(super) const EOF_VALUE: &str = "EOF while parsing a value";
const EXPECTED_COLON: &str = "expected `:`";
const EXPECTED_LIST_END: &str = "expected `,` or `]`";
const EXPECTED_OBJECT_END: &str = "expected `,` or `}`";
const EXPECTED_IDENT: &str = "expected ident";
const EXPECTED_VALUE: &str = "expected value";
const INVALID_ESCAPE: &str = "invalid escape";
pub(super) const INVALID_NUMBER: &str = "invalid number";
pub(super) const OUT_OF_RANGE: &str = "number out of range";
const CONTROL_CHARACTER: &str = "control character (\\u0000-\\u001F) found while parsing a string";
const KEY_NOT_STRING: &str = "key must be a string";
const LONE_SURROGATE: &str = "lone leading surrogate in hex escape";
const TRAILING_COMMA: &str = "trailing comma";
const TRAILING_CHARACTERS: &str = "trailing characters";
const HEX_ESCAPE_END: &str = "unexpected end of hex escape";
const TOO_DEEP: &str = "recursion limit exceeded";

/// Parses one JSON value that makes up all of `text` (whitespace around it allowed).
pub(crate) fn parse(text: &str) -> Result<Value, SyntaxError> {
    let mut reader = Reader::new(text);
    let value = reader.value()?;
    match reader.whitespace() {
        Some(_) => Err(reader.peek_error(TRAILING_CHARACTERS)),
        None => Ok(value),
    }
}

/// A cursor over the text. serde_json allows 127 nested arrays and objects; the 128th is
/// refused, which also bounds the recursion here.
pub(super) struct Reader<'a> {
    /// The bytes of a `str` (made only from one, which `string` relies on).
    text: &'a [u8],
    pub(super) index: usize,
    depth_left: u8,
}

impl<'a> Reader<'a> {
    pub(super) fn new(source: &'a str) -> Self {
        Self { text: source.as_bytes(), index: 0, depth_left: 128 }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.text.get(self.index).copied()
    }

    pub(super) fn next(&mut self) -> Option<u8> {
        let byte = self.peek();
        self.index += usize::from(byte.is_some());
        byte
    }

    /// The error at the last byte read.
    pub(super) fn error(&self, message: &'static str) -> SyntaxError {
        self.error_at(self.index, message)
    }

    /// The error at the byte looked at but not read.
    pub(super) fn peek_error(&self, message: &'static str) -> SyntaxError {
        self.error_at((self.index + 1).min(self.text.len()), message)
    }

    // Out of line: a refusal is rare, and inlined at each of its many sites it would be a
    // large share of the reader's code.
    #[cold]
    #[inline(never)]
    fn error_at(&self, index: usize, message: &'static str) -> SyntaxError {
        let before = &self.text[..index];
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let line = 1 + before[..line_start].iter().filter(|&&b| b == b'\n').count();
        SyntaxError { message, line, column: index - line_start }
    }

    /// Skips JSON whitespace; the next byte, not read.
    fn whitespace(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.index += 1;
        }
        self.peek()
    }

    fn value(&mut self) -> Result<Value, SyntaxError> {
        let Some(first) = self.whitespace() else { return Err(self.peek_error(EOF_VALUE)) };
        match first {
            b'n' => self.word(b"null", Value::Null),
            b't' => self.word(b"true", Value::Bool(true)),
            b'f' => self.word(b"false", Value::Bool(false)),
            b'-' => {
                self.index += 1;
                self.number(false)
            }
            b'0'..=b'9' => self.number(true),
            b'"' => {
                self.index += 1;
                self.string().map(Value::String)
            }
            b'[' | b'{' => {
                self.depth_left -= 1;
                if self.depth_left == 0 {
                    return Err(self.peek_error(TOO_DEEP));
                }
                self.index += 1;
                let value = if first == b'[' { self.array()? } else { self.object()? };
                self.depth_left += 1;
                Ok(value)
            }
            _ => Err(self.peek_error(EXPECTED_VALUE)),
        }
    }

    fn word(&mut self, word: &[u8], value: Value) -> Result<Value, SyntaxError> {
        self.index += 1;
        for &expected in &word[1..] {
            match self.next() {
                None => return Err(self.error(EOF_VALUE)),
                Some(byte) if byte != expected => return Err(self.error(EXPECTED_IDENT)),
                Some(_) => {}
            }
        }
        Ok(value)
    }

    /// After `[`: the elements and the closing `]`.
    fn array(&mut self) -> Result<Value, SyntaxError> {
        let mut items = Vec::new();
        loop {
            match self.whitespace() {
                None => return Err(self.peek_error(EOF_LIST)),
                Some(b']') => break,
                Some(_) if items.is_empty() => {}
                Some(b',') => {
                    self.index += 1;
                    match self.whitespace() {
                        Some(b']') => return Err(self.peek_error(TRAILING_COMMA)),
                        Some(_) => {}
                        None => return Err(self.peek_error(EOF_VALUE)),
                    }
                }
                Some(_) => return Err(self.peek_error(EXPECTED_LIST_END)),
            }
            items.push(self.value()?);
        }
        self.index += 1;
        Ok(Value::Array(items))
    }

    /// After `{`: the members and the closing `}`.
    fn object(&mut self) -> Result<Value, SyntaxError> {
        let mut members = Vec::new();
        let mut first = true;
        loop {
            match self.whitespace() {
                None => return Err(self.peek_error(EOF_OBJECT)),
                Some(b'}') => break,
                Some(b'"') if first => {}
                Some(_) if first => return Err(self.peek_error(KEY_NOT_STRING)),
                Some(b',') => {
                    self.index += 1;
                    match self.whitespace() {
                        Some(b'"') => {}
                        Some(b'}') => return Err(self.peek_error(TRAILING_COMMA)),
                        Some(_) => return Err(self.peek_error(KEY_NOT_STRING)),
                        None => return Err(self.peek_error(EOF_VALUE)),
                    }
                }
                Some(_) => return Err(self.peek_error(EXPECTED_OBJECT_END)),
            }
            first = false;
            self.index += 1;
            let key = self.string()?;
            match self.whitespace() {
                Some(b':') => self.index += 1,
                Some(_) => return Err(self.peek_error(EXPECTED_COLON)),
                None => return Err(self.peek_error(EOF_OBJECT)),
            }
            members.push((key, self.value()?));
        }
        self.index += 1;
        Ok(Value::Object(sorted(members)))
    }

    /// After the opening `"`: the string's contents, escapes decoded, and the closing `"`.
    fn string(&mut self) -> Result<String, SyntaxError> {
        let mut out = Vec::new();
        loop {
            // Runs without escapes are copied whole: a byte (or a `str` slice) at a time
            // cost a guest more fuel than serde_json did, and large parameters are read
            // within a fuel budget.
            let start = self.index;
            let rest = self.text.get(start..).unwrap_or_default();
            let run = rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).unwrap_or(rest.len());
            out.extend_from_slice(rest.get(..run).unwrap_or_default());
            self.index = start + run;
            let Some(byte) = self.next() else { return Err(self.error(EOF_STRING)) };
            match byte {
                b'"' => break,
                b'\\' => self.escape(&mut out)?,
                _ => return Err(self.error(CONTROL_CHARACTER)),
            }
        }
        // SAFETY: `out` holds runs of the `str` being read, each cut at ASCII bytes (so
        // whole UTF-8 sequences), and chars written by `char::encode_utf8`: valid UTF-8.
        Ok(unsafe { String::from_utf8_unchecked(out) })
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), SyntaxError> {
        let Some(byte) = self.next() else { return Err(self.error(EOF_STRING)) };
        let decoded = match byte {
            b'"' | b'\\' | b'/' => byte,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => return self.unicode_escape(out),
            _ => return Err(self.error(INVALID_ESCAPE)),
        };
        out.push(decoded);
        Ok(())
    }

    /// After `\u`: one code point, a surrogate pair being two escapes.
    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> Result<(), SyntaxError> {
        let first = self.hex4()?;
        let code = match first {
            0xDC00..=0xDFFF => return Err(self.error(LONE_SURROGATE)),
            0xD800..=0xDBFF => {
                for expected in *b"\\u" {
                    match self.next() {
                        Some(byte) if byte == expected => {}
                        Some(_) => return Err(self.error(HEX_ESCAPE_END)),
                        // Looked at, not read: serde_json places this one at the last byte.
                        None => return Err(self.error(EOF_STRING)),
                    }
                }
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error(LONE_SURROGATE));
                }
                0x1_0000 + ((u32::from(first) - 0xD800) << 10 | (u32::from(second) - 0xDC00))
            }
            _ => u32::from(first),
        };
        let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }

    fn hex4(&mut self) -> Result<u16, SyntaxError> {
        let Some(digits) = self.text.get(self.index..self.index + 4) else {
            self.index = self.text.len();
            return Err(self.error(EOF_STRING));
        };
        self.index += 4;
        let mut n = 0u16;
        for &d in digits {
            let v = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(self.error(INVALID_ESCAPE)),
            };
            n = n << 4 | u16::from(v);
        }
        Ok(n)
    }
}

/// `members` sorted by key, of equal keys only the last (as `BTreeMap::insert` keeps it).
/// A merge sort of indices, written here: a `BTreeMap` or std's sort inlined into the
/// reader would be several KB of a guest's code, and a tenant's object may be large, so
/// nothing quadratic.
#[inline(never)]
fn sorted(members: Vec<(String, Value)>) -> Vec<(String, Value)> {
    let n = members.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut merged = order.clone();
    let mut width = 1;
    while width < n {
        for start in (0..n).step_by(2 * width) {
            let (mid, end) = ((start + width).min(n), (start + 2 * width).min(n));
            let (mut i, mut j) = (start, mid);
            for slot in &mut merged[start..end] {
                // `<=`: of equal keys the earlier stays first (stable).
                let take_left = i < mid && (j == end || members[order[i]].0 <= members[order[j]].0);
                *slot = if take_left { order[i] } else { order[j] };
                if take_left { i += 1 } else { j += 1 }
            }
        }
        std::mem::swap(&mut order, &mut merged);
        width *= 2;
    }
    let mut slots: Vec<Option<(String, Value)>> = members.into_iter().map(Some).collect();
    let mut out: Vec<(String, Value)> = Vec::with_capacity(n);
    for index in order {
        let Some(member) = slots[index].take() else { continue };
        match out.last_mut() {
            Some(last) if last.0 == member.0 => *last = member,
            _ => out.push(member),
        }
    }
    out
}
