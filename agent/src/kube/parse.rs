//! The items of a split list page (`page`) parsed on two threads: the reading thread
//! hands batches to a helper while the helper's queue has room and parses a batch itself
//! only when it is ahead; the parsed items reach `each` on the reading thread, in the
//! list's order. At 150,000 pods the parse was one core's work for ~1 s while the node's
//! other core was half idle (with a queue of one, the helper idled while the reader
//! parsed: slower than one thread).

use std::collections::VecDeque;
use std::sync::mpsc;

use crate::kube::page;

/// A batch is cut at this many bytes of items (~150 stub pods, ~25 real ones).
const BATCH: usize = 128 << 10;
/// Batches waiting for the helper, at most.
const QUEUE: usize = 3;
/// Batches parsed and not yet handed to `each` before the reader waits for the helper.
const AHEAD: usize = 6;

/// Items copied out of the read buffer, one after another.
struct Raw {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Raw {
    /// Room for a batch: no growth by doubling.
    fn with_room() -> Raw {
        Raw {
            bytes: Vec::with_capacity(BATCH + (BATCH >> 2)),
            ends: Vec::with_capacity(BATCH >> 9),
        }
    }

    fn items(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| &self.bytes[a..b])
    }
}

/// A batch's place in the order: parsed here, or by the helper (whose batches come
/// back in the order they were sent).
enum Slot<T> {
    Here(Parsed<T>),
    Helper,
}

type Parsed<T> = (Vec<T>, Option<String>);

/// Like `page::split_items`, with each item through `parse` (None: skipped) and the
/// result to `each`; the object without `items`.
pub fn split_parse<T: Send>(
    body: impl std::io::Read,
    parse: impl Fn(&[u8]) -> Result<Option<T>, String> + Sync,
    mut each: impl FnMut(T) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    // A batch's items up to the first that does not parse, and its error.
    let parse_all = |raw: &Raw| -> Parsed<T> {
        let mut out = Vec::with_capacity(raw.ends.len());
        for item in raw.items() {
            match parse(item) {
                Ok(one) => out.extend(one),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    };
    let parse_all = &parse_all;
    std::thread::scope(|scope| {
        // The helper always has a batch waiting; the reader parses only when it is ahead.
        let (to_helper, batches) = mpsc::sync_channel::<Raw>(QUEUE);
        let (parsed, from_helper) = mpsc::channel();
        std::thread::Builder::new()
            .name("parse-list".into())
            .spawn_scoped(scope, move || {
                for raw in batches {
                    if parsed.send(parse_all(&raw)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("starting the list's parser: {e}"))?;
        let mut slots: VecDeque<Slot<T>> = VecDeque::new();
        let mut deliver = |slots: &mut VecDeque<Slot<T>>, wait: bool| -> Result<(), String> {
            loop {
                let behind = slots.len() > AHEAD;
                let Some(slot) = slots.front_mut() else {
                    return Ok(());
                };
                let (items, error) = match slot {
                    Slot::Here(parsed) => std::mem::take(parsed),
                    Slot::Helper if wait || behind => from_helper
                        .recv()
                        .map_err(|_| "the list's parser ended".to_string())?,
                    Slot::Helper => match from_helper.try_recv() {
                        Ok(parsed) => parsed,
                        Err(_) => return Ok(()),
                    },
                };
                slots.pop_front();
                for item in items {
                    each(item)?;
                }
                if let Some(e) = error {
                    return Err(e);
                }
            }
        };
        let mut raw = Raw::with_room();
        let cut = |raw: &mut Raw, slots: &mut VecDeque<Slot<T>>| {
            let batch = std::mem::replace(raw, Raw::with_room());
            match to_helper.try_send(batch) {
                Ok(()) => slots.push_back(Slot::Helper),
                Err(mpsc::TrySendError::Full(batch) | mpsc::TrySendError::Disconnected(batch)) => {
                    slots.push_back(Slot::Here(parse_all(&batch)))
                }
            }
        };
        let rest = page::split_items(body, |item| {
            raw.bytes.extend_from_slice(item);
            raw.ends.push(raw.bytes.len());
            if raw.bytes.len() >= BATCH {
                cut(&mut raw, &mut slots);
                deliver(&mut slots, false)?;
            }
            Ok(())
        })?;
        if !raw.ends.is_empty() {
            cut(&mut raw, &mut slots);
        }
        deliver(&mut slots, true)?;
        Ok(rest)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    /// `count` numbers as a list, each item padded so that batches are cut.
    fn list(count: usize) -> String {
        let pad = "x".repeat(1000);
        let items: Vec<String> = (0..count)
            .map(|i| format!(r#"{{"n":{i},"pad":"{pad}"}}"#))
            .collect();
        format!(
            r#"{{"metadata":{{"resourceVersion":"5"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    fn number(item: &[u8]) -> Result<Option<u64>, String> {
        let v: serde_json::Value = serde_json::from_slice(item).map_err(|e| e.to_string())?;
        let n = v["n"].as_u64().ok_or("no n")?;
        // Odd ones are skipped, as a nameless object is.
        Ok((n % 2 == 0).then_some(n))
    }

    #[test]
    fn items_reach_each_in_order_whoever_parsed_them() {
        for count in [0, 1, 130, 2000] {
            let body = list(count);
            let helped = AtomicUsize::new(0);
            let parse = |item: &[u8]| {
                if std::thread::current().name() == Some("parse-list") {
                    helped.fetch_add(1, Relaxed);
                }
                number(item)
            };
            let mut seen = Vec::new();
            let rest = split_parse(body.as_bytes(), parse, |n| {
                seen.push(n);
                Ok(())
            })
            .unwrap();
            let want: Vec<u64> = (0..count as u64).filter(|n| n % 2 == 0).collect();
            assert_eq!(seen, want, "{count} items");
            // The first batch goes to the helper, idle then.
            assert_eq!(helped.load(Relaxed) > 0, count > 0, "{count} items");
            assert_eq!(rest, br#"{"metadata":{"resourceVersion":"5"}}"#);
        }
    }

    #[test]
    fn an_item_that_does_not_parse_or_is_refused_ends_the_list() {
        let body = list(2000).replace(r#"{"n":1500,"#, r#"{"n":"x","#);
        let mut seen = 0;
        let e = split_parse(body.as_bytes(), number, |_| {
            seen += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!((e.as_str(), seen), ("no n", 750));
        let mut seen = 0;
        let e = split_parse(list(2000).as_bytes(), number, |n| {
            seen += 1;
            if n == 1000 {
                Err("full".into())
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!((e.as_str(), seen), ("full", 501));
    }
}
