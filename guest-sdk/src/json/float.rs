//! f64 → text, exactly as core's and serde_json's formatters write it, without linking them:
//! [`display`] is core's `{}` (range errors, `check`), [`json`] is how serde_json wrote a
//! float into its type errors (`invalid type: floating point `1.5``). Both print the
//! shortest digits that read back to the same f64; they differ only in layout and in which
//! of two equally close shortest candidates wins (core: the upper; serde_json: the even).
//!
//! The digits come from exact integer arithmetic (the classic free-format algorithm on
//! small big integers): slower than core's tables, but a few hundred bytes of code, and
//! parameters are read once per `configure`.

use std::cmp::Ordering;

/// An unsigned big integer, little-endian 32-bit limbs. Its operations stay out of line:
/// inlined and vectorised into each use they would be kilobytes of code for a cold path.
#[derive(Clone)]
struct Big(Vec<u32>);

impl Big {
    fn new(n: u64) -> Self {
        Self(vec![n as u32, (n >> 32) as u32])
    }

    #[inline(never)]
    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let product = u64::from(*limb) * u64::from(m) + carry;
            *limb = product as u32;
            carry = product >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    #[inline(never)]
    fn mul_pow2(&mut self, bits: u32) {
        for _ in 0..bits / 32 {
            self.0.insert(0, 0);
        }
        for _ in 0..bits % 32 {
            self.mul_small(2);
        }
    }

    fn mul_pow10(&mut self, n: u32) {
        for _ in 0..n {
            self.mul_small(10);
        }
    }

    #[inline(never)]
    fn add(&self, other: &Big) -> Big {
        let mut sum = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(other.0.len()) {
            let s = u64::from(limb(self, i)) + u64::from(limb(other, i)) + carry;
            sum.push(s as u32);
            carry = s >> 32;
        }
        sum.push(carry as u32);
        Big(sum)
    }

