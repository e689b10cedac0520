//! Decoding straight from the input bytes, one level at a time: a value is parsed only
//! when the target asks for it, so a key no struct field takes (a 50-million-element
//! array in an unknown field) is skipped by the scanner and never built. The rules are
//! [`Go`](super::Go)'s; the syntax of the whole input is still checked first.

use super::{Error, match_field, unexpected};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;

/// The input as one raw value: syntax checked (whitespace around it allowed), nothing
/// built. Iterative: any depth, on any stack.
pub(super) fn parse(bytes: &[u8]) -> Result<&RawValue, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let raw = <&RawValue>::deserialize(&mut de).map_err(de::Error::custom)?;
    de.end().map_err(de::Error::custom)?;
    Ok(raw)
}

/// Parses the text of `raw` (already validated) as `T` with serde_json's own rules.
fn parse_as<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.disable_recursion_limit();
    T::deserialize(&mut de).map_err(de::Error::custom)
}

/// One level of an object: its keys and raw values, a repeated key keeping its last value
/// at the position of its last occurrence (as the [`Value`] document does).
fn entries(raw: &RawValue) -> Result<Vec<(String, &RawValue)>, Error> {
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Vec<Option<(String, &'de RawValue)>> = Vec::new();
            let mut at: HashMap<String, usize> = HashMap::new();
            while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                if let Some(old) = at.insert(k.clone(), out.len()) {
                    out[old] = None;
                }
                out.push(Some((k, v)));
            }
            Ok(out.into_iter().flatten().collect())
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.disable_recursion_limit();
    de.deserialize_map(Entries).map_err(de::Error::custom)
}

fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

fn first(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b'n')
}

/// A raw value handed to `Deserialize` impls with Go's rules.
pub(super) struct Raw<'a>(pub(super) &'a RawValue);

impl Raw<'_> {
    /// The error for a value of the wrong type, worded as [`super::Go`] words it.
    fn invalid_type(&self, exp: &dyn de::Expected) -> Error {
        match first(self.0) {
            b'[' => de::Error::invalid_type(de::Unexpected::Seq, exp),
            b'{' => de::Error::invalid_type(de::Unexpected::Map, exp),
            _ => match parse_as::<Value>(self.0) {
                Ok(v) => de::Error::invalid_type(unexpected(&v), exp),
                Err(e) => e,
            },
        }
    }
}

fn visit_array<'de, V: Visitor<'de>>(raw: &RawValue, visitor: V) -> Result<V::Value, Error> {
    let items: Vec<&RawValue> = parse_as(raw)?;
    let len = items.len();
    let mut seq = Seq(items.into_iter().enumerate());
    let out = visitor.visit_seq(&mut seq)?;
    match seq.0.len() {
        0 => Ok(out),
        _ => Err(de::Error::invalid_length(len, &"fewer elements in array")),
    }
}

fn visit_entries<'de, V: Visitor<'de>>(
    entries: Vec<(String, &RawValue)>,
    visitor: V,
) -> Result<V::Value, Error> {
    let len = entries.len();
    let mut obj = Obj {
        entries: entries.into_iter(),
        value: None,
    };
    let out = visitor.visit_map(&mut obj)?;
    match obj.entries.len() {
        0 => Ok(out),
        _ => Err(de::Error::invalid_length(len, &"fewer elements in map")),
    }
}

