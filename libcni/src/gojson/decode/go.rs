//! Go's field rules as one serde `Deserializer`, over either kind of [`Node`]: a built
//! [`Value`] or a raw slice of the input (`lazy`), so both decodings follow the same code.

use super::{Error, match_field};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// One JSON value as the decoder walks it.
pub(super) trait Node: Sized {
    fn is_null(&self) -> bool;
    /// Its top level: a scalar, or a container with its children as nodes (for a raw node,
    /// only this level is parsed). A repeated key keeps its last value, at the position of
    /// its last occurrence.
    fn open(self) -> Result<Level<Self>, Error>;
    /// The whole value, built (for serde_json's enum decoding).
    fn into_value(self) -> Result<Value, Error>;
}

/// The top level of a [`Node`].
pub(super) enum Level<N> {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<N>),
    Object(Vec<(String, N)>),
}

impl Node for Value {
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn open(self) -> Result<Level<Value>, Error> {
        Ok(match self {
            Value::Null => Level::Null,
            Value::Bool(b) => Level::Bool(b),
            Value::Number(n) => Level::Number(n),
            Value::String(s) => Level::String(s),
            Value::Array(a) => Level::Array(a),
            Value::Object(m) => Level::Object(m.into_iter().collect()),
        })
    }
    fn into_value(self) -> Result<Value, Error> {
        Ok(self)
    }
}

/// The unexpected value in a type error, named as serde names it.
pub(super) fn unexpected<N>(level: &Level<N>) -> de::Unexpected<'_> {
    match level {
        Level::Null => de::Unexpected::Unit,
        Level::Bool(b) => de::Unexpected::Bool(*b),
        Level::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => de::Unexpected::Unsigned(u),
            (None, Some(i)) => de::Unexpected::Signed(i),
            _ => de::Unexpected::Float(n.as_f64().unwrap_or_default()),
        },
        Level::String(s) => de::Unexpected::Str(s),
        Level::Array(_) => de::Unexpected::Seq,
        Level::Object(_) => de::Unexpected::Map,
    }
}

/// Go's struct rule: each key fills the field of its exact name, else the field equal to it
/// case-insensitively; a later key for the same field replaces the earlier one; `null` and
/// unknown keys change nothing (they are dropped here, unparsed, so serde's defaults apply).
fn match_fields<N: Node>(entries: Vec<(String, N)>, fields: &[&'static str]) -> Vec<(String, N)> {
    let mut out: Vec<(String, N)> = Vec::new();
    for (k, v) in entries {
        if v.is_null() {
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

/// A node handed to `Deserialize` impls with Go's rules.
pub(super) struct Go<N>(pub(super) N);

fn visit_array<'de, N: Node, V: Visitor<'de>>(
    items: Vec<N>,
    visitor: V,
) -> Result<V::Value, Error> {
    let len = items.len();
    let mut seq = Seq(items.into_iter().enumerate());
    let out = visitor.visit_seq(&mut seq)?;
    match seq.0.len() {
        0 => Ok(out),
        _ => Err(de::Error::invalid_length(len, &"fewer elements in array")),
    }
}

fn visit_object<'de, N: Node, V: Visitor<'de>>(
    entries: Vec<(String, N)>,
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

/// `null` where a scalar is expected is its zero value (as in Go).
macro_rules! null_is_zero {
    ($($method:ident => $visit:ident($zero:expr);)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            if self.0.is_null() {
                v.$visit($zero)
            } else {
                self.deserialize_any(v)
            }
        }
    )*};
}

impl<'de, N: Node> de::Deserializer<'de> for Go<N> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.0.open()? {
            Level::Null => v.visit_unit(),
            Level::Bool(b) => v.visit_bool(b),
            Level::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => v.visit_u64(u),
                (None, Some(i)) => v.visit_i64(i),
                _ => v.visit_f64(n.as_f64().unwrap_or_default()),
            },
            Level::String(s) => v.visit_string(s),
            Level::Array(a) => visit_array(a, v),
            Level::Object(m) => visit_object(m, v),
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
        deserialize_seq => visit_seq(Seq::<N>(Vec::new().into_iter().enumerate()));
        deserialize_map => visit_map(Obj::<N> { entries: Vec::new().into_iter(), value: None });
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        if self.0.is_null() {
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
        match self.0.open()? {
            Level::Object(m) => visit_object(match_fields(m, fields), v),
            Level::Null => visit_object(Vec::<(String, N)>::new(), v),
            other => Err(de::Error::invalid_type(unexpected(&other), &v)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        match self.0.into_value()? {
            Value::String(s) => v.visit_enum(s.into_deserializer()),
            other => other
                .deserialize_enum(name, variants, v)
                .map_err(de::Error::custom),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }

    /// Skipped: nothing is built (a raw node was syntax-checked already).
    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        drop(self);
        v.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        char bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

struct Seq<N>(std::iter::Enumerate<std::vec::IntoIter<N>>);

impl<'de, N: Node> SeqAccess<'de> for Seq<N> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.0.next() {
            None => Ok(None),
            Some((i, v)) => seed
                .deserialize(Go(v))
                .map(Some)
                .map_err(|e| e.within(format!("[{i}]"))),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Obj<N> {
    entries: std::vec::IntoIter<(String, N)>,
    value: Option<(String, N)>,
}

impl<'de, N: Node> MapAccess<'de> for Obj<N> {
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
        seed.deserialize(Go(v)).map_err(|e| e.within(k))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}
