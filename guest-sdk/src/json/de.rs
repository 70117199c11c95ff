//! [`Value`] → any `Deserialize` type, recording the path to the first failing value.
//!
//! What each request of the data model does with each kind of value is what serde_json's
//! `Value` deserializer did (e.g. a struct may be read from an array, an enum from a
//! string or a one-key object), and the path is recorded as serde_path_to_error did: the
//! deepest place an error passed through first, kept even if that error is later caught
//! (`Track`), map keys by their text when they were read as a string, bool or integer,
//! `?` otherwise, and sequence indices as `[i]`.

use std::cell::Cell;

use serde::de::{self, DeserializeSeed, Expected, IntoDeserializer, Unexpected, Visitor};

use super::key::KeyDe;
use super::read::Value;
use super::{Error, Path};

/// The path of the first error seen, rendered (`Some("")`: at the top).
pub(super) type Track = Cell<Option<String>>;

/// `result`, its error (if any) placed at `path` unless one was placed before.
pub(super) fn trigger<T>(track: &Track, path: &Path<'_>, result: Result<T, Error>) -> Result<T, Error> {
    if result.is_err() {
        place(track, path);
    }
    result
}

// Not generic and out of line: `trigger` is instantiated for every type a policy reads.
#[cold]
#[inline(never)]
fn place(track: &Track, path: &Path<'_>) {
    let first = track.take().unwrap_or_else(|| path.to_string());
    track.set(Some(first));
}

/// One value and where it sits.
pub(super) struct ValueDe<'a> {
    pub(super) value: Value,
    pub(super) path: &'a Path<'a>,
    pub(super) track: &'a Track,
}

impl ValueDe<'_> {
    fn unexpected(&self) -> Unexpected<'_> {
        match &self.value {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::U64(n) => Unexpected::Unsigned(*n),
            Value::I64(n) => Unexpected::Signed(*n),
            Value::F64(f) => Unexpected::Float(*f),
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }

    pub(super) fn invalid_type(&self, expected: &dyn Expected) -> Error {
        de::Error::invalid_type(self.unexpected(), expected)
    }

    /// Every request goes through here: `read` answers it, and an error leaving it is
    /// placed at this value's path unless a deeper one was placed first.
    fn tracked<'de, V: Visitor<'de>>(
        self,
        visitor: V,
        read: impl FnOnce(Self, V) -> Result<V::Value, Error>,
    ) -> Result<V::Value, Error> {
        let (path, track) = (self.path, self.track);
        trigger(track, path, read(self, visitor))
    }

    fn any<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::U64(n) => visitor.visit_u64(n),
            Value::I64(n) => visitor.visit_i64(n),
            Value::F64(f) => visitor.visit_f64(f),
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visit_array(items, self.path, self.track, visitor),
            Value::Object(members) => visit_object(members, self.path, self.track, visitor),
        }
    }
}

pub(super) fn visit_array<'de, V: Visitor<'de>>(
    items: Vec<Value>,
    path: &Path<'_>,
    track: &Track,
    visitor: V,
) -> Result<V::Value, Error> {
    let len = items.len();
    let mut seq = SeqDe { items: items.into_iter(), index: 0, path, track };
    let out = visitor.visit_seq(&mut seq)?;
    if seq.items.len() == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements in array"))
    }
}

pub(super) fn visit_object<'de, V: Visitor<'de>>(
    members: Vec<(String, Value)>,
    path: &Path<'_>,
    track: &Track,
    visitor: V,
) -> Result<V::Value, Error> {
    let len = members.len();
    let mut map = MapDe { members: members.into_iter(), pending: None, path, track };
    let out = visitor.visit_map(&mut map)?;
    if map.members.len() == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements in map"))
    }
}

macro_rules! numbers {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.tracked(visitor, |de, v| match de.value {
                Value::U64(_) | Value::I64(_) | Value::F64(_) => de.any(v),
                _ => Err(de.invalid_type(&v)),
            })
        }
    )*};
}

