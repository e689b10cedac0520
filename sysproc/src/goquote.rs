//! Go's `%q` (`strconv.Quote`), which the reference uses in its messages, iptables comments
//! and error texts: double quotes, Go escapes for `"`, `\` and control characters, printable
//! Unicode kept as is, invalid UTF-8 bytes as `\xNN`.

use std::fmt::Write;

pub fn quote(s: &str) -> String {
    quote_bytes(s.as_bytes())
}

pub fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\x0c' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\x0b' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

/// Go `%q` of a list of strings: `["a" "b"]`.
pub fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("/run/netns/a"), r#""/run/netns/a""#);
        assert_eq!(quote("a\"b\\c\td\x01"), r#""a\"b\\c\td\x01""#);
        assert_eq!(quote("a\nb\u{1}\u{7f}"), "\"a\\nb\\x01\\x7f\"");
        assert_eq!(quote_bytes(b"x\xffy"), r#""x\xffy""#);
        assert_eq!(quote("é"), "\"é\"");
        assert_eq!(quote("\u{85}"), "\"\\u0085\"");
        assert_eq!(quote_list(&["a", "b c"]), r#"["a" "b c"]"#);
        assert_eq!(quote_list::<&str>(&[]), "[]");
    }
}
