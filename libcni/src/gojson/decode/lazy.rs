//! Decoding straight from the input bytes, one level at a time: a value is parsed only
//! when the target asks for it, so a key no struct field takes (a 50-million-element
//! array in an unknown field) is skipped by the scanner and never built. The rules are
//! [`Go`]'s, the same deserializer as for a built value; the syntax of the whole input is
//! still checked first.

use super::Error;
use super::go::{Go, Level, Node};
use serde::de::{self, MapAccess, Visitor};
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

/// A raw value: each level parsed when the target asks for it.
impl<'a> Node for &'a RawValue {
    fn is_null(&self) -> bool {
        is_null(self)
    }
    fn open(self) -> Result<Level<&'a RawValue>, Error> {
        Ok(match first(self) {
            b'{' => Level::Object(entries(self)?),
            b'[' => Level::Array(parse_as(self)?),
            b'"' => Level::String(parse_as(self)?),
            b'n' => Level::Null,
            b't' => Level::Bool(true),
            b'f' => Level::Bool(false),
            _ => Level::Number(parse_as(self)?),
        })
    }
    fn into_value(self) -> Result<Value, Error> {
        parse_as(self)
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
    Go(parse(bytes)?).deserialize_map(Pick(keys))
}