impl<'de> de::Deserializer<'de> for ValueDe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, Self::any)
    }

    numbers!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64);

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Null => v.visit_none(),
            _ => v.visit_some(de),
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::String(variant) => {
                v.visit_enum(EnumDe { variant, value: None, path: de.path, track: de.track })
            }
            Value::Object(members) => {
                let single = Err(de::Error::invalid_value(Unexpected::Map, &"map with a single key"));
                let mut members = members.into_iter();
                let Some((variant, value)) = members.next() else { return single };
                if members.next().is_some() {
                    return single;
                }
                v.visit_enum(EnumDe { variant, value: Some(value), path: de.path, track: de.track })
            }
            _ => Err(de.invalid_type(&"string or map")),
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| v.visit_newtype_struct(de))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Bool(b) => v.visit_bool(b),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::String(s) => v.visit_string(s),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_byte_buf(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::String(s) => v.visit_string(s),
            Value::Array(items) => visit_array(items, de.path, de.track, v),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Null => v.visit_unit(),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Array(items) => visit_array(items, de.path, de.track, v),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Object(members) => visit_object(members, de.path, de.track, v),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.tracked(visitor, |de, v| match de.value {
            Value::Array(items) => visit_array(items, de.path, de.track, v),
            Value::Object(members) => visit_object(members, de.path, de.track, v),
            _ => Err(de.invalid_type(&v)),
        })
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.tracked(visitor, |_, v| v.visit_unit())
    }
}

struct SeqDe<'a> {
    items: std::vec::IntoIter<Value>,
    index: usize,
    path: &'a Path<'a>,
    track: &'a Track,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let path = Path::Index(self.path, self.index);
        self.index += 1;
        let result = match self.items.next() {
            Some(value) => seed.deserialize(ValueDe { value, path: &path, track: self.track }).map(Some),
            None => Ok(None),
        };
        trigger(self.track, self.path, result)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a> {
    members: std::vec::IntoIter<(String, Value)>,
    /// The value of the key just read, and the key if it was read as text (see `KeyDe`).
    pending: Option<(Value, Option<String>)>,
    path: &'a Path<'a>,
    track: &'a Track,
}

impl<'de> de::MapAccess<'de> for MapDe<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.members.next() else { return Ok(None) };
        let mut named = None;
        let result = seed.deserialize(KeyDe { key, named: &mut named });
        let key = named;
        if result.is_err() {
            let path = key.as_deref().map_or(Path::Unknown(self.path), |k| Path::Key(self.path, k));
            return trigger(self.track, &path, result).map(Some);
        }
        self.pending = Some((value, key));
        result.map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((value, key)) = self.pending.take() else {
            return Err(de::Error::custom("value is missing"));
        };
        let path = key.as_deref().map_or(Path::Unknown(self.path), |k| Path::Key(self.path, k));
        let result = seed.deserialize(ValueDe { value, path: &path, track: self.track });
        trigger(self.track, self.path, result)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.members.len())
    }
}

// An enum read from a string (a unit variant) or from a one-key object (the variant and
// its content), as serde_json's `Value` did; the content's path ends in the variant.

/// An enum's variant name and, from a one-key object, its content.
struct EnumDe<'a> {
    pub(super) variant: String,
    pub(super) value: Option<Value>,
    pub(super) path: &'a Path<'a>,
    pub(super) track: &'a Track,
}

impl<'de, 'a> de::EnumAccess<'de> for EnumDe<'a> {
    type Error = Error;
    type Variant = VariantDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, VariantDe<'a>), Error> {
        let name = IntoDeserializer::<Error>::into_deserializer(self.variant.clone());
        let result = seed.deserialize(name);
        let variant =
            VariantDe { variant: self.variant, value: self.value, parent: self.path, track: self.track };
        trigger(self.track, self.path, result).map(|v| (v, variant))
    }
}

struct VariantDe<'a> {
    variant: String,
    value: Option<Value>,
    parent: &'a Path<'a>,
    track: &'a Track,
}

impl VariantDe<'_> {
    /// Reads the content at `<enum path>.<variant>`.
    fn content<T>(
        self,
        read: impl FnOnce(Option<Value>, &Path<'_>, &Track) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let path = Path::Key(self.parent, &self.variant);
        trigger(self.track, &path, read(self.value, &path, self.track))
    }
}

impl<'de> de::VariantAccess<'de> for VariantDe<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        self.content(|value, path, track| match value {
            Some(value) => de::Deserialize::deserialize(ValueDe { value, path, track }),
            None => Ok(()),
        })
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        self.content(|value, path, track| match value {
            Some(value) => seed.deserialize(ValueDe { value, path, track }),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"newtype variant")),
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.content(|value, path, track| match value {
            Some(Value::Array(items)) if items.is_empty() => visitor.visit_unit(),
            Some(Value::Array(items)) => visit_array(items, path, track, visitor),
            Some(other) => Err(ValueDe { value: other, path, track }.invalid_type(&"tuple variant")),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"tuple variant")),
        })
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.content(|value, path, track| match value {
            Some(Value::Object(members)) => visit_object(members, path, track, visitor),
            Some(other) => Err(ValueDe { value: other, path, track }.invalid_type(&"struct variant")),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"struct variant")),
        })
    }
}
