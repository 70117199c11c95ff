//! A map key handed to a `Deserialize` type: text, or a number or a bool read from it,
//! as serde_json's `Value` did; and what the error path shows for it.

use serde::de::{self, IntoDeserializer, Unexpected, Visitor};

use super::Error;
use super::read::{INVALID_NUMBER, OUT_OF_RANGE, Reader, Value};

/// A map key: text, read as a number or a bool when asked (serde_json's rules). `named`
/// is what the path shows for it: the text handed over as a string or bool, an integer's
/// decimal form; nothing (the path shows `?`) for a float or an enum.
pub(super) struct KeyDe<'k> {
    pub(super) key: String,
    pub(super) named: &'k mut Option<String>,
}

macro_rules! numeric_keys {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.number(visitor)
        }
    )*};
}

impl KeyDe<'_> {
    /// A key read as a number: parsed as serde_json parses a number (its errors placed as
    /// there), and refused unless the whole key is one.
    fn number<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let mut reader = Reader::new(&self.key);
        let positive = match reader.peek() {
            Some(b'0'..=b'9') => true,
            Some(b'-') => {
                reader.index += 1;
                false
            }
            _ => return Err(Error::custom_str(NOT_A_NUMBER)),
        };
        let number = reader.number(positive).map_err(Error::syntax)?;
        let visited = match number {
            Value::U64(n) => {
                let mut name = String::new();
                super::push_decimal(&mut name, n);
                *self.named = Some(name);
                visitor.visit_u64(n)
            }
            Value::I64(n) => {
                let mut name = String::from("-");
                super::push_decimal(&mut name, n.unsigned_abs());
                *self.named = Some(name);
                visitor.visit_i64(n)
            }
            Value::F64(f) => visitor.visit_f64(f),
            // `Reader::number` returns only numbers.
            _ => Err(Error::custom_str(NOT_A_NUMBER)),
        };
        // An error of the visitor is placed where the number ended.
        let value = visited.map_err(|e| e.placed_at(&reader))?;
        if reader.peek().is_some() { Err(Error::custom_str(NOT_A_NUMBER)) } else { Ok(value) }
    }
}

impl KeyDe<'_> {
    /// A key read as an i128 or u128: serde_json's own path for those (an optional `-` and
    /// digits; beyond the type's range an error, not a float).
    fn wide<'de, V: Visitor<'de>>(self, visitor: V, signed: bool) -> Result<V::Value, Error> {
        let syntax = |e| Err(Error::syntax(e));
        let bytes = self.key.as_bytes();
        let mut reader = Reader::new(&self.key);
        let negative = match reader.peek() {
            Some(b'-') if !signed => return syntax(reader.peek_error(OUT_OF_RANGE)),
            Some(b'-') => true,
            Some(b'0'..=b'9') => false,
            _ => return Err(Error::custom_str(NOT_A_NUMBER)),
        };
        reader.index += usize::from(negative);
        let start = reader.index;
        match reader.next() {
            Some(b'0') if matches!(reader.peek(), Some(b'0'..=b'9')) => {
                return syntax(reader.peek_error(INVALID_NUMBER));
            }
            Some(b'0') => {}
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = reader.peek() {
                    reader.index += 1;
                }
            }
            _ => return syntax(reader.error(INVALID_NUMBER)),
        }
        let magnitude = bytes[start..reader.index]
            .iter()
            .try_fold(0u128, |n, &d| n.checked_mul(10)?.checked_add(u128::from(d - b'0')));
        let mut name = String::from(if negative { "-" } else { "" });
        let visited: Result<V::Value, Error> = match (signed, magnitude) {
            (false, Some(n)) => {
                super::push_decimal_wide(&mut name, n);
                *self.named = Some(name);
                visitor.visit_u128(n)
            }
            (true, Some(n)) if n <= 1 << 127 && (negative || n < 1 << 127) => {
                super::push_decimal_wide(&mut name, n);
                *self.named = Some(if n == 0 { "0".into() } else { name });
                visitor.visit_i128(if negative { (n as i128).wrapping_neg() } else { n as i128 })
            }
            _ => return syntax(reader.error(OUT_OF_RANGE)),
        };
        let value = visited.map_err(|e| e.placed_at(&reader))?;
        if reader.peek().is_some() { Err(Error::custom_str(NOT_A_NUMBER)) } else { Ok(value) }
    }
}

/// serde_json's refusal of a key that is not wholly a number.
const NOT_A_NUMBER: &str = "invalid value: expected key to be a number in quotes";

impl<'de> de::Deserializer<'de> for KeyDe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        // One copy for the path, as serde_path_to_error made; the key itself is handed over.
        *self.named = Some(self.key.clone());
        visitor.visit_string(self.key)
    }

    numeric_keys!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_u8
        deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32 deserialize_f64);

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.key.as_str() {
            "true" | "false" => {
                let value = self.key == "true";
                *self.named = Some(self.key);
                visitor.visit_bool(value)
            }
            _ => Err(de::Error::invalid_type(Unexpected::Str(&self.key), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        IntoDeserializer::<Error>::into_deserializer(self.key).deserialize_enum(name, variants, visitor)
    }

    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.wide(visitor, true)
    }

    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.wide(visitor, false)
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map
        struct identifier ignored_any
    }
}
