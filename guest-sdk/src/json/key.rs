//! A map key handed to a `Deserialize` type: text, or a number or a bool read from it,
//! as serde_json's `Value` did; and what the error path shows for it.

use serde::de::{self, IntoDeserializer, Unexpected, Visitor};

use super::Error;
use super::read::{Reader, Value};

/// A map key: text, read as a number or a bool when asked (serde_json's rules). `named`
/// is what the path shows for it: the text handed over as a string or bool, an integer's
/// decimal form; nothing (the path shows `?`) for a float or an enum.
pub(super) struct KeyDe<'k> {
    pub(super) key: &'k str,
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
        let not_a_number = || Error::custom_str("invalid value: expected key to be a number in quotes");
        let mut reader = Reader::new(self.key.as_bytes());
        let positive = match reader.peek() {
            Some(b'0'..=b'9') => true,
            Some(b'-') => {
                reader.index += 1;
                false
            }
            _ => return Err(not_a_number()),
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
            _ => unreachable_number(),
        };
        // An error of the visitor is placed where the number ended.
        let value = visited.map_err(|e| e.placed_at(&reader))?;
        if reader.peek().is_some() { Err(not_a_number()) } else { Ok(value) }
    }
}

/// `Reader::number` returns only numbers.
fn unreachable_number<T>() -> Result<T, Error> {
    Err(Error::custom_str("invalid value: expected key to be a number in quotes"))
}

impl<'de> de::Deserializer<'de> for KeyDe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        *self.named = Some(self.key.to_owned());
        visitor.visit_string(self.key.to_owned())
    }

    numeric_keys!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_u8
        deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32 deserialize_f64);

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.key {
            "true" | "false" => {
                *self.named = Some(self.key.to_owned());
                visitor.visit_bool(self.key == "true")
            }
            _ => Err(de::Error::invalid_type(Unexpected::Str(self.key), &visitor)),
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
        IntoDeserializer::<Error>::into_deserializer(self.key.to_owned())
            .deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map
        struct identifier ignored_any
    }
}
