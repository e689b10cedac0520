//! Decoding: [`from_slice`] goes from the bytes straight to `T` ([`lazy`]: iterative depth
//! check and syntax check first, then each level parsed only when `T` asks for it, so
//! what no field takes is never built); [`with_document`] builds a whole
//! `serde_json::Value` (duplicates collapsed) for callers that decode several types from
//! one parse, each through [`from_value`]. Both are walked by one deserializer ([`go`]),
//! with Go's field rules.

mod go;
mod lazy;

pub use lazy::last_field_is_null;

use go::Go;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Go's decoder refuses deeper documents ("exceeded max depth").
pub const MAX_DEPTH: usize = 10_000;
/// Documents up to this depth are decoded on the caller's stack (a 2 MiB thread has room).
const INLINE_DEPTH: usize = 100;
/// Documents up to this depth are decoded lazily: each level rescans what is below it, so
/// the work grows with depth times size; real configs nest under 10 levels. Deeper ones
/// are built whole (linear work, but every value built).
const LAZY_DEPTH: usize = 32;
/// Stack per level for deeper ones: parsing, decoding and dropping recurse once per level
/// (a debug build needs under 4 KiB; the pages are only touched as deep as the document).
const STACK_PER_LEVEL: usize = 16 << 10;

/// A syntax, depth or type error; `Display` names the field (`ipam.ranges[0][1].subnet: ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// Innermost segment first (segments are pushed while the error travels outwards).
    path: Vec<String>,
    msg: String,
}

impl Error {
    fn within(mut self, segment: String) -> Error {
        self.path.push(segment);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.path.iter().rev().enumerate() {
            if i > 0 && !segment.starts_with('[') {
                f.write_str(".")?;
            }
            f.write_str(segment)?;
        }
        if !self.path.is_empty() {
            f.write_str(": ")?;
        }
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error {
            path: Vec::new(),
            msg: msg.to_string(),
        }
    }
}

/// Decodes `bytes` into `T` with Go's rules (see the module docs), building only what `T`
/// keeps. Deep documents are decoded on a helper thread with a stack sized for their depth.
pub fn from_slice<T: DeserializeOwned + Send>(bytes: &[u8]) -> Result<T, Error> {
    let depth = nesting_depth(bytes)?;
    if depth > LAZY_DEPTH {
        return on_sized_stack(depth, || parse(bytes).and_then(from_value))?;
    }
    T::deserialize(Go(lazy::parse(bytes)?))
}

/// [`from_slice`] into a map that keeps only the top-level keys named exactly `keys`:
/// the others are skipped, not built.
pub fn pick_keys(bytes: &[u8], keys: &[&str]) -> Result<Map<String, Value>, Error> {
    let depth = nesting_depth(bytes)?;
    if depth > LAZY_DEPTH {
        let mut all: Map<String, Value> = from_slice(bytes)?;
        all.retain(|k, _| keys.contains(&k.as_str()));
        return Ok(all);
    }
    lazy::pick_keys(bytes, keys)
}

/// Parses `bytes` once (syntax, depth, repeated keys as Go reads them) and hands the
/// document to `f`, for a caller that decodes several types from one input (each with
/// [`from_value`] on a clone). Deep documents are parsed, handed over and dropped on a
/// helper thread with a stack sized for their depth, so `f` may recurse as deep as the
/// document; it must not return the document (or a deep part of it) to the caller.
pub fn with_document<T: Send>(bytes: &[u8], f: impl FnOnce(Value) -> T + Send) -> Result<T, Error> {
    let depth = nesting_depth(bytes)?;
    on_sized_stack(depth, || parse(bytes).map(f))?
}

/// Runs `f` here when `depth` is shallow, else on a thread with a stack for that depth.
fn on_sized_stack<T: Send>(depth: usize, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
    if depth <= INLINE_DEPTH {
        return Ok(f());
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("json-decode".into())
            .stack_size((depth + 64) * STACK_PER_LEVEL)
            .spawn_scoped(s, f)
            .map_err(|e| {
                de::Error::custom(format!(
                    "cannot start a thread to decode JSON nested {depth} levels: {e}"
                ))
            })
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
    })
}

/// [`from_slice`] for a value already parsed (its depth is the caller's concern).
pub fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, Error> {
    T::deserialize(Go(v))
}

/// The value Go would put in a struct field named `name` (ASCII): the last non-null key
/// equal to it exactly or case-insensitively. `None` when `v` is not an object.
pub fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    map_field(v.as_object()?, name)
}

/// [`field`] for a map.
pub fn map_field<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.iter()
        .rev()
        .find(|(k, v)| !v.is_null() && eq_fold(k, name))
        .map(|(_, v)| v)
}

fn parse(bytes: &[u8]) -> Result<Value, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Safe: nesting_depth() bounded the depth and the caller sized the stack for it.
    de.disable_recursion_limit();
    Doc::deserialize(&mut de)
        .and_then(|doc| de.end().map(|()| doc.0))
        .map_err(de::Error::custom)
}

/// The deepest nesting of `bytes`, found without recursion; an error past [`MAX_DEPTH`].
fn nesting_depth(bytes: &[u8]) -> Result<usize, Error> {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(de::Error::custom(format!(
                        "exceeded max depth: JSON nested deeper than {MAX_DEPTH} levels"
                    )));
                }
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(max)
}

/// A parsed document; a repeated key keeps its last value, moved to the position of its
/// last occurrence (so "the last of several case-variants" follows the document order).
struct Doc(Value);

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(DocVisitor).map(Doc)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Doc(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((k, Doc(v))) = map.next_entry::<String, Doc>()? {
            out.shift_remove(&k);
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Whether Go would put `key` into a field named `name` (ASCII): `bytes.EqualFold`, where
/// the Kelvin sign and the long s are the only non-ASCII letters that fold to ASCII ones.
pub fn eq_fold(key: &str, name: &str) -> bool {
    let mut name = name.bytes();
    key.chars().all(|c| {
        let c = match c {
            '\u{212A}' => 'k',
            '\u{17F}' => 's',
            c => c.to_ascii_lowercase(),
        };
        name.next()
            .is_some_and(|b| c.is_ascii() && b.to_ascii_lowercase() == c as u8)
    }) && name.next().is_none()
}

/// The field `key` fills: the one of its exact name, else one equal to it
/// case-insensitively.
fn match_field(key: &str, fields: &[&'static str]) -> Option<&'static str> {
    fields
        .iter()
        .find(|f| **f == key)
        .or_else(|| fields.iter().find(|f| eq_fold(key, f)))
        .copied()
}

#[cfg(test)]
mod tests;