    /// `self -= other`; `other` ≤ `self`.
    #[inline(never)]
    fn sub(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let d = i64::from(self.0[i]) - i64::from(limb(other, i)) - borrow;
            self.0[i] = d as u32;
            borrow = i64::from(d < 0);
        }
    }

    #[inline(never)]
    fn cmp(&self, other: &Big) -> Ordering {
        let len = self.0.len().max(other.0.len());
        (0..len)
            .rev()
            .map(|i| limb(self, i).cmp(&limb(other, i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

fn limb(n: &Big, i: usize) -> u32 {
    n.0.get(i).copied().unwrap_or(0)
}

/// The shortest decimal digits `d` and exponent `k` with `0.d × 10^k` reading back to
/// `v` (finite, > 0); between two equally close candidates, the even one if `ties_even`,
/// else the upper.
// Out of line and never vectorised into the callers: its loops are not hot.
#[inline(never)]
fn shortest(v: f64, ties_even: bool) -> (Vec<u8>, i32) {
    let bits = v.to_bits();
    let fraction = bits & ((1 << 52) - 1);
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let (mant, exp) = if biased == 0 { (fraction, -1074) } else { (fraction | 1 << 52, biased - 1075) };
    // Parsing rounds half to even: an even mantissa owns the ends of its interval.
    let even = mant % 2 == 0;
    // At a power of two the gap below is half the gap above.
    let uneven = fraction == 0 && biased > 1;
    // v = r/s; the interval that reads back to v is (r - minus, r + plus)/s.
    let scale_bits = 1 + u32::from(uneven);
    let mut r = Big::new(mant);
    r.mul_pow2(scale_bits + exp.max(0) as u32);
    let mut s = Big::new(1);
    s.mul_pow2(scale_bits + (-exp).max(0) as u32);
    let mut minus = Big::new(1);
    minus.mul_pow2(exp.max(0) as u32);
    let mut plus = minus.clone();
    plus.mul_pow2(u32::from(uneven));

    // k with 10^(k-1) ≤ the interval's top < 10^k (≤ when it is owned): an estimate, fixed up.
    let top_fits = |r: &Big, plus: &Big, s: &Big| {
        let top = r.add(plus).cmp(s);
        if even { top.is_lt() } else { top.is_le() }
    };
    let bit_length = 64 - i32::try_from(mant.leading_zeros()).unwrap_or(0);
    let mut k = ((exp + bit_length - 1) as f64 * std::f64::consts::LOG10_2).ceil() as i32;
    if k >= 0 {
        s.mul_pow10(k as u32);
    } else {
        for n in [&mut r, &mut minus, &mut plus] {
            n.mul_pow10(k.unsigned_abs());
        }
    }
    while !top_fits(&r, &plus, &s) {
        s.mul_small(10);
        k += 1;
    }
    loop {
        let (mut r10, mut plus10) = (r.clone(), plus.clone());
        r10.mul_small(10);
        plus10.mul_small(10);
        if !top_fits(&r10, &plus10, &s) {
            break;
        }
        (r, plus) = (r10, plus10);
        minus.mul_small(10);
        k -= 1;
    }

    let mut digits = Vec::new();
    loop {
        for n in [&mut r, &mut minus, &mut plus] {
            n.mul_small(10);
        }
        let mut d = 0u8;
        while r.cmp(&s).is_ge() {
            r.sub(&s);
            d += 1;
        }
        let low = if even { r.cmp(&minus).is_le() } else { r.cmp(&minus).is_lt() };
        let high = {
            let top = r.add(&plus).cmp(&s);
            if even { top.is_ge() } else { top.is_gt() }
        };
        if !low && !high {
            digits.push(d);
            continue;
        }
        let up = match (low, high) {
            (true, false) => false,
            (false, true) => true,
            _ => {
                let mut twice = r.clone();
                twice.mul_small(2);
                match twice.cmp(&s) {
                    Ordering::Less => false,
                    Ordering::Greater => true,
                    Ordering::Equal => !ties_even || d % 2 == 1,
                }
            }
        };
        digits.push(d + u8::from(up));
        break;
    }
    // A last digit rounded up to 10 carries.
    while digits.last() == Some(&10) {
        digits.pop();
        match digits.last_mut() {
            Some(last) => *last += 1,
            None => {
                digits.push(1);
                k += 1;
            }
        }
    }
    (digits, k)
}

fn push_digits(out: &mut String, digits: &[u8]) {
    out.extend(digits.iter().map(|&d| char::from(b'0' + d)));
}

fn zeros(out: &mut String, n: i32) {
    out.extend((0..n).map(|_| '0'));
}

/// `0.digits × 10^k` without an exponent: `0.00123`, `12.5`, `1200`.
fn positional(out: &mut String, digits: &[u8], k: i32) {
    let n = digits.len() as i32;
    if k <= 0 {
        out.push_str("0.");
        zeros(out, -k);
        push_digits(out, digits);
    } else if k >= n {
        push_digits(out, digits);
        zeros(out, k - n);
    } else {
        push_digits(out, &digits[..k as usize]);
        out.push('.');
        push_digits(out, &digits[k as usize..]);
    }
}

/// `v` as core's `Display` writes an f64: positional, no exponent (`1`, `0.1`, `1e20` as
/// `100000000000000000000`), `-0`, `inf`, `NaN`.
pub(crate) fn display(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    let mut out = String::from(if v.is_sign_negative() { "-" } else { "" });
    if v.is_infinite() {
        out.push_str("inf");
    } else if v == 0.0 {
        out.push('0');
    } else {
        let (digits, k) = shortest(v.abs(), false);
        positional(&mut out, &digits, k);
    }
    out
}

/// `v` as serde_json wrote a float: positional with a `.0` for whole numbers when the
/// decimal exponent is in -5..=15 (`1.0`, `0.00001`), else `1e+16`, `1.5e-7`.
pub(crate) fn json(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    let mut out = String::from(if v.is_sign_negative() { "-" } else { "" });
    if v.is_infinite() {
        out.push_str("inf");
        return out;
    }
    if v == 0.0 {
        out.push_str("0.0");
        return out;
    }
    let (digits, k) = shortest(v.abs(), true);
    let exponent = k - 1;
    if (-5..=15).contains(&exponent) {
        positional(&mut out, &digits, k);
        if k >= digits.len() as i32 {
            out.push_str(".0");
        }
    } else {
        push_digits(&mut out, &digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            push_digits(&mut out, &digits[1..]);
        }
        out.push_str(if exponent < 0 { "e-" } else { "e+" });
        super::push_decimal(&mut out, u64::from(exponent.unsigned_abs()));
    }
    out
}