/// Go's struct rule over raw entries (see [`super::match_fields`]): nulls and unknown keys
/// are dropped unparsed; a later key for the same field replaces the earlier one.
fn match_fields<'a>(
    entries: Vec<(String, &'a RawValue)>,
    fields: &[&'static str],
) -> Vec<(String, &'a RawValue)> {
    let mut out: Vec<(String, &'a RawValue)> = Vec::new();
    for (k, v) in entries {
        if is_null(v) {
            continue;
        }
        let Some(f) = match_field(&k, fields) else {
            continue;
        };
        match out.iter_mut().find(|(name, _)| name == f) {
            Some(slot) => slot.1 = v,
            None => out.push((f.to_string(), v)),
        }
    }
    out
}

macro_rules! null_is_zero {
    ($($method:ident => $visit:ident($zero:expr);)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            if is_null(self.0) {
                v.$visit($zero)
            } else {
                self.deserialize_any(v)
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Raw<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match first(self.0) {
            b'{' => visit_entries(entries(self.0)?, v),
            b'[' => visit_array(self.0, v),
            b'"' => v.visit_string(parse_as::<String>(self.0)?),
            b'n' => v.visit_unit(),
            b't' => v.visit_bool(true),
            b'f' => v.visit_bool(false),
            _ => {
                let n = parse_as::<serde_json::Number>(self.0)?;
                match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => v.visit_u64(u),
                    (None, Some(i)) => v.visit_i64(i),
                    _ => v.visit_f64(n.as_f64().unwrap_or_default()),
                }
            }
        }
    }

    null_is_zero! {
        deserialize_bool => visit_bool(false);
        deserialize_i8 => visit_u64(0);
        deserialize_i16 => visit_u64(0);
        deserialize_i32 => visit_u64(0);
        deserialize_i64 => visit_u64(0);
        deserialize_i128 => visit_u64(0);
        deserialize_u8 => visit_u64(0);
        deserialize_u16 => visit_u64(0);
        deserialize_u32 => visit_u64(0);
        deserialize_u64 => visit_u64(0);
        deserialize_u128 => visit_u64(0);
        deserialize_f32 => visit_u64(0);
        deserialize_f64 => visit_u64(0);
        deserialize_str => visit_string(String::new());
        deserialize_string => visit_string(String::new());
        deserialize_seq => visit_seq(Seq(Vec::new().into_iter().enumerate()));
        deserialize_map => visit_map(Obj { entries: Vec::new().into_iter(), value: None });
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        if is_null(self.0) {
            v.visit_none()
        } else {
            v.visit_some(self)
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        match first(self.0) {
            b'{' => visit_entries(match_fields(entries(self.0)?, fields), v),
            b'n' => visit_entries(Vec::new(), v),
            _ => Err(self.invalid_type(&v)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        match first(self.0) {
            b'"' => v.visit_enum(parse_as::<String>(self.0)?.into_deserializer()),
            _ => super::Go(parse_as::<Value>(self.0)?).deserialize_enum(name, variants, v),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }

    /// Skipped: the scanner already checked it, nothing is built.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        char bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

struct Seq<'a>(std::iter::Enumerate<std::vec::IntoIter<&'a RawValue>>);

impl<'de> SeqAccess<'de> for Seq<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.0.next() {
            None => Ok(None),
            Some((i, v)) => seed
                .deserialize(Raw(v))
                .map(Some)
                .map_err(|e| e.within(format!("[{i}]"))),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Obj<'a> {
    entries: std::vec::IntoIter<(String, &'a RawValue)>,
    value: Option<(String, &'a RawValue)>,
}

impl<'de> MapAccess<'de> for Obj<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        let key = seed.deserialize(k.as_str().into_deserializer());
        self.value = Some((k, v));
        key.map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let (k, v) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("value requested before its key"))?;
        seed.deserialize(Raw(v)).map_err(|e| e.within(k))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// Whether the last top-level key of the object `bytes` that Go would put in a field
/// named `name` is `null` (for a slice field, Go's null sets it to nil).
pub fn last_field_is_null(bytes: &[u8], name: &str) -> bool {
    let Ok(raw) = parse(bytes) else {
        return false;
    };
    if first(raw) != b'{' {
        return false;
    }
    entries(raw).is_ok_and(|entries| {
        entries
            .iter()
            .rev()
            .find(|(k, _)| super::eq_fold(k, name))
            .is_some_and(|(_, v)| is_null(v))
    })
}

/// Builds the values of the top-level keys named exactly `keys` (as Go's decoding into a
/// map keeps them) and skips every other key unbuilt.
pub(super) fn pick_keys(
    bytes: &[u8],
    keys: &[&str],
) -> Result<serde_json::Map<String, Value>, Error> {
    struct Pick<'k>(&'k [&'k str]);
    impl<'de> Visitor<'de> for Pick<'_> {
        type Value = serde_json::Map<String, Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = serde_json::Map::new();
            while let Some(k) = map.next_key::<String>()? {
                if self.0.contains(&k.as_str()) {
                    let v: Value = map.next_value()?;
                    out.insert(k, v);
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    Raw(parse(bytes)?).deserialize_map(Pick(keys))
}
