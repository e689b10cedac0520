//! A list page too large to read into memory whole (the watch cache answers a list of
//! 150,000 Pods, ~100 MB, in one page, whatever the `limit`): its `items` are split off
//! as the body streams in and each is parsed from memory, where serde_json is several
//! times faster than on a reader (which keeps a line and column per byte). The rest of
//! the object, `items` left out, comes back for an ordinary parse.
//!
//! Only the structure is scanned here (strings, nesting, the separators of the top
//! object and of `items`); every value is then parsed, and so checked, by serde_json.

use std::io::Read;
use std::ops::Range;

/// Read at least this much at a time; more as a value grows (each read at least doubles
/// what is buffered), so a value is rescanned a bounded number of times, however large.
const CHUNK: usize = 64 << 10;

/// Calls `item` on the bytes of each element of the top-level object's `items` array, in
/// order; returns the object without `items` (`{}` when that was all).
pub fn split_items(
    body: impl Read,
    mut item: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let mut s = Scan {
        body,
        buf: Vec::new(),
        pos: 0,
        eof: false,
    };
    let mut rest = vec![b'{'];
    let mut split = false;
    s.expect(b'{')?;
    if s.peek()? == Some(b'}') {
        s.pos += 1;
    } else {
        loop {
            let key = s.value()?;
            if s.buf[key.start] != b'"' {
                return Err("expected a key in the list object".into());
            }
            s.expect(b':')?;
            if &s.buf[key.clone()] == b"\"items\"" && s.peek()? == Some(b'[') {
                if split {
                    return Err("duplicate field `items`".into());
                }
                split = true;
                s.pos += 1;
                s.compact();
                s.elements(&mut item)?;
            } else {
                let value = s.value()?;
                if rest.len() > 1 {
                    rest.push(b',');
                }
                rest.extend_from_slice(&s.buf[key]);
                rest.push(b':');
                rest.extend_from_slice(&s.buf[value]);
                s.compact();
            }
            match s.next()? {
                b',' => continue,
                b'}' => break,
                c => return Err(unexpected(c, "`,` or `}` in the list object")),
            }
        }
    }
    if s.peek()?.is_some() {
        return Err("trailing characters after the list".into());
    }
    rest.push(b'}');
    Ok(rest)
}

struct Scan<R> {
    body: R,
    buf: Vec<u8>,
    /// Where scanning goes on; what is before it is done with.
    pos: usize,
    eof: bool,
}

impl<R: Read> Scan<R> {
    /// Reads more; false at the end of the body.
    fn fill(&mut self) -> Result<bool, String> {
        if self.eof {
            return Ok(false);
        }
        let want = (self.buf.len() - self.pos).max(CHUNK);
        let had = self.buf.len();
        let got = (&mut self.body)
            .take(want as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| e.to_string())?;
        self.eof = got == 0;
        Ok(self.buf.len() > had)
    }

