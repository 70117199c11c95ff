//! Numbers, read as serde_json (default features) read them: exact integers while they fit
//! a u64 (an i64 when negative), else its f64 arithmetic, which is not always correctly
//! rounded but is what tenants' parameters always read as.

use super::pow10::POW10;
use super::read::{EOF_VALUE, INVALID_NUMBER, OUT_OF_RANGE, Reader, SyntaxError, Value};

impl Reader<'_> {
    /// After an optional `-` (read): the number. Integers are kept exact while they fit a
    /// u64 (an i64 when negative); anything else is serde_json's f64 (see `float`).
    pub(super) fn number(&mut self, positive: bool) -> Result<Value, SyntaxError> {
        let Some(first) = self.next() else { return Err(self.error(EOF_VALUE)) };
        let mut significand = match first {
            b'0' if matches!(self.peek(), Some(b'0'..=b'9')) => return Err(self.peek_error(INVALID_NUMBER)),
            b'0'..=b'9' => u64::from(first - b'0'),
            _ => return Err(self.error(INVALID_NUMBER)),
        };
        while let Some(c @ b'0'..=b'9') = self.peek().filter(|_| first != b'0') {
            let Some(next) = append_digit(significand, c) else {
                // Too long for a u64: the digits that do not fit only scale it.
                let mut exponent = 0;
                while let Some(b'0'..=b'9') = self.peek() {
                    self.index += 1;
                    exponent += 1;
                }
                return self.float(positive, significand, exponent).map(Value::F64);
            };
            self.index += 1;
            significand = next;
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return self.float(positive, significand, 0).map(Value::F64);
        }
        Ok(if positive {
            Value::U64(significand)
        } else {
            // `-0` and integers below i64::MIN are floats, as in serde_json.
            let negated = (significand as i64).wrapping_neg();
            if negated >= 0 { Value::F64(-(significand as f64)) } else { Value::I64(negated) }
        })
    }

    /// The fraction and exponent after `significand` × 10^`exponent`.
    fn float(&mut self, positive: bool, mut significand: u64, mut exponent: i32) -> Result<f64, SyntaxError> {
        if self.peek() == Some(b'.') {
            self.index += 1;
            let mut fraction_digits = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                let Some(next) = append_digit(significand, c) else {
                    // Further fraction digits are dropped (serde_json's default precision).
                    while let Some(b'0'..=b'9') = self.peek() {
                        self.index += 1;
                    }
                    fraction_digits = 1;
                    break;
                };
                self.index += 1;
                significand = next;
                exponent -= 1;
                fraction_digits += 1;
            }
            if fraction_digits == 0 {
                return Err(match self.peek() {
                    Some(_) => self.peek_error(INVALID_NUMBER),
                    None => self.peek_error(EOF_VALUE),
                });
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.index += 1;
            let positive_exponent = match self.peek() {
                Some(b'+') => {
                    self.index += 1;
                    true
                }
                Some(b'-') => {
                    self.index += 1;
                    false
                }
                _ => true,
            };
            let mut written: i32 = match self.next() {
                Some(c @ b'0'..=b'9') => i32::from(c - b'0'),
                Some(_) => return Err(self.error(INVALID_NUMBER)),
                None => return Err(self.error(EOF_VALUE)),
            };
            while let Some(c @ b'0'..=b'9') = self.peek() {
                self.index += 1;
                match written.checked_mul(10).and_then(|w| w.checked_add(i32::from(c - b'0'))) {
                    Some(w) => written = w,
                    None => {
                        // An exponent past i32: out of range upwards, zero downwards.
                        if significand != 0 && positive_exponent {
                            return Err(self.error(OUT_OF_RANGE));
                        }
                        while let Some(b'0'..=b'9') = self.peek() {
                            self.index += 1;
                        }
                        return Ok(if positive { 0.0 } else { -0.0 });
                    }
                }
            }
            exponent = if positive_exponent {
                exponent.saturating_add(written)
            } else {
                exponent.saturating_sub(written)
            };
        }
        self.scale(positive, significand, exponent)
    }

    /// serde_json's default conversion: the significand as f64, then one multiplication or
    /// division by a power of ten (division by 1e308 first while the power is beyond the
    /// table). Not correctly rounded in every case, but the same bits as serde_json's.
    fn scale(&self, positive: bool, significand: u64, mut exponent: i32) -> Result<f64, SyntaxError> {
        let mut f = significand as f64;
        loop {
            if let Some(&power) = POW10.get(exponent.wrapping_abs() as usize) {
                if exponent >= 0 {
                    f *= power;
                    if f.is_infinite() {
                        return Err(self.error(OUT_OF_RANGE));
                    }
                } else {
                    f /= power;
                }
                break;
            }
            if f == 0.0 {
                break;
            }
            if exponent >= 0 {
                return Err(self.error(OUT_OF_RANGE));
            }
            f /= 1e308;
            exponent += 308;
        }
        Ok(if positive { f } else { -f })
    }
}

/// `n * 10 + digit` if it fits a u64. Compared, not `checked_mul`: on wasm32 that is a
/// 128-bit multiply per digit, which would make numbers cost a guest more fuel.
fn append_digit(n: u64, digit: u8) -> Option<u64> {
    let digit = u64::from(digit - b'0');
    let fits = n < u64::MAX / 10 || (n == u64::MAX / 10 && digit <= u64::MAX % 10);
    fits.then(|| n * 10 + digit)
}
