//! An enum read from a string (a unit variant) or from a one-key object (the variant and
//! its content), as serde_json's `Value` did; the content's path ends in the variant.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};

use super::Error;
use super::Path;
use super::de::{Track, ValueDe, trigger, visit_array, visit_object};
use super::read::Value;

/// An enum's variant name and, from a one-key object, its content.
pub(super) struct EnumDe<'a> {
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

pub(super) struct VariantDe<'a> {
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