    /// Drops what is done with (only between values: ranges into the buffer move).
    fn compact(&mut self) {
        if self.pos >= CHUNK {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// The next byte that is not whitespace, not consumed; None at the end of the body.
    fn peek(&mut self) -> Result<Option<u8>, String> {
        loop {
            while let Some(&c) = self.buf.get(self.pos) {
                if !c.is_ascii_whitespace() {
                    return Ok(Some(c));
                }
                self.pos += 1;
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    fn next(&mut self) -> Result<u8, String> {
        let c = self.peek()?.ok_or("EOF while parsing the list")?;
        self.pos += 1;
        Ok(c)
    }

    fn expect(&mut self, want: u8) -> Result<(), String> {
        match self.next()? {
            c if c == want => Ok(()),
            c => Err(unexpected(c, &format!("`{}`", want as char))),
        }
    }

    /// The extent of the value that starts at the next byte that is not whitespace.
    fn value(&mut self) -> Result<Range<usize>, String> {
        self.peek()?.ok_or("EOF while parsing a value")?;
        let start = self.pos;
        loop {
            if let Some(len) = value_len(&self.buf[start..], self.eof) {
                if len == 0 {
                    return Err(unexpected(self.buf[start], "a value"));
                }
                self.pos = start + len;
                return Ok(start..self.pos);
            }
            if !self.fill()? {
                return Err("EOF while parsing a value".into());
            }
        }
    }

    /// The elements of an array whose `[` is consumed, to `item`, through its `]`.
    fn elements(
        &mut self,
        item: &mut impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.peek()? == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let v = self.value()?;
            item(&self.buf[v])?;
            self.compact();
            match self.next()? {
                b',' => continue,
                b']' => return Ok(()),
                c => return Err(unexpected(c, "`,` or `]` after an item")),
            }
        }
    }
}

fn unexpected(c: u8, want: &str) -> String {
    format!("expected {want}, found {:?}", c as char)
}

/// The length of the JSON value at the start of `b` (which is not whitespace), if `b`
/// holds all of it; a scalar ends at a separator, or at the end of the body (`eof`).
fn value_len(b: &[u8], eof: bool) -> Option<usize> {
    match b[0] {
        b'"' => string_len(b),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i += string_len(&b[i..])?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => match b
            .iter()
            .position(|c| matches!(c, b',' | b']' | b'}') || c.is_ascii_whitespace())
        {
            Some(end) => Some(end),
            None => eof.then_some(b.len()),
        },
    }
}

/// The length of the string at the start of `b`, quotes included, if `b` holds all of it.
fn string_len(b: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out a few bytes at a time, so every value crosses reads.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn split(body: &str, step: usize) -> Result<(Vec<String>, String), String> {
        let mut items = Vec::new();
        let rest = split_items(Trickle(body.as_bytes(), step), |b| {
            items.push(String::from_utf8(b.to_vec()).unwrap());
            Ok(())
        })?;
        Ok((items, String::from_utf8(rest).unwrap()))
    }

    #[test]
    fn items_are_split_off_and_the_rest_kept_whatever_the_reads() {
        let body = r#" { "kind" : "PodList", "metadata": {"resourceVersion":"7","continue":""},
            "items": [ {"a":"x\"]}","b":[1,{"c":null}]} , "s\\" ,12 ,true,[ ] ],
            "after": [1, "]"] } "#;
        for step in [1, 2, 3, 7, 64, 4096] {
            let (items, rest) = split(body, step).unwrap();
            assert_eq!(
                items,
                [
                    r#"{"a":"x\"]}","b":[1,{"c":null}]}"#,
                    r#""s\\""#,
                    "12",
                    "true",
                    "[ ]"
                ],
                "reads of {step}"
            );
            let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
            let mut want: serde_json::Value = serde_json::from_str(body).unwrap();
            want.as_object_mut().unwrap().remove("items");
            assert_eq!(rest, want, "reads of {step}");
        }
        assert_eq!(split(r#"{"items":[]}"#, 1).unwrap(), (vec![], "{}".into()));
        assert_eq!(split("{}", 1).unwrap(), (vec![], "{}".into()));
        // `items: null` is left for the ordinary parse (no items).
        assert_eq!(
            split(r#"{"items":null}"#, 1).unwrap(),
            (vec![], r#"{"items":null}"#.into())
        );
    }

    #[test]
    fn a_broken_list_is_an_error_not_a_hang() {
        for (body, says) in [
            (r#"{"items":[{"a":1}"#, "EOF"),
            (r#"{"items":[{"a":1},"#, "EOF"),
            (r#"{"items":[{"a":"1}]}"#, "EOF"),
            (r#"{"items":[1 2]}"#, "expected `,` or `]`"),
            (r#"{"items":[,]}"#, "expected a value"),
            (r#"{"items":[] "x":1}"#, "expected `,` or `}`"),
            (r#"{"items":[],"items":[]}"#, "duplicate"),
            (r#"{1:2}"#, "expected a key"),
            (r#"{"a":1} {"#, "trailing"),
            (r#"["#, "expected `{`"),
            ("", "EOF"),
        ] {
            let e = split(body, 3).unwrap_err();
            assert!(e.contains(says), "{body}: {e}");
        }
        // An item the callback refuses stops the split with its error.
        let e = split_items(&br#"{"items":[1,2]}"#[..], |b| match b {
            b"2" => Err("two".into()),
            _ => Ok(()),
        })
        .unwrap_err();
        assert_eq!(e, "two");
    }

    #[test]
    fn a_value_larger_than_many_reads_is_split_whole() {
        let big = format!(r#"{{"items":["{}"]}}"#, "x".repeat(1 << 20));
        let (items, _) = split(&big, usize::MAX).unwrap();
        assert_eq!(items[0].len(), (1 << 20) + 2);
    }
}
