//! JSON written the way Go's `encoding/json` writes it, so files and stdin we produce are
//! byte-identical to what Go libcni produces from the same data:
//! - Go decodes objects into `map[string]interface{}` and marshals maps with sorted keys;
//!   structs (a result, a GC attachment) keep their field order, so sorting is the caller's choice;
//! - `<`, `>`, `&`, U+2028 and U+2029 are escaped inside strings (HTML-safe output);
//! - numbers went through float64, so `1.0` prints as `1`.

use serde_json::{Map, Number, Value};

/// `v` with every object's keys sorted (recursively) and integral floats made integers.
pub fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        Value::Number(n) => Value::Number(go_number(n)),
        other => other.clone(),
    }
}

/// The object `m` with its top-level keys sorted; the values of `keep_order` keys are taken
/// as they are (they stand for Go structs), all others are [`sorted`].
pub fn sorted_except(m: &Map<String, Value>, keep_order: &[&str]) -> Value {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    Value::Object(
        keys.into_iter()
            .map(|k| {
                let v = if keep_order.contains(&k.as_str()) {
                    m[k].clone()
                } else {
                    sorted(&m[k])
                };
                (k.clone(), v)
            })
            .collect(),
    )
}

fn go_number(n: &Number) -> Number {
    match n.as_f64() {
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => {
            // Exact for |f| < 2^53; Go prints such floats without a fraction.
            Number::from(f as i64)
        }
        _ => n.clone(),
    }
}

/// Compact JSON as `json.Marshal` writes it (key order as in `v`).
pub fn marshal(v: &Value) -> String {
    escape_html(v.to_string())
}

/// Indented JSON as `json.MarshalIndent(v, "", "    ")` writes it, no trailing newline.
pub fn marshal_indent(v: &Value) -> String {
    escape_html(crate::types::to_pretty_json(v))
}

/// Go's HTML-safe escaping. These characters can only occur inside JSON strings, so
/// replacing them in the serialized text is the same as escaping while writing.
fn escape_html(s: String) -> String {
    if !s.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_recursively_and_escapes_like_go() {
        let v: Value =
            serde_json::from_str(r#"{"b":1,"a":{"z":[{"y":2.0,"x":"<&>"}],"c":1.5}}"#).unwrap();
        assert_eq!(
            marshal(&sorted(&v)),
            r#"{"a":{"c":1.5,"z":[{"x":"\u003c\u0026\u003e","y":2}]},"b":1}"#
        );
    }

    #[test]
    fn keeps_struct_order_where_asked() {
        let mut m = Map::new();
        m.insert("type".into(), json!("x"));
        m.insert(
            "prevResult".into(),
            json!({"cniVersion": "1.0.0", "ips": [], "dns": {"b": 1, "a": 2}}),
        );
        assert_eq!(
            marshal(&sorted_except(&m, &["prevResult"])),
            r#"{"prevResult":{"cniVersion":"1.0.0","ips":[],"dns":{"b":1,"a":2}},"type":"x"}"#
        );
    }

    #[test]
    fn indents_with_four_spaces() {
        assert_eq!(
            marshal_indent(&json!({"a": [1]})),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }
}
