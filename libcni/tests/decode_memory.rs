//! Decoding builds only what the target keeps: a config with a huge array under a key no
//! field takes costs about its own size, not a value per element (it was 36 times the
//! input: 570 MB for 15 MB). Measured with a counting allocator (this test binary only).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes allocated at the peak of `f`, above what was allocated before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - base)
}

fn with_junk(head: &str, elements: usize) -> Vec<u8> {
    let mut s = String::with_capacity(head.len() + 2 * elements + 16);
    s.push_str(head);
    s.push_str(",\"junk\":[");
    for i in 0..elements {
        s.push_str(if i == 0 { "0" } else { ",0" });
    }
    s.push_str("]}");
    s.into_bytes()
}

#[test]
fn unknown_subtrees_are_skipped_not_built() {
    // 4 MB of input, a million elements.
    let n = 2_000_000;
    let conf = with_junk(r#"{"cniVersion":"1.1.0","name":"lo","type":"loopback""#, n);
    let (parsed, peak) = peak_of(|| libcni::types::NetConf::parse(&conf));
    let parsed = parsed.unwrap();
    assert_eq!(
        (parsed.name.as_str(), parsed.plugin_type.as_str()),
        ("lo", "loopback")
    );
    assert!(
        peak < conf.len(),
        "NetConf: {peak} bytes for {} of input",
        conf.len()
    );

    let list = with_junk(
        r#"{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"x"}]"#,
        n,
    );
    let (parsed, peak) = peak_of(|| libcni::runtime::NetworkConfigList::from_bytes(&list));
    assert_eq!(parsed.unwrap().name, "other");
    // The list keeps a copy of its bytes (the cache stores them); nothing more.
    assert!(
        peak < 2 * list.len(),
        "conflist: {peak} bytes for {} of input",
        list.len()
    );
}
